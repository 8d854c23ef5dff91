//! The defaults of the configuration keys that both sides apply: the generator's model fills
//! them in for keys pipeline.yaml leaves out (and docs/configuration.md shows them), and the
//! runtime's `RuntimeConfig::default` and Kafka source use them for callers that do not
//! generate their configuration.
//!
//! This file depends on `std` alone because etl-gen compiles it too (`#[path]`), so the
//! generator takes no dependency on the runtime. With these defaults the sizing rule holds
//! for one to three shards.

use std::time::Duration;

/// `sink.*.batch.max_rows`.
pub(crate) const BATCH_MAX_ROWS: u64 = 500_000;
/// `sink.*.batch.max_bytes`: 16 MiB.
pub(crate) const BATCH_MAX_BYTES: u64 = 16 << 20;
/// `sink.*.batch.linger`.
pub(crate) const BATCH_LINGER: Duration = Duration::from_secs(1);
/// `sink.*.inflight.max_per_shard`.
pub(crate) const INFLIGHT_PER_SHARD: u64 = 2;
/// `sink.*.chunk.target_bytes`: 256 KiB.
pub(crate) const CHUNK_TARGET_BYTES: u64 = 256 << 10;
/// `sink.*.queue.capacity`.
pub(crate) const QUEUE_CAPACITY: u64 = 8;
/// `sink.clickhouse.retry.max_attempts`: unlimited (`None`), so that no outage, however long,
/// stops the pipeline by itself.
pub(crate) const RETRY_MAX_ATTEMPTS: Option<u32> = None;
/// `sink.clickhouse.retry.initial_backoff`.
pub(crate) const RETRY_INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// `sink.clickhouse.retry.max_backoff`.
pub(crate) const RETRY_MAX_BACKOFF: Duration = Duration::from_secs(10);
/// `backpressure.max_inflight_bytes`: 512 MiB.
pub(crate) const MAX_INFLIGHT_BYTES: u64 = 512 << 20;
/// `backpressure.high_ratio`, exact: numerator and decimal places (0.9).
pub(crate) const HIGH_RATIO: (u64, u32) = (9, 1);
/// `backpressure.low_ratio`, exact: numerator and decimal places (0.5).
pub(crate) const LOW_RATIO: (u64, u32) = (5, 1);
/// `backpressure.min_pause`.
pub(crate) const MIN_PAUSE: Duration = Duration::from_millis(250);
/// `checkpoint.drain_timeout`.
pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_secs(25);
/// `source.kafka.stall_timeout`: how long a partition may go without its source delivering the
/// records it holds before the stall watchdog recovers it (Invariant 9).
pub(crate) const STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// `format.avro.registry_timeout`: how long a record whose schema lookup fails is held.
pub(crate) const REGISTRY_TIMEOUT: Duration = Duration::from_secs(60);
/// A ratio of this table as a float (`(9, 1)` → 0.9; the division is exact to the last bit).
pub(crate) fn ratio((numerator, places): (u64, u32)) -> f64 {
    numerator as f64 / 10f64.powi(places as i32)
}
