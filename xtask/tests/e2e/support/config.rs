//! The numbers of a pipeline file that the scenarios' bounds derive from (budget, timeouts,
//! chunk sizes, the memory bound), read with etl-gen so the bounds follow the file.

use std::time::Duration;

use super::variant::Variant;

/// The numbers of a variant's pipeline.yaml that the tests' bounds derive from, read with etl-gen
/// so the bounds follow the file.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    variant: Variant,
    pub max_inflight_bytes: u64,
    pub min_pause: Duration,
    pub drain_timeout: Duration,
    pub commit_interval: Duration,
    pub max_message_bytes: u64,
    /// What one lane may hold over the budget (Invariant 7): `chunk.target_bytes`, or under
    /// exactly-once (where a lane's chunk is a whole batch) `batch.max_bytes`, as in
    /// `etl_gen::memory`.
    pub chunk_bytes: u64,
}

impl Config {
    pub fn of(variant: Variant) -> Config {
        let outcome = etl_gen::validate_file(&variant.yaml(), &etl_gen::Options::default()).unwrap();
        let v = outcome.pipeline.unwrap_or_else(|| panic!("{}", outcome.report.render()));
        let etl_gen::model::Source::Kafka(kafka) = &v.model.source else { panic!("the e2e pipelines read Kafka") };
        Config {
            variant,
            max_inflight_bytes: v.model.backpressure.max_inflight_bytes.bytes(),
            min_pause: v.model.backpressure.min_pause.to_std(),
            drain_timeout: v.model.checkpoint.drain_timeout.to_std(),
            commit_interval: kafka.commit_interval.to_std(),
            max_message_bytes: v.model.format.max_message_bytes.bytes(),
            chunk_bytes: match &v.model.sink {
                etl_gen::model::Sink::Clickhouse(c) if c.exactly_once => c.batch.max_bytes.bytes(),
                sink => sink.flow().chunk.target_bytes.bytes(),
            },
        }
    }

    /// The most in-flight bytes `lanes` lanes may hold (Invariant 7): the budget plus one chunk per
    /// lane. (A chunk is sealed at its target plus one row; the room between the high watermark,
    /// where lanes pause, and the budget covers that row.)
    pub fn inflight_bound(&self, lanes: u64) -> u64 {
        self.max_inflight_bytes + lanes * self.chunk_bytes
    }

    /// The process's memory bound with `partitions` owned partitions (Invariant 7): exactly what
    /// `gen X --memory --partitions N` prints as its total, the figure users size their
    /// containers with.
    pub fn memory_bound(&self, partitions: u64) -> u64 {
        let outcome = etl_gen::validate_file(&self.variant.yaml(), &etl_gen::Options::default()).unwrap();
        let v = outcome.pipeline.unwrap_or_else(|| panic!("{}", outcome.report.render()));
        etl_gen::memory::total(&v, partitions)
    }
}
