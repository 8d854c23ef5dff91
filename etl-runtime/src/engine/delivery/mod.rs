//! The delivery guarantee as one seam: where the lane loop cuts batches and what the shard worker
//! does before and after a write. [`at_least_once`] and [`exactly_once`] implement it.
//!
//! The lane loop (`engine::pipeline`) and the shard worker (`engine::worker`) are generic over a
//! [`Delivery`] and never ask which one they run: `Pipeline::start` picks it once, from
//! `RuntimeConfig::exactly_once`.

pub(crate) mod at_least_once;
pub(crate) mod exactly_once;

use std::future::Future;
use std::time::Duration;

use crossbeam_channel::Sender;

use crate::config::RuntimeConfig;
use crate::engine::ack::Ack;
use crate::engine::chain::OpenBuffer;
use crate::engine::checkpoint::Checkpointer;
use crate::engine::chunk::{Batch, Chunk};
use crate::engine::fence::Fence;
use crate::engine::lane::{Lane, LaneKey};
use crate::engine::ledger::Replay;
use crate::engine::shared::Shared;

/// What just happened at a lane; the delivery seals the buffers whose batch it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum At {
    /// A record was processed: its rows were placed and its offset marked processed.
    Record,
    /// The lane is about to be polled for a burst of records.
    Turn,
    /// The lane has nothing at hand right now.
    Idle,
    /// A record of the lane is held because something it needs is unavailable; `started` on the
    /// turn the hold began, false on the turns it waits.
    Held { started: bool },
    /// The lane is being drained (revoked, shut down or finished); once per drain.
    Drain,
    /// The lane is being removed from its thread, before its partition is handed over.
    Removed,
}

/// A lane as the pipeline thread lends it to its delivery: its open buffers, its checkpointer,
/// and sealing.
pub(crate) trait LaneCut {
    /// The lane's identity.
    fn key(&self) -> &LaneKey;
    /// The number of shards (and of open buffers).
    fn shards(&self) -> usize;
    /// The runtime configuration.
    fn config(&self) -> &RuntimeConfig;
    /// Whether chunks keep each row's source offset (`errors.policy: dlq`).
    fn tracks_row_sources(&self) -> bool;
    /// The open buffer of `shard`.
    fn buffer(&mut self, shard: usize) -> &mut OpenBuffer;
    /// The lane's checkpointer.
    fn checkpointer(&mut self) -> &mut Checkpointer;
    /// True while the lane is paused at the source.
    fn is_paused(&self) -> bool;
    /// The lane's hand-over fence, which its chunks carry (`None` unless the source made one:
    /// only under exactly-once).
    fn fence(&self) -> Option<&Fence>;
    /// Seals `shard`'s open buffer into a chunk, counts it in the budget and offers it to the
    /// shard's queue (Invariant 1: never blocking). `urgent`: its batch is written at once; an
    /// urgent seal of an empty buffer sends an empty marker that only flushes the worker.
    fn seal(&mut self, shard: usize, urgent: bool);
    /// Counts `n` batches given up unwritten because their partition goes to another owner
    /// (`etl_exactly_once_batches_left_total`).
    fn count_batches_left(&self, n: u64);
}

/// How one shard worker merges chunks into batches.
pub(crate) trait BatchPolicy: Send {
    /// Whether `chunk` may join the open batch; false writes the open batch first.
    fn fits(&self, open: &Batch, chunk: &Chunk) -> bool;
    /// Whether the open batch must be written now.
    fn is_full(&self, open: &Batch) -> bool;
    /// How long a non-empty batch may wait for more chunks.
    fn linger(&self) -> Duration;
}

/// A delivery guarantee: the lane side cuts batches, the worker side names them and guards
/// their writes.
pub(crate) trait Delivery: Send + Sync + 'static {
    /// What the delivery keeps per lane, on the lane's pipeline thread.
    type Lane: Send;
    /// How the shard workers merge chunks.
    type Batching: BatchPolicy;
    /// Whether a full shard queue pauses the lane at the source (Invariant 1). A delivery that
    /// does not pause still holds the rejected chunk, and the lane is not polled until the queue
    /// takes it.
    const PAUSE_WHEN_QUEUE_FULL: bool;

    /// The state of a lane just added; the source positioned it with `replay` when one was made.
    fn open_lane(
        &self,
        lane: &mut dyn Lane,
        checkpointer: &mut Checkpointer,
        shards: usize,
        replay: Option<Replay>,
    ) -> Self::Lane;

    /// Files the rows the record at `offset` added: `before[shard]` is each buffer's
    /// `(bytes, rows)` before the chain ran. Every row kept is registered with the checkpointer
    /// through [`note_rows`].
    fn place(
        lane: &mut Self::Lane,
        buffers: &mut [OpenBuffer],
        before: &[(usize, u32)],
        offset: i64,
        checkpointer: &mut Checkpointer,
        track_row_sources: bool,
    );

    /// Seals the buffers whose batch ends at `at`.
    fn cut(lane: &mut Self::Lane, at: At, cut: &mut impl LaneCut);

    /// The shard workers' batching.
    fn batching(&self) -> Self::Batching;

    /// Gives the batch its deduplication token (and under exactly-once its span); `sequence`
    /// counts the worker's batches.
    fn name(&self, batch: &mut Batch, shard: usize, sequence: &mut u64);

    /// True when the batch must not be written any more: its lane was handed over.
    fn handed_over(&self, batch: &Batch) -> bool;

    /// Runs before the batch's first write attempt; false when it must not be written (it was
    /// given up, or the pipeline stops).
    fn before_write(&self, shared: &Shared, acks: &[Sender<Ack>], batch: &Batch) -> impl Future<Output = bool> + Send;
}

/// Registers the rows the record at `offset` added to `buffer` (which held `rows_before` rows):
/// a buffer's first row registers its chunk with the checkpointer, and under `dlq` each row
/// keeps its source offset.
#[inline]
pub(crate) fn note_rows(
    buffer: &mut OpenBuffer,
    rows_before: u32,
    offset: i64,
    checkpointer: &mut Checkpointer,
    track_row_sources: bool,
) {
    if rows_before == 0 {
        buffer.first_offset = offset;
        checkpointer.register(offset);
    }
    buffer.last_offset = offset;
    if track_row_sources {
        let added = (buffer.rows - rows_before) as usize;
        buffer.row_offsets.extend(std::iter::repeat_n(offset, added));
    }
}
