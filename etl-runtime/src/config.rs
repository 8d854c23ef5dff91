//! The runtime configuration: a plain struct the generated `main` fills in from `pipeline.yaml`.

use std::net::SocketAddr;
use std::time::Duration;

use crate::contract::defaults;

/// Everything the runtime needs to know at start-up.
///
/// The generated code builds this from the validated configuration; the runtime does not parse
/// YAML. [`RuntimeConfig::default`] carries the defaults of docs/configuration.md (the table the
/// generator shares, `contract/defaults.rs`), which satisfy the sizing rule for one to three shards.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// `pipeline.name`, used in `etl_build_info` and in batch tokens.
    pub pipeline: String,
    /// The config hash (first 16 hex digits) shown in `etl_build_info`.
    pub config_hash: String,
    /// The binary's version shown in `etl_build_info`.
    pub version: String,
    /// `pipeline.threads`: the number of pipeline threads lanes are spread over.
    pub threads: usize,
    /// The number of sink shards (`len(sink.clickhouse.shards)`, or 1 for `sink.file`).
    pub shards: usize,
    /// `backpressure.*`.
    pub backpressure: BackpressureConfig,
    /// `sink.*.batch`.
    pub batch: BatchConfig,
    /// `sink.*.inflight.max_per_shard`: concurrent writes per shard.
    pub inflight_per_shard: usize,
    /// `sink.*.chunk.target_bytes`: a lane's per-shard buffer is sealed at this size.
    pub chunk_target_bytes: usize,
    /// `sink.*.queue.capacity`: chunks per shard queue.
    pub queue_capacity: usize,
    /// `sink.clickhouse.retry`.
    pub retry: RetryConfig,
    /// `checkpoint.drain_timeout`: the bound on a revocation or shutdown drain.
    pub drain_timeout: Duration,
    /// `errors.policy`.
    pub error_policy: ErrorPolicy,
    /// `errors.tombstones`.
    pub tombstones: TombstonePolicy,
    /// `admin.listen`; `None` runs without the admin server (tests).
    pub admin_listen: Option<SocketAddr>,
    /// `admin.control`: `POST /admin/pause` and `POST /admin/resume` are served.
    pub admin_control: bool,
    /// `sink.clickhouse.exactly_once`: batches per (partition, shard), spans recorded in the
    /// sink's ledger before each insert, replays re-cut at the recorded spans.
    pub exactly_once: bool,
    /// `format.avro.registry_timeout`: how long a record whose dependency is unavailable (a
    /// schema registry lookup that fails) is held and retried, its lane paused, before it
    /// becomes a record error under `errors.policy`.
    pub unavailable_timeout: Duration,
    /// The bound `gen --memory` computes for this build, exported as `etl_memory_bound_bytes`
    /// so that an alert can compare the process's RSS with it (`None`: not exported).
    pub memory_bound: Option<MemoryBound>,
    /// `source.kafka.stall_timeout`: a lane whose source holds records for it and delivers none of
    /// them, while nothing holds the lane back, for this long is stalled: the watchdog restarts its
    /// fetch, and stops the pipeline (exit 1) if it stalls for this long again (Invariant 9). Zero
    /// disables the watchdog; a source that cannot tell what it holds is never watched.
    pub stall_timeout: Duration,
}

/// `gen --memory`'s bound, which is linear in the partitions an instance owns: the generated
/// `main` passes its two coefficients, and the runtime applies them to the most lanes it has
/// owned at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBound {
    /// The bound with no partition: the budget, the inserts in flight, the process itself.
    pub fixed_bytes: u64,
    /// What each owned partition adds: its open buffers, librdkafka's prefetch, its batch.
    pub per_partition_bytes: u64,
}

impl MemoryBound {
    /// The bound for an instance that owns `partitions` partitions.
    pub fn for_partitions(&self, partitions: u64) -> u64 {
        self.fixed_bytes.saturating_add(self.per_partition_bytes.saturating_mul(partitions))
    }
}

/// `backpressure.*`: the in-flight byte budget and the pause controller.
#[derive(Debug, Clone, Copy)]
pub struct BackpressureConfig {
    /// `max_inflight_bytes`: the budget for bytes sealed into chunks and not yet durable.
    pub max_inflight_bytes: u64,
    /// `high_ratio`: lanes pause when in-flight bytes reach `max × high_ratio`.
    pub high_ratio: f64,
    /// `low_ratio`: paused lanes resume only below `max × low_ratio`.
    pub low_ratio: f64,
    /// `min_pause`: the shortest time a lane stays paused.
    pub min_pause: Duration,
}

/// `sink.*.batch`: when a shard worker cuts a batch.
#[derive(Debug, Clone, Copy)]
pub struct BatchConfig {
    /// `max_rows`: a batch holds at most this many rows (a single larger chunk still goes alone).
    pub max_rows: u64,
    /// `max_bytes`: a batch holds at most this many bytes (a single larger chunk still goes alone).
    pub max_bytes: u64,
    /// `linger`: a non-empty batch is written at the latest this long after its first chunk.
    pub linger: Duration,
}

/// `sink.clickhouse.retry`: exponential backoff with full jitter.
#[derive(Debug, Clone, Copy)]
pub struct RetryConfig {
    /// `max_attempts`: the total number of attempts, the first included; `None` (the default,
    /// `unlimited` in pipeline.yaml) retries a retryable error until it stops: an outage of any
    /// length pauses the lanes instead of stopping the pipeline.
    pub max_attempts: Option<u32>,
    /// `initial_backoff`: the backoff cap before the second attempt.
    pub initial_backoff: Duration,
    /// `max_backoff`: the largest backoff cap.
    pub max_backoff: Duration,
}

/// `errors.policy`: what happens to a record the chain cannot process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorPolicy {
    /// Count it in `etl_records_dropped_total{reason="error"}`; its offset counts as done.
    Skip,
    /// Stop the pipeline with exit code 1; the watermark never passes the record.
    Fail,
    /// Hand the raw record to the dead-letter sink; its offset is done once that write is acknowledged.
    DeadLetter,
}

/// `errors.tombstones`: what happens to a record without a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TombstonePolicy {
    /// Count it in `etl_records_dropped_total{reason="tombstone"}`; its offset counts as done.
    Skip,
    /// Stop the pipeline with exit code 1.
    Fail,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            pipeline: "pipeline".to_owned(),
            config_hash: String::new(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            shards: 1,
            backpressure: BackpressureConfig::default(),
            batch: BatchConfig::default(),
            inflight_per_shard: defaults::INFLIGHT_PER_SHARD as usize,
            chunk_target_bytes: defaults::CHUNK_TARGET_BYTES as usize,
            queue_capacity: defaults::QUEUE_CAPACITY as usize,
            retry: RetryConfig::default(),
            drain_timeout: defaults::DRAIN_TIMEOUT,
            error_policy: ErrorPolicy::Skip,
            tombstones: TombstonePolicy::Skip,
            admin_listen: None,
            admin_control: false,
            exactly_once: false,
            unavailable_timeout: defaults::REGISTRY_TIMEOUT,
            memory_bound: None,
            stall_timeout: defaults::STALL_TIMEOUT,
        }
    }
}

impl Default for BackpressureConfig {
    fn default() -> Self {
        BackpressureConfig {
            max_inflight_bytes: defaults::MAX_INFLIGHT_BYTES,
            high_ratio: defaults::ratio(defaults::HIGH_RATIO),
            low_ratio: defaults::ratio(defaults::LOW_RATIO),
            min_pause: defaults::MIN_PAUSE,
        }
    }
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            max_rows: defaults::BATCH_MAX_ROWS,
            max_bytes: defaults::BATCH_MAX_BYTES,
            linger: defaults::BATCH_LINGER,
        }
    }
}

impl RetryConfig {
    /// Whether an error after `attempt` attempts may be retried.
    pub(crate) fn allows_after(&self, attempt: u32) -> bool {
        self.max_attempts.is_none_or(|max| attempt < max)
    }
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_attempts: defaults::RETRY_MAX_ATTEMPTS,
            initial_backoff: defaults::RETRY_INITIAL_BACKOFF,
            max_backoff: defaults::RETRY_MAX_BACKOFF,
        }
    }
}

impl RuntimeConfig {
    /// Checks what the runtime itself relies on; `gen` has already checked the rest.
    pub(crate) fn validate(&self) -> Result<(), String> {
        let bp = &self.backpressure;
        if self.threads == 0 {
            return Err("threads must be at least 1".into());
        }
        if self.shards == 0 {
            return Err("shards must be at least 1".into());
        }
        if self.queue_capacity == 0 || self.inflight_per_shard == 0 {
            return Err("queue.capacity and inflight.max_per_shard must be at least 1".into());
        }
        if !(0.0 < bp.low_ratio && bp.low_ratio < bp.high_ratio && bp.high_ratio <= 1.0) {
            return Err(format!(
                "backpressure ratios must satisfy 0 < low_ratio < high_ratio <= 1 (low {}, high {})",
                bp.low_ratio, bp.high_ratio
            ));
        }
        if self.retry.max_attempts == Some(0) {
            return Err("retry.max_attempts must be at least 1".into());
        }
        Ok(())
    }
}
