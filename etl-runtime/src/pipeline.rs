//! The pipeline thread: polls its lanes, runs the chain, seals chunks, and turns acks into offsets.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};

use crate::chain::{Chain, OpenBuffer, RecordError, RecordErrorKind, RowOut};
use crate::checkpoint::Checkpointer;
use crate::config::{ErrorPolicy, TombstonePolicy};
use crate::exactly_once::{Cut, Fence, Recorded, Replay};
use crate::handle::Shared;
use crate::sink::{Chunk, ChunkOrigin, DeadLetterAck, DeadRecord};
use crate::source::{Lane, Record, SourceErrorKind};

/// How many records one lane may process before the thread looks at acks, control messages and its
/// other lanes again. It bounds the gap between two iterations of the loop.
const BURST: usize = 256;

/// How long an idle thread waits for an ack or a control message before it polls its lanes again.
/// Short, so a lane whose source has new data is picked up at once ("keeps polling").
const IDLE_WAIT: Duration = Duration::from_millis(2);

/// The first wait before a record whose dependency is unavailable is run through the chain again;
/// it doubles with every failure up to [`UNAVAILABLE_MAX_BACKOFF`].
const UNAVAILABLE_FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// The longest wait between two tries of a held record.
const UNAVAILABLE_MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The final stored `next_offset` of each drained partition (`None`: nothing stored).
pub(crate) type FinalOffsets = Vec<(i32, Option<i64>)>;

/// An acknowledgement from the sink side, sent over the owning thread's unbounded ack channel.
#[derive(Debug)]
pub(crate) enum Ack {
    /// The chunks of one written batch that belong to this thread: `(lane_id, first_offset)`.
    Chunks(Vec<(u64, i64)>),
    /// A dead-letter write of `offset` is durable.
    DeadLetter { lane_id: u64, offset: i64 },
    /// Exactly-once: chunks of a handed-over lane that will never be written (`(lane_id,
    /// first_offset)`); the watermark stays below them.
    Abandoned(Vec<(u64, i64)>),
}

/// What the coordinator asks of a pipeline thread.
pub(crate) enum Control {
    AddLane {
        lane_id: u64,
        lane: Box<dyn Lane>,
        replay: Option<Replay>,
        /// Exactly-once: the lane's fence, also held by the handle.
        fence: Option<Arc<Fence>>,
    },
    /// Drain and drop the lanes of these partitions; reply with their final stored offsets.
    RemoveLanes { partitions: Vec<i32>, deadline: Instant, reply: Sender<FinalOffsets> },
    /// Store the safe watermark of every remaining lane and end the thread.
    Exit,
}

struct LaneState {
    id: u64,
    partition: i32,
    lane: Box<dyn Lane>,
    buffers: Vec<OpenBuffer>,
    round_robin: usize,
    checkpointer: Checkpointer,
    /// Sealed chunks a shard queue rejected (or that queued up behind one), already counted in the
    /// budget: the exact resume point of the lane, sent before its next record is taken.
    pending: VecDeque<Chunk>,
    paused_since: Option<Instant>,
    /// The drain this lane belongs to, and its deadline.
    drain: Option<(u64, Instant)>,
    /// The drain has flushed the open buffers.
    drain_flushed: bool,
    /// A record failed under `errors.policy: fail`; the lane is no longer polled.
    failed: bool,
    newest_timestamp_ms: Option<i64>,
    lag_seconds: prometheus::Gauge,
    /// Exactly-once state; `None` at least-once.
    exact: Option<Exact>,
    /// A record the chain could not process because something it needs is unavailable: the lane
    /// is paused and the record is tried again (see [`Held`]).
    held: Option<Held>,
}

/// A record held because a dependency it needs is unavailable (a schema registry lookup failed).
/// Skipping it would lose a good record and stopping would crash-loop on a registry blip, so the
/// lane pauses at the source (the consumer keeps polling) and the record is run through the
/// chain again with capped exponential backoff; once `unavailable_timeout` has passed since the
/// first failure it becomes a record error under `errors.policy`. Nothing of it is registered
/// with the checkpointer until it is processed, so no offset passes it meanwhile.
struct Held {
    payload: Option<Vec<u8>>,
    key: Option<Vec<u8>>,
    partition: i32,
    offset: i64,
    timestamp_ms: Option<i64>,
    since: Instant,
    next_try: Instant,
    backoff: Duration,
    attempts: u32,
}

impl Held {
    fn of(record: &Record<'_>, now: Instant) -> Held {
        Held {
            payload: record.payload.map(<[u8]>::to_vec),
            key: record.key.map(<[u8]>::to_vec),
            partition: record.partition,
            offset: record.offset,
            timestamp_ms: record.timestamp_ms,
            since: now,
            next_try: now,
            backoff: Duration::ZERO,
            attempts: 0,
        }
    }

    fn record(&self) -> Record<'_> {
        Record {
            payload: self.payload.as_deref(),
            key: self.key.as_deref(),
            partition: self.partition,
            offset: self.offset,
            timestamp_ms: self.timestamp_ms,
        }
    }

    /// Schedules the next try after another failure, never later than the deadline.
    fn failed_again(&mut self, now: Instant, timeout: Duration) {
        self.attempts += 1;
        self.backoff = (self.backoff * 2).clamp(UNAVAILABLE_FIRST_BACKOFF, UNAVAILABLE_MAX_BACKOFF);
        let deadline = self.since + timeout;
        self.next_try = (now + self.backoff).min(deadline.max(now));
    }
}

/// A lane's exactly-once state: where its replayed batches end, its fence, and the work the last
/// record left for `step_lane` (which, unlike `poll_one`, may seal).
struct Exact {
    replay: Replay,
    fence: Arc<Fence>,
    /// Rows of the last record that belong to another batch than the open buffer of their shard:
    /// the buffer is sealed first, then they start the next one.
    carry: Vec<Carry>,
}

impl Exact {
    /// Where the rows the record at `offset` added to `shard`'s buffer (which held `rows_before`
    /// rows) belong; starts the buffer's batch when it was empty.
    fn place(&mut self, shard: usize, buffer: &mut OpenBuffer, rows_before: u32, offset: i64) -> Place {
        let target = match self.replay.cut(shard, offset) {
            Cut::Durable => return Place::Drop,
            Cut::Recorded(first, last) => Some((first, last)),
            Cut::New => None,
        };
        if rows_before == 0 {
            buffer.recorded = target;
            buffer.opened_at = Some(Instant::now());
            Place::Keep
        } else if buffer.recorded == target {
            Place::Keep
        } else {
            Place::Carry(target)
        }
    }
}

struct Carry {
    shard: usize,
    bytes: Vec<u8>,
    rows: u32,
    offset: i64,
    recorded: Option<(i64, i64)>,
}

/// Where the rows a record just added to one shard's buffer go, under exactly-once.
enum Place {
    /// They stay in the buffer (the batch they belong to is the open one).
    Keep,
    /// They are durable already: removed.
    Drop,
    /// They belong to the next batch (`recorded` or a new one): moved out, the buffer is sealed.
    Carry(Option<(i64, i64)>),
}

struct DrainRequest {
    id: u64,
    remaining: usize,
    results: Vec<(i32, Option<i64>)>,
    reply: Option<Sender<FinalOffsets>>,
}

/// The id of the drain a finite lane starts for itself when it has finished.
const SELF_DRAIN: u64 = 0;

/// Counters kept locally and added to the shared metrics once per loop iteration.
#[derive(Default)]
struct Counts {
    records_in: u64,
    filtered: u64,
    errors: u64,
    tombstones: u64,
    dead_letters: u64,
}

enum Poll {
    Record,
    Idle,
    Stop,
    /// The record is held until a dependency is available again: pause the lane.
    Wait,
}

pub(crate) struct PipelineThread<C: Chain> {
    index: usize,
    chain: C,
    lanes: Vec<LaneState>,
    control: Receiver<Control>,
    acks: Receiver<Ack>,
    ack_tx: Sender<Ack>,
    queues: Vec<Sender<Chunk>>,
    shared: Arc<Shared>,
    drains: Vec<DrainRequest>,
    next_drain: u64,
    snapshot: Vec<(usize, u32)>,
    counts: Counts,
}

impl<C: Chain> PipelineThread<C> {
    pub(crate) fn new(
        index: usize,
        chain: C,
        control: Receiver<Control>,
        (ack_tx, acks): (Sender<Ack>, Receiver<Ack>),
        queues: Vec<Sender<Chunk>>,
        shared: Arc<Shared>,
    ) -> Self {
        PipelineThread {
            index,
            chain,
            lanes: Vec::new(),
            control,
            acks,
            ack_tx,
            queues,
            shared,
            drains: Vec::new(),
            next_drain: SELF_DRAIN + 1,
            snapshot: Vec::new(),
            counts: Counts::default(),
        }
    }

    /// The thread's loop. It never blocks on a send (Invariant 1); the only wait is the short idle
    /// `select!` on the ack and control channels.
    pub(crate) fn run(mut self) {
        let mut last = Instant::now();
        loop {
            let now = Instant::now();
            let gap = now.duration_since(last).as_nanos() as u64;
            self.shared.max_loop_gap_ns.fetch_max(gap, Ordering::Relaxed);
            last = now;

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
            for i in 0..self.lanes.len() {
                busy |= self.step_lane(i, high, stopped);
            }
            self.finish_drains();
            self.store_offsets();
            self.flush_counts();

            if !busy {
                crossbeam_channel::select! {
                    recv(self.acks) -> ack => if let Ok(ack) = ack { self.handle_ack(ack) },
                    recv(self.control) -> msg => match msg {
                        Ok(msg) => if self.handle_control(msg) { return self.exit() },
                        Err(_) => return self.exit(),
                    },
                    default(IDLE_WAIT) => {}
                }
            }
        }
    }

    /// Returns true when the thread must exit.
    fn handle_control(&mut self, msg: Control) -> bool {
        match msg {
            Control::AddLane { lane_id, mut lane, replay, fence } => {
                let partition = lane.partition();
                tracing::info!(thread = self.index, partition, lane_id, "lane added");
                let mut checkpointer = Checkpointer::default();
                let exact = fence.map(|fence| {
                    let replay =
                        replay.unwrap_or_else(|| Replay::new(self.queues.len(), None, &Recorded::default(), 0));
                    // A replay may start below the committed offset; storing below it again would
                    // only widen the next replay. Stored through the lane too (it is committed
                    // already), so the source counts a drain's abandoned records from there.
                    if let Some(watermark) = replay.watermark {
                        if let Err(error) = lane.store_offset(watermark + 1) {
                            tracing::warn!(partition, %error, "storing the committed offset again failed");
                        }
                        checkpointer.mark_stored(watermark + 1);
                    }
                    Exact { fence, replay, carry: Vec::new() }
                });
                let lag_seconds = self.shared.metrics.lag_seconds.with_label_values(&[partition.to_string().as_str()]);
                self.lanes.push(LaneState {
                    id: lane_id,
                    partition,
                    lane,
                    buffers: (0..self.queues.len()).map(|_| OpenBuffer::default()).collect(),
                    round_robin: 0,
                    checkpointer,
                    pending: VecDeque::new(),
                    paused_since: None,
                    drain: None,
                    drain_flushed: false,
                    failed: false,
                    newest_timestamp_ms: None,
                    lag_seconds,
                    exact,
                    held: None,
                });
                false
            }
            Control::RemoveLanes { partitions, deadline, reply } => {
                let id = self.next_drain;
                self.next_drain += 1;
                let mut request = DrainRequest { id, remaining: 0, results: Vec::new(), reply: Some(reply) };
                for &partition in &partitions {
                    match self
                        .lanes
                        .iter_mut()
                        .find(|l| l.partition == partition && l.drain.is_none_or(|(d, _)| d == SELF_DRAIN))
                    {
                        Some(lane) => {
                            lane.drain = Some((id, deadline));
                            request.remaining += 1;
                        }
                        None => request.results.push((partition, None)),
                    }
                }
                tracing::info!(thread = self.index, ?partitions, lanes = request.remaining, "draining lanes");
                self.drains.push(request);
                self.finish_drains();
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
            tracing::error!(partition = lane.partition, first_offset, "ack for an offset that was never registered");
        }
    }

    /// One iteration for one lane. Returns true when the lane did work and may have more.
    fn step_lane(&mut self, i: usize, high: bool, stopped: bool) -> bool {
        if !self.lanes[i].pending.is_empty() {
            self.send_pending(i);
        }
        if self.lanes[i].drain.is_some() {
            if !self.lanes[i].drain_flushed {
                if self.lanes[i].exact.is_some() {
                    self.flush_exact(i);
                } else {
                    // Once per drain: seal every open buffer as urgent, or send an empty urgent
                    // marker, so every shard worker writes what it holds of this lane without
                    // lingering.
                    for shard in 0..self.queues.len() {
                        self.seal(i, shard, true);
                    }
                }
                self.lanes[i].drain_flushed = true;
            }
            return false;
        }
        if self.lanes[i].failed || stopped {
            return false;
        }
        if self.lanes[i].exact.is_some() && !self.lanes[i].pending.is_empty() {
            // Holding a batch its shard queue rejected (see `seal`).
            return false;
        }
        if let Some(next_try) = self.lanes[i].held.as_ref().map(|h| h.next_try) {
            // The lane stays paused at the source while its held record waits for its next try;
            // exactly-once batches of the records before it still end at their linger.
            if Instant::now() < next_try {
                if self.lanes[i].exact.is_some() {
                    self.seal_lingering(i);
                }
                return false;
            }
            match self.poll_one(i) {
                Poll::Record => {
                    if self.after_record(i) {
                        return false;
                    }
                }
                Poll::Wait | Poll::Stop | Poll::Idle => return false,
            }
            // Processed at last: the lane resumes on a later turn, once the pause controller agrees.
        }
        if let Some(since) = self.lanes[i].paused_since {
            let lane = &self.lanes[i];
            let ready = lane.pending.is_empty()
                && self.shared.budget.below_low()
                && since.elapsed() >= self.shared.config.backpressure.min_pause;
            if !ready {
                return false;
            }
            self.resume_lane(i);
        }
        if high {
            // The budget is at its high watermark: every producing lane pauses (Invariant 6).
            self.pause_lane(i);
            return false;
        }
        let exact = self.lanes[i].exact.is_some();
        if exact {
            self.seal_lingering(i);
            if !self.lanes[i].pending.is_empty() {
                return false;
            }
        }
        for _ in 0..BURST {
            match self.poll_one(i) {
                Poll::Record => {
                    if self.after_record(i) {
                        return false;
                    }
                }
                Poll::Wait => {
                    // The rows of the records before the held one are written now rather than
                    // after the hold: their offsets can then be stored meanwhile.
                    if self.lanes[i].exact.is_some() {
                        self.seal_lingering(i);
                    } else {
                        for shard in 0..self.queues.len() {
                            self.seal(i, shard, false);
                        }
                    }
                    self.pause_lane(i);
                    return false;
                }
                Poll::Idle => {
                    let lane = &mut self.lanes[i];
                    if lane.lane.is_finished() {
                        // A finished lane drains itself: its last chunks are written at once rather
                        // than after the batch linger, then its final offset is stored.
                        tracing::info!(partition = lane.partition, "lane finished; draining it");
                        lane.drain = Some((SELF_DRAIN, Instant::now() + Duration::from_secs(365 * 24 * 3600)));
                        self.update_lag(i);
                        return false;
                    }
                    // Exactly-once batches end at the batch limits or the linger, not whenever
                    // the source has nothing at hand: every cut costs a ledger row and an insert.
                    for shard in 0..if exact { 0 } else { self.queues.len() } {
                        if self.lanes[i].paused_since.is_some() {
                            break;
                        }
                        self.seal(i, shard, false);
                    }
                    self.update_lag(i);
                    return false;
                }
                Poll::Stop => return false,
            }
        }
        self.update_lag(i);
        true
    }

    /// What follows each processed record: exactly-once cuts its batches; at-least-once seals the
    /// buffers that reached the chunk target. Returns true when the lane must stop for now
    /// (paused, failed, or holding a batch).
    fn after_record(&mut self, i: usize) -> bool {
        if self.lanes[i].exact.is_some() {
            self.cut_exact(i);
            let lane = &self.lanes[i];
            return lane.paused_since.is_some() || lane.failed || !lane.pending.is_empty();
        }
        let target = self.shared.config.chunk_target_bytes;
        for shard in 0..self.queues.len() {
            if self.lanes[i].buffers[shard].bytes.len() >= target {
                self.seal(i, shard, false);
                if self.lanes[i].paused_since.is_some() {
                    break;
                }
            }
        }
        self.lanes[i].paused_since.is_some() || self.lanes[i].failed
    }

    /// Takes one record from the lane (or the record it holds) and runs it through the chain.
    fn poll_one(&mut self, i: usize) -> Poll {
        let PipelineThread { lanes, chain, shared, snapshot, counts, ack_tx, .. } = self;
        let LaneState {
            id,
            lane,
            buffers,
            round_robin,
            checkpointer,
            failed,
            newest_timestamp_ms,
            partition,
            exact,
            held: held_slot,
            ..
        } = &mut lanes[i];
        let held = held_slot.take();
        let record = match &held {
            Some(held) => held.record(),
            None => match lane.next() {
                None => return Poll::Idle,
                Some(Err(error)) if error.kind == SourceErrorKind::Transient => {
                    tracing::warn!(partition = *partition, %error, "transient source error");
                    return Poll::Idle;
                }
                Some(Err(error)) => {
                    *failed = true;
                    shared.fatal.report(format!("partition {partition}: {error}"));
                    return Poll::Stop;
                }
                Some(Ok(record)) => record,
            },
        };
        if held.is_none() {
            counts.records_in += 1;
        }
        let offset = record.offset;
        if record.timestamp_ms.is_some() {
            *newest_timestamp_ms = record.timestamp_ms;
        }
        if record.payload.is_none() {
            match shared.config.tombstones {
                TombstonePolicy::Skip => {
                    counts.tombstones += 1;
                    checkpointer.processed(offset);
                    return Poll::Record;
                }
                TombstonePolicy::Fail => {
                    *failed = true;
                    shared.fatal.report(format!("tombstone at partition {partition} offset {offset}"));
                    return Poll::Stop;
                }
            }
        }

        snapshot.clear();
        snapshot.extend(buffers.iter().map(|b| (b.bytes.len(), b.rows)));
        // Round-robin follows the offset, not a per-lane counter, so a replay puts every row on
        // the shard it went to before (exactly-once re-cuts batches per shard).
        *round_robin = offset as usize;
        let mut out = RowOut { buffers, round_robin, rows: 0 };
        let result = chain.process(&record, &mut out);
        let rows = out.rows;
        match result {
            Ok(()) => {
                if rows == 0 {
                    counts.filtered += 1;
                }
                let track = shared.track_row_sources;
                for (shard, (buffer, &(len, rows_before))) in buffers.iter_mut().zip(snapshot.iter()).enumerate() {
                    if buffer.rows > rows_before {
                        if let Some(exact) = exact.as_mut() {
                            match exact.place(shard, buffer, rows_before, offset) {
                                Place::Keep => {}
                                Place::Drop => {
                                    buffer.bytes.truncate(len);
                                    buffer.rows = rows_before;
                                    continue;
                                }
                                Place::Carry(recorded) => {
                                    let bytes = buffer.bytes.split_off(len);
                                    let rows = buffer.rows - rows_before;
                                    buffer.rows = rows_before;
                                    exact.carry.push(Carry { shard, bytes, rows, offset, recorded });
                                    continue;
                                }
                            }
                        }
                        if rows_before == 0 {
                            buffer.first_offset = offset;
                            checkpointer.register(offset);
                        }
                        buffer.last_offset = offset;
                        if track {
                            let added = (buffer.rows - rows_before) as usize;
                            buffer.row_offsets.extend(std::iter::repeat_n(offset, added));
                        }
                    }
                }
                checkpointer.processed(offset);
                Poll::Record
            }
            Err(mut error) => {
                // Rows pushed before the error are discarded so the record leaves nothing behind.
                for (buffer, &(len, rows_before)) in buffers.iter_mut().zip(snapshot.iter()) {
                    buffer.bytes.truncate(len);
                    buffer.rows = rows_before;
                }
                if error.kind == RecordErrorKind::Unavailable {
                    // Not the record's fault: held and tried again until the timeout (see `Held`).
                    let now = Instant::now();
                    let timeout = shared.config.unavailable_timeout;
                    let since = held.as_ref().map_or(now, |h| h.since);
                    if now.duration_since(since) < timeout {
                        let fresh = held.is_none().then(|| Held::of(&record, now));
                        let mut waiting = match held {
                            Some(held) => held,
                            None => fresh.expect("a fresh hold for a record taken from the lane"),
                        };
                        waiting.failed_again(now, timeout);
                        tracing::warn!(
                            partition = *partition,
                            offset,
                            attempt = waiting.attempts,
                            retry_in_ms = waiting.next_try.saturating_duration_since(now).as_millis() as u64,
                            %error,
                            "the record needs something unavailable; holding it with its lane paused"
                        );
                        shared.metrics.unavailable_retries.inc();
                        *held_slot = Some(waiting);
                        return Poll::Wait;
                    }
                    error = RecordError::new(
                        RecordErrorKind::Decode,
                        format!("{} (still failing after {timeout:?}: format.avro.registry_timeout)", error.message),
                    );
                }
                match (shared.config.error_policy, shared.dead_letter.as_ref()) {
                    (ErrorPolicy::Skip, _) => {
                        tracing::debug!(partition = *partition, offset, %error, "record skipped");
                        counts.errors += 1;
                        checkpointer.processed(offset);
                        Poll::Record
                    }
                    (ErrorPolicy::DeadLetter, Some(dead_letter)) => {
                        tracing::debug!(partition = *partition, offset, %error, "record sent to the dead-letter sink");
                        counts.dead_letters += 1;
                        checkpointer.register(offset);
                        checkpointer.processed(offset);
                        let ack = DeadLetterAck::for_lane(ack_tx.clone(), shared.fatal.clone(), *id, offset);
                        dead_letter.send(DeadRecord::from_record(&record, error.to_string()), ack);
                        Poll::Record
                    }
                    (ErrorPolicy::Fail, _) | (ErrorPolicy::DeadLetter, None) => {
                        *failed = true;
                        shared.fatal.report(format!("record at partition {partition} offset {offset}: {error}"));
                        Poll::Stop
                    }
                }
            }
        }
    }

    /// Seals the lane's open buffer for `shard` into a chunk, counts it in the budget and offers it to
    /// the shard queue. A rejection keeps the chunk as the lane's resume point and pauses the lane
    /// and the other lanes of this thread whose next chunk goes to that shard (Invariant 1).
    ///
    /// An urgent seal of an empty buffer sends an empty marker chunk: the shard worker writes its
    /// open batch at once and drops the marker.
    fn seal(&mut self, i: usize, shard: usize, urgent: bool) {
        let target = self.shared.config.chunk_target_bytes;
        let lane = &mut self.lanes[i];
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
                thread: self.index,
                lane_id: lane.id,
                partition: lane.partition,
                first_offset: buffer.first_offset,
                last_offset: buffer.last_offset,
            },
            shard,
            urgent,
            bytes,
            row_offsets: std::mem::take(&mut buffer.row_offsets),
            recorded: buffer.recorded.take(),
            fence: lane.exact.as_ref().map(|e| e.fence.clone()),
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
        if rejected && lane.exact.is_some() {
            // Exactly-once: every chunk is a whole batch, so a full queue is the normal state of a
            // lane that outruns its shard (a replay of many small recorded batches above all). The
            // lane holds the batch and is not polled until the queue takes it (`step_lane`), but is
            // not paused at the source: a pause would cost `min_pause` and a refetch per batch, and
            // librdkafka's per-partition queue cap already bounds what arrives meanwhile.
            tracing::trace!(partition = lane.partition, shard, "shard queue full; holding the batch");
        } else if rejected {
            tracing::debug!(partition = lane.partition, shard, "shard queue full; pausing");
            self.pause_lane(i);
            for j in 0..self.lanes.len() {
                if j != i && self.lanes[j].drain.is_none() && self.lanes[j].buffers[shard].rows > 0 {
                    self.pause_lane(j);
                }
            }
        }
        if above_high {
            self.pause_lane(i);
        }
    }

    /// Exactly-once, after each record: starts the next batch with the rows the record carried
    /// over (sealing the buffer they follow), then seals every buffer whose batch is complete: a
    /// recorded span whose last record was processed, or a new batch that reached the batch limits
    /// or that a recorded span starts right after.
    fn cut_exact(&mut self, i: usize) {
        let carried = match self.lanes[i].exact.as_mut() {
            Some(exact) => std::mem::take(&mut exact.carry),
            None => return,
        };
        for carry in carried {
            self.seal(i, carry.shard, false);
            let lane = &mut self.lanes[i];
            let buffer = &mut lane.buffers[carry.shard];
            buffer.bytes.extend_from_slice(&carry.bytes);
            buffer.rows = carry.rows;
            buffer.first_offset = carry.offset;
            buffer.last_offset = carry.offset;
            buffer.recorded = carry.recorded;
            buffer.opened_at = Some(Instant::now());
            if self.shared.track_row_sources {
                buffer.row_offsets.extend(std::iter::repeat_n(carry.offset, carry.rows as usize));
            }
            lane.checkpointer.register(carry.offset);
        }
        let Some(offset) = self.lanes[i].checkpointer.processed_through() else { return };
        let limits = self.shared.config.batch;
        for shard in 0..self.queues.len() {
            let LaneState { buffers, exact, .. } = &mut self.lanes[i];
            let buffer = &buffers[shard];
            if buffer.rows == 0 {
                continue;
            }
            let complete = match buffer.recorded {
                Some((_, last)) => offset >= last,
                None => {
                    buffer.bytes.len() as u64 >= limits.max_bytes
                        || u64::from(buffer.rows) >= limits.max_rows
                        || exact
                            .as_mut()
                            .and_then(|e| e.replay.next_first(shard, offset + 1))
                            .is_some_and(|first| first <= offset + 1)
                }
            };
            if complete {
                self.seal(i, shard, false);
            }
        }
    }

    /// Exactly-once: seals the new batches whose first row waited `batch.linger`. (Recorded
    /// batches end at their recorded last offset only.)
    fn seal_lingering(&mut self, i: usize) {
        let linger = self.shared.config.batch.linger;
        let now = Instant::now();
        for shard in 0..self.queues.len() {
            let buffer = &self.lanes[i].buffers[shard];
            if buffer.rows > 0
                && buffer.recorded.is_none()
                && buffer.opened_at.is_some_and(|t| now.duration_since(t) >= linger)
            {
                self.seal(i, shard, false);
            }
        }
    }

    /// Exactly-once, at a drain: seals the new batches, and leaves a partly replayed recorded
    /// batch to the next owner. Sealing it short would insert its rows under another span (and
    /// token) than the one an earlier owner may have inserted them under; instead the watermark
    /// stays below its first offset, and the next owner replays it whole. Once the lane is fenced
    /// (its assignment was lost) nothing more is written: every open buffer is left.
    fn flush_exact(&mut self, i: usize) {
        let fenced = self.lanes[i].exact.as_ref().is_some_and(|e| e.fence.is_closed());
        for shard in 0..self.queues.len() {
            let lane = &mut self.lanes[i];
            let buffer = &mut lane.buffers[shard];
            if buffer.rows == 0 {
                continue;
            }
            let recorded = buffer.recorded.take();
            match recorded.or(fenced.then_some((buffer.first_offset, buffer.last_offset))) {
                Some((first, last)) => {
                    tracing::info!(
                        partition = lane.partition,
                        shard,
                        first,
                        last,
                        fenced,
                        "drain: an unfinished batch is left to the next owner"
                    );
                    buffer.bytes.clear();
                    buffer.rows = 0;
                    buffer.row_offsets.clear();
                    buffer.opened_at = None;
                    lane.checkpointer.abandon(buffer.first_offset);
                }
                None => self.seal(i, shard, true),
            }
        }
    }

    /// Offers the lane's rejected chunks again, in order, without blocking.
    fn send_pending(&mut self, i: usize) {
        let lane = &mut self.lanes[i];
        while let Some(chunk) = lane.pending.pop_front() {
            let shard = chunk.shard;
            match self.queues[shard].try_send(chunk) {
                Ok(()) => {}
                Err(TrySendError::Full(chunk)) => {
                    lane.pending.push_front(chunk);
                    return;
                }
                Err(TrySendError::Disconnected(chunk)) => {
                    self.shared.budget.release(chunk.held_bytes());
                    self.shared.fatal.report(format!("the worker of shard {shard} is gone"));
                }
            }
        }
    }

    fn pause_lane(&mut self, i: usize) {
        let lane = &mut self.lanes[i];
        if lane.paused_since.is_none() {
            lane.lane.pause();
            lane.paused_since = Some(Instant::now());
            self.shared.metrics.pause_events.inc();
            self.shared.paused_lanes.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn resume_lane(&mut self, i: usize) {
        let lane = &mut self.lanes[i];
        if lane.paused_since.take().is_some() {
            lane.lane.resume();
            self.shared.paused_lanes.fetch_sub(1, Ordering::AcqRel);
        }
    }

    fn update_lag(&mut self, i: usize) {
        let lane = &self.lanes[i];
        if let Some(ts) = lane.newest_timestamp_ms {
            let now_ms =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
            lane.lag_seconds.set((now_ms - ts).max(0) as f64 / 1000.0);
        }
    }

    /// Finalizes the draining lanes that are done or past their deadline, and answers the requests
    /// whose lanes are all finalized.
    fn finish_drains(&mut self) {
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
                    partition = lane.partition,
                    "drain deadline passed with unacknowledged data; storing the safe offset"
                );
            }
            let lane = self.remove_lane(i);
            let offset = lane.checkpointer.stored();
            tracing::info!(partition = lane.partition, next_offset = ?offset, complete = done, "lane drained");
            if let Some(request) = self.drains.iter_mut().find(|r| r.id == drain) {
                request.results.push((lane.partition, offset));
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
    fn remove_lane(&mut self, i: usize) -> LaneState {
        self.store_offset(i);
        let lane = self.lanes.swap_remove(i);
        if let Some(exact) = &lane.exact {
            // From here on no write task records a span of this lane (see `Fence`).
            let recording = exact.fence.close();
            if recording > 0 {
                tracing::info!(
                    partition = lane.partition,
                    recording,
                    "the partition is handed over while batch spans are being recorded; those batches will not be \
                     inserted by this member"
                );
            }
        }
        let unsent: u64 = lane.pending.iter().map(Chunk::held_bytes).sum();
        self.shared.budget.release(unsent);
        if lane.paused_since.is_some() {
            self.shared.paused_lanes.fetch_sub(1, Ordering::AcqRel);
        }
        self.shared.lane_counts[self.index].fetch_sub(1, Ordering::AcqRel);
        // A partition this member no longer owns has no lag here; a stale series would show
        // a lag that never changes on every member it ever passed through.
        let partition = lane.partition.to_string();
        let _ = self.shared.metrics.lag_records.remove_label_values(&[partition.as_str()]);
        let _ = self.shared.metrics.lag_seconds.remove_label_values(&[partition.as_str()]);
        lane
    }

    fn store_offsets(&mut self) {
        for i in 0..self.lanes.len() {
            self.store_offset(i);
        }
    }

    fn store_offset(&mut self, i: usize) {
        let lane = &mut self.lanes[i];
        if let Some(next) = lane.checkpointer.offset_to_store() {
            match lane.lane.store_offset(next) {
                Ok(()) => lane.checkpointer.mark_stored(next),
                Err(error) => {
                    tracing::warn!(partition = lane.partition, next_offset = next, %error, "storing the offset failed")
                }
            }
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
            tracing::info!(partition = lane.partition, next_offset = ?lane.checkpointer.stored(), "lane closed");
        }
        for request in &mut self.drains {
            if let Some(reply) = request.reply.take() {
                let _ = reply.send(std::mem::take(&mut request.results));
            }
        }
        tracing::debug!(thread = self.index, "pipeline thread exits");
    }
}
