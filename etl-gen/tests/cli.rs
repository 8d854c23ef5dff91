//! The `etl-gen gen --check` command's exit codes (docs/diagnostics.md) and output streams.

use std::path::Path;
use std::process::Command;

fn gen_check(path: &Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_etl-gen")).arg("gen").arg(path).arg("--check").output().unwrap();
    (out.status.code().unwrap(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

fn corpus(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus").join(rel)
}

#[test]
fn valid_file_exits_0() {
    let (code, stdout, stderr) = gen_check(&corpus("valid/minimal_kafka.yaml"));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("ok: "), "{stdout}");
}

#[test]
fn invalid_configuration_exits_1_with_diagnostics_on_stderr() {
    for case in [
        "invalid/sizing_four_shards.yaml",
        "invalid/yaml_syntax.yaml",
        "invalid/schema_missing.yaml",
        "invalid/schema_invalid.yaml",
    ] {
        let (code, stdout, stderr) = gen_check(&corpus(case));
        assert_eq!(code, 1, "{case}: {stderr}");
        assert!(stdout.is_empty(), "{case}: diagnostics belong on stderr");
        assert!(stderr.contains("error["), "{case}: {stderr}");
    }
}

#[test]
fn unreadable_file_exits_2() {
    let (code, _, stderr) = gen_check(&corpus("does-not-exist.yaml"));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("cannot read"), "{stderr}");
    let dir = corpus("invalid");
    let (code, _, _) = gen_check(&dir);
    assert_eq!(code, 2, "a directory is not a readable pipeline.yaml");
}

#[test]
fn usage_error_exits_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_etl-gen")).args(["gen", "--frobnicate"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// `gen --memory --partitions N` prints the terms of the bound and their sum (Invariant 7).
#[test]
fn memory_bound_lists_its_terms() {
    let flagship = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/kafka_avro_to_clickhouse/pipeline.yaml");
    let text = memory_bound(&flagship);
    let terms: u64 = text
        .lines()
        .filter(|l| l.contains(" bytes  "))
        .map(|l| l.split_whitespace().next().unwrap().parse::<u64>().unwrap())
        .sum();
    // 512 MiB budget, 4 lanes × 256 KiB over it, 4 × 2 open buffers, 2 × 2 Native inserts,
    // 4 × (8 MiB + 1 MiB) prefetch, 4 × (8 MiB + 2 MiB) held in batches, 64 MiB baseline.
    let expected = (512u64 << 20)
        + 4 * (256 << 10)
        + 8 * (256 << 10)
        + 4 * (1 << 20)
        + 4 * (9 << 20)
        + 4 * (10 << 20)
        + (64 << 20);
    assert_eq!(terms, expected, "{text}");
    assert!(text.contains(&format!("total: {expected} bytes")), "{text}");
    let missing =
        Command::new(env!("CARGO_BIN_EXE_etl-gen")).args(["gen", "--memory"]).arg(&flagship).output().unwrap();
    assert_eq!(missing.status.code(), Some(2), "--memory needs --partitions");
}

/// With many partitions per instance the prefetch term dominates the bound, and `--memory` says
/// so and names the knob; with the flagship's 4 partitions it does not.
#[test]
fn memory_bound_notes_a_dominant_prefetch() {
    let flagship = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/kafka_avro_to_clickhouse/pipeline.yaml");
    let at = |partitions: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_etl-gen"))
            .args(["gen", "--memory", "--partitions", partitions])
            .arg(&flagship)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let few = at("4");
    assert!(!few.contains("note:"), "{few}");
    // 256 × 19 MiB of prefetch and batches against 512 MiB of budget and the rest.
    let many = at("256");
    let note = many.lines().find(|l| l.starts_with("note:")).unwrap_or_else(|| panic!("no note:\n{many}"));
    assert!(note.contains("queued.max.messages.kbytes") && note.contains("256 partitions"), "{note}");
}

/// Exactly-once seals a batch per partition and shard: past 16 inserts per shard and second
/// (partitions / batch.linger) `gen --memory` says so and names the knob; at-least-once never.
#[test]
fn memory_bound_notes_exactly_once_inserts_per_partition() {
    let at = |pipeline: &str, partitions: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_etl-gen"))
            .args(["gen", "--memory", "--partitions", partitions])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(pipeline))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let eo = "../xtask/tests/e2e/pipeline-eo.yaml";
    // 200 ms linger: 3 partitions make 15 inserts per shard and second, 64 make 320.
    let few = at(eo, "3");
    assert!(!few.contains("exactly-once"), "{few}");
    let many = at(eo, "64");
    let note = many.lines().find(|l| l.contains("note: exactly-once")).unwrap_or_else(|| panic!("no note:\n{many}"));
    assert!(note.contains("320 inserts") && note.contains("batch.linger"), "{note}");
    let flagship = at("../examples/kafka_avro_to_clickhouse/pipeline.yaml", "256");
    assert!(!flagship.contains("exactly-once"), "at-least-once merges partitions:\n{flagship}");
}

/// Under `errors.policy: dlq` chunks keep each row's source offset (to dead-letter rows the sink
/// refuses), and the bound has a term for them: 8 bytes per row, rows at least the columns'
/// fewest RowBinary bytes (the e2e order row: 8 + 8 + 1 + 8 + 1 + 8 = 34).
#[test]
fn memory_bound_counts_row_offsets_under_dlq() {
    let text = memory_bound(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../xtask/tests/e2e/pipeline-dlq.yaml"));
    let line =
        text.lines().find(|l| l.contains("row offsets")).unwrap_or_else(|| panic!("no row offsets term:\n{text}"));
    let bytes: u64 = line.split_whitespace().next().unwrap().parse().unwrap();
    // 4 lanes × (2 shards + 1) × (64 KiB / 34 + 1) × 8.
    assert_eq!(bytes, 4 * 3 * ((64 << 10) / 34 + 1) * 8, "{text}");
}

/// Under `exactly_once` a lane's open buffer is a whole batch: the open-buffer and
/// over-the-budget terms count `batch.max_bytes` (256 KiB in the e2e pipeline) instead of chunks.
#[test]
fn memory_bound_counts_whole_batches_under_exactly_once() {
    let text = memory_bound(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../xtask/tests/e2e/pipeline-eo.yaml"));
    let term = |what: &str| -> u64 {
        let line = text.lines().find(|l| l.contains(what)).unwrap_or_else(|| panic!("no `{what}` term:\n{text}"));
        assert!(line.contains("batch.max_bytes (exactly_once)"), "{line}");
        line.split_whitespace().next().unwrap().parse().unwrap()
    };
    assert_eq!(term("open buffers"), 4 * 2 * (256 << 10), "{text}");
    assert_eq!(term("one chunk over the budget"), 4 * (256 << 10), "{text}");
}

/// `gen --ddl` under `exactly_once`: the table deduplicates inserts and the ledger table follows,
/// each a statement of its own.
#[test]
fn ddl_prints_the_deduplicating_table_and_the_ledger_under_exactly_once() {
    let out = Command::new(env!("CARGO_BIN_EXE_etl-gen"))
        .args(["gen", "--ddl"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../xtask/tests/e2e/pipeline-eo.yaml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ddl = String::from_utf8(out.stdout).unwrap();
    let statements: Vec<&str> = etl_gen::ddl::statements(&ddl).collect();
    assert_eq!(statements.len(), 2, "{ddl}");
    assert!(
        statements[0].contains("`e2e_orders_eo`")
            && statements[0].contains("non_replicated_deduplication_window = 1000")
    );
    for column in ["`partition`", "`shard`", "`first_offset`", "`last_offset`", "`config_hash`", "`epoch`", "TTL"] {
        assert!(
            statements[1].contains("`e2e_orders_eo_etl_batches`") && statements[1].contains(column),
            "{column}: {ddl}"
        );
    }
}

/// `gen --ddl` at least once: one statement, a table that deduplicates inserts all the same, so
/// that an insert retried after its answer was lost lands once.
#[test]
fn ddl_prints_a_deduplicating_table_at_least_once_too() {
    let out = Command::new(env!("CARGO_BIN_EXE_etl-gen"))
        .args(["gen", "--ddl"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/kafka_avro_to_clickhouse/pipeline.yaml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ddl = String::from_utf8(out.stdout).unwrap();
    let statements: Vec<&str> = etl_gen::ddl::statements(&ddl).collect();
    assert_eq!(statements.len(), 1, "{ddl}");
    assert!(statements[0].contains("ENGINE = MergeTree"), "{ddl}");
    assert!(statements[0].contains("SETTINGS non_replicated_deduplication_window = 1000"), "{ddl}");
}

/// `gen --ddl --replicated [--cluster NAME]`: the same statements as ReplicatedMergeTree tables
/// created ON CLUSTER (the `{cluster}` macro, or the name given); `--replicated` without `--ddl`
/// and `--cluster` without `--replicated` are usage errors that name the missing flag.
#[test]
fn ddl_replicated_prints_on_cluster_statements_and_needs_ddl() {
    let pipeline = corpus("valid/exactly_once.yaml");
    let run_gen =
        |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_etl-gen")).arg("gen").arg(&pipeline).args(args).output();
    for (args, on_cluster) in [
        (&["--ddl", "--replicated"][..], "ON CLUSTER '{cluster}'"),
        (&["--ddl", "--replicated", "--cluster", "prod"], "ON CLUSTER 'prod'"),
    ] {
        let out = run_gen(args).unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let ddl = String::from_utf8(out.stdout).unwrap();
        assert!(ddl.starts_with("-- Generated by `cargo xtask gen --ddl --replicated`"), "{ddl}");
        let statements: Vec<&str> = etl_gen::ddl::statements(&ddl).collect();
        assert_eq!(statements.len(), 2, "{ddl}");
        for (statement, table) in statements.iter().zip(["orders", "orders_etl_batches"]) {
            assert!(statement.contains(&format!("`default`.`{table}` {on_cluster}\n")), "{args:?}: {statement}");
            assert!(
                statement.contains(&format!(
                    "ENGINE = ReplicatedMergeTree('/clickhouse/tables/{{shard}}/default/{table}', '{{replica}}')"
                )),
                "{statement}"
            );
            assert!(statement.contains("SETTINGS replicated_deduplication_window = 1000"), "{statement}");
        }
    }
    for (args, missing) in [(&["--replicated"][..], "--ddl"), (&["--ddl", "--cluster", "prod"], "--replicated")] {
        let out = run_gen(args).unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(stderr.contains("required arguments were not provided") && stderr.contains(missing), "{stderr}");
    }
    let empty = run_gen(&["--ddl", "--replicated", "--cluster", ""]).unwrap();
    assert_eq!(empty.status.code(), Some(2), "{}", String::from_utf8_lossy(&empty.stderr));
}

/// What `gen --memory --partitions 4` prints for `pipeline`.
fn memory_bound(pipeline: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_etl-gen"))
        .args(["gen", "--memory", "--partitions", "4"])
        .arg(pipeline)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// A temporary directory holding the quickstart's pipeline.yaml and schema.
fn quickstart_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/quickstart");
    for f in ["pipeline.yaml", "order.avsc"] {
        std::fs::copy(examples.join(f), dir.path().join(f)).unwrap();
    }
    dir
}

/// `etl-gen gen pipeline.yaml -o crate` in `dir`; it must succeed.
fn gen_into_crate(dir: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_etl-gen"))
        .current_dir(dir)
        .args(["gen", "pipeline.yaml", "-o", "crate"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The installed `etl-gen` works outside this repository: the crate it writes points at
/// the etl-runtime of the checkout it was built from, and builds into a local target dir.
#[test]
fn etl_gen_binary_works_outside_the_repository() {
    let dir = quickstart_copy();
    gen_into_crate(dir.path());
    let manifest = std::fs::read_to_string(dir.path().join("crate/Cargo.toml")).unwrap();
    let runtime = Path::new(env!("CARGO_MANIFEST_DIR")).join("../etl-runtime").canonicalize().unwrap();
    assert!(manifest.contains(&format!("path = \"{}\"", runtime.display())), "{manifest}");
    assert!(dir.path().join("crate/src/main.rs").exists());
}

/// `gen` rewrites only what changed, so cargo sees an unchanged pipeline as unchanged (a `build`
/// of it is then a no-op, not a recompile of the crate), and it removes what an earlier generation
/// left under `src/` and `benches/`.
#[test]
fn regenerating_rewrites_only_what_changed_and_removes_stale_files() {
    let dir = quickstart_copy();
    let generate = || gen_into_crate(dir.path());
    let generated = dir.path().join("crate");
    let mtime = |rel: &str| std::fs::metadata(generated.join(rel)).unwrap().modified().unwrap();
    generate();
    let (main, manifest) = (mtime("src/main.rs"), mtime("Cargo.toml"));
    std::fs::write(generated.join("src/stale.rs"), "// from an older generation").unwrap();
    std::fs::create_dir_all(generated.join("benches")).unwrap();
    std::fs::write(generated.join("benches/chain.rs"), "// from a --bench generation").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    generate();
    assert_eq!(mtime("src/main.rs"), main, "an unchanged main.rs was rewritten");
    assert_eq!(mtime("Cargo.toml"), manifest, "an unchanged Cargo.toml was rewritten");
    assert!(!generated.join("src/stale.rs").exists(), "a stale source file survived");
    assert!(!generated.join("benches").exists(), "a stale benches/ survived");

    let yaml = std::fs::read_to_string(dir.path().join("pipeline.yaml")).unwrap();
    let edited = yaml.replacen("threads: ", "threads: 1 #", 1);
    assert_ne!(edited, yaml, "the quickstart sets pipeline.threads");
    std::fs::write(dir.path().join("pipeline.yaml"), edited).unwrap();
    generate();
    assert_ne!(mtime("src/main.rs"), main, "a changed main.rs was not written");
}

/// The fault points are opt-in: `gen` (and so `build` and `image`) generates a crate without the
/// runtime's `fault-injection` feature; only the hidden `--fault-injection` of the project's own
/// tests asks for it, and `image` refuses that flag.
#[test]
fn fault_injection_is_never_enabled_unless_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let pipeline = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/quickstart/pipeline.yaml");
    let manifest = |extra: &[&str], name: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_etl-gen"))
            .arg("gen")
            .arg(&pipeline)
            .arg("-o")
            .arg(dir.path().join(name))
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        std::fs::read_to_string(dir.path().join(name).join("Cargo.toml")).unwrap()
    };
    assert!(!manifest(&[], "plain").contains("fault-injection"));
    assert!(manifest(&["--fault-injection"], "faulty").contains("\"fault-injection\""));
    let image = Command::new(env!("CARGO_BIN_EXE_etl-gen"))
        .arg("image")
        .arg(&pipeline)
        .arg("--fault-injection")
        .output()
        .unwrap();
    assert_eq!(image.status.code(), Some(2), "{}", String::from_utf8_lossy(&image.stderr));
    assert!(String::from_utf8_lossy(&image.stderr).contains("never carries fault hooks"));
}

/// `--migrate`'s usage: `--against` needs it, it does not go with `--ddl`, and a server it cannot
/// read is an error that names the server (exit 1, nothing on stdout). What it prints against a
/// real server is tested in etl-runtime/tests/clickhouse.rs.
#[test]
fn migrate_usage_and_an_unreachable_server() {
    let pipeline = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/kafka_avro_to_clickhouse/pipeline.yaml");
    let run = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_etl-gen")).arg("gen").arg(&pipeline).args(args).output();
    for args in [&["--against", "http://127.0.0.1:9"][..], &["--migrate", "--ddl"]] {
        let out = run(args).unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = run(&["--migrate", "--against", "http://127.0.0.1:9"]).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(stderr.contains("error: http://127.0.0.1:9"), "{stderr}");
}

/// A subject of [`stub_registry`].
struct Subject {
    name: &'static str,
    /// `schemaType`: `None` for Avro, which the registry leaves out.
    kind: Option<&'static str>,
    /// The versions' schema texts; version N is the N-th.
    versions: Vec<String>,
    /// `(name, subject, version)`: the references every version carries.
    references: Vec<(&'static str, &'static str, u32)>,
}

impl Subject {
    fn avro(name: &'static str, versions: Vec<String>) -> Self {
        Subject { name, kind: None, versions, references: Vec::new() }
    }
}

/// A stub Confluent-API registry on loopback serving `subjects` (ids are 40 + the version);
/// anything else is 404. Returns its URL.
fn stub_registry(subjects: Vec<Subject>) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = String::new();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            reader.read_line(&mut request).unwrap();
            // Headers up to the blank line; GETs have no body.
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let path = request.split_whitespace().nth(1).unwrap_or("/").to_owned();
            let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
            let found = subjects.iter().find(|s| parts.get(1) == Some(&s.name));
            let body = match (found, &parts[..]) {
                (Some(subject), ["subjects", _, "versions"]) => {
                    serde_json::to_string(&(1..=subject.versions.len()).collect::<Vec<_>>()).unwrap()
                }
                (Some(subject), ["subjects", _, "versions", n]) => match n.parse::<usize>() {
                    Ok(n) if (1..=subject.versions.len()).contains(&n) => {
                        let mut body = serde_json::json!({
                            "subject": parts[1], "version": n, "id": 40 + n, "schema": subject.versions[n - 1]
                        });
                        if let Some(kind) = subject.kind {
                            body["schemaType"] = kind.into();
                        }
                        if !subject.references.is_empty() {
                            body["references"] = subject
                                .references
                                .iter()
                                .map(|(name, subject, version)| {
                                    serde_json::json!({"name": name, "subject": subject, "version": version})
                                })
                                .collect();
                        }
                        body.to_string()
                    }
                    _ => String::new(),
                },
                _ => String::new(),
            };
            let status = if body.is_empty() { "404 Not Found" } else { "200 OK" };
            let body =
                if body.is_empty() { r#"{"error_code":40401,"message":"Subject not found"}"#.to_owned() } else { body };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

/// `etl-gen gen PIPELINE --check --registry URL ARGS...` (the topic left to its default): its
/// exit code, stdout and stderr.
fn check_registry(pipeline: &Path, url: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_etl-gen"))
        .arg("gen")
        .arg(pipeline)
        .args(["--check", "--registry", url])
        .args(args)
        .env_remove("ORDERS_TOPIC")
        .env_remove("CLICKS_TOPIC")
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

/// `gen --check --registry`: every registered version the reader schema reads passes; a version
/// that dropped a field the reader needs (no default) fails the build, named with its version and
/// field; the subject defaults to `<topic>-value`; a subject the registry lacks is an error.
#[test]
fn check_registry_reads_every_version_or_names_the_one_it_cannot() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/kafka_avro_to_clickhouse");
    let reader = std::fs::read_to_string(dir.join("schemas/order.avsc")).unwrap();
    // A later writer with a field more (ignored by the reader) and without `coupon` (the reader
    // has a default for it): readable.
    let added = reader.replace(
        r#"{"name": "coupon", "type": ["null", "string"], "default": null},"#,
        r#"{"name": "channel", "type": "string"},"#,
    );
    // A writer without `total_cents`, which the reader needs and has no default for.
    let dropped = reader.replace(r#"{"name": "total_cents", "type": "long"},"#, "");
    assert!(added != reader && dropped != reader);
    let url = stub_registry(vec![
        Subject::avro("orders-value", vec![reader.clone(), added.clone()]),
        Subject::avro("orders-broken", vec![reader, added, dropped]),
    ]);
    let run = |args: &[&str]| check_registry(&dir.join("pipeline.yaml"), &url, args);
    let (code, stdout, stderr) = run(&[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("reads all 2 version(s) of subject `orders-value`"), "{stdout}");

    let (code, _, stderr) = run(&["--subject", "orders-broken"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "field `total_cents` of the reader schema has no default, and writer version 3 (id 43) does not write it"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("help: give `total_cents` a default"), "{stderr}");
    assert!(!stderr.contains("version 1 ") && !stderr.contains("version 2 "), "only version 3 is named: {stderr}");

    let (code, _, stderr) = run(&["--subject", "nobody"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("subject `nobody`") && stderr.contains("not found"), "{stderr}");
}

/// `--check --registry` for JSON Schema subjects: evolved writers the decoder reads pass and
/// their ids are listed; a writer that changed a required property's type fails, named by
/// version and property; a subject of Avro schemas is refused for a JSON pipeline.
#[test]
fn check_registry_compares_json_schema_writers() {
    let pipeline = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/json_to_clickhouse/pipeline.yaml");
    let reader = std::fs::read_to_string(pipeline.with_file_name("schemas/click.schema.json")).unwrap();
    let mut schema: serde_json::Value = serde_json::from_str(&reader).unwrap();
    // Evolved: a property more, and `duration_ms` (a number) written as integers.
    schema["properties"]["channel"] = serde_json::json!({"type": "string"});
    schema["properties"]["duration_ms"] = serde_json::json!({"type": "integer"});
    let evolved = schema.to_string();
    // Broken: `user_id` (a required integer) became a string.
    schema["properties"]["user_id"] = serde_json::json!({"type": "string"});
    let broken = schema.to_string();
    let url = stub_registry(vec![
        Subject {
            name: "clicks-value",
            kind: Some("JSON"),
            versions: vec![reader.clone(), evolved.clone()],
            references: vec![],
        },
        Subject {
            name: "clicks-broken",
            kind: Some("JSON"),
            versions: vec![reader, evolved, broken],
            references: vec![],
        },
        Subject::avro("clicks-avro", vec![r#"{"type": "string"}"#.into()]),
    ]);
    let run = |subject: &str| check_registry(&pipeline, &url, &["--subject", subject]);
    let (code, stdout, stderr) = run("clicks-value");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("reads all 2 version(s) of subject `clicks-value`"), "{stdout}");
    assert!(stdout.contains("their schema ids: 41, 42"), "{stdout}");

    let (code, _, stderr) = run("clicks-broken");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "writer version 3 (id 43): property `user_id`: it is a string in the writer and an integer in the reader"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("1 of 3 version(s)"), "{stderr}");

    let (code, _, stderr) = run("clicks-avro");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("version 1 has schemaType AVRO; this pipeline reads JSON"), "{stderr}");
}

/// `--check --registry` for Protobuf subjects: a writer version is compiled with the schemas its
/// references name (here `common.proto`, registered as its own subject); evolved writers pass,
/// one that changed a field's type fails named by the field's path, and the ids not in
/// `schema_id` are pointed out.
#[test]
fn check_registry_compares_protobuf_writers_with_their_references() {
    let pipeline = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pipelines/protobuf/pipeline.yaml");
    let reader = std::fs::read_to_string(pipeline.with_file_name("click.proto")).unwrap();
    let common = std::fs::read_to_string(pipeline.with_file_name("common.proto")).unwrap();
    // Evolved: field 1 written as int32 (read as int64) and a new field 99.
    assert!(reader.contains("    int64 id = 1;"));
    let evolved = reader.replace("    int64 id = 1;", "    int32 id = 1;\n    string added = 99;");
    // Broken: field 7 written as double, which the reader reads as float.
    assert!(reader.contains("    float ratio = 7;"));
    let broken = reader.replace("    float ratio = 7;", "    double ratio = 7;");
    let references = vec![("common.proto", "common", 1)];
    let url = stub_registry(vec![
        Subject { name: "common", kind: Some("PROTOBUF"), versions: vec![common], references: vec![] },
        Subject {
            name: "clicks-value",
            kind: Some("PROTOBUF"),
            versions: vec![reader.clone(), evolved.clone()],
            references: references.clone(),
        },
        Subject {
            name: "clicks-broken",
            kind: Some("PROTOBUF"),
            versions: vec![reader.clone(), evolved, broken],
            references,
        },
        Subject { name: "clicks-unresolved", kind: Some("PROTOBUF"), versions: vec![reader], references: vec![] },
    ]);
    let run = |subject: &str| check_registry(&pipeline, &url, &["--subject", subject]);
    let (code, stdout, stderr) = run("clicks-value");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("reads all 2 version(s) of subject `clicks-value`"), "{stdout}");
    // The pipeline lists schema_id 4 only; it has a registry, which the binary asks about the others.
    assert!(stdout.contains("format.protobuf.schema_id does not list 41, 42"), "{stdout}");
    assert!(stdout.contains("the binary asks the registry about them"), "{stdout}");

    let (code, _, stderr) = run("clicks-broken");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "writer version 3 (id 43): field `ratio = 7`: it is double in the writer and float in the reader"
        ),
        "{stderr}"
    );

    // A version whose import is not among its references does not compile: reported, not passed.
    let (code, _, stderr) = run("clicks-unresolved");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("writer version 1 (id 41): it does not compile"), "{stderr}");
}
