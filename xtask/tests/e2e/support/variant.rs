//! The pipelines of `xtask/tests/e2e/`: their files and tables, and their binaries, built once
//! per test binary with their tables (re)created from `gen --ddl`.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use super::clickhouse::ch_exec;
use super::{root, xtask};

/// One build at a time: they share the target directory (and two cores).
static BUILD: Mutex<()> = Mutex::new(());

/// The build lock: held by each build, and by a scenario that measures a pace a build's two cores
/// would distort (while it lives no binary is built; a build under way finishes first). Take it
/// after the scenario's [`super::scope`] and after preparing its variants, as a build does.
pub fn build_lock() -> MutexGuard<'static, ()> {
    BUILD.lock().unwrap_or_else(|e| e.into_inner())
}

/// How many [`Variant`]s there are.
pub const VARIANTS: usize = 23;

/// The pipelines of `xtask/tests/e2e/`, one binary each (errors.policy, errors.tombstones and the
/// sizing knobs are compiled in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// `pipeline.yaml`: errors.policy skip, tombstones skip.
    Skip,
    /// `pipeline-dlq.yaml`: errors.policy dlq (`$DLQ_TOPIC`), tombstones skip.
    Dlq,
    /// `pipeline-fail.yaml`: errors.policy fail, tombstones fail.
    Fail,
    /// `pipeline-tls.yaml`: `pipeline.yaml` over TLS (the broker and shard 0).
    Tls,
    /// `pipeline-eo.yaml`: `pipeline.yaml` with `exactly_once: true`.
    Exactly,
    /// `pipeline-bounded.yaml`: `pipeline.yaml` with a small budget and prefetch, so that its
    /// memory bound is small enough for the memory scenarios to put several bounds in the topic.
    Bounded,
    /// `pipeline-replicas.yaml`: `pipeline.yaml` with several replicas per shard (stand-ins that
    /// hang or fail on shard 0, `$CLICKHOUSE_URL_3` on shard 1) and a 5 s insert timeout.
    Replicas,
    /// `pipeline-registry.yaml`: `pipeline.yaml` with a 10 minute `registry_timeout`.
    Registry,
    /// `pipeline-json.yaml`: `pipeline-eo.yaml` reading JSON documents (exactly once, skip).
    Json,
    /// `pipeline-json-dlq.yaml`: `pipeline-json.yaml` with errors.policy dlq.
    JsonDlq,
    /// `pipeline-json-fail.yaml`: `pipeline-json.yaml` with errors.policy and tombstones fail.
    JsonFail,
    /// `pipeline-json-registry.yaml`: `pipeline-json.yaml` with Confluent framing and a registry.
    JsonRegistry,
    /// `pipeline-protobuf.yaml`: `pipeline-eo.yaml` reading Protobuf messages (exactly once, skip).
    Protobuf,
    /// `pipeline-protobuf-dlq.yaml`: `pipeline-protobuf.yaml` with errors.policy dlq.
    ProtobufDlq,
    /// `pipeline-protobuf-fail.yaml`: `pipeline-protobuf.yaml` with errors.policy and tombstones
    /// fail.
    ProtobufFail,
    /// `pipeline-stall.yaml`: `pipeline-eo.yaml` with a 5 s `stall_timeout`.
    Stall,
    /// `pipeline-outage.yaml`: `pipeline.yaml` with a table of its own (scenario 13).
    Outage,
    /// `pipeline-outage-eo.yaml`: `pipeline-eo.yaml` with a table of its own (scenario 13).
    OutageEo,
    /// `examples/regional_topics/pipeline.yaml`: every topic matching `$ORDERS_PATTERN` into one
    /// table, exactly once, with `_topic` as the column `source_topic` (scenario 19).
    Regional,
    /// `examples/route_to_tables/pipeline.yaml`: shop events of two topics split into three
    /// tables by `outputs`, exactly once per table (scenario 40).
    Routes,
    /// `examples/events_with_json/pipeline.yaml`: a tuple, a map, a JSON column, a variant and
    /// Kafka headers (scenario 41).
    Events,
    /// `pipeline-dlq-fixed.yaml`: `pipeline-dlq.yaml` reading records up to 8 KiB, into its table
    /// (scenario 43's second build).
    DlqFixed,
    /// `pipeline-json-dlq-fixed.yaml`: `pipeline-json-dlq.yaml` reading documents up to 8 KiB, into
    /// its table (scenario 43's second build, exactly once).
    JsonDlqFixed,
}

impl Variant {
    pub fn yaml(self) -> PathBuf {
        let file = match self {
            Variant::Skip => "pipeline.yaml",
            Variant::Dlq => "pipeline-dlq.yaml",
            Variant::Fail => "pipeline-fail.yaml",
            Variant::Tls => "pipeline-tls.yaml",
            Variant::Exactly => "pipeline-eo.yaml",
            Variant::Bounded => "pipeline-bounded.yaml",
            Variant::Replicas => "pipeline-replicas.yaml",
            Variant::Registry => "pipeline-registry.yaml",
            Variant::Json => "pipeline-json.yaml",
            Variant::JsonDlq => "pipeline-json-dlq.yaml",
            Variant::JsonFail => "pipeline-json-fail.yaml",
            Variant::JsonRegistry => "pipeline-json-registry.yaml",
            Variant::Protobuf => "pipeline-protobuf.yaml",
            Variant::ProtobufDlq => "pipeline-protobuf-dlq.yaml",
            Variant::ProtobufFail => "pipeline-protobuf-fail.yaml",
            Variant::Stall => "pipeline-stall.yaml",
            Variant::DlqFixed => "pipeline-dlq-fixed.yaml",
            Variant::JsonDlqFixed => "pipeline-json-dlq-fixed.yaml",
            Variant::Outage => "pipeline-outage.yaml",
            Variant::OutageEo => "pipeline-outage-eo.yaml",
            Variant::Regional => return root().join("examples/regional_topics/pipeline.yaml"),
            Variant::Routes => return root().join("examples/route_to_tables/pipeline.yaml"),
            Variant::Events => return root().join("examples/events_with_json/pipeline.yaml"),
        };
        root().join("xtask/tests/e2e").join(file)
    }

    pub fn table(self) -> &'static str {
        match self {
            Variant::Skip => "e2e_orders",
            Variant::Dlq => "e2e_orders_dlq",
            Variant::Fail => "e2e_orders_fail",
            Variant::Tls => "e2e_orders_tls",
            Variant::Exactly => "e2e_orders_eo",
            Variant::Bounded => "e2e_orders_bounded",
            Variant::Replicas => "e2e_orders_replicas",
            Variant::Registry => "e2e_orders_registry",
            Variant::Json => "e2e_orders_json",
            Variant::JsonDlq => "e2e_orders_json_dlq",
            Variant::JsonFail => "e2e_orders_json_fail",
            Variant::JsonRegistry => "e2e_orders_json_registry",
            Variant::Protobuf => "e2e_orders_protobuf",
            Variant::ProtobufDlq => "e2e_orders_protobuf_dlq",
            Variant::ProtobufFail => "e2e_orders_protobuf_fail",
            Variant::Stall => "e2e_orders_stall",
            Variant::Outage => "e2e_orders_outage",
            Variant::OutageEo => "e2e_orders_outage_eo",
            Variant::Regional => "regional_orders",
            Variant::Routes => "shop_orders",
            Variant::Events => "events_with_json",
            // The first build's tables: the fixed binary writes where the first one did.
            Variant::DlqFixed => "e2e_orders_dlq",
            Variant::JsonDlqFixed => "e2e_orders_json_dlq",
        }
    }

    /// Every table the variant writes: its [`Variant::table`], and with `outputs` the others.
    pub fn tables(self) -> Vec<&'static str> {
        match self {
            Variant::Routes => vec!["shop_orders", "shop_order_lines", "shop_refunds"],
            _ => vec![self.table()],
        }
    }

    pub(super) fn index(self) -> usize {
        self as usize
    }

    /// The binary, built once per test binary with `cargo xtask build`; its table is (re)created
    /// on both shards from `cargo xtask gen --ddl` at the same time.
    pub fn binary(self) -> PathBuf {
        static BINARIES: [OnceLock<PathBuf>; VARIANTS] = [const { OnceLock::new() }; VARIANTS];
        BINARIES[self.index()]
            .get_or_init(|| {
                let _build = build_lock();
                let started = Instant::now();
                // The fault points (`ETL_FAULT`) are compiled in only on request; every e2e binary
                // gets them, so all variants share one build of the runtime. Static, like the
                // binary an image ships: the dependencies are the ones the image tests compiled.
                let output = xtask()
                    .arg("build")
                    .arg(self.yaml())
                    .args(["--fault-injection", "--static"])
                    .output()
                    .expect("running cargo xtask build");
                let stdout = String::from_utf8_lossy(&output.stdout);
                assert!(
                    output.status.success(),
                    "cargo xtask build {} failed:\n{stdout}\n{}",
                    self.yaml().display(),
                    String::from_utf8_lossy(&output.stderr)
                );
                let binary = PathBuf::from(stdout.lines().last().expect("build prints the binary").trim());
                assert!(binary.is_absolute() && binary.exists(), "{} is the built binary", binary.display());
                eprintln!("built {} in {:.1}s", binary.display(), started.elapsed().as_secs_f64());
                // The counterpart of the image test's check that a shipped binary has no hook.
                let bytes = std::fs::read(&binary).expect("reading the built binary");
                assert!(bytes.windows(9).any(|w| w == b"ETL_FAULT"), "--fault-injection compiles the fault points in");

                for url in &super::clickhouse::shards_of(self.table()) {
                    self.recreate_table(url);
                }
                binary
            })
            .clone()
    }

    /// Drops and creates the variant's table (and ledger) on the server at `url`, from
    /// `cargo xtask gen --ddl`.
    pub fn recreate_table(self, url: &str) {
        let ddl = xtask().args(["gen", "--ddl"]).arg(self.yaml()).output().expect("running gen --ddl");
        assert!(ddl.status.success(), "gen --ddl: {}", String::from_utf8_lossy(&ddl.stderr));
        let ddl = String::from_utf8(ddl.stdout).unwrap();
        for table in self.tables() {
            ch_exec(url, &format!("DROP TABLE IF EXISTS default.{table} SYNC"));
            // The exactly-once variant's DDL also creates its ledger table.
            ch_exec(url, &format!("DROP TABLE IF EXISTS default.{table}_etl_batches SYNC"));
        }
        for statement in etl_gen::ddl::statements(&ddl) {
            ch_exec(url, statement);
        }
    }
}
