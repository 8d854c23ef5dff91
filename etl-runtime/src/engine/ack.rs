//! The messages a pipeline thread receives: acknowledgements from the sink side, and the
//! coordinator's requests.

use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Sender;

use crate::engine::budget::Budget;
use crate::engine::chunk::Batch;
use crate::engine::fence::Fence;
use crate::engine::lane::{Lane, LaneKey};
use crate::engine::ledger::Replay;

/// The final stored `next_offset` of each drained lane (`None`: nothing stored).
pub(crate) type FinalOffsets = Vec<(LaneKey, Option<i64>)>;

/// An acknowledgement from the sink side, sent over the owning thread's unbounded ack channel
/// (Invariant 2: the sink side never blocks on a pipeline thread).
#[derive(Debug)]
pub(crate) enum Ack {
    /// The chunks of one written batch that belong to this thread: `(lane_id, first_offset)`.
    Chunks(Vec<(u64, i64)>),
    /// A dead-letter write of `offset` is durable.
    DeadLetter { lane_id: u64, offset: i64 },
    /// Chunks of a handed-over lane that will never be written (`(lane_id, first_offset)`); the
    /// watermark stays below them. Only the exactly-once delivery gives batches up.
    Abandoned(Vec<(u64, i64)>),
}

/// What the coordinator asks of a pipeline thread.
pub(crate) enum Control {
    AddLane {
        lane_id: u64,
        lane: Box<dyn Lane>,
        /// Exactly-once: the replay plan the source positioned the lane with.
        replay: Option<Replay>,
        /// Exactly-once: the lane's fence, also held by the handle.
        fence: Option<Arc<Fence>>,
    },
    /// Drain and drop these lanes; reply with their final stored offsets.
    RemoveLanes { lanes: Vec<LaneKey>, deadline: Instant, reply: Sender<FinalOffsets> },
    /// Store the safe watermark of every remaining lane and end the thread.
    Exit,
}

/// Sends each chunk's `(lane_id, first_offset)` to its pipeline thread, wrapped by `ack`.
pub(crate) fn send_acks(acks: &[Sender<Ack>], batch: &Batch, ack: fn(Vec<(u64, i64)>) -> Ack) {
    let mut per_thread: Vec<Vec<(u64, i64)>> = vec![Vec::new(); acks.len()];
    for chunk in &batch.chunks {
        per_thread[chunk.origin.thread].push((chunk.origin.lane_id, chunk.origin.first_offset));
    }
    for (thread, chunks) in per_thread.into_iter().enumerate() {
        if !chunks.is_empty() {
            // A closed channel means the thread has exited; its lanes are gone.
            let _ = acks[thread].send(ack(chunks));
        }
    }
}

/// Gives a batch up without writing it (its partition was handed over): its bytes go back to the
/// budget and its chunks are reported abandoned, so a drain still waiting for them can finish (the
/// watermark stays below them; the next owner replays their records).
pub(crate) fn abandon(budget: &Budget, acks: &[Sender<Ack>], batch: &Batch) {
    budget.release(batch.held);
    send_acks(acks, batch, Ack::Abandoned);
}
