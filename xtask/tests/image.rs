//! The images `cargo xtask image` writes, run for real in podman: read-only, all
//! capabilities dropped, as uid 65532.
//!
//! - quickstart: `--version`, then the whole pipeline writing NDJSON to a mounted host
//!   directory; rebuilding gives the same digest.
//! - flagship (kafka_avro_to_clickhouse): `--check`, then the container on the host network
//!   (`--network host`; it reaches the broker and ClickHouse of `cargo xtask infra up` on
//!   127.0.0.1) consumes a topic into both ClickHouse shards
//!   and stops cleanly on SIGTERM.
//!
//! Podman is required, not optional: `cargo xtask test` installs it (xtask/src/podman.rs)
//! and this test uses the same configuration; without podman the test fails and says so.

#[path = "../src/apt.rs"]
#[allow(dead_code, unreachable_pub)]
mod apt;
#[path = "../src/podman.rs"]
#[allow(dead_code, unreachable_pub)]
mod podman;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_owned()
}

/// One image build at a time: each is a release build of its own (2 cores).
static BUILDS: Mutex<()> = Mutex::new(());

fn xtask() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_xtask"));
    command.current_dir(root());
    command
}

fn podman() -> Command {
    assert!(
        apt::runs("podman"),
        "podman is not installed: run the tests with `cargo xtask test` (it installs podman and runc), \
         or `apt-get install podman runc`"
    );
    let mut command = Command::new("podman");
    command.envs(podman::configure(&root().join("target")).expect("writing the podman configuration"));
    command
}

fn run(command: &mut Command) -> Output {
    let output = command.output().unwrap_or_else(|e| panic!("starting {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A built and loaded image.
#[derive(Debug)]
struct Built {
    archive: PathBuf,
    digest: String,
    reference: String,
}

/// `cargo xtask image PIPELINE`, then `podman load`; checks the two last stdout lines.
fn build_and_load(pipeline: &str) -> Built {
    let _build = BUILDS.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let out = stdout(&run(xtask().args(["image", pipeline])));
    eprintln!("cargo xtask image {pipeline}: {:.1}s", started.elapsed().as_secs_f64());
    let lines: Vec<&str> = out.lines().collect();
    let [.., image, digest] = lines[..] else { panic!("expected `image:` and `digest:` lines:\n{out}") };
    let archive = PathBuf::from(image.strip_prefix("image: ").expect("an `image: ` line"));
    let digest = digest.strip_prefix("digest: ").expect("a `digest: ` line").to_owned();
    assert!(archive.is_absolute() && archive.exists(), "{}", archive.display());
    assert!(digest.starts_with("sha256:") && digest.len() == 71, "{digest}");
    let loaded = run(podman().args(["load", "-i"]).arg(&archive));
    let text = format!("{}{}", stdout(&loaded), String::from_utf8_lossy(&loaded.stderr));
    let reference = text
        .lines()
        .find_map(|l| l.strip_prefix("Loaded image: ").or_else(|| l.strip_prefix("Loaded image(s): ")))
        .unwrap_or_else(|| panic!("podman load named no image:\n{text}"))
        .trim()
        .to_owned();
    // Podman keeps the manifest digest the generator printed.
    let inspected = stdout(&run(podman().args(["image", "inspect", "--format", "{{.Digest}}", &reference])));
    assert_eq!(inspected.trim(), digest, "podman's digest of {reference}");
    Built { archive, digest, reference }
}

/// `podman run --rm --read-only --cap-drop all ... IMAGE ARGS`.
fn run_locked_down(image: &str, options: &[&str], args: &[&str]) -> Output {
    podman()
        .args(["run", "--rm", "--read-only", "--cap-drop", "all"])
        .args(options)
        .arg(image)
        .args(args)
        .output()
        .unwrap()
}

/// How many of the quickstart's 100,000 datagen orders (seed 42, 4 partitions) its filter
/// `total_cents > 0` keeps: datagen's records replayed lane by lane, as `DatagenSource` seeds them.
fn quickstart_orders_kept() -> usize {
    use etl_runtime::__private as rt;
    let schema = std::fs::read_to_string(root().join("examples/quickstart/order.avsc")).unwrap();
    let schema = rt::apache_avro::Schema::parse_str(&schema).unwrap();
    let (count, partitions, seed) = (100_000u64, 4u64, 42u64);
    let mut kept = 0;
    for p in 0..partitions {
        let n = count / partitions + u64::from(p < count % partitions);
        let lane_seed = seed.wrapping_add(p.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        for payload in rt::sample_payloads(&schema, rt::Encoding::Avro, rt::Wire::Raw, lane_seed, n as usize) {
            let value = rt::apache_avro::from_avro_datum(&schema, &mut &payload[..], None).unwrap();
            let rt::apache_avro::types::Value::Record(fields) = value else { panic!("a record") };
            let total = fields.iter().find(|(name, _)| name == "total_cents").map(|(_, v)| v.clone());
            kept += usize::from(matches!(total, Some(rt::apache_avro::types::Value::Long(t)) if t > 0));
        }
    }
    assert!(kept > 80_000 && kept < 100_000, "datagen's edge values include non-positive totals: {kept}");
    kept
}

#[test]
fn quickstart_image_runs_read_only_as_nonroot_and_rebuilds_to_the_same_digest() {
    let built = build_and_load("examples/quickstart/pipeline.yaml");

    let version = run_locked_down(&built.reference, &[], &["--version"]);
    assert!(version.status.success(), "{version:?}");
    assert!(stdout(&version).starts_with("quickstart 0.1.0 (config "), "{}", stdout(&version));

    // The process runs as 65532 and can only write to what is mounted (and /tmp).
    let dir = root().join("target").join("image-test").join(format!("quickstart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let volume = format!("{}:/out", dir.display());
    let started = Instant::now();
    let ran = run_locked_down(&built.reference, &["-v", &volume, "-e", "QUICKSTART_OUT=/out/q.ndjson"], &[]);
    assert!(ran.status.success(), "quickstart in the container: {}", String::from_utf8_lossy(&ran.stderr));
    eprintln!("quickstart in the container: {:.1}s", started.elapsed().as_secs_f64());
    let written = dir.join("q.ndjson");
    let text = std::fs::read_to_string(&written).unwrap();
    // The filter keeps the orders with total_cents > 0, which datagen's edge values are not all.
    assert_eq!(text.lines().count(), quickstart_orders_kept());
    assert!(text.lines().next().unwrap().starts_with("{\"order_id\":"), "{}", &text[..200.min(text.len())]);
    assert_eq!(std::fs::metadata(&written).unwrap().uid(), 65532, "written by the non-root user");
    let _ = std::fs::remove_dir_all(&dir);

    // Nothing changed, so the same bytes: the archive and its digest are reproducible.
    let bytes = std::fs::read(&built.archive).unwrap();
    let again = build_and_load("examples/quickstart/pipeline.yaml");
    assert_eq!(again.digest, built.digest);
    assert!(std::fs::read(&again.archive).unwrap() == bytes, "byte-identical archive");
}

// ---------------------------------------------------------------------------------------------
// The flagship against the local broker and ClickHouse.

const FLAGSHIP: &str = "examples/kafka_avro_to_clickhouse/pipeline.yaml";

/// The services of `cargo xtask infra up` (idempotent).
struct Infra {
    brokers: String,
    clickhouse: [String; 2],
}

fn infra() -> Infra {
    let out = stdout(&run(xtask().args(["infra", "up"])));
    let value = |key: &str| {
        out.lines()
            .find_map(|l| l.trim_start_matches("export ").strip_prefix(key)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("no {key}= in the output of infra up:\n{out}"))
            .to_owned()
    };
    Infra { brokers: value("KAFKA_BROKERS"), clickhouse: [value("CLICKHOUSE_URL"), value("CLICKHOUSE_URL_2")] }
}

/// HTTP/1.0 (unchunked) to `addr`; returns (status, body).
fn http(addr: &str, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(stream, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n{body}", body.len())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    Ok((head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0), body.to_owned()))
}

fn ch(url: &str, sql: &str) -> String {
    let addr = url.trim_start_matches("http://").trim_end_matches('/');
    let (status, body) = http(addr, "POST", "/", sql).unwrap_or_else(|e| panic!("{url}: {e}"));
    assert_eq!(status, 200, "{sql}: {body}");
    body
}

fn rows(infra: &Infra) -> u64 {
    infra.clickhouse.iter().map(|u| ch(u, "SELECT count() FROM default.orders").trim().parse::<u64>().unwrap()).sum()
}

/// The sum of every series of `name` in a Prometheus text exposition.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{')))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Removes the container however the test ends.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman().args(["rm", "-f", "-t", "0", &self.0]).output();
    }
}

#[test]
fn flagship_image_checks_then_consumes_kafka_into_clickhouse_on_the_host_network() {
    let built = build_and_load(FLAGSHIP);
    let image = built.reference.as_str();

    // A binary that ships carries no self-kill hook: the `ETL_FAULT` kill points are compiled only
    // with the `fault-injection` feature, which `image` (and `build`) never enable.
    let binary = root().join("target/x86_64-unknown-linux-gnu/release/orders");
    let bytes = std::fs::read(&binary).unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
    assert!(bytes.len() > 1 << 20, "the image's static binary");
    assert!(!bytes.windows(9).any(|w| w == b"ETL_FAULT"), "{} has a fault hook", binary.display());

    let version = run_locked_down(image, &[], &["--version"]);
    assert!(stdout(&version).starts_with("orders 0.1.0 (config "), "{version:?}");
    // --check resolves the run-time settings in the container and masks the secret.
    let check = run_locked_down(image, &["-e", "CLICKHOUSE_PASSWORD=hunter2-secret"], &["--check"]);
    let text = stdout(&check);
    assert!(check.status.success(), "{check:?}");
    assert!(text.contains("sink.clickhouse.password") && !text.contains("hunter2-secret"), "{text}");

    let infra = infra();
    let ddl = stdout(&run(xtask().args(["gen", FLAGSHIP, "--ddl"])));
    for url in &infra.clickhouse {
        ch(url, &ddl);
    }
    const N: u64 = 20_000;
    let id = format!("image-test-{}-{}", std::process::id(), Instant::now().elapsed().as_nanos());
    run(xtask().args(["produce", FLAGSHIP, "--count", &N.to_string(), "--topic", &id, "--brokers", &infra.brokers]));
    let before = rows(&infra);

    // A free loopback port for the admin server: the container shares the host's network.
    let admin = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let container = Container(id.clone());
    let env = [
        format!("KAFKA_BROKERS={}", infra.brokers),
        format!("CLICKHOUSE_URL={}", infra.clickhouse[0]),
        format!("CLICKHOUSE_URL_2={}", infra.clickhouse[1]),
        format!("ORDERS_TOPIC={id}"),
        format!("ORDERS_GROUP={id}"),
        format!("ADMIN_LISTEN={admin}"),
    ];
    let mut command = podman();
    command.args(["run", "-d", "--name", &container.0, "--read-only", "--cap-drop", "all", "--network", "host"]);
    for e in &env {
        command.args(["-e", e]);
    }
    run(command.arg(image));

    let started = Instant::now();
    let metrics = loop {
        let scraped = http(&admin, "GET", "/metrics", "").map(|(_, body)| body).unwrap_or_default();
        let done = metric(&scraped, "etl_records_out_total") + metric(&scraped, "etl_records_dropped_total");
        if metric(&scraped, "etl_records_in_total") as u64 == N && done as u64 == N {
            break scraped;
        }
        if started.elapsed() > Duration::from_secs(120) {
            let logs = podman().args(["logs", &container.0]).output().unwrap();
            panic!(
                "the container did not process {N} records in 120s; metrics:\n{scraped}\nlogs:\n{}",
                String::from_utf8_lossy(&logs.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    eprintln!("flagship in the container: {N} records in {:.1}s", started.elapsed().as_secs_f64());
    let out = metric(&metrics, "etl_records_out_total") as u64;
    assert!(out > 0, "some rows pass the filter");
    assert_eq!(rows(&infra) - before, out, "ClickHouse holds the rows the container wrote");
    let (status, _) = http(&admin, "GET", "/readyz", "").unwrap();
    assert_eq!(status, 200, "ready while running");

    // SIGTERM (podman stop) drains and exits 0 within the drain timeout.
    run(podman().args(["stop", "-t", "40", &container.0]));
    let code = stdout(&run(podman().args(["inspect", "--format", "{{.State.ExitCode}}", &container.0])));
    assert_eq!(code.trim(), "0", "clean shutdown on SIGTERM");
}
