//! The sink side: chunks, batches, the `Sink` trait, its errors and the dead-letter trait.

use std::future::Future;

use crate::source::Record;

/// A sealed buffer of encoded rows from one lane for one shard.
#[derive(Debug)]
pub struct Chunk {
    pub(crate) bytes: Vec<u8>,
    pub(crate) rows: u32,
    pub(crate) origin: ChunkOrigin,
    pub(crate) shard: usize,
    /// Sealed by a drain: the shard worker writes its batch at once instead of lingering.
    pub(crate) urgent: bool,
    /// The source offset of each row, in row order; kept only under `errors.policy: dlq`, where
    /// a row the sink refuses must be traced back to the record to dead-letter.
    pub(crate) row_offsets: Vec<i64>,
    /// Under exactly-once: the span this chunk's batch was recorded with by an earlier owner, so
    /// its token is the recorded one (`None`: a new batch, spanning the chunk's offsets).
    pub(crate) recorded: Option<(i64, i64)>,
    /// Under exactly-once: the lane's fence, closed when the lane is handed over.
    pub(crate) fence: Option<std::sync::Arc<crate::exactly_once::Fence>>,
}

/// Where a chunk's acknowledgement goes, and which offsets its rows come from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChunkOrigin {
    pub(crate) thread: usize,
    pub(crate) lane_id: u64,
    pub(crate) partition: i32,
    pub(crate) first_offset: i64,
    pub(crate) last_offset: i64,
}

impl Chunk {
    /// The encoded rows, back to back.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The number of rows.
    pub fn rows(&self) -> u32 {
        self.rows
    }

    /// The source partition the rows come from.
    pub fn partition(&self) -> i32 {
        self.origin.partition
    }

    /// The offset of the record whose row entered the chunk first.
    pub fn first_offset(&self) -> i64 {
        self.origin.first_offset
    }

    /// The offset of the record whose row entered the chunk last.
    pub fn last_offset(&self) -> i64 {
        self.origin.last_offset
    }

    /// What the chunk holds in memory, as the in-flight budget counts it: the encoded rows and,
    /// under `errors.policy: dlq`, their source offsets.
    pub(crate) fn held_bytes(&self) -> u64 {
        (self.bytes.len() + self.row_offsets.len() * size_of::<i64>()) as u64
    }
}

/// What a shard worker hands to [`Sink::write`]: chunks merged up to the batch limits.
#[derive(Debug)]
pub struct Batch {
    pub(crate) shard: usize,
    pub(crate) token: String,
    pub(crate) chunks: Vec<Chunk>,
    pub(crate) rows: u64,
    pub(crate) bytes: u64,
    /// The chunks' [`Chunk::held_bytes`]: what the budget gets back once the batch is done.
    pub(crate) held: u64,
    /// Under exactly-once, the batch's span (its token is derived from it).
    pub(crate) span: Option<crate::exactly_once::Span>,
}

impl Batch {
    /// The shard this batch goes to.
    pub fn shard(&self) -> usize {
        self.shard
    }

    /// A token unique to this batch within the process, the same for every attempt to write it,
    /// so a sink can use it as a deduplication token across retries.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The chunks, in the order the shard worker received them.
    pub fn chunks(&self) -> &[Chunk] {
        &self.chunks
    }

    /// The total number of rows.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The total number of encoded bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The source partition and offset of row `index` of the batch (rows counted across the
    /// chunks in order), when the runtime kept them (`errors.policy: dlq`).
    pub fn row_source(&self, index: u64) -> Option<(i32, i64)> {
        let mut first = 0u64;
        for chunk in &self.chunks {
            let rows = u64::from(chunk.rows);
            if index < first + rows {
                let offset = chunk.row_offsets.get(usize::try_from(index - first).ok()?)?;
                return Some((chunk.origin.partition, *offset));
            }
            first += rows;
        }
        None
    }
}

/// A sink that writes batches durably (Invariant 3): `write` resolves to `Ok` only when the batch is
/// durable (ClickHouse: the INSERT returned success; file: written and fsynced).
///
/// Writes run as tasks on the runtime's small tokio runtime, at most `inflight.max_per_shard` per
/// shard at a time; the runtime retries [`SinkErrorKind::Retryable`] errors itself.
pub trait Sink: Send + Sync + 'static {
    /// Writes one batch to `shard`.
    fn write(&self, shard: usize, batch: &Batch) -> impl Future<Output = Result<(), SinkError>> + Send;

    /// Checks that the sink is reachable; `/readyz` answers 200 only once this succeeded.
    fn check(&self) -> impl Future<Output = Result<(), SinkError>> + Send;

    /// The ledger that makes batch spans durable for exactly-once; `None` (the default) when the
    /// sink cannot, which makes `exactly_once` a start-up error.
    fn ledger(&self) -> Option<std::sync::Arc<dyn crate::exactly_once::Ledger>> {
        None
    }
}

/// An error from a sink write or check.
#[derive(Debug, Clone, thiserror::Error)]
#[error("sink error ({kind:?}): {message}")]
pub struct SinkError {
    /// How the runtime reacts.
    pub kind: SinkErrorKind,
    /// What happened.
    pub message: String,
}

/// How the runtime reacts to a [`SinkError`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkErrorKind {
    /// Retried with backoff up to `retry.max_attempts`; then fatal.
    Retryable,
    /// Stops the pipeline at once with exit code 1; the batch's offsets are never stored.
    Fatal,
    /// Some rows were rejected (their indexes within the batch); every other row of the batch is
    /// durable. Under `errors.policy: skip` the runtime counts them and completes the batch;
    /// otherwise it stops the pipeline.
    Data {
        /// Indexes of the rejected rows within the batch.
        rows: Vec<u64>,
    },
}

impl SinkError {
    /// A retryable error.
    pub fn retryable(message: impl Into<String>) -> Self {
        SinkError { kind: SinkErrorKind::Retryable, message: message.into() }
    }

    /// A fatal error.
    pub fn fatal(message: impl Into<String>) -> Self {
        SinkError { kind: SinkErrorKind::Fatal, message: message.into() }
    }

    pub(crate) fn is_retryable(&self) -> bool {
        self.kind == SinkErrorKind::Retryable
    }
}

/// A record that failed in the chain, copied out of the lane for the dead-letter sink.
#[derive(Debug, Clone)]
pub struct DeadRecord {
    /// The raw payload (`None` for a tombstone).
    pub payload: Option<Vec<u8>>,
    /// The raw key.
    pub key: Option<Vec<u8>>,
    /// The source partition.
    pub partition: i32,
    /// The source offset.
    pub offset: i64,
    /// The source timestamp in milliseconds.
    pub timestamp_ms: Option<i64>,
    /// Why the record failed.
    pub error: String,
}

impl DeadRecord {
    pub(crate) fn from_record(record: &Record<'_>, error: String) -> Self {
        DeadRecord {
            payload: record.payload.map(<[u8]>::to_vec),
            key: record.key.map(<[u8]>::to_vec),
            partition: record.partition,
            offset: record.offset,
            timestamp_ms: record.timestamp_ms,
            error,
        }
    }
}

/// Where `errors.policy: dlq` sends failed records (`KafkaDeadLetter` writes them to a topic).
///
/// `send` must not block the pipeline thread: it hands the record off and calls
/// [`DeadLetterAck::complete`] later, from any thread, once the write is durable or has failed. The
/// record's offset counts as done only after a successful completion.
pub trait DeadLetter: Send + Sync + 'static {
    /// Hands off one record; `ack` must be completed exactly once.
    fn send(&self, record: DeadRecord, ack: DeadLetterAck);

    /// Hands off the record at `partition`/`offset` of the source, whose row the sink refused: the
    /// runtime no longer holds the raw record, so the dead-letter sink reads it again from the
    /// source (the offset is not committed yet, so it is still there). `ack` as for [`send`].
    ///
    /// The default cannot read the source and fails, which stops the pipeline.
    ///
    /// [`send`]: DeadLetter::send
    fn send_refused(&self, partition: i32, offset: i64, error: String, ack: DeadLetterAck) {
        let _ = error;
        ack.complete(Err(SinkError::fatal(format!(
            "partition {partition} offset {offset}: this dead-letter sink cannot read refused rows' records again"
        ))));
    }
}

/// The completion handle of one dead-letter write. For a record that failed in the chain it
/// travels over the same unbounded ack channel as chunk acks (Invariant 2); for a row the sink
/// refused, the batch that held it waits for it before it acknowledges its chunks.
#[derive(Debug)]
pub struct DeadLetterAck(AckTarget);

#[derive(Debug)]
enum AckTarget {
    Lane {
        ack: crossbeam_channel::Sender<crate::pipeline::Ack>,
        fatal: crate::handle::FatalSlot,
        lane_id: u64,
        offset: i64,
    },
    Batch(tokio::sync::oneshot::Sender<Result<(), SinkError>>),
}

impl DeadLetterAck {
    pub(crate) fn for_lane(
        ack: crossbeam_channel::Sender<crate::pipeline::Ack>,
        fatal: crate::handle::FatalSlot,
        lane_id: u64,
        offset: i64,
    ) -> Self {
        DeadLetterAck(AckTarget::Lane { ack, fatal, lane_id, offset })
    }

    pub(crate) fn for_batch() -> (Self, tokio::sync::oneshot::Receiver<Result<(), SinkError>>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (DeadLetterAck(AckTarget::Batch(tx)), rx)
    }

    /// Reports the outcome of the dead-letter write. An error stops the pipeline (exit code 1)
    /// without the record's offset ever being stored.
    pub fn complete(self, result: Result<(), SinkError>) {
        match (self.0, result) {
            (AckTarget::Lane { ack, lane_id, offset, .. }, Ok(())) => {
                // A closed channel means the pipeline thread is gone; nothing is left to store.
                let _ = ack.send(crate::pipeline::Ack::DeadLetter { lane_id, offset });
            }
            (AckTarget::Lane { fatal, offset, .. }, Err(error)) => {
                fatal.report(format!("dead-letter write of offset {offset} failed: {error}"))
            }
            // A dropped receiver means the batch was abandoned (the pipeline is stopping).
            (AckTarget::Batch(tx), result) => {
                let _ = tx.send(result);
            }
        }
    }
}
