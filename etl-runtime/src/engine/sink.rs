//! The contracts a sink implements: `Sink`, which writes batches durably, and `DeadLetter`, where
//! `errors.policy: dlq` sends failed records.

use std::future::Future;
use std::sync::Arc;

use crate::engine::ack::Ack;
use crate::engine::chunk::Batch;
use crate::engine::errors::SinkError;
use crate::engine::fatal::FatalSlot;
use crate::engine::headers::OwnedHeader;
use crate::engine::lane::{LaneKey, Record};
use crate::engine::ledger::Ledger;

/// A sink that writes batches durably (Invariant 3): `write` resolves to `Ok` only when the batch is
/// durable (ClickHouse: the INSERT returned success; file: written and fsynced).
///
/// Writes run as tasks on the runtime's small tokio runtime, at most `inflight.max_per_shard` per
/// shard at a time; the runtime retries [`SinkErrorKind::Retryable`](crate::SinkErrorKind::Retryable) errors itself.
pub trait Sink: Send + Sync + 'static {
    /// Writes one batch to `shard`.
    fn write(&self, shard: usize, batch: &Batch) -> impl Future<Output = Result<(), SinkError>> + Send;

    /// Checks that the sink is reachable; `/readyz` answers 200 only once this succeeded.
    fn check(&self) -> impl Future<Output = Result<(), SinkError>> + Send;

    /// The ledger that makes batch spans durable for exactly-once; `None` (the default) when the
    /// sink cannot, which makes `exactly_once` a start-up error.
    fn ledger(&self) -> Option<Arc<dyn Ledger>> {
        None
    }

    /// The output sink slot `slot` belongs to and its shard within that output, for the `output`
    /// and `shard` labels of per-slot metrics. The default, for a sink of one output, is
    /// `("", slot)`: an empty label, which Prometheus stores as none.
    fn slot_output(&self, slot: usize) -> (String, usize) {
        (String::new(), slot)
    }

    /// The sink behind a vtable, as the shard workers hold it.
    ///
    /// The default is right for every sink. The runtime's own sinks override it with a
    /// non-generic `#[inline(never)]` copy of the same body so that the vtable, and with it their
    /// whole write path, is compiled once in this crate rather than again in every generated
    /// pipeline (closures and `async` bodies are instantiated where they are first made
    /// generic, which is the pipeline crate when the erasing happens there).
    fn erase(self) -> ErasedSink
    where
        Self: Sized,
    {
        ErasedSink::new(self)
    }
}

/// A future a [`DynSink`] returns.
pub(crate) type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// [`Sink`], object-safe: what the shard workers and the start-up check call.
pub(crate) trait DynSink: Send + Sync + 'static {
    fn write<'a>(&'a self, shard: usize, batch: &'a Batch) -> BoxFuture<'a, Result<(), SinkError>>;
    fn check(&self) -> BoxFuture<'_, Result<(), SinkError>>;
    fn ledger(&self) -> Option<Arc<dyn Ledger>>;
    fn slot_output(&self, slot: usize) -> (String, usize);
}

impl<K: Sink> DynSink for K {
    fn write<'a>(&'a self, shard: usize, batch: &'a Batch) -> BoxFuture<'a, Result<(), SinkError>> {
        // One allocation per batch write: nothing next to the write itself.
        Box::pin(Sink::write(self, shard, batch))
    }

    fn check(&self) -> BoxFuture<'_, Result<(), SinkError>> {
        Box::pin(Sink::check(self))
    }

    fn ledger(&self) -> Option<Arc<dyn Ledger>> {
        Sink::ledger(self)
    }

    fn slot_output(&self, slot: usize) -> (String, usize) {
        Sink::slot_output(self, slot)
    }
}

/// A [`Sink`] with its type erased ([`Sink::erase`]); the runtime's sink side is not generic
/// over the sink, so a generated pipeline compiles only its own chain.
pub struct ErasedSink(pub(crate) Arc<dyn DynSink>);

impl ErasedSink {
    /// Erases `sink`'s type.
    pub fn new<K: Sink>(sink: K) -> Self {
        ErasedSink(Arc::new(sink))
    }
}

impl std::fmt::Debug for ErasedSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ErasedSink")
    }
}

/// A record that failed in the chain, copied out of the lane for the dead-letter sink.
#[derive(Debug, Clone)]
pub struct DeadRecord {
    /// The raw payload (`None` for a tombstone).
    pub payload: Option<Vec<u8>>,
    /// The raw key.
    pub key: Option<Vec<u8>>,
    /// The source topic.
    pub topic: String,
    /// The source partition.
    pub partition: i32,
    /// The source offset.
    pub offset: i64,
    /// The source timestamp in milliseconds.
    pub timestamp_ms: Option<i64>,
    /// The record's own headers, which the dead-letter message keeps beside its `etl.*` ones.
    pub headers: Vec<OwnedHeader>,
    /// Why the record failed.
    pub error: String,
}

impl DeadRecord {
    pub(crate) fn from_record(record: &Record<'_>, error: String) -> Self {
        DeadRecord {
            payload: record.payload.map(<[u8]>::to_vec),
            key: record.key.map(<[u8]>::to_vec),
            topic: record.topic.to_owned(),
            partition: record.partition,
            offset: record.offset,
            timestamp_ms: record.timestamp_ms,
            headers: record.headers.to_owned_headers(),
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

    /// The topic dead letters go to, for a sink that writes them to one the source could read.
    fn topic(&self) -> Option<&str> {
        None
    }

    /// Hands off the record at `offset` of the source's `lane`, whose row the sink refused: the
    /// runtime no longer holds the raw record, so the dead-letter sink reads it again from the
    /// source (the offset is not committed yet, so it is still there). `ack` as for [`send`].
    ///
    /// The default cannot read the source and fails, which stops the pipeline.
    ///
    /// [`send`]: DeadLetter::send
    fn send_refused(&self, lane: &LaneKey, offset: i64, error: String, ack: DeadLetterAck) {
        let _ = error;
        ack.complete(Err(SinkError::fatal(format!(
            "{lane} offset {offset}: this dead-letter sink cannot read refused rows' records again"
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
    Lane { ack: crossbeam_channel::Sender<Ack>, fatal: FatalSlot, lane_id: u64, offset: i64 },
    Batch(tokio::sync::oneshot::Sender<Result<(), SinkError>>),
}

impl DeadLetterAck {
    pub(crate) fn for_lane(ack: crossbeam_channel::Sender<Ack>, fatal: FatalSlot, lane_id: u64, offset: i64) -> Self {
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
                let _ = ack.send(Ack::DeadLetter { lane_id, offset });
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
