//! `etl-gen init`: for every example's schema (Avro, JSON Schema, Protobuf), the printed pipeline
//! passes `gen --check` as it is, saved where `init` ran; more shards than the defaults are sized
//! for get a budget that satisfies the sizing rule; and what `init` cannot decide is an error that
//! says what to pass.

use std::path::Path;
use std::process::{Command, Output};

fn etl_gen(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_etl-gen")).current_dir(dir).args(args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `init` for `schema` (copied into a fresh directory) and `gen --check` of what it printed;
/// returns the pipeline.
fn init_and_check(schema: &str, extra: &[&str]) -> String {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(schema);
    let dir = tempfile::tempdir().unwrap();
    let name = source.file_name().unwrap().to_str().unwrap();
    std::fs::copy(&source, dir.path().join(name)).unwrap();
    let mut args = vec!["init", name, "--topic", "events", "--table", "events_local"];
    args.extend_from_slice(extra);
    let out = etl_gen(dir.path(), &args);
    assert_eq!(out.status.code(), Some(0), "{schema}: {}", text(&out.stderr));
    let pipeline = text(&out.stdout);
    std::fs::write(dir.path().join("pipeline.yaml"), &pipeline).unwrap();
    let check = etl_gen(dir.path(), &["gen", "pipeline.yaml", "--check"]);
    assert_eq!(check.status.code(), Some(0), "{schema}: {}\n{pipeline}", text(&check.stderr));
    pipeline
}

#[test]
fn every_example_schema_gives_a_pipeline_that_passes_the_check() {
    for schema in [
        "examples/kafka_avro_to_clickhouse/schemas/order.avsc",
        "examples/order_items/schemas/order_with_items.avsc",
        "examples/quickstart/order.avsc",
        "examples/json_to_clickhouse/schemas/click.schema.json",
        "examples/protobuf_to_clickhouse/schemas/click.proto",
    ] {
        let pipeline = init_and_check(schema, &[]);
        assert!(pipeline.contains("name: events-local"), "{pipeline}");
        assert!(pipeline.contains("topic: ${EVENTS_LOCAL_TOPIC:-events}"), "{pipeline}");
        assert!(pipeline.contains("--ddl"), "the DDL hint: {pipeline}");
        assert!(pipeline.contains("# The sizing rule"), "{pipeline}");
    }
}

// The defaults hold the sizing rule for up to 3 shards; at 6, `init` writes the smallest budget
// (in 64 MiB steps) that holds it, and the worked rule beside the knobs shows the numbers `gen`
// checks: left ≥ right.
#[test]
fn many_shards_get_a_budget_that_fits_the_rule() {
    let pipeline = init_and_check("examples/kafka_avro_to_clickhouse/schemas/order.avsc", &["--shards", "6"]);
    assert!(pipeline.contains("CLICKHOUSE_URL_6"), "{pipeline}");
    let budget = pipeline.lines().find(|l| l.trim_start().starts_with("max_inflight_bytes:")).expect("a budget");
    // 2 × (6 × 2 × 16 MiB + 6 × 8 × 256 KiB) = 408 MiB, / 0.5 = 816 MiB, rounded up to 832 MiB.
    assert!(budget.contains("832MiB"), "{budget}");
    assert!(
        pipeline.contains("#   832MiB × 0.5 = 416MiB  ≥  2 × (6 × 2 × 16MiB + 6 × 8 × 256KiB) = 408MiB"),
        "{pipeline}"
    );
    let few = init_and_check("examples/kafka_avro_to_clickhouse/schemas/order.avsc", &["--shards", "3"]);
    assert!(few.contains("# max_inflight_bytes: 512MiB"), "the default, commented: {few}");
}

#[test]
fn what_init_cannot_decide_is_an_error_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("two.proto"),
        "syntax = \"proto3\";\npackage p;\nmessage A { int64 id = 1; }\nmessage B { int64 id = 1; }\n",
    )
    .unwrap();
    let out = etl_gen(dir.path(), &["init", "two.proto", "--topic", "t", "--table", "x"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("p.A, p.B") && stderr.contains("--message"), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing printed that would not pass the check");
    let named = etl_gen(dir.path(), &["init", "two.proto", "--topic", "t", "--table", "x", "--message", "p.B"]);
    assert_eq!(named.status.code(), Some(0), "{}", text(&named.stderr));
    assert!(text(&named.stdout).contains("message: p.B"));

    let out = etl_gen(dir.path(), &["init", "schema.xsd", "--topic", "t", "--table", "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains(".avsc (Avro), .json (JSON Schema) or .proto"), "{}", text(&out.stderr));
}
