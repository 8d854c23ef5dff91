//! Generated crates: their code is snapshot-tested, and they are compiled as real crates
//! and run, and what they compute is checked row by row.

use std::path::{Path, PathBuf};
use std::process::Command;

use etl_gen::emit::{self, GenOptions, RuntimeDep};
use etl_gen::{Options, Validated, validate_file};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

fn load(rel: &str) -> Validated {
    let outcome = validate_file(&root().join(rel), &Options::default()).unwrap();
    outcome.pipeline.unwrap_or_else(|| panic!("{rel}:\n{}", outcome.report.render()))
}

fn options(rel: &str, crate_dir: PathBuf) -> GenOptions {
    GenOptions {
        source_name: rel.to_owned(),
        crate_dir,
        target_dir: root().join("target"),
        runtime: RuntimeDep::Path(root().join("etl-runtime")),
        lockfile: etl_gen::load::read_lockfile(&root().join("Cargo.lock")).unwrap(),
        bench: false,
        fault_injection: false,
    }
}

fn file<'a>(files: &'a [emit::GeneratedFile], path: &str) -> &'a str {
    let f = files.iter().find(|f| f.path == Path::new(path)).unwrap_or_else(|| panic!("{path} generated"));
    std::str::from_utf8(&f.contents).unwrap()
}

/// The generated code of every pipeline that can be generated today is reviewed as a snapshot.
#[test]
fn generated_code_snapshots() {
    for rel in [
        "examples/quickstart/pipeline.yaml",
        "examples/kafka_avro_to_clickhouse/pipeline.yaml",
        "examples/order_items/pipeline.yaml",
        "etl-gen/tests/pipelines/kitchen_sink/pipeline.yaml",
        "etl-gen/tests/pipelines/items/pipeline.yaml",
        "examples/json_to_clickhouse/pipeline.yaml",
        "etl-gen/tests/pipelines/json/pipeline.yaml",
        "examples/protobuf_to_clickhouse/pipeline.yaml",
        "etl-gen/tests/pipelines/protobuf/pipeline.yaml",
        "examples/route_to_tables/pipeline.yaml",
        "examples/events_with_json/pipeline.yaml",
    ] {
        let v = load(rel);
        // Inside the workspace, so the relative paths in the code do not depend on where
        // the checkout is.
        let files = emit::generate(&v, &options(rel, root().join("target/etl-snapshots").join(&v.model.pipeline.name)))
            .unwrap();
        let name = v.model.pipeline.name.clone();
        insta::assert_snapshot!(format!("{name}_main_rs"), file(&files, "src/main.rs"));
        insta::assert_snapshot!(format!("{name}_readme"), file(&files, "README.md"));
    }
}

/// Generates and builds (debug, in the shared target directory) a pipeline; returns the
/// validated pipeline and its binary.
fn build(rel: &str) -> (Validated, PathBuf) {
    let v = load(rel);
    let name = v.model.pipeline.name.clone();
    let crate_dir = root().join("target/etl-test").join(&name);
    let files = emit::generate(&v, &options(rel, crate_dir.clone())).unwrap();
    etl_gen::cli::write(&crate_dir, &files).unwrap();
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--manifest-path"])
        .arg(crate_dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", root().join("target"))
        .status()
        .unwrap();
    assert!(status.success(), "the generated crate for {rel} must compile");
    let binary = root().join("target/debug").join(&name);
    // What `gen` generates carries no self-kill hook (only `--fault-injection` compiles it in).
    let bytes = std::fs::read(&binary).unwrap();
    assert!(!bytes.windows(9).any(|w| w == b"ETL_FAULT"), "{} has the ETL_FAULT hook", binary.display());
    (v, binary)
}

/// Builds and runs a datagen → file pipeline; returns its output rows.
fn build_and_run(rel: &str) -> Vec<Value> {
    let (_, binary) = build(rel);
    run_built(rel, &binary, &[]).expect("the pipeline succeeds")
}

/// Runs a built datagen → file pipeline with extra environment; its rows, or its stderr.
fn run_built(rel: &str, binary: &Path, env: &[(&str, &str)]) -> Result<Vec<Value>, String> {
    let v = load(rel);
    let name = v.model.pipeline.name.clone();
    let version = Command::new(binary).arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8(version.stdout).unwrap().trim(),
        format!("{name} {} (config {})", emit::VERSION, v.config_hash)
    );
    let out = tempfile::NamedTempFile::new().unwrap();
    let run = Command::new(binary).env("OUT", out.path()).envs(env.iter().copied()).output().unwrap();
    if !run.status.success() {
        return Err(String::from_utf8_lossy(&run.stderr).into_owned());
    }
    Ok(std::fs::read_to_string(out.path()).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect())
}

/// Runs a built pipeline that is expected to fail; its exit code and stderr.
fn run_built_status(binary: &Path, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = tempfile::NamedTempFile::new().unwrap();
    let run = Command::new(binary).env("OUT", out.path()).envs(env.iter().copied()).output().unwrap();
    (run.status.code(), String::from_utf8_lossy(&run.stderr).into_owned())
}

fn int(row: &Value, key: &str) -> i64 {
    row[key].as_i64().unwrap_or_else(|| panic!("`{key}` is an integer in {row}"))
}

/// A float column: a number, or NaN and the infinities as the file sink writes them.
fn float(row: &Value, key: &str) -> f64 {
    match &row[key] {
        Value::String(s) if s == "nan" => f64::NAN,
        Value::String(s) if s == "inf" => f64::INFINITY,
        Value::String(s) if s == "-inf" => f64::NEG_INFINITY,
        v => v.as_f64().unwrap_or_else(|| panic!("`{key}` is a number in {row}")),
    }
}

/// Whether two floats agree: equal (NaN with NaN, an infinity with itself) or within a relative
/// 1e-12.
fn close(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-12 * a.abs().max(1.0)
}

fn text<'a>(row: &'a Value, key: &str) -> &'a str {
    row[key].as_str().unwrap_or_else(|| panic!("`{key}` is a string in {row}"))
}

/// A JSON pipeline end to end in one binary: datagen writes documents, the generated decoder
/// reads them, the file sink writes rows. Every row has every column, in the types the mapping
/// promises (the decoder's own tests, with documents written by hand, are in
/// etl-macros/tests/json_decoder.rs).
#[test]
fn json_documents_become_typed_rows() {
    let rows = build_and_run("etl-gen/tests/pipelines/json/pipeline.yaml");
    assert_eq!(rows.len(), 3000, "no record is lost or dropped");
    let mut ids: Vec<i64> = rows.iter().map(|r| int(r, "id")).collect();
    ids.sort_unstable();
    ids.dedup();
    // Datagen gives edge values (i64::MIN, 0, -1, ...) to one value in eight.
    assert!(ids.len() > 2500, "distinct records, not one repeated");
    for row in &rows {
        let object = row.as_object().unwrap();
        let columns: Vec<&str> = object.keys().map(String::as_str).collect();
        assert_eq!(
            columns,
            [
                "id",
                "name",
                "score",
                "ok",
                "userId",
                "kind",
                "at",
                "day",
                "uid",
                "user_agent",
                "tags",
                "counts",
                "items",
                "geo_lat",
                "geo_lon",
                "geo_place_city",
                "extra_note",
                "extra_say__hi_",
                "grid"
            ]
        );
        assert!(["a", "b", "c"].contains(&text(row, "kind")));
        assert!(text(row, "at").ends_with('Z') && text(row, "at").len() == 27, "DateTime64(6): {row}");
        assert_eq!(text(row, "day").len(), 10);
        assert!(row["geo_lat"].is_number(), "{row}");
        for item in row["items"].as_array().unwrap() {
            assert!(item["sku"].is_string() && (item["qty"].is_i64() || item["qty"].is_null()), "{item}");
        }
    }
}

/// A Protobuf pipeline end to end in one binary: datagen writes messages, the generated decoder
/// reads them, the file sink writes rows with every column in the mapped types (the decoder's
/// own tests, against prost-reflect, are in etl-macros/tests/protobuf_decoder.rs).
#[test]
fn protobuf_messages_become_typed_rows() {
    let rows = build_and_run("etl-gen/tests/pipelines/protobuf/pipeline.yaml");
    assert_eq!(rows.len(), 3000, "no record is lost or dropped");
    let mut ids: Vec<i64> = rows.iter().map(|r| int(r, "id")).collect();
    ids.sort_unstable();
    ids.dedup();
    // Datagen gives edge values (i64::MIN, 0, -1, ...) to one value in eight.
    assert!(ids.len() > 2500, "distinct records, not one repeated");
    let (mut nulls, mut negative, mut optional_absent) = (0, 0, 0);
    for row in &rows {
        let columns: Vec<&str> = row.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            columns,
            [
                "id",
                "delta",
                "big",
                "small",
                "signed",
                "ok",
                "ratio",
                "score",
                "name",
                "raw",
                "kind",
                "at",
                "maybe",
                "label",
                "note",
                "items",
                "tags",
                "words",
                "kinds",
                "attrs",
                "by_slot",
                "geo_lat",
                "geo_lon",
                "geo_city",
                "geo_names",
                "url",
                "place_lat",
                "place_lon",
                "place_city",
                "place_names",
                "code",
                "int32_min",
                "plain_uint",
                "o_item_sku",
                "o_item_qty",
                "o_item_price",
                "o_at"
            ]
        );
        assert!(["KIND_UNSPECIFIED", "VIEW", "BUY"].contains(&text(row, "kind")));
        assert!(text(row, "at").ends_with('Z') && text(row, "at").len() == 30, "DateTime64(9): {row}");
        assert!(row["big"].is_u64() && row["plain_uint"].is_u64(), "unsigned: {row}");
        // A oneof: at most one member set.
        let set = [&row["url"], &row["place_lat"], &row["code"]].iter().filter(|v| !v.is_null()).count();
        assert!(set <= 1, "one oneof member at most: {row}");
        nulls += usize::from(row["maybe"].is_null());
        // An `optional` message: all its columns NULL, or none but its own optional price.
        let absent = ["o_item_sku", "o_item_qty"].iter().filter(|c| row[**c].is_null()).count();
        assert!(absent == 0 || (absent == 2 && row["o_item_price"].is_null()), "{row}");
        optional_absent += usize::from(absent == 2);
        negative += usize::from(int(row, "int32_min") < 0);
        for item in row["items"].as_array().unwrap() {
            assert!(item["sku"].is_string() && item["qty"].is_u64(), "{item}");
        }
    }
    assert!((500..2500).contains(&nulls), "wrappers are null and set: {nulls} null");
    assert!((500..2500).contains(&optional_absent), "optional messages absent and present: {optional_absent} absent");
    assert!(negative > 0, "negative int32s (ten-byte varints) decode");
}

/// Every operator and function of the expression language, checked against the input
/// fields each output row also carries.
#[test]
fn kitchen_sink_computes_what_the_expressions_say() {
    let rows = build_and_run("etl-gen/tests/pipelines/kitchen_sink/pipeline.yaml");
    // 3000 records; the filter drops about a third (APAC) and a seventh of the rest.
    assert!((1000..2600).contains(&rows.len()), "{} rows", rows.len());
    for row in &rows {
        let (id, small) = (int(row, "id"), int(row, "small"));
        assert_ne!(text(row, "region"), "APAC", "filtered out");
        assert_ne!(small % 7, 3, "filtered out");
        assert_eq!(int(row, "sum"), id + small);
        assert!(close(float(row, "half"), float(row, "ratio") / 2.0), "{row}");
        assert_eq!(text(row, "lname"), text(row, "name").to_lowercase());
        assert_eq!(int(row, "n_tags"), row["tags"].as_array().unwrap().len() as i64);
        assert_eq!(row["has_maybe"].as_bool().unwrap(), !row["maybe"].is_null());
        assert_eq!(text(row, "fallback"), row["maybe"].as_str().unwrap_or("none"));
        match row["maybe_n"].as_i64() {
            Some(n) => assert_eq!(int(row, "plus_n"), n + 1),
            None => assert!(row["plus_n"].is_null(), "arithmetic with null is null"),
        }
        assert_eq!(int(row, "neg"), -small);
        assert!(close(float(row, "absd"), float(row, "price").abs()), "{row}");
        assert_eq!(text(row, "cat"), format!("{}-{}", text(row, "name"), text(row, "region")));
        assert_eq!(row["big"].as_bool().unwrap(), float(row, "price") > 0.0 || row["flag"].as_bool().unwrap());
        // Timestamps are RFC 3339 in the file; `ts + 1000` is its millisecond count + 1000.
        assert!(text(row, "ts").ends_with('Z') && text(row, "ts").len() == 24, "{row}");
        assert!(text(row, "ts_us").len() == 27, "{row}");
        assert_eq!(text(row, "day").len(), 10);
        assert!(text(row, "amount").contains('.'), "decimals are strings with their scale");
        assert_eq!(text(row, "uid").len(), 36);
        assert!(row.get("na").is_some() && row.get("nested_a").is_none(), "renamed");
        assert!(row.get("nested_b").is_some(), "nested records are flattened");
        assert!(row.get("blob").is_none(), "dropped");
        // A null record's columns are all NULL (its arrays empty); a null array or map is empty.
        if row["opt_x"].is_null() {
            assert!(row["opt_note"].is_null() && row["opt_inner_y"].is_null(), "{row}");
            assert_eq!(row["opt_words"], serde_json::json!([]), "{row}");
        }
        assert!(row["maybe_tags"].is_array() && row["maybe_attrs"].is_object(), "{row}");
    }
    let opt_null = rows.iter().filter(|r| r["opt_x"].is_null()).count();
    assert!(opt_null > 0 && opt_null < rows.len(), "nullable records are null and set: {opt_null} null");
    let inner_null = rows.iter().filter(|r| !r["opt_x"].is_null() && r["opt_inner_y"].is_null()).count();
    assert!(inner_null > 0, "a nullable record inside a present one is null in some rows");
    // The column order is the row order: schema fields, then the map's new fields.
    let keys: Vec<&String> = rows[0].as_object().unwrap().keys().collect();
    assert_eq!(keys.first().map(|k| k.as_str()), Some("id"));
    assert_eq!(keys.last().map(|k| k.as_str()), Some("later"));
}

/// flat_map over records, a filter on the element, and a user Rust operator.
#[test]
fn items_flat_map_and_rust_operator() {
    let rows = build_and_run("etl-gen/tests/pipelines/items/pipeline.yaml");
    assert!(!rows.is_empty());
    let mut last: Option<(i64, i64)> = None;
    for row in &rows {
        let q = int(row, "items_quantity");
        assert!(q >= 0 && q % 2 == 0, "filter and the user function drop the rest: {row}");
        let sku = text(row, "items_sku");
        assert_eq!(sku, sku.to_uppercase(), "the user function ran");
        assert_eq!(row.as_object().unwrap().len(), 5, "select keeps five fields: {row}");
        let key = (int(row, "part"), int(row, "off"));
        if let Some(prev) = last {
            assert!(key >= prev, "one partition, offsets in order");
        }
        last = Some(key);
    }
    // One order yields several rows: some offset repeats.
    let mut offsets: Vec<i64> = rows.iter().map(|r| int(r, "off")).collect();
    let n = offsets.len();
    offsets.dedup();
    assert!(offsets.len() < n, "flat_map gives one row per element");
}

/// The Kafka → ClickHouse examples compile, and their binaries resolve their settings from
/// the environment with secrets masked (running them is the end-to-end tests' job).
#[test]
fn kafka_examples_compile_and_check_their_environment() {
    for rel in [
        "examples/kafka_avro_to_clickhouse/pipeline.yaml",
        "examples/order_items/pipeline.yaml",
        "examples/json_to_clickhouse/pipeline.yaml",
        "examples/protobuf_to_clickhouse/pipeline.yaml",
    ] {
        let (v, binary) = build(rel);
        let check = Command::new(&binary)
            .arg("--check")
            .env("KAFKA_BROKERS", "kafka-1:9092,kafka-2:9092")
            .env("CLICKHOUSE_PASSWORD", "hunter2")
            .output()
            .unwrap();
        let stdout = String::from_utf8(check.stdout).unwrap();
        assert!(check.status.success(), "{rel}: {}", String::from_utf8_lossy(&check.stderr));
        assert!(stdout.contains("source.kafka.brokers = kafka-1:9092,kafka-2:9092"), "{stdout}");
        assert!(stdout.contains("sink.clickhouse.password = ********"), "{stdout}");
        assert!(!stdout.contains("hunter2"), "secrets are never printed: {stdout}");
        assert!(stdout.contains(&format!("config {}", v.config_hash)), "{stdout}");
        let bad = Command::new(&binary).arg("--frobnicate").output().unwrap();
        assert_eq!(bad.status.code(), Some(2), "unknown arguments are a usage error");
    }
}

/// Every generated binary allocates with mimalloc, librdkafka's C code included, commits its
/// arenas on demand and purges freed pages after mimalloc's own delay unless the environment
/// says otherwise (docs/BENCHMARKS.md, "The allocator
/// under librdkafka"). mimalloc prints its options at start-up when `MIMALLOC_VERBOSE` is set; a
/// binary still on glibc's malloc prints none.
#[test]
fn generated_binaries_allocate_with_mimalloc() {
    let (_, binary) = build("examples/kafka_avro_to_clickhouse/pipeline.yaml");
    let options = |env: &[(&str, &str)]| {
        let run =
            Command::new(&binary).arg("--version").env("MIMALLOC_VERBOSE", "1").envs(env.iter().copied()).output();
        let run = run.unwrap();
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        String::from_utf8_lossy(&run.stderr).into_owned()
    };
    let defaults = options(&[]);
    assert!(defaults.contains("option 'arena_eager_commit': 0"), "mimalloc, arenas committed on demand:\n{defaults}");
    assert!(defaults.contains("option 'purge_delay': 1000"), "mimalloc's own purge delay:\n{defaults}");
    let overridden = options(&[("MIMALLOC_ARENA_EAGER_COMMIT", "1"), ("MIMALLOC_PURGE_DELAY", "250")]);
    assert!(overridden.contains("option 'arena_eager_commit': 1"), "the environment wins:\n{overridden}");
    assert!(overridden.contains("option 'purge_delay': 250"), "the environment wins:\n{overridden}");
}

/// A stub Confluent-API registry on loopback answering every `/schemas/ids/N` with
/// `answer` (a status line and a body).
fn stub_registry(status: &'static str, body: String) -> String {
    stub_registry_answering(vec![(status, body)])
}

/// A stub registry that gives `answers` in turn, one per request, the last one from then on.
fn stub_registry_answering(answers: Vec<(&'static str, String)>) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let (status, body) = &answers[n.min(answers.len() - 1)];
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://{addr}")
}

/// `format.avro.registry`: the writer schema is fetched by id; the same schema takes the
/// fast path, another one is resolved to the reader schema, and a registry that lags the
/// producer (404, then 500, then the schema) loses no record: the lookup is retried, never
/// cached as unknown. (Lookups that keep failing until `registry_timeout` are the runtime's
/// pipeline tests' and the registry's unit tests'.)
#[test]
fn registry_resolves_writer_schemas() {
    let rel = "etl-gen/tests/pipelines/registry/pipeline.yaml";
    let (_, binary) = build(rel);
    let reader = std::fs::read_to_string(root().join("etl-gen/tests/pipelines/registry/order.avsc")).unwrap();
    let answer = |schema: &str| serde_json::json!({ "schema": schema }).to_string();

    // Datagen timestamps follow the clock; everything else is the same for the same seed.
    let stable = |rows: Vec<Value>| -> Vec<Value> {
        rows.into_iter()
            .map(|mut r| {
                r.as_object_mut().unwrap().remove("created_at");
                r
            })
            .collect()
    };
    let same = stable(run_built(rel, &binary, &[("REGISTRY", &stub_registry("200 OK", answer(&reader)))]).unwrap());
    assert_eq!(same.len(), 500);

    // A writer schema with one more field, of type null (zero bytes on the wire): the
    // datagen bytes are valid for it, and resolution to the reader schema drops the field.
    let mut writer: Value = serde_json::from_str(&reader).unwrap();
    writer["fields"].as_array_mut().unwrap().push(serde_json::json!({"name": "legacy", "type": "null"}));
    let resolved = stable(
        run_built(rel, &binary, &[("REGISTRY", &stub_registry("200 OK", answer(&writer.to_string())))]).unwrap(),
    );
    assert!(resolved == same, "the resolved path yields the same rows");

    let lagging = stub_registry_answering(vec![
        ("404 Not Found", "{}".into()),
        ("500 Internal Server Error", "oops".into()),
        ("200 OK", answer(&reader)),
    ]);
    let caught_up = stable(run_built(rel, &binary, &[("REGISTRY", &lagging)]).unwrap());
    assert!(caught_up == same, "a lagging registry delays records but drops none ({} rows)", caught_up.len());

    // Without a registry and without `schema_id`, Confluent ids cannot be told apart: exit 2.
    let none = run_built_status(&binary, &[("REGISTRY", "")]);
    assert_eq!(none.0, Some(2), "an empty registry URL without schema_id is a start-up error: {}", none.1);
    assert!(none.1.contains("format.avro.schema_id"), "{}", none.1);
}

/// A generated crate refuses to build once the pipeline.yaml it came from has changed, so a
/// binary never silently disagrees with its configuration.
#[test]
fn editing_the_pipeline_after_generation_fails_the_build() {
    let dir = tempfile::tempdir().unwrap();
    let source = root().join("etl-gen/tests/pipelines/items");
    for f in ["pipeline.yaml", "orders.avsc", "ops.rs"] {
        std::fs::copy(source.join(f), dir.path().join(f)).unwrap();
    }
    let yaml = dir.path().join("pipeline.yaml");
    // A crate name of its own: crates of one name share their build state in the shared target
    // directory, and the other tests build `items` meanwhile.
    let renamed = std::fs::read_to_string(&yaml).unwrap().replace("name: items", "name: stale-check");
    std::fs::write(&yaml, renamed).unwrap();
    let v = validate_file(&yaml, &Options::default()).unwrap().pipeline.unwrap();
    let crate_dir = root().join("target/etl-test/stale-check");
    let opts = options("pipeline.yaml", crate_dir.clone());
    // The crate's own copy of the sources; fresh each run.
    let _ = std::fs::remove_dir_all(&crate_dir);
    etl_gen::cli::write(&crate_dir, &emit::generate(&v, &opts).unwrap()).unwrap();
    let build = || {
        Command::new(env!("CARGO"))
            .args(["build", "--quiet", "--manifest-path"])
            .arg(crate_dir.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", root().join("target"))
            .output()
            .unwrap()
    };
    assert!(build().status.success(), "the fresh crate builds");
    let edited = std::fs::read_to_string(&yaml).unwrap().replace("threads: 1", "threads: 2");
    std::fs::write(&yaml, edited).unwrap();
    let stale = build();
    assert!(!stale.status.success(), "an edited pipeline.yaml must fail the build");
    let stderr = String::from_utf8_lossy(&stale.stderr);
    assert!(stderr.contains("pipeline.yaml changed after this crate was generated"), "{stderr}");
}

/// An integer division by zero is a record error that `errors.policy: skip` drops; the
/// other records are computed with truncating division.
#[test]
fn division_by_zero_is_a_record_error() {
    let rows = build_and_run("etl-gen/tests/pipelines/division/pipeline.yaml");
    assert!((300..600).contains(&rows.len()), "about a third is dropped: {} rows", rows.len());
    for row in &rows {
        let (id, total) = (int(row, "order_id"), int(row, "total_cents"));
        assert_ne!(id % 3, 0, "records dividing by zero are skipped");
        assert_eq!(int(row, "per_third"), total / (id % 3));
    }
}

/// Secrets are never shown: a binary whose every credential comes from the environment as a
/// marker value prints none of them in `--check`, in the log of a failed start-up (debug level,
/// with librdkafka's own complaints), or in `/metrics` while it waits for its broker.
#[test]
fn secrets_never_appear_in_check_logs_or_metrics() {
    let rel = "etl-gen/tests/pipelines/secrets/pipeline.yaml";
    let (_, binary) = build(rel);
    let markers = [
        ("SASL_USERNAME", "marker-sasl-username"),
        ("SASL_PASSWORD", "marker-sasl-password"),
        ("OAUTHBEARER_CONFIG", "marker-oauthbearer-config"),
        ("SSL_KEY_PASSWORD", "marker-ssl-key-password"),
        ("SSL_KEYSTORE_PASSWORD", "marker-ssl-keystore-password"),
        ("SSL_KEY_PEM", "marker-ssl-key-pem"),
        ("CLICKHOUSE_PASSWORD", "marker-clickhouse-password"),
        ("REPLICA_USERINFO", "marker-replica-user:marker-replica-password"),
    ];
    let registry = "http://marker-registry-user:marker-registry-password@127.0.0.1:1";
    let leaked = |text: &str| -> Vec<&str> {
        let mut found: Vec<&str> = markers.iter().map(|(_, m)| *m).filter(|m| text.contains(m)).collect();
        found.extend(
            ["marker-replica-user", "marker-replica-password", "marker-registry-user", "marker-registry-password"]
                .into_iter()
                .filter(|m| text.contains(m)),
        );
        found
    };
    let free_port = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let command = |protocol: &str, admin: &str| {
        let mut c = Command::new(&binary);
        c.envs(markers.iter().copied())
            .env("REGISTRY", registry)
            .env("SECURITY_PROTOCOL", protocol)
            .env("ADMIN_LISTEN", admin)
            .env("RUST_LOG", "debug");
        c
    };

    let check = command("sasl_ssl", "127.0.0.1:0").arg("--check").output().unwrap();
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    assert!(leaked(&stdout).is_empty(), "--check shows {:?}:\n{stdout}", leaked(&stdout));
    assert!(stdout.contains("source.kafka.rdkafka.sasl.password = ********"), "{stdout}");
    assert!(stdout.contains("127.0.0.1:1"), "URLs are shown without their userinfo: {stdout}");

    // With TLS, librdkafka refuses the key at once: a failed start-up whose error quotes
    // configuration.
    let failed = command("sasl_ssl", "127.0.0.1:0").output().unwrap();
    let log = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(2), "a start-up error: {log}");
    assert!(leaked(&log).is_empty(), "the failed start-up log shows {:?}:\n{log}", leaked(&log));

    // In plaintext the consumer starts and waits for a broker that is not there: /metrics is
    // served meanwhile, then the start-up times out.
    let admin = format!("127.0.0.1:{}", free_port());
    let child = command("plaintext", &admin)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut metrics = None;
    for _ in 0..60 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        if let Ok(text) = http_get(&admin, "/metrics") {
            metrics = Some(text);
            break;
        }
    }
    let output = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    let metrics = metrics.unwrap_or_else(|| panic!("/metrics was served on {admin} during start-up:\n{log}"));
    assert!(metrics.contains("etl_build_info"), "{metrics}");
    assert!(leaked(&metrics).is_empty(), "/metrics shows {:?}:\n{metrics}", leaked(&metrics));
    assert_eq!(output.status.code(), Some(2), "no broker: a start-up error after startup_timeout: {log}");
    assert!(leaked(&log).is_empty(), "the start-up log shows {:?}:\n{log}", leaked(&log));
}

/// A secret property this build of librdkafka refuses at start-up (OIDC's client secret, when
/// the method resolves to `default`) is masked all the same: in `--check`, and in the log of the
/// start-up it fails.
#[test]
fn refused_secret_properties_are_not_shown_either() {
    let rel = "etl-gen/tests/pipelines/secrets-rejected/pipeline.yaml";
    let (_, binary) = build(rel);
    let markers = [("OAUTHBEARER_CLIENT_SECRET", "marker-client-secret"), ("OAUTHBEARER_METHOD", "default")];
    let leaked =
        |text: &str| -> Vec<&str> { markers[..1].iter().map(|(_, m)| *m).filter(|m| text.contains(m)).collect() };
    let check = Command::new(&binary).arg("--check").envs(markers.iter().copied()).output().unwrap();
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    assert!(leaked(&stdout).is_empty(), "--check shows {:?}:\n{stdout}", leaked(&stdout));
    assert!(stdout.contains("source.kafka.rdkafka.sasl.oauthbearer.client.secret = ********"), "{stdout}");
    let failed = Command::new(&binary).envs(markers.iter().copied()).env("RUST_LOG", "debug").output().unwrap();
    let log = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(2), "librdkafka refuses the properties at start-up: {log}");
    assert!(leaked(&log).is_empty(), "the failed start-up log shows {:?}:\n{log}", leaked(&log));
}

/// A plain HTTP/1.1 GET on loopback; the body.
fn http_get(addr: &str, path: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default())
}

/// Every wire format's generated decoder and chain meet random and damaged payloads with record
/// errors, never a panic: each generated crate carries that test (`fuzz_chain`), run here.
#[test]
fn generated_chains_never_panic_on_random_payloads() {
    for rel in [
        // Confluent framing (with `schema_id`), every supported type.
        "etl-gen/tests/pipelines/kitchen_sink/pipeline.yaml",
        // Raw datums, arrays of records under flat_map, a user operator.
        "etl-gen/tests/pipelines/items/pipeline.yaml",
        // Confluent framing with a registry.
        "etl-gen/tests/pipelines/registry/pipeline.yaml",
        // JSON documents, Confluent-framed, every construct of the JSON Schema subset.
        "etl-gen/tests/pipelines/json/pipeline.yaml",
        // Protobuf messages, Confluent-framed with a message-index path, every mapped construct.
        "etl-gen/tests/pipelines/protobuf/pipeline.yaml",
    ] {
        let (v, _) = build(rel);
        let crate_dir = root().join("target/etl-test").join(&v.model.pipeline.name);
        let output = Command::new(env!("CARGO"))
            .args(["test", "--quiet", "--manifest-path"])
            .arg(crate_dir.join("Cargo.toml"))
            .args(["--", "--nocapture"])
            .env("CARGO_TARGET_DIR", root().join("target"))
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success(), "{rel}: the generated fuzz test failed:\n{text}");
        assert!(text.contains("no panic"), "{rel}: the fuzz test ran:\n{text}");
        let rows: u32 = text
            .split("valid payloads decoded into ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("{rel}: the fuzz test reports the valid payloads' rows:\n{text}"));
        // The registry pipeline's records carry an id only its registry knows: not checked.
        assert!(rows > 0 || rel.contains("registry"), "{rel}: no valid payload decoded into a row:\n{text}");
    }
}

/// A `.proto`'s imports are part of the configuration: editing one changes the config hash (and
/// so the binary's `--version`), as editing the file itself does.
#[test]
fn protobuf_imports_enter_the_config_hash() {
    let dir = tempfile::tempdir().unwrap();
    let from = root().join("etl-gen/tests/pipelines/protobuf");
    for name in ["pipeline.yaml", "click.proto", "common.proto"] {
        std::fs::copy(from.join(name), dir.path().join(name)).unwrap();
    }
    let hash = || {
        let outcome = etl_gen::validate_file(&dir.path().join("pipeline.yaml"), &etl_gen::Options::default()).unwrap();
        outcome.pipeline.unwrap_or_else(|| panic!("{}", outcome.report.render())).config_hash
    };
    let before = hash();
    let common = std::fs::read_to_string(dir.path().join("common.proto")).unwrap();
    std::fs::write(
        dir.path().join("common.proto"),
        common.replace("double lon = 2;", "double lon = 2;\n  int32 alt = 5;"),
    )
    .unwrap();
    assert_ne!(hash(), before, "an edited import is a new configuration");
}

/// Every pipeline the repository holds (the examples, the valid corpus, the test pipelines and
/// a `rust` step whose fields a later `select` partly drops), generated and compiled together as
/// the binaries of one scratch crate, passes rustc and clippy with `-D warnings`, test modules
/// included. One crate with the runtime's default features: its dependencies are the ones the
/// workspace's own clippy step compiled, so nothing is compiled twice.
#[test]
fn every_pipeline_compiles_without_warnings() {
    let mut pipelines: Vec<PathBuf> = Vec::new();
    for dir in ["examples", "etl-gen/tests/pipelines"] {
        for entry in std::fs::read_dir(root().join(dir)).unwrap() {
            let path = entry.unwrap().path().join("pipeline.yaml");
            if path.exists() {
                pipelines.push(path);
            }
        }
    }
    for entry in std::fs::read_dir(root().join("etl-gen/tests/corpus/valid")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            pipelines.push(path);
        }
    }
    pipelines.sort();
    let scratch = root().join("target/etl-warnings");
    let mut bins = String::new();
    for (i, path) in pipelines.iter().enumerate() {
        let rel = path.strip_prefix(root()).unwrap().display().to_string();
        let v = load(&rel);
        let crate_dir = scratch.join(format!("p{i}"));
        let files = emit::generate(&v, &options(&rel, crate_dir.clone())).unwrap();
        etl_gen::cli::write(&crate_dir, &files).unwrap();
        bins.push_str(&format!(
            "[[bin]]\nname = \"p{i}-{}\"\npath = \"{}\"\n\n",
            v.model.pipeline.name,
            crate_dir.join("src/main.rs").display()
        ));
    }
    assert!(pipelines.len() >= 20, "the examples, the corpus and the test pipelines: {}", pipelines.len());
    let manifest = format!(
        "[package]\nname = \"etl-warnings\"\nversion = \"0.1.0\"\nedition = \"2024\"\npublish = false\n\n{bins}\
         [dependencies]\netl-runtime = {{ path = \"{}\" }}\n\n[workspace]\n\n\
         [profile.dev]\ndebug = \"line-tables-only\"\n\n[profile.dev.package.\"*\"]\ndebug = false\n",
        root().join("etl-runtime").display()
    );
    std::fs::write(scratch.join("Cargo.toml"), manifest).unwrap();
    std::fs::copy(root().join("Cargo.lock"), scratch.join("Cargo.lock")).unwrap();
    let output = Command::new(env!("CARGO"))
        .args(["clippy", "--quiet", "--all-targets", "--manifest-path"])
        .arg(scratch.join("Cargo.toml"))
        .args(["--", "-D", "warnings"])
        .env("CARGO_TARGET_DIR", root().join("target"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "generated code must compile without warnings:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `sasl.oauthbearer.method: oidc` in a generated binary: it asks the token endpoint (a stub)
/// with the client credentials, sends the token it got in the OAUTHBEARER exchange to the broker
/// (a stub that answers like a 0.10 broker and keeps the exchange open), and renews the token
/// before it expires; the client secret appears in no log line.
#[test]
fn a_generated_binary_fetches_oidc_tokens_and_renews_them() {
    use std::io::{Read as _, Write as _};
    use std::net::{TcpListener, TcpStream};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

    let (_, binary) = build("etl-gen/tests/pipelines/oidc/pipeline.yaml");
    // The token endpoint: each answer a JWT-shaped token that expires in 6 s.
    let asked: Arc<Mutex<Vec<String>>> = Arc::default();
    let endpoint = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint_url = format!("http://{}/token", endpoint.local_addr().unwrap());
    let log = asked.clone();
    std::thread::spawn(move || {
        for stream in endpoint.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut request = Vec::new();
            let mut buf = [0; 4096];
            while !String::from_utf8_lossy(&request).contains("grant_type") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend(&buf[..n]),
                }
            }
            let n = {
                let mut log = log.lock().unwrap();
                log.push(String::from_utf8_lossy(&request).into_owned());
                log.len()
            };
            let exp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 6;
            let claims = URL_SAFE_NO_PAD.encode(format!(r#"{{"sub":"etl-client","exp":{exp}}}"#));
            let answer = format!(r#"{{"access_token":"eyJhbGciOiJub25lIn0.{claims}.token{n}","token_type":"bearer"}}"#);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
    // The broker: ApiVersions refused above v0, SaslHandshake v0, then the raw initial response.
    let broker = TcpListener::bind("127.0.0.1:0").unwrap();
    let brokers = broker.local_addr().unwrap().to_string();
    let (sent_tx, sent_rx) = std::sync::mpsc::channel::<(Vec<u8>, TcpStream)>();
    std::thread::spawn(move || {
        let Ok((mut stream, _)) = broker.accept() else { return };
        let frame = |stream: &mut TcpStream| -> Option<Vec<u8>> {
            let mut size = [0; 4];
            stream.read_exact(&mut size).ok()?;
            let mut body = vec![0; u32::from_be_bytes(size) as usize];
            stream.read_exact(&mut body).ok()?;
            Some(body)
        };
        while let Some(request) = frame(&mut stream) {
            let (key, version) =
                (i16::from_be_bytes([request[0], request[1]]), i16::from_be_bytes([request[2], request[3]]));
            let mut answer = request[4..8].to_vec();
            match key {
                18 if version > 0 => answer.extend([0, 35, 0, 0, 0, 0]),
                18 => answer.extend([0, 0, 0, 0, 0, 1, 0, 17, 0, 0, 0, 0]),
                17 => {
                    answer.extend([0, 0, 0, 0, 0, 1, 0, 11]);
                    answer.extend(b"OAUTHBEARER");
                }
                _ => {
                    let _ = sent_tx.send((request, stream));
                    return;
                }
            }
            let mut framed = (answer.len() as u32).to_be_bytes().to_vec();
            framed.extend(answer);
            stream.write_all(&framed).unwrap();
        }
    });
    let secret = "oidc-client-secret-marker";
    let mut child = Command::new(&binary)
        .envs([
            ("KAFKA_BROKERS", brokers.as_str()),
            ("KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT"),
            ("OIDC_CLIENT_SECRET", secret),
            ("OIDC_TOKEN_ENDPOINT", endpoint_url.as_str()),
            ("RUST_LOG", "info"),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let sent = sent_rx.recv_timeout(Duration::from_secs(30));
    // Renewed before the first token's 6 s are out (librdkafka asks at 80%).
    let deadline = Instant::now() + Duration::from_secs(20);
    while asked.lock().unwrap().len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    let (sent, _connection) = sent.unwrap_or_else(|_| panic!("the broker got no SASL initial response; log:\n{log}"));
    let text = String::from_utf8(sent).unwrap();
    assert!(
        text.starts_with("n,,\u{1}auth=Bearer eyJhbGciOiJub25lIn0.") && text.ends_with(".token1\u{1}\u{1}"),
        "{text:?}"
    );
    let asked = asked.lock().unwrap().clone();
    assert!(asked.len() >= 2, "the token was not renewed before it expired: {asked:?}\n{log}");
    let basic = format!("Basic {}", STANDARD.encode(format!("etl-client:{secret}")));
    for request in &asked {
        assert!(request.starts_with("POST /token "), "{request}");
        assert!(request.contains(&basic) && request.ends_with("grant_type=client_credentials"), "{request}");
    }
    assert!(log.contains("OIDC token fetched"), "{log}");
    assert!(!log.contains(secret), "the client secret is in the log:\n{log}");
}
