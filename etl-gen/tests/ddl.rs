//! `gen --ddl`'s statements, per shard and replicated (`--replicated`), as snapshots and as the
//! same table in both forms.

use std::path::{Path, PathBuf};

use etl_gen::ddl::{self, Replication};
use etl_gen::{Options, Validated, validate_file};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

fn load(rel: &str) -> Validated {
    let outcome = validate_file(&root().join(rel), &Options::default()).unwrap();
    outcome.pipeline.unwrap_or_else(|| panic!("{rel}:\n{}", outcome.report.render()))
}

/// At least once (one table) and exactly once (the table and its ledger).
const FLAGSHIP: &str = "examples/kafka_avro_to_clickhouse/pipeline.yaml";
const EXACTLY_ONCE: &str = "etl-gen/tests/corpus/valid/exactly_once.yaml";

fn replicated(cluster: Option<&str>) -> Replication {
    Replication::Replicated { cluster: cluster.map(str::to_owned) }
}

/// What `--ddl` printed before `--replicated` existed, kept as it was: a MergeTree per shard.
#[test]
fn per_shard_tables_snapshots() {
    insta::assert_snapshot!("per_shard_flagship", ddl::create_table(&load(FLAGSHIP)).unwrap());
    insta::assert_snapshot!("per_shard_exactly_once", ddl::create_table(&load(EXACTLY_ONCE)).unwrap());
    assert_eq!(
        ddl::create_tables(&load(EXACTLY_ONCE), &Replication::PerShard).unwrap(),
        ddl::create_table(&load(EXACTLY_ONCE)).unwrap()
    );
}

/// With `outputs`: one CREATE per output's table, each with its own ledger under exactly-once,
/// per shard and replicated.
#[test]
fn outputs_tables_snapshots() {
    let v = load("examples/route_to_tables/pipeline.yaml");
    let per_shard = ddl::create_table(&v).unwrap();
    for table in ["shop_orders", "shop_order_lines", "shop_refunds"] {
        for name in [table.to_owned(), format!("{table}_etl_batches")] {
            let create = format!("CREATE TABLE IF NOT EXISTS `default`.`{name}`\n");
            assert_eq!(per_shard.matches(&create).count(), 1, "{name} is created once:\n{per_shard}");
        }
    }
    insta::assert_snapshot!("per_shard_outputs", per_shard);
    insta::assert_snapshot!("replicated_outputs", ddl::create_tables(&v, &replicated(None)).unwrap());
}

/// `--ddl --replicated [--cluster NAME]`: ON CLUSTER, ReplicatedMergeTree with the `{shard}` and
/// `{replica}` macros, Keeper's deduplication settings, and a header that says where to run it.
#[test]
fn replicated_tables_snapshots() {
    insta::assert_snapshot!("replicated_flagship", ddl::create_tables(&load(FLAGSHIP), &replicated(None)).unwrap());
    insta::assert_snapshot!(
        "replicated_exactly_once",
        ddl::create_tables(&load(EXACTLY_ONCE), &replicated(None)).unwrap()
    );
    insta::assert_snapshot!(
        "replicated_exactly_once_named_cluster",
        ddl::create_tables(&load(EXACTLY_ONCE), &replicated(Some("prod"))).unwrap()
    );
}

/// The replicated statements describe the same tables as the per-shard ones: only ON CLUSTER, the
/// engine and the deduplication settings differ (columns, ordering and the ledger's TTL do not),
/// and each table gets a Keeper path of its own.
#[test]
fn replicated_tables_differ_only_in_cluster_engine_and_settings() {
    let v = load(EXACTLY_ONCE);
    let per_shard = ddl::create_table(&v).unwrap();
    let replicated = ddl::create_tables(&v, &replicated(None)).unwrap();
    let per_shard: Vec<String> = ddl::statements(&per_shard).map(without_comments).collect();
    let replicated: Vec<String> = ddl::statements(&replicated).map(without_comments).collect();
    assert_eq!(replicated.len(), 2);
    for (table, (one, other)) in ["orders", "orders_etl_batches"].into_iter().zip(per_shard.iter().zip(&replicated)) {
        let path = format!("'/clickhouse/tables/{{shard}}/default/{table}'");
        let back = other
            .replace(" ON CLUSTER '{cluster}'", "")
            .replace(&format!("ReplicatedMergeTree({path}, '{{replica}}')"), "MergeTree")
            .replace(
                "replicated_deduplication_window = 1000, replicated_deduplication_window_seconds = 604800",
                "non_replicated_deduplication_window = 1000",
            );
        assert_eq!(&back, one, "{table}:\n{other}");
    }
}

/// `--cluster` is written as a string literal, so any name is one token of ON CLUSTER; an empty
/// one is refused rather than left for ClickHouse to reject.
#[test]
fn cluster_names_are_string_literals_and_never_empty() {
    let v = load(FLAGSHIP);
    let sql = ddl::create_tables(&v, &replicated(Some(r"it's\prod"))).unwrap();
    assert!(sql.contains(r"ON CLUSTER 'it\'s\\prod'"), "{sql}");
    assert!(!sql.contains("{cluster}"), "a named cluster needs no `cluster` macro:\n{sql}");
    let error = ddl::create_tables(&v, &replicated(Some(""))).unwrap_err();
    assert!(matches!(error, ddl::Error::EmptyCluster), "{error}");
}

/// A statement without its comment lines.
fn without_comments(statement: &str) -> String {
    statement.lines().filter(|l| !l.trim_start().starts_with("--") && !l.is_empty()).collect::<Vec<_>>().join("\n")
}
