//! Sealing: an open buffer becomes a chunk, is counted in the budget and offered to its shard's
//! queue without blocking; a rejected chunk stays with its lane as the lane's resume point.

use crossbeam_channel::{Sender, TrySendError};

use crate::config::RuntimeConfig;
use crate::engine::chain::OpenBuffer;
use crate::engine::checkpoint::Checkpointer;
use crate::engine::chunk::{Chunk, ChunkOrigin};
use crate::engine::delivery::LaneCut;
use crate::engine::fence::Fence;
use crate::engine::lane::LaneKey;
use crate::engine::pipeline::lane_state::LaneState;
use crate::engine::shared::Shared;

/// Lane `i` of a pipeline thread, lent to its delivery. It reaches the thread's other lanes too:
/// a full queue pauses every lane whose next chunk goes to the same shard.
pub(super) struct Cutter<'a> {
    pub(super) thread: usize,
    pub(super) i: usize,
    pub(super) lanes: &'a mut [LaneState],
    pub(super) queues: &'a [Sender<Chunk>],
    pub(super) shared: &'a Shared,
    pub(super) pause_when_full: bool,
}

impl LaneCut for Cutter<'_> {
    fn key(&self) -> &LaneKey {
        &self.lanes[self.i].key
    }

    fn shards(&self) -> usize {
        self.queues.len()
    }

    fn config(&self) -> &RuntimeConfig {
        &self.shared.config
    }

    fn tracks_row_sources(&self) -> bool {
        self.shared.track_row_sources
    }

    fn buffer(&mut self, shard: usize) -> &mut OpenBuffer {
        &mut self.lanes[self.i].buffers[shard]
    }

    fn checkpointer(&mut self) -> &mut Checkpointer {
        &mut self.lanes[self.i].checkpointer
    }

    fn is_paused(&self) -> bool {
        self.lanes[self.i].paused_since.is_some()
    }

    fn fence(&self) -> Option<&Fence> {
        self.lanes[self.i].fence.as_deref()
    }

    fn count_batches_left(&self, n: u64) {
        self.shared.metrics.batches_left.inc_by(n);
    }

    /// A rejection keeps the chunk as the lane's resume point and, when the delivery says so,
    /// pauses the lane and the other lanes of this thread whose next chunk goes to that shard
    /// (Invariant 1).
    fn seal(&mut self, shard: usize, urgent: bool) {
        let target = self.shared.config.chunk_target_bytes;
        let lane = &mut self.lanes[self.i];
        let buffer = &mut lane.buffers[shard];
        if buffer.rows == 0 && !urgent {
            return;
        }
        // Room for the row that crosses the target, so the buffer rarely doubles; what a
        // doubling leaves unused is given back, so that the budget (which counts lengths)
        // also bounds the memory sealed chunks hold (Invariant 7).
        let mut bytes = std::mem::replace(&mut buffer.bytes, Vec::with_capacity(target.min(1 << 20) * 5 / 4));
        if bytes.capacity() > bytes.len() + 4096 {
            bytes.shrink_to_fit();
        }
        let chunk = Chunk {
            rows: std::mem::take(&mut buffer.rows),
            origin: ChunkOrigin {
                thread: self.thread,
                lane_id: lane.id,
                lane: lane.key.clone(),
                first_offset: buffer.first_offset,
                last_offset: buffer.last_offset,
            },
            shard,
            urgent,
            bytes,
            row_offsets: std::mem::take(&mut buffer.row_offsets),
            recorded: buffer.recorded.take(),
            fence: lane.fence.clone(),
            first_timestamp_ms: buffer.first_timestamp_ms.take(),
        };
        buffer.opened_at = None;
        let above_high = self.shared.budget.acquire(chunk.held_bytes());
        let mut rejected = false;
        if lane.pending.is_empty() {
            match self.queues[shard].try_send(chunk) {
                Ok(()) => {}
                Err(TrySendError::Full(chunk)) => {
                    self.shared.metrics.queue_full[shard].inc();
                    lane.pending.push_back(chunk);
                    rejected = true;
                }
                Err(TrySendError::Disconnected(chunk)) => {
                    self.shared.budget.release(chunk.held_bytes());
                    self.shared.fatal.report(format!("the worker of shard {shard} is gone"));
                }
            }
        } else {
            lane.pending.push_back(chunk);
        }
        if lane.drain.is_some() {
            return;
        }
        if rejected && !self.pause_when_full {
            tracing::trace!(topic = %lane.key.topic, partition = lane.key.partition, shard, "shard queue full; holding the batch");
        } else if rejected {
            tracing::debug!(topic = %lane.key.topic, partition = lane.key.partition, shard, "shard queue full; pausing");
            lane.pause(self.shared);
            for (j, other) in self.lanes.iter_mut().enumerate() {
                if j != self.i && other.drain.is_none() && other.buffers[shard].rows > 0 {
                    other.pause(self.shared);
                }
            }
        }
        if above_high {
            self.lanes[self.i].pause(self.shared);
        }
    }
}

/// Offers the lane's rejected chunks again, in order, without blocking.
pub(super) fn send_pending(lane: &mut LaneState, queues: &[Sender<Chunk>], shared: &Shared) {
    while let Some(chunk) = lane.pending.pop_front() {
        let shard = chunk.shard;
        match queues[shard].try_send(chunk) {
            Ok(()) => {}
            Err(TrySendError::Full(chunk)) => {
                lane.pending.push_front(chunk);
                return;
            }
            Err(TrySendError::Disconnected(chunk)) => {
                shared.budget.release(chunk.held_bytes());
                shared.fatal.report(format!("the worker of shard {shard} is gone"));
            }
        }
    }
}
