//! The coordinator API a source drives a running pipeline with: add, drain and fence lanes,
//! report readiness, lag and commits. [`recover`] is its exactly-once half: reading the ledger for
//! a replay plan.

mod recover;

pub use recover::LedgerReadError;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use crate::engine::ack::Control;
use crate::engine::fence::Fence;
use crate::engine::lane::{Lane, LaneKey};
use crate::engine::ledger::{Ledger, Replay};
use crate::engine::shared::Shared;

/// The coordinator API sources use, cheap to clone and usable from any thread (for Kafka: from the
/// rebalance callback).
#[derive(Clone)]
pub struct PipelineHandle {
    pub(crate) inner: Arc<HandleInner>,
}

impl std::fmt::Debug for PipelineHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipelineHandle").field("live_lanes", &self.live_lanes()).finish()
    }
}

pub(crate) struct HandleInner {
    pub(crate) control: Vec<Sender<Control>>,
    pub(crate) shared: Arc<Shared>,
    /// Which pipeline thread owns each lane.
    pub(crate) placement: Mutex<HashMap<LaneKey, usize>>,
    /// Exactly-once: where batch spans are recorded (`None` at least-once).
    pub(crate) ledger: Option<Arc<dyn Ledger>>,
    /// Exactly-once: each live lane's fence, so that a hand-over closes it whatever the pipeline
    /// threads are doing (see [`Fence`]).
    pub(crate) fences: Mutex<HashMap<LaneKey, Arc<Fence>>>,
    pub(crate) next_lane_id: AtomicU64,
    pub(crate) stop: Sender<()>,
    /// The sink's runtime, on which [`PipelineHandle::recover`] reads the ledger.
    pub(crate) runtime: tokio::runtime::Handle,
}

impl PipelineHandle {
    /// Hands a new lane to the pipeline thread with the fewest lanes (m:n placement); it is polled
    /// from then on. The runtime expects a lane that is ready to poll: a Kafka source pauses a newly
    /// assigned partition at once, splits its queue, and resumes it when it hands the lane over
    /// (Invariant 5). From then on only the runtime pauses and resumes the lane.
    pub fn add_lane(&self, lane: Box<dyn Lane>) {
        self.add_lane_replaying(lane, None);
    }

    /// [`PipelineHandle::add_lane`] for a lane that replays its partition under exactly-once: the
    /// source positioned it at [`Replay::start`] (from [`PipelineHandle::recover`]), and the lane's
    /// batches are cut at the recorded spans.
    pub fn add_lane_replaying(&self, lane: Box<dyn Lane>, replay: Option<Replay>) {
        let inner = &self.inner;
        if inner.shared.stopping.load(Ordering::Acquire) {
            tracing::warn!(topic = lane.topic(), partition = lane.partition(), "lane added during shutdown; ignored");
            return;
        }
        let thread =
            (0..inner.control.len()).min_by_key(|&t| inner.shared.lane_counts[t].load(Ordering::Acquire)).unwrap_or(0);
        inner.shared.lane_counts[thread].fetch_add(1, Ordering::AcqRel);
        if let Some(bound) = inner.shared.config.memory_bound {
            // The most partitions owned at once: memory the allocator took for them stays.
            let bound = i64::try_from(bound.for_partitions(self.live_lanes() as u64)).unwrap_or(i64::MAX);
            let gauge = &inner.shared.metrics.memory_bound;
            if bound > gauge.get() {
                gauge.set(bound);
            }
        }
        let key = lane.key();
        inner.placement.lock().expect("placement lock").insert(key.clone(), thread);
        let fence = inner.ledger.is_some().then(|| {
            let fence = Arc::new(Fence::new(replay.as_ref().map_or(0, |r| r.epoch)));
            // A lane of this partition that was never drained must not write next to the new one.
            if let Some(old) = inner.fences.lock().expect("fences lock").insert(key, fence.clone()) {
                old.close();
            }
            fence
        });
        let lane_id = inner.next_lane_id.fetch_add(1, Ordering::Relaxed);
        if inner.control[thread].send(Control::AddLane { lane_id, lane, replay, fence }).is_err() {
            inner.shared.lane_counts[thread].fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Drains `lanes` and drops them (Invariant 4): they stop being polled, their open buffers are
    /// flushed and their held chunks sent, and acks are awaited until everything they processed is
    /// durable or `timeout` passes. Their final offsets are stored through the lanes before this
    /// returns, with each lane's final `next_offset` (`None`: none stored). It blocks the caller
    /// (for Kafka: inside the revocation callback) for at most `timeout` plus a small slack.
    pub fn drain_partitions(&self, lanes: &[LaneKey], timeout: Duration) -> Vec<(LaneKey, Option<i64>)> {
        self.drain_until(lanes, Instant::now() + timeout)
    }

    /// Exactly-once: stops `lanes` from recording or inserting any more batches, now. For a source
    /// that learns it lost partitions without a clean hand-over (for Kafka: the assignment was
    /// lost): their next owner may be reading the ledger already. A drain does it by itself at its
    /// end.
    pub fn fence_partitions(&self, lanes: &[LaneKey]) {
        let mut fences = self.inner.fences.lock().expect("fences lock");
        for key in lanes {
            if let Some(fence) = fences.remove(key) {
                let recording = fence.close();
                tracing::debug!(
                    topic = %key.topic,
                    partition = key.partition,
                    recording,
                    "partition fenced: this member records and inserts no more of its batches"
                );
            }
        }
    }

    /// True when the pipeline runs exactly-once: a source must then position each new lane with
    /// [`PipelineHandle::recover`] and add it with [`PipelineHandle::add_lane_replaying`].
    pub fn exactly_once(&self) -> bool {
        self.inner.ledger.is_some()
    }

    /// Asks the run loop for a graceful shutdown, as SIGTERM does.
    pub fn request_shutdown(&self) {
        self.inner.shared.shutdown_requested.store(true, Ordering::Release);
        let _ = self.inner.stop.send(());
    }

    /// Whether a shutdown was asked for (a signal, or [`PipelineHandle::request_shutdown`]): a
    /// source still starting up stops waiting.
    pub fn shutdown_requested(&self) -> bool {
        self.inner.shared.shutdown_requested.load(Ordering::Acquire)
    }

    /// Reports a fatal error: the pipeline stops with exit code 1.
    pub fn report_fatal(&self, message: impl Into<String>) {
        self.inner.shared.fatal.report(message.into());
    }

    /// Tells `/readyz` whether the source is ready (for Kafka: joined the group).
    pub fn set_source_ready(&self, ready: bool) {
        self.inner.shared.source_ready.store(ready, Ordering::Release);
    }

    /// Whether the pipeline is shutting down.
    pub fn is_stopping(&self) -> bool {
        self.inner.shared.stopping.load(Ordering::Acquire)
    }

    /// What `/readyz` answers: the source is ready, the sink's start-up check passed, and no
    /// shard's writes are failing now.
    pub fn is_ready(&self) -> bool {
        self.inner.shared.is_ready()
    }

    /// Sets `etl_source_lag_records{topic, partition}`.
    pub fn set_lag_records(&self, topic: &str, partition: i32, lag: i64) {
        self.inner.shared.metrics.lag_records.with_label_values(&[topic, partition.to_string().as_str()]).set(lag);
    }

    /// Counts records a drain gave up on in `etl_source_abandoned_records_total`.
    pub fn record_abandoned(&self, records: u64) {
        self.inner.shared.metrics.abandoned.inc_by(records);
    }

    /// Counts an assignment in `etl_source_assignments_total`.
    pub fn record_assignment(&self) {
        self.inner.shared.metrics.assignments.inc();
    }

    /// Counts a revocation in `etl_source_revocations_total`.
    pub fn record_revocation(&self) {
        self.inner.shared.metrics.revocations.inc();
    }

    /// Counts a lost assignment in `etl_source_assignments_lost_total`.
    pub fn record_assignment_lost(&self) {
        self.inner.shared.metrics.assignments_lost.inc();
    }

    /// Counts a failed commit (or a partition of a commit that failed) in
    /// `etl_source_commit_failures_total`.
    pub fn record_commit_failure(&self) {
        self.inner.shared.metrics.commit_failures.inc();
    }

    /// Counts a commit in `etl_source_commits_total` and sets `etl_source_committed_offset`.
    pub fn record_commit(&self, topic: &str, partition: i32, offset: i64) {
        let metrics = &self.inner.shared.metrics;
        metrics.commits.inc();
        metrics.committed_offset.with_label_values(&[topic, partition.to_string().as_str()]).set(offset);
    }

    /// The number of lanes the pipeline owns right now.
    pub fn live_lanes(&self) -> usize {
        self.inner.shared.lane_counts.iter().map(|c| c.load(Ordering::Acquire)).sum()
    }

    pub(crate) fn drain_until(&self, lanes: &[LaneKey], deadline: Instant) -> Vec<(LaneKey, Option<i64>)> {
        let inner = &self.inner;
        let mut by_thread: HashMap<usize, Vec<LaneKey>> = HashMap::new();
        let mut results = Vec::new();
        {
            let mut placement = inner.placement.lock().expect("placement lock");
            for key in lanes {
                match placement.remove(key) {
                    Some(thread) => by_thread.entry(thread).or_default().push(key.clone()),
                    None => results.push((key.clone(), None)),
                }
            }
        }
        let (reply_tx, reply_rx) = crossbeam_channel::unbounded();
        let mut expected = 0;
        for (thread, lanes) in by_thread {
            let msg = Control::RemoveLanes { lanes, deadline, reply: reply_tx.clone() };
            if inner.control[thread].send(msg).is_ok() {
                expected += 1;
            }
        }
        // The threads answer at the deadline at the latest; the slack covers one loop iteration.
        let give_up = deadline + Duration::from_millis(500);
        for _ in 0..expected {
            match reply_rx.recv_deadline(give_up) {
                Ok(mut offsets) => results.append(&mut offsets),
                Err(_) => {
                    tracing::error!("a pipeline thread did not answer a drain in time");
                    break;
                }
            }
        }
        // Before the caller hands the partitions over, even if a thread did not answer.
        self.fence_partitions(lanes);
        results
    }
}
