//! etl-runtime: the shared runtime every generated pipeline runs on — lanes, shard queues, the
//! in-flight byte budget, the pause controller, the checkpointer, shard workers, metrics and the
//! admin server — independent of Kafka and ClickHouse, which plug in through [`Source`]/[`Lane`]
//! and [`Sink`].
//!
//! # Bird's-eye view
//!
//! ```text
//!  Source ──add_lane──▶ pipeline thread 0..threads ──try_send(chunk)──▶ shard queue (bounded)
//!   (lanes m:n)          Lane::next → Chain::process → RowOut            │
//!                        open buffer per (lane, shard)                    ▼
//!        ▲               seal at chunk.target_bytes / idle / drain     shard worker thread
//!        │                                                               merges chunks → Batch
//!   store_offset ◀── Checkpointer ◀── unbounded ack channel ◀── write task (tokio, ≤ inflight per shard)
//! ```
//!
//! * A **pipeline thread** owns a set of lanes (one per source partition). It takes one record at
//!   a time from a lane and fully processes it before the next, so when a shard queue rejects a
//!   chunk the only held state is that already encoded chunk: the lane's exact resume point. The
//!   thread never blocks on a send (Invariant 1); when nothing is to be done it waits at most a few
//!   milliseconds on its ack and control channels, so it keeps polling.
//! * The **budget** counts bytes from the moment a chunk is sealed until its batch is durable.
//!   Reaching the high watermark, or a queue rejection, pauses lanes; a lane resumes only below the
//!   low watermark, after `min_pause`, and once its held chunk was accepted (Invariant 6).
//! * A **shard worker** (one plain thread per shard) merges chunks into batches and waits for one
//!   of `inflight.max_per_shard` write slots; while it waits it does not receive, so the queue
//!   fills up: that is how a slow sink pushes back. Writes run as tasks on a two-worker tokio
//!   runtime, retry retryable errors with exponential backoff and full jitter under one batch
//!   token, and on success release the bytes and ack each chunk to its thread (Invariant 2).
//! * The **checkpointer** of each lane turns out-of-order acks into a watermark that never passes
//!   an offset with an unwritten row; the lane stores `watermark + 1` whenever it grows
//!   (Invariant 3). A batch that exhausts its retries is never acked, so its offsets are never
//!   stored; the pipeline stops with exit code 1.
//! * [`PipelineHandle`] is the coordinator API: `add_lane` (least-loaded thread),
//!   `drain_partitions` (synchronous, bounded by a timeout: what a Kafka revocation callback
//!   needs, Invariant 4), `request_shutdown`, readiness and lag reporting.
//! * [`run`] is what a generated `main` calls: it adds the admin server, signal handling and the
//!   source to a [`Pipeline`], and maps the outcome to the exit codes (0 clean, 1 fatal, 2 start-up; see the README).
//!
//! # Choices and deviations worth knowing
//!
//! * Shard choice belongs to the generated chain: it hashes the shard key and calls
//!   [`RowOut::shard_for_key_hash`] (`hash % shards`), or uses [`RowOut::round_robin`].
//! * Tombstones never reach the chain: the runtime applies `errors.tombstones` first.
//! * Rows a chain pushed before returning an error are discarded before `errors.policy` applies.
//! * The Invariant 7 bound is "one chunk per lane" for chunks sealed while producing; a drain
//!   (revocation or shutdown) flushes every open buffer of the drained lane, up to one chunk per
//!   shard, regardless of the budget, because the drain must not wait for a resume.
//! * The delivery guarantee is one crate-private trait, `engine::delivery::Delivery`: where the
//!   lane cuts batches, how the shard worker merges and names them, and what runs before a write.
//!   At-least-once seals chunks at the chunk target and merges them across partitions up to the
//!   batch limits; exactly-once cuts one batch per partition and shard at the batch limits or at a
//!   span an earlier owner recorded, and records each span before its insert
//!   (docs/adr/0001-exactly-once.md). `Pipeline::start` picks one; nothing else asks.
//! * A [`SinkErrorKind::Data`] error (rows the sink refused; the others are written) follows
//!   `errors.policy`: `skip` counts them in `etl_records_dropped_total{reason="sink_refused"}` and
//!   completes the batch; `fail` stops the pipeline; `dlq` sends the records behind the refused
//!   rows to the dead-letter sink (which reads them again from the source: chunks keep each row's
//!   source offset under `dlq`, counted in the budget) and completes the batch once they are
//!   durable there.
//! * A fatal sink start-up check (`Sink::check`) is a start-up error (exit code 2); a sink that
//!   is not reachable yet is checked again in the background and /readyz reports it.
//! * The concurrency of the budget is checked by a deterministic model (a proptest over
//!   interleavings) and a multi-threaded balance test rather than loom, to keep loom out of the
//!   dependency tree.
//!
//! Generated crates reach the runtime through [`__private`] plus the few public types re-exported
//! at the root.

mod admin;
// Unsafe for mimalloc's option defaults, set by a constructor before its first arena.
#[allow(unsafe_code)]
mod allocator;
mod chain_harness;
#[cfg(feature = "clickhouse")]
mod clickhouse;
mod codec;
mod config;
mod contract;
mod datagen;
mod engine;
mod entry;
mod file_sink;
#[cfg(feature = "kafka")]
mod kafka;
#[cfg(feature = "registry")]
mod registry;
mod run;
pub mod secret;
#[cfg(test)]
mod testing;

#[cfg(feature = "clickhouse")]
pub use crate::clickhouse::{
    ClickhouseSink, ClickhouseSinkConfig, ExactlyOnceConfig, InsertCompression, InsertFormat, ledger_table,
};
pub use crate::engine::chain::{Chain, RowOut};
pub use crate::engine::chunk::{Batch, Chunk};
pub use crate::engine::errors::{RecordError, RecordErrorKind, SinkError, SinkErrorKind, SourceError, SourceErrorKind};
pub use crate::engine::handle::{LedgerReadError, PipelineHandle};
pub use crate::engine::headers::{HeaderSource, Headers, OwnedHeader};
pub use crate::engine::lane::{Backlog, Lane, LaneKey, Record};
pub use crate::engine::ledger::{Ledger, LedgerFuture, Newest, Recorded, Replay, Span};
pub use crate::engine::metrics::{MetricDoc, metric_catalogue, metrics_markdown};
pub use crate::engine::outputs::Outputs;
pub use crate::engine::shared::PipelineStats;
pub use crate::engine::sink::{DeadLetter, DeadLetterAck, DeadRecord, ErasedSink, Sink};
pub use crate::engine::source::Source;
pub use crate::engine::start::{Pipeline, ShutdownReport, StartError, Wake};
pub use config::{
    BackpressureConfig, BatchConfig, ErrorPolicy, MemoryBound, RetryConfig, RuntimeConfig, TombstonePolicy,
};
pub use datagen::{DatagenConfig, DatagenError, DatagenSource, Encoding, Wire};
pub use entry::Command;
pub use file_sink::FileSink;
#[cfg(feature = "kafka")]
pub use kafka::{
    BATCH_MESSAGES, BatchMessage, DlqReplay, KafkaAuth, KafkaDeadLetter, KafkaSource, KafkaSourceConfig,
    KafkaSourceStats, OffsetsCommand, PartitionBatches, ResetTarget,
};
pub use run::{RunOutcome, init_logging, run, run_command};

/// What generated crates use. Not a stable API: it changes with the code generator.
#[doc(hidden)]
pub mod __private {
    pub use crate::chain_harness::{
        ChainHarness, PartsMeasured, fuzz_chain, interleaved, measure_parts, read_payload_file, sample_payloads,
        thread_cpu_seconds,
    };
    /// The RowBinary-to-Native transposition, for `cargo xtask bench`'s raw inserter.
    #[cfg(feature = "clickhouse")]
    pub use crate::clickhouse::native::{NATIVE_BLOCK_BYTES, NativeEncoder};
    #[cfg(feature = "clickhouse")]
    pub use crate::clickhouse::{
        ClickhouseSink, ClickhouseSinkConfig, ExactlyOnceConfig, InsertCompression, InsertFormat,
    };
    pub use crate::codec::{avro, field_error, json, json_read, ops, proto_read, rowbinary, shard_hash, text_bytes};
    pub use crate::config::{
        BackpressureConfig, BatchConfig, ErrorPolicy, MemoryBound, RetryConfig, RuntimeConfig, TombstonePolicy,
    };
    pub use crate::datagen::{DatagenConfig, DatagenSource, Encoding, Wire};
    pub use crate::engine::chain::{Chain, RowOut};
    pub use crate::engine::errors::{RecordError, RecordErrorKind};
    pub use crate::engine::headers::{Headers, OwnedHeader};
    pub use crate::engine::lane::Record;
    pub use crate::engine::outputs::Outputs;
    pub use crate::engine::sink::{DeadLetter, Sink};
    pub use crate::engine::source::Source;
    pub use crate::entry::{Build, Command, Part, Resolved, Setting, Start, start, startup_error};
    pub use crate::file_sink::FileSink;
    #[cfg(feature = "kafka")]
    pub use crate::kafka::{
        KafkaAuth, KafkaDeadLetter, KafkaSource, KafkaSourceConfig, prefetch_properties, topic_list, topic_pattern,
    };
    #[cfg(feature = "registry")]
    pub use crate::registry::{Datum, Registry, RegistryError};
    pub use crate::run::{RunOutcome, init_logging, run, run_command};
    pub use apache_avro;
    pub use tracing;
}
