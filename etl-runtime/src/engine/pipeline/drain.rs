//! Drains: a revocation, a shutdown or a finished lane flushes the lane, waits for its acks up to
//! a deadline (Invariant 4), stores its final offset and removes it.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crossbeam_channel::Sender;

use crate::engine::ack::FinalOffsets;
use crate::engine::chain::Chain;
use crate::engine::chunk::Chunk;
use crate::engine::delivery::{At, Delivery};
use crate::engine::lane::{LaneKey, named};
use crate::engine::pipeline::PipelineThread;
use crate::engine::pipeline::lane_state::LaneState;

/// The id of the drain a finite lane starts for itself when it has finished.
pub(super) const SELF_DRAIN: u64 = 0;

pub(super) struct DrainRequest {
    id: u64,
    remaining: usize,
    pub(super) results: FinalOffsets,
    pub(super) reply: Option<Sender<FinalOffsets>>,
}

impl<C: Chain, D: Delivery> PipelineThread<C, D> {
    /// Marks `lanes` as draining until `deadline`; the answer goes to `reply` once every one of
    /// them is finalized.
    pub(super) fn start_drain(&mut self, lanes: Vec<LaneKey>, deadline: Instant, reply: Sender<FinalOffsets>) {
        let id = self.next_drain;
        self.next_drain += 1;
        let mut request = DrainRequest { id, remaining: 0, results: Vec::new(), reply: Some(reply) };
        for key in &lanes {
            match self.lanes.iter_mut().find(|l| l.key == *key && l.drain.is_none_or(|(d, _)| d == SELF_DRAIN)) {
                Some(lane) => {
                    lane.drain = Some((id, deadline));
                    request.remaining += 1;
                }
                None => request.results.push((key.clone(), None)),
            }
        }
        tracing::info!(thread = self.index, lanes = %named(&lanes), draining = request.remaining, "draining lanes");
        self.drains.push(request);
        self.finish_drains();
    }

    /// Finalizes the draining lanes that are done or past their deadline, and answers the requests
    /// whose lanes are all finalized.
    pub(super) fn finish_drains(&mut self) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.lanes.len() {
            let lane = &self.lanes[i];
            let Some((drain, deadline)) = lane.drain else {
                i += 1;
                continue;
            };
            let done =
                lane.pending.is_empty() && lane.buffers.iter().all(|b| b.rows == 0) && lane.checkpointer.is_settled();
            if !done && now < deadline {
                i += 1;
                continue;
            }
            if !done {
                tracing::warn!(
                    topic = %lane.key.topic,
                    partition = lane.key.partition,
                    "drain deadline passed with unacknowledged data; storing the safe offset"
                );
            }
            let lane = self.remove_lane(i);
            let offset = lane.checkpointer.stored();
            tracing::info!(topic = %lane.key.topic, partition = lane.key.partition, next_offset = ?offset, complete = done, "lane drained");
            if let Some(request) = self.drains.iter_mut().find(|r| r.id == drain) {
                request.results.push((lane.key.clone(), offset));
                request.remaining -= 1;
            }
        }
        self.drains.retain_mut(|request| {
            if request.remaining > 0 {
                return true;
            }
            if let Some(reply) = request.reply.take() {
                // The requester may have given up waiting; the offsets are stored either way.
                let _ = reply.send(std::mem::take(&mut request.results));
            }
            false
        });
    }

    /// Removes a lane after storing its safe offset and returning its unsent bytes to the budget.
    pub(super) fn remove_lane(&mut self, i: usize) -> LaneState {
        self.lanes[i].store_offset();
        self.cut(i, At::Removed);
        let lane = self.lanes.swap_remove(i);
        self.deliveries.swap_remove(i);
        let unsent: u64 = lane.pending.iter().map(Chunk::held_bytes).sum();
        self.shared.budget.release(unsent);
        if lane.paused_since.is_some() {
            self.shared.paused_lanes.fetch_sub(1, Ordering::AcqRel);
        }
        if lane.stall.is_stalled() {
            self.shared.stalled_lanes.fetch_sub(1, Ordering::AcqRel);
        }
        self.shared.lane_counts[self.index].fetch_sub(1, Ordering::AcqRel);
        // A partition this member no longer owns has no lag here; a stale series would show
        // a lag that never changes on every member it ever passed through.
        let partition = lane.key.partition.to_string();
        let labels = [&*lane.key.topic, partition.as_str()];
        let _ = self.shared.metrics.lag_records.remove_label_values(&labels);
        let _ = self.shared.metrics.lag_seconds.remove_label_values(&labels);
        let _ = self.shared.metrics.watermark_age.remove_label_values(&labels);
        lane
    }
}
