//! The pipeline thread: polls its lanes, runs the chain, seals chunks, and turns acks into
//! offsets. Where batches end is its delivery's business (`engine::delivery`).
//!
//! `mod.rs` holds the thread and its loop; [`lane_state`] a lane's state, [`turn`] one lane's turn
//! (poll, chain, place), [`seal`] sealing and the queue rejection, [`drain`] drains and removal.

mod drain;
mod lane_state;
mod seal;
mod turn;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::engine::ack::{Ack, Control};
use crate::engine::chain::Chain;
use crate::engine::checkpoint::Checkpointer;
use crate::engine::chunk::Chunk;
use crate::engine::delivery::{At, Delivery};
use crate::engine::pipeline::drain::{DrainRequest, SELF_DRAIN};
use crate::engine::pipeline::lane_state::LaneState;
use crate::engine::pipeline::seal::Cutter;
use crate::engine::shared::Shared;

/// How long an idle thread waits for an ack or a control message before it polls its lanes again.
/// Short, so a lane whose source has new data is picked up at once ("keeps polling").
const IDLE_WAIT: Duration = Duration::from_millis(2);

/// How long a thread that owns no lane (and drains none) waits for a control message: nothing
/// else can give it work, and the control channel wakes it at once. Waking every `IDLE_WAIT`
/// instead cost about 1% of a core per thread, measured on a member that waited 23 s for its
/// group to form (docs/BENCHMARKS.md, "The join is not per record"); a standby member with no
/// partitions waits like that all along. Well inside the loop-gap bound the tests hold
/// (`backpressure.rs`, `POLL_GAP_BOUND`).
const LANELESS_WAIT: Duration = Duration::from_millis(50);

/// Idle turns in a row (about 200 ms at `IDLE_WAIT`) after which a thread counts its lanes as
/// quiet and waits `QUIET_WAIT` between turns; the first turn that processes a record goes back
/// to `IDLE_WAIT`. A saturated pipeline never goes this long without a record, so its cadence is
/// unchanged; a quiet topic costs a thread 50 wake-ups a second instead of 500 (2 ms turns over
/// idle lanes cost about 1.4% of a core per thread, docs/BENCHMARKS.md, "The join is not per
/// record"). What waits for a turn is coarse next to 20 ms: `batch.linger`,
/// `backpressure.min_pause`, a held record's retry backoff; acks and control messages still wake
/// the thread at once.
const QUIET_AFTER: u32 = 100;
const QUIET_WAIT: Duration = Duration::from_millis(20);

/// How often the thread sets the gauges of lanes that may take no turns (paused, held, draining),
/// and samples each lane for the stall watchdog.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// Counters kept locally and added to the shared metrics once per loop iteration.
#[derive(Default)]
struct Counts {
    records_in: u64,
    filtered: u64,
    errors: u64,
    tombstones: u64,
    dead_letters: u64,
}

pub(crate) struct PipelineThread<C: Chain, D: Delivery> {
    index: usize,
    chain: C,
    delivery: Arc<D>,
    lanes: Vec<LaneState>,
    /// What the delivery keeps for each lane, index for index with `lanes`.
    deliveries: Vec<D::Lane>,
    control: Receiver<Control>,
    acks: Receiver<Ack>,
    ack_tx: Sender<Ack>,
    queues: Vec<Sender<Chunk>>,
    shared: Arc<Shared>,
    drains: Vec<DrainRequest>,
    next_drain: u64,
    snapshot: Vec<(usize, u32)>,
    counts: Counts,
    /// Where the next loop starts among the lanes. The first lane of a loop takes the budget and
    /// the queue room its turn frees; starting each loop one lane further shares them, where a
    /// fixed order let the first lanes take most of them under backpressure (the last lane of a
    /// thread read a third to an eighth of the first's records).
    first_lane: usize,
}

impl<C: Chain, D: Delivery> PipelineThread<C, D> {
    pub(crate) fn new(
        index: usize,
        chain: C,
        delivery: Arc<D>,
        control: Receiver<Control>,
        (ack_tx, acks): (Sender<Ack>, Receiver<Ack>),
        queues: Vec<Sender<Chunk>>,
        shared: Arc<Shared>,
    ) -> Self {
        PipelineThread {
            index,
            chain,
            delivery,
            lanes: Vec::new(),
            deliveries: Vec::new(),
            control,
            acks,
            ack_tx,
            queues,
            shared,
            drains: Vec::new(),
            next_drain: SELF_DRAIN + 1,
            snapshot: Vec::new(),
            counts: Counts::default(),
            first_lane: 0,
        }
    }

    /// The thread's loop. It never blocks on a send (Invariant 1); the only wait is the short idle
    /// `select!` on the ack and control channels.
    pub(crate) fn run(mut self) {
        let mut last = Instant::now();
        let mut next_report = last;
        let mut idle_turns = 0u32;
        loop {
            let now = Instant::now();
            let gap = now.duration_since(last).as_nanos() as u64;
            self.shared.max_loop_gap_ns.fetch_max(gap, Ordering::Relaxed);
            last = now;
            if now >= next_report {
                for lane in &mut self.lanes {
                    lane.report(now);
                    lane.watch_stall(now, &self.shared);
                }
                next_report = now + REPORT_EVERY;
            }

            loop {
                match self.control.try_recv() {
                    Ok(msg) => {
                        if self.handle_control(msg) {
                            return self.exit();
                        }
                    }
                    Err(crossbeam_channel::TryRecvError::Empty) => break,
                    Err(crossbeam_channel::TryRecvError::Disconnected) => return self.exit(),
                }
            }
            while let Ok(ack) = self.acks.try_recv() {
                self.handle_ack(ack);
            }

            let mut busy = false;
            let stopped = self.shared.fatal.is_set();
            let high = self.shared.budget.above_high();
            let n = self.lanes.len();
            if n > 0 {
                self.first_lane = (self.first_lane + 1) % n;
            }
            for k in 0..n {
                busy |= self.step_lane((self.first_lane + k) % n, high, stopped);
            }
            self.finish_drains();
            self.store_offsets();
            // Read before the flush, which takes the turn's counts.
            let took_records = self.counts.records_in > 0;
            self.flush_counts();

            idle_turns = if took_records { 0 } else { idle_turns.saturating_add(1) };
            if !busy {
                let wait = if !self.drains.is_empty() {
                    IDLE_WAIT
                } else if self.lanes.is_empty() {
                    LANELESS_WAIT
                } else if idle_turns >= QUIET_AFTER {
                    QUIET_WAIT
                } else {
                    IDLE_WAIT
                };
                crossbeam_channel::select! {
                    recv(self.acks) -> ack => if let Ok(ack) = ack { self.handle_ack(ack) },
                    recv(self.control) -> msg => match msg {
                        Ok(msg) => if self.handle_control(msg) { return self.exit() },
                        Err(_) => return self.exit(),
                    },
                    default(wait) => {}
                }
            }
        }
    }

    /// Returns true when the thread must exit.
    fn handle_control(&mut self, msg: Control) -> bool {
        match msg {
            Control::AddLane { lane_id, mut lane, replay, fence } => {
                tracing::info!(
                    thread = self.index,
                    topic = lane.topic(),
                    partition = lane.partition(),
                    lane_id,
                    "lane added"
                );
                let mut checkpointer = Checkpointer::default();
                let state = self.delivery.open_lane(&mut *lane, &mut checkpointer, self.queues.len(), replay);
                self.lanes.push(LaneState::new(lane_id, lane, self.queues.len(), checkpointer, fence, &self.shared));
                self.deliveries.push(state);
                false
            }
            Control::RemoveLanes { lanes, deadline, reply } => {
                self.start_drain(lanes, deadline, reply);
                false
            }
            Control::Exit => true,
        }
    }

    fn handle_ack(&mut self, ack: Ack) {
        match ack {
            Ack::Chunks(chunks) => {
                for (lane_id, first_offset) in chunks {
                    self.ack_one(lane_id, first_offset);
                }
            }
            Ack::DeadLetter { lane_id, offset } => self.ack_one(lane_id, offset),
            Ack::Abandoned(chunks) => {
                for (lane_id, first_offset) in chunks {
                    if let Some(lane) = self.lanes.iter_mut().find(|l| l.id == lane_id) {
                        lane.checkpointer.abandon(first_offset);
                    }
                }
            }
        }
    }

    fn ack_one(&mut self, lane_id: u64, first_offset: i64) {
        // An ack for a lane that is gone (drained past its deadline) has nothing left to move.
        if let Some(lane) = self.lanes.iter_mut().find(|l| l.id == lane_id)
            && !lane.checkpointer.ack(first_offset)
        {
            tracing::error!(topic = %lane.key.topic, partition = lane.key.partition, first_offset, "ack for an offset that was never registered");
        }
    }

    /// Lets the delivery of lane `i` seal the buffers whose batch ends `at`.
    fn cut(&mut self, i: usize, at: At) {
        let PipelineThread { index, lanes, deliveries, queues, shared, .. } = self;
        let mut cutter = Cutter { thread: *index, i, lanes, queues, shared, pause_when_full: D::PAUSE_WHEN_QUEUE_FULL };
        D::cut(&mut deliveries[i], at, &mut cutter);
    }

    fn store_offsets(&mut self) {
        for lane in &mut self.lanes {
            lane.store_offset();
        }
    }

    fn flush_counts(&mut self) {
        let c = std::mem::take(&mut self.counts);
        let m = &self.shared.metrics;
        for (counter, n) in [
            (&m.records_in, c.records_in),
            (&m.dropped_filtered, c.filtered),
            (&m.dropped_error, c.errors),
            (&m.dropped_tombstone, c.tombstones),
            (&m.dropped_dead_letter, c.dead_letters),
        ] {
            if n > 0 {
                counter.inc_by(n);
            }
        }
    }

    fn exit(mut self) {
        self.flush_counts();
        while let Ok(ack) = self.acks.try_recv() {
            self.handle_ack(ack);
        }
        while !self.lanes.is_empty() {
            let lane = self.remove_lane(self.lanes.len() - 1);
            tracing::info!(topic = %lane.key.topic, partition = lane.key.partition, next_offset = ?lane.checkpointer.stored(), "lane closed");
        }
        for request in &mut self.drains {
            if let Some(reply) = request.reply.take() {
                let _ = reply.send(std::mem::take(&mut request.results));
            }
        }
        tracing::debug!(thread = self.index, "pipeline thread exits");
    }
}
