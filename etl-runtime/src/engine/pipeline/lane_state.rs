//! A lane as its pipeline thread keeps it (`LaneState`: the source's `Lane` with its open
//! buffers, checkpointer, held chunks and records, pause state and drain state), and the held
//! record (`Held`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::engine::chain::OpenBuffer;
use crate::engine::checkpoint::Checkpointer;
use crate::engine::chunk::Chunk;
use crate::engine::fence::Fence;
use crate::engine::headers::{Headers, OwnedHeader};
use crate::engine::lane::{Lane, LaneKey, Record};
use crate::engine::shared::Shared;
use crate::engine::stall::{Sample, StallWatch, Verdict};

/// The first wait before a record whose dependency is unavailable is run through the chain again;
/// it doubles with every failure up to [`UNAVAILABLE_MAX_BACKOFF`].
const UNAVAILABLE_FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// The longest wait between two tries of a held record.
const UNAVAILABLE_MAX_BACKOFF: Duration = Duration::from_secs(5);

pub(super) struct LaneState {
    pub(super) id: u64,
    pub(super) key: LaneKey,
    pub(super) lane: Box<dyn Lane>,
    pub(super) buffers: Vec<OpenBuffer>,
    pub(super) round_robin: usize,
    pub(super) checkpointer: Checkpointer,
    /// Sealed chunks a shard queue rejected (or that queued up behind one), already counted in the
    /// budget: the exact resume point of the lane, sent before its next record is taken.
    pub(super) pending: VecDeque<Chunk>,
    pub(super) paused_since: Option<Instant>,
    /// Under the operator's pause, the lane has sealed what it read (once per pause).
    pub(super) sealed_for_operator: bool,
    /// Since when `pending` has not emptied (a delivery that holds lanes on a full queue).
    pub(super) held_since: Option<Instant>,
    /// The drain this lane belongs to, and its deadline.
    pub(super) drain: Option<(u64, Instant)>,
    /// The drain has flushed the open buffers.
    pub(super) drain_flushed: bool,
    /// A record failed under `errors.policy: fail`; the lane is no longer polled.
    pub(super) failed: bool,
    pub(super) newest_timestamp_ms: Option<i64>,
    pub(super) lag_seconds: prometheus::Gauge,
    /// `etl_checkpoint_watermark_age_seconds` of the lane's partition.
    pub(super) watermark_age: prometheus::Gauge,
    /// The hand-over fence the handle gave the lane, carried by its chunks (`None` unless the
    /// pipeline runs exactly-once).
    pub(super) fence: Option<Arc<Fence>>,
    /// A record the chain could not process because something it needs is unavailable: the lane
    /// is paused and the record is tried again (see [`Held`]).
    pub(super) held: Option<Held>,
    /// The lane's last poll found nothing to take (the stall watchdog's `starved`).
    pub(super) starved: bool,
    pub(super) stall: StallWatch,
}

impl LaneState {
    pub(super) fn new(
        id: u64,
        lane: Box<dyn Lane>,
        shards: usize,
        checkpointer: Checkpointer,
        fence: Option<Arc<Fence>>,
        shared: &Shared,
    ) -> LaneState {
        let key = lane.key();
        let partition_label = key.partition.to_string();
        let labels = [&*key.topic, partition_label.as_str()];
        let lag_seconds = shared.metrics.lag_seconds.with_label_values(&labels);
        let watermark_age = shared.metrics.watermark_age.with_label_values(&labels);
        LaneState {
            id,
            key,
            lane,
            buffers: (0..shards).map(|_| OpenBuffer::default()).collect(),
            round_robin: 0,
            checkpointer,
            pending: VecDeque::new(),
            held_since: None,
            paused_since: None,
            sealed_for_operator: false,
            drain: None,
            drain_flushed: false,
            failed: false,
            newest_timestamp_ms: None,
            lag_seconds,
            watermark_age,
            fence,
            held: None,
            starved: false,
            stall: StallWatch::new(shared.config.stall_timeout),
        }
    }

    /// Pauses the lane at the source, once.
    pub(super) fn pause(&mut self, shared: &Shared) {
        if self.paused_since.is_none() {
            self.lane.pause();
            self.paused_since = Some(Instant::now());
            shared.metrics.pause_events.inc();
            shared.paused_lanes.fetch_add(1, Ordering::AcqRel);
        }
    }

    pub(super) fn resume(&mut self, shared: &Shared) {
        if self.paused_since.take().is_some() {
            self.sealed_for_operator = false;
            self.lane.resume();
            shared.paused_lanes.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Sets `etl_source_lag_seconds` from the newest record's timestamp.
    pub(super) fn update_lag(&self) {
        if let Some(ts) = self.newest_timestamp_ms {
            let now_ms =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
            self.lag_seconds.set((now_ms - ts).max(0) as f64 / 1000.0);
        }
    }

    /// Sets the gauges that must move while the lane does not: a paused or held lane takes no
    /// turns, and that is when its checkpoint stands still.
    pub(super) fn report(&self, now: Instant) {
        self.watermark_age.set(self.checkpointer.standing_still(now).as_secs_f64());
        self.update_lag();
    }

    /// Nothing on the pipeline's side holds the lane back: it is polled on every turn.
    fn is_free(&self) -> bool {
        self.paused_since.is_none()
            && self.pending.is_empty()
            && self.held.is_none()
            && self.drain.is_none()
            && !self.failed
    }

    /// The stall watchdog's sample of the lane at `now` (Invariant 9): recovers a lane found
    /// stalled, and stops the pipeline when it stalls again after that.
    pub(super) fn watch_stall(&mut self, now: Instant, shared: &Shared) {
        let backlog = self.lane.backlog();
        let sample = Sample { free: self.is_free(), backlog, starved: self.starved };
        let timeout = shared.config.stall_timeout;
        match self.stall.observe(now, sample) {
            Verdict::Fine => {}
            Verdict::Stalled => {
                shared.stalled_lanes.fetch_add(1, Ordering::AcqRel);
                shared.metrics.stall_recoveries.inc();
                tracing::warn!(
                    topic = %self.key.topic, partition = self.key.partition,
                    ?backlog,
                    stall_timeout = ?timeout,
                    fetch = %self.lane.describe_fetch(),
                    "partition stalled: its source holds records and delivered none for stall_timeout while nothing \
                     held the lane back; restarting its fetch at the next offset"
                );
                if let Err(error) = self.lane.refetch() {
                    tracing::error!(topic = %self.key.topic, partition = self.key.partition, %error, "restarting the fetch of a stalled partition failed");
                }
            }
            Verdict::StillStalled => {
                let message = format!(
                    "partition {} stalled again for {timeout:?} after its fetch was restarted ({backlog:?}; {}); \
                     stopping so that the orchestrator starts the pipeline afresh",
                    self.key,
                    self.lane.describe_fetch()
                );
                tracing::error!(topic = %self.key.topic, partition = self.key.partition, "{message}");
                shared.fatal.report(message);
            }
            Verdict::Recovered => {
                shared.stalled_lanes.fetch_sub(1, Ordering::AcqRel);
                tracing::info!(
                    topic = %self.key.topic, partition = self.key.partition,
                    ?backlog,
                    "partition no longer stalled: its source delivers again"
                );
            }
        }
    }

    /// Stores the watermark through the lane when it moved (Invariant 3).
    pub(super) fn store_offset(&mut self) {
        if let Some(next) = self.checkpointer.offset_to_store() {
            match self.lane.store_offset(next) {
                Ok(()) => self.checkpointer.mark_stored(next),
                Err(error) => {
                    tracing::warn!(topic = %self.key.topic, partition = self.key.partition, next_offset = next, %error, "storing the offset failed")
                }
            }
        }
    }
}

/// A record held because a dependency it needs is unavailable (a schema registry lookup failed).
/// Skipping it would lose a good record and stopping would crash-loop on a registry blip, so the
/// lane pauses at the source (the consumer keeps polling) and the record is run through the
/// chain again with capped exponential backoff; once `unavailable_timeout` has passed since the
/// first failure it becomes a record error under `errors.policy`. Nothing of it is registered
/// with the checkpointer until it is processed, so no offset passes it meanwhile.
pub(super) struct Held {
    payload: Option<Vec<u8>>,
    key: Option<Vec<u8>>,
    topic: Box<str>,
    partition: i32,
    offset: i64,
    timestamp_ms: Option<i64>,
    headers: Vec<OwnedHeader>,
    pub(super) since: Instant,
    pub(super) next_try: Instant,
    backoff: Duration,
    pub(super) attempts: u32,
}

impl Held {
    pub(super) fn of(record: &Record<'_>, now: Instant) -> Held {
        Held {
            payload: record.payload.map(<[u8]>::to_vec),
            key: record.key.map(<[u8]>::to_vec),
            topic: record.topic.into(),
            partition: record.partition,
            offset: record.offset,
            timestamp_ms: record.timestamp_ms,
            headers: record.headers.to_owned_headers(),
            since: now,
            next_try: now,
            backoff: Duration::ZERO,
            attempts: 0,
        }
    }

    pub(super) fn record(&self) -> Record<'_> {
        Record {
            payload: self.payload.as_deref(),
            key: self.key.as_deref(),
            topic: &self.topic,
            partition: self.partition,
            offset: self.offset,
            timestamp_ms: self.timestamp_ms,
            headers: Headers::owned(&self.headers),
        }
    }

    /// Schedules the next try after another failure, never later than the deadline.
    pub(super) fn failed_again(&mut self, now: Instant, timeout: Duration) {
        self.attempts += 1;
        self.backoff = (self.backoff * 2).clamp(UNAVAILABLE_FIRST_BACKOFF, UNAVAILABLE_MAX_BACKOFF);
        let deadline = self.since + timeout;
        self.next_try = (now + self.backoff).min(deadline.max(now));
    }
}
