//! `gen --memory --partitions N`: the bound on a pipeline's resident memory (Invariant 7),
//! with its terms, for one instance that owns N partitions.
//!
//! Every byte a pipeline holds is in one of these places; each is bounded by the
//! configuration:
//! - sealed chunks, queued or inside batches being written: the in-flight budget, which a
//!   lane can overshoot by at most one chunk (Invariant 7);
//! - the open buffer of each (lane, shard), sealed at `chunk.target_bytes` (plus one row);
//! - librdkafka's prefetch, capped per split partition queue by `queued.max.messages.kbytes`
//!   plus one fetched message set;
//! - the batch each lane holds: messages taken from its queue in one non-blocking pass, so at
//!   most what the queue held (the prefetch cap) plus one message set fetched during the pass.
//!   They no longer count against the queue's cap, so librdkafka fetches more meanwhile;
//! - the frames of inserts in flight (under `format: native`, also the block's columns);
//! - under `errors.policy: dlq`, each row's source offset (8 bytes) beside the open buffers and
//!   the chunk a lane may hold over the budget (sealed chunks' offsets count in the budget);
//! - the process itself (code, tokio, librdkafka's threads, the allocator's slack).

use crate::load::Validated;
use crate::model::{ErrorPolicy, Source};

/// The etl-runtime default of `queued.max.messages.kbytes` per split partition queue.
pub const DEFAULT_QUEUED_MAX_KBYTES: u64 = 8 * 1024;
/// librdkafka's default `fetch.message.max.bytes`.
pub const DEFAULT_FETCH_MESSAGE_MAX_BYTES: u64 = 1 << 20;
/// The process without data: code, runtime threads, allocator slack (measured idle RSS is
/// about a third of this).
pub const BASELINE_BYTES: u64 = 64 << 20;
/// Per insert in flight: the sink streams 256 KiB frames, compressed copies included.
pub const INSERT_FRAME_BYTES: u64 = 512 << 10;
/// Per insert in flight under `format: native`: a 256 KiB block's columns, the block in the
/// insert's buffer and its compressed frame, each overshooting by the row that crossed 256 KiB
/// (rounded up to 1 MiB: rows of the size that would make that wrong are rows of megabytes).
pub const NATIVE_INSERT_BYTES: u64 = 1 << 20;

/// One term of the bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    /// What it is, with its formula.
    pub what: String,
    /// Bytes.
    pub bytes: u64,
}

/// The bound for an instance owning `partitions` partitions (lanes).
pub fn bound(v: &Validated, partitions: u64) -> Vec<Term> {
    let m = &v.model;
    let flow = m.sink.flow();
    // Each (output, shard) has its own buffers and inserts: a sink slot.
    let shards = m.sink.shard_count() * m.output_count();
    let slots = match m.output_count() {
        1 => format!("{shards} shards"),
        outputs => format!("{outputs} outputs × {} shards", m.sink.shard_count()),
    };
    // Under exactly-once a lane's open buffer is a whole batch.
    let exactly_once = matches!(&m.sink, crate::model::Sink::Clickhouse(c) if c.exactly_once);
    let (chunk, unit) = if exactly_once {
        (flow.batch.max_bytes.bytes(), "batch.max_bytes (exactly_once)")
    } else {
        (flow.chunk.target_bytes.bytes(), "chunk.target_bytes")
    };
    let budget = m.backpressure.max_inflight_bytes.bytes();
    let (per_insert, format) = match &m.sink {
        crate::model::Sink::Clickhouse(c) if c.format == crate::model::InsertFormat::Native => {
            (NATIVE_INSERT_BYTES, "format native: block columns, buffer, compressed frame")
        }
        _ => (INSERT_FRAME_BYTES, "RowBinary frames, compressed copies included"),
    };
    let mut terms = vec![
        Term { what: "baseline: code, threads, allocator slack".into(), bytes: BASELINE_BYTES },
        Term { what: format!("in-flight budget: backpressure.max_inflight_bytes ({budget})"), bytes: budget },
        Term {
            what: format!("one chunk over the budget per lane: {partitions} × {unit} ({chunk})"),
            bytes: partitions * chunk,
        },
        Term {
            what: format!("open buffers: {partitions} lanes × {slots} × {unit} ({chunk})"),
            bytes: partitions * shards * chunk,
        },
        Term {
            what: format!(
                "insert frames: {slots} × inflight.max_per_shard ({}) × {per_insert} ({format})",
                flow.inflight.max_per_shard
            ),
            bytes: shards * flow.inflight.max_per_shard * per_insert,
        },
    ];
    if m.errors.policy == ErrorPolicy::Dlq {
        // Rows are at least this long: the fewest bytes of each column (an NDJSON line of the
        // file sink is longer than that, braces and names included).
        let min_row = v
            .plan
            .outputs
            .iter()
            .map(|o| o.output.iter().map(|c| c.ty.min_rowbinary_bytes()).sum::<u64>())
            .min()
            .unwrap_or(0)
            .max(1);
        let rows_per_chunk = chunk / min_row + 1;
        terms.push(Term {
            what: format!(
                "row offsets (errors.policy dlq): {partitions} lanes × ({slots} + 1) × (chunk.target_bytes / {min_row}-byte minimal row + 1) × 8"
            ),
            bytes: partitions * (shards + 1) * rows_per_chunk * 8,
        });
    }
    if let Source::Kafka(k) = &m.source {
        let prop = |name: &str| k.rdkafka.get(name).and_then(|v| v.to_text().parse::<u64>().ok());
        let kbytes = prop("queued.max.messages.kbytes").unwrap_or(DEFAULT_QUEUED_MAX_KBYTES);
        let fetch = prop("fetch.message.max.bytes")
            .or(prop("max.partition.fetch.bytes"))
            .unwrap_or(DEFAULT_FETCH_MESSAGE_MAX_BYTES);
        terms.push(Term {
            what: format!(
                "{PREFETCH}: {partitions} partitions × (queued.max.messages.kbytes ({kbytes}) × 1024 + fetch.message.max.bytes ({fetch}))"
            ),
            bytes: partitions * (kbytes * 1024 + fetch),
        });
        terms.push(Term {
            what: format!(
                "{BATCHES}: {partitions} lanes × (queued.max.messages.kbytes ({kbytes}) × 1024 + 2 × fetch.message.max.bytes ({fetch}))"
            ),
            bytes: partitions * (kbytes * 1024 + 2 * fetch),
        });
    }
    terms
}

/// The name of the prefetch term.
const PREFETCH: &str = "librdkafka prefetch";
/// The name of the term for the messages lanes have taken from their queues and not processed.
const BATCHES: &str = "batches held by lanes";

/// The bound as text: the terms, then the total in bytes and MiB (rounded up).
pub fn render(v: &Validated, partitions: u64) -> String {
    let terms = bound(v, partitions);
    let total: u64 = terms.iter().map(|t| t.bytes).sum();
    let mut out = format!("memory bound of pipeline `{}` owning {partitions} partition(s):\n", v.model.pipeline.name);
    for t in &terms {
        out.push_str(&format!("  {:>12} bytes  {}\n", t.bytes, t.what));
    }
    out.push_str(&format!("total: {total} bytes ({} MiB)\n", total.div_ceil(1 << 20)));
    // With many partitions per instance librdkafka's prefetch, not the pipeline, sizes the
    // container (seen in docs/BENCHMARKS.md: 1 GiB at 64 partitions with the defaults), and a
    // paused lane never fills it: say so, and name the knob.
    let prefetch: u64 =
        terms.iter().filter(|t| t.what.starts_with(PREFETCH) || t.what.starts_with(BATCHES)).map(|t| t.bytes).sum();
    if prefetch * 2 > total {
        out.push_str(&format!(
            "note: librdkafka's prefetch and the lanes' batches are {}% of the bound: with {partitions} partitions \
             per instance, lower source.kafka.rdkafka.queued.max.messages.kbytes (it is per partition) or run more \
             instances\n",
            prefetch * 100 / total
        ));
    }
    if let Some(note) = exactly_once_note(v, partitions) {
        out.push_str(&note);
    }
    out
}

/// Inserts per second and shard, from which exactly-once's per-partition batches are worth a
/// note: each insert is a new part that ClickHouse has to merge.
const EXACTLY_ONCE_INSERTS_PER_SHARD_SECOND: u64 = 16;

/// Exactly-once seals a batch per (partition, shard), where at-least-once merges the
/// partitions of a lane: with many partitions the linger, not the size, seals them, and the
/// inserts multiply (docs/BENCHMARKS.md: 37 times smaller batches at 64 partitions).
fn exactly_once_note(v: &Validated, partitions: u64) -> Option<String> {
    let crate::model::Sink::Clickhouse(c) = &v.model.sink else { return None };
    if !c.exactly_once {
        return None;
    }
    let linger = c.batch.linger;
    let linger_ms = linger.as_millis().max(1);
    let per_shard_second = partitions * 1000 / linger_ms;
    (per_shard_second > EXACTLY_ONCE_INSERTS_PER_SHARD_SECOND).then(|| {
        format!(
            "note: exactly-once seals a batch per partition and shard: {partitions} partitions can make {} inserts \
             per shard and second (one per partition every batch.linger, {}), each a new part to merge; raise \
             sink.clickhouse.batch.linger so that batches fill, or spread the partitions over more instances\n",
            per_shard_second, linger
        )
    })
}

/// The total in bytes.
pub fn total(v: &Validated, partitions: u64) -> u64 {
    bound(v, partitions).iter().map(|t| t.bytes).sum()
}
