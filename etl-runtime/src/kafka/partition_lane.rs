//! One assigned Kafka partition as a lane (`KafkaLane`): its split queue, its pause state at the
//! consumer, and the offsets it stores, with how far it got (`LaneProgress`).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerContext};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use crate::engine::errors::SourceError;
use crate::engine::lane::{Backlog, Lane, Record};
use crate::kafka::batches::PartitionBatches;

/// How far a lane got, shared with the rebalance callback so a revocation can tell how many handed-out
/// records a drain timeout abandoned.
#[derive(Debug)]
pub(crate) struct LaneProgress {
    /// The offset of the first record handed out, or -1.
    first: AtomicI64,
    /// The offset after the last record handed out, or -1.
    next: AtomicI64,
    /// The last stored next offset, or -1.
    stored: AtomicI64,
    /// What librdkafka's last statistics said of the partition's fetch (the source thread writes it
    /// every `statistics_interval`; the stall watchdog reads it once a second).
    fetch: Mutex<Option<FetchStats>>,
}

/// The partition's fetch as librdkafka's statistics describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FetchStats {
    /// `fetch_state`: `active` when librdkafka fetches it; `offset-query`, `offset-wait`, `none`,
    /// `stopped` otherwise.
    pub(crate) state: String,
    /// `fetchq_cnt`: messages in its queue.
    pub(crate) queued: i64,
    /// `next_offset`: where librdkafka fetches next.
    pub(crate) next_fetch: i64,
    /// Whether the partition's leader broker is connected (`state` `UP`); `None` when the
    /// statistics do not name it.
    pub(crate) leader_up: Option<bool>,
}

impl LaneProgress {
    pub(crate) fn new() -> Self {
        LaneProgress {
            first: AtomicI64::new(-1),
            next: AtomicI64::new(-1),
            stored: AtomicI64::new(-1),
            fetch: Mutex::new(None),
        }
    }

    /// The offset after the last record handed out, if any.
    fn next(&self) -> Option<i64> {
        let next = self.next.load(Ordering::Acquire);
        (next >= 0).then_some(next)
    }

    /// Records what librdkafka's statistics say of the partition's fetch.
    pub(crate) fn set_fetch(&self, stats: FetchStats) {
        *self.fetch.lock().expect("fetch stats lock") = Some(stats);
    }

    fn fetch(&self) -> Option<FetchStats> {
        self.fetch.lock().expect("fetch stats lock").clone()
    }

    fn handed(&self, offset: i64) {
        if self.first.load(Ordering::Relaxed) < 0 {
            self.first.store(offset, Ordering::Relaxed);
        }
        self.next.store(offset + 1, Ordering::Release);
    }

    /// Records handed out to the pipeline but not covered by the last stored offset: after a drain,
    /// what its timeout abandoned.
    pub(crate) fn abandoned(&self) -> i64 {
        let next = self.next.load(Ordering::Acquire);
        if next < 0 {
            return 0;
        }
        let stored = self.stored.load(Ordering::Acquire);
        let base = if stored >= 0 { stored } else { self.first.load(Ordering::Relaxed) };
        (next - base).max(0)
    }

    /// The last stored next offset, if any.
    pub(crate) fn stored(&self) -> Option<i64> {
        let stored = self.stored.load(Ordering::Acquire);
        (stored >= 0).then_some(stored)
    }
}

/// A lane over one partition's split queue, read in batches ([`PartitionBatches`]): a record
/// borrows its message in librdkafka's memory, which the lane destroys when it takes the next one.
///
/// Generic over the consumer's context so that the lane does not depend on the source's context
/// (which creates lanes); the source uses one context type.
pub(crate) struct KafkaLane<C: ConsumerContext + 'static> {
    batches: PartitionBatches<C>,
    consumer: Arc<BaseConsumer<C>>,
    /// The one-partition list used for pause and resume.
    this: TopicPartitionList,
    /// The one-partition list used to store offsets; its offset is set before each store.
    store: TopicPartitionList,
    topic: Arc<str>,
    /// How pause and resume reach the consumer; see [`Start`].
    start: Start,
    progress: Arc<LaneProgress>,
    /// Where the assignment positioned the partition when it named an offset (exactly-once's
    /// replay start); `None` when librdkafka looks up the committed offset.
    assigned_at: Option<i64>,
    /// `dlq replay`: the offset the lane stops before, and whether it got there.
    stop: Option<(super::replay::LaneStop, bool)>,
    #[cfg(feature = "fault-injection")]
    stall_fault: StallFault,
}

/// Test-only (`fault-injection` builds, as the end-to-end tests make): `ETL_FAULT=stall_fetch:P`
/// makes the lane of partition `P` pause it at the consumer behind the runtime's back once it has
/// handed out a record, as a dropped fetch start or resume would (librdkafka issue #5591), so
/// that nothing more is fetched for it; `stall_fetch_always:P` does it again after every restart
/// of its fetch, so that the stall watchdog's recovery never helps.
#[cfg(feature = "fault-injection")]
#[derive(Debug, Clone, Copy)]
struct StallFault {
    armed: bool,
    always: bool,
}

#[cfg(feature = "fault-injection")]
impl StallFault {
    fn for_partition(partition: i32) -> Self {
        let plan = std::env::var("ETL_FAULT").ok().and_then(|value| {
            let (name, p) = value.split_once(':')?;
            let always = match name {
                "stall_fetch" => false,
                "stall_fetch_always" => true,
                _ => return None,
            };
            (p.parse::<i32>().ok()? == partition).then_some(always)
        });
        StallFault { armed: plan.is_some(), always: plan.unwrap_or(false) }
    }
}

/// A lane's pause state at the consumer, from its assignment to its first message.
///
/// librdkafka orders every pause, resume, seek and fetch start of a partition by a version it
/// takes when the call is made, and silently drops an operation older than the last it served
/// (it answers `__OUTDATED`, which `rd_kafka_pause_partitions` does not report). After an
/// assignment without explicit offsets, its main thread looks up the committed offset and then
/// resumes its own pause and starts the fetch; an application pause or resume made in those few
/// milliseconds from another thread can lose either the application's call or the fetch start,
/// and the partition is then never fetched, without an error or a log line (the stall of one
/// partition seen once in CI; librdkafka issue #5591 reports the same with split queues). So a
/// lane leaves the consumer alone until its first message, which proves the fetch started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// Paused at the consumer before the assignment (exactly-once, whose lanes wait for their
    /// replay plans): the first `next` resumes it unless the runtime paused the lane first (then
    /// its `resume` does).
    PausedAtAssign,
    /// Not paused at the consumer, and no message yet: the runtime's pause and resume are only
    /// recorded (`paused`). Until the runtime resumes a paused lane it does not poll it, so the
    /// partition's prefetch fills its split queue up to `queued.max.messages.kbytes`, which the
    /// memory bound counts for every partition anyway.
    AwaitingFirst { paused: bool },
    /// Pause and resume go to the consumer.
    Running,
}

impl Start {
    // Each returns the pause state to set at the consumer now, if any.

    /// Before each poll.
    fn before_poll(&mut self) -> Option<bool> {
        if *self != Start::PausedAtAssign {
            return None;
        }
        *self = Start::Running;
        Some(false)
    }

    /// A message arrived.
    fn on_message(&mut self) -> Option<bool> {
        match std::mem::replace(self, Start::Running) {
            // The fetch has started: from now on the consumer's pause state is the lane's.
            Start::AwaitingFirst { paused } => paused.then_some(true),
            Start::PausedAtAssign | Start::Running => None,
        }
    }

    /// The runtime paused the lane.
    fn pause(&mut self) -> Option<bool> {
        match *self {
            // From the hand-over on, the runtime alone decides: it paused first, so there is
            // nothing left to resume on the first poll and the partition is already paused at the
            // consumer.
            Start::PausedAtAssign => {
                *self = Start::Running;
                None
            }
            Start::AwaitingFirst { .. } => {
                *self = Start::AwaitingFirst { paused: true };
                None
            }
            Start::Running => Some(true),
        }
    }

    /// The runtime resumed the lane.
    fn resume(&mut self) -> Option<bool> {
        match *self {
            Start::AwaitingFirst { .. } => {
                *self = Start::AwaitingFirst { paused: false };
                None
            }
            Start::PausedAtAssign | Start::Running => {
                *self = Start::Running;
                Some(false)
            }
        }
    }
}

impl<C: ConsumerContext + 'static> KafkaLane<C> {
    pub(crate) fn new(
        consumer: Arc<BaseConsumer<C>>,
        batches: PartitionBatches<C>,
        topic: Arc<str>,
        progress: Arc<LaneProgress>,
        start: Start,
        assigned_at: Option<i64>,
    ) -> Self {
        let partition = batches.partition();
        let mut this = TopicPartitionList::with_capacity(1);
        this.add_partition(&topic, partition);
        let mut store = TopicPartitionList::with_capacity(1);
        store.add_partition(&topic, partition);
        KafkaLane {
            batches,
            consumer,
            this,
            store,
            topic,
            start,
            progress,
            assigned_at,
            stop: None,
            #[cfg(feature = "fault-injection")]
            stall_fault: StallFault::for_partition(partition),
        }
    }

    /// A lane of `dlq replay`: it hands out no record at or above the stop offset, and is
    /// finished once it handed out the one below it (or had nothing to read).
    pub(crate) fn with_stop(mut self, stop: Option<super::replay::LaneStop>) -> Self {
        self.stop = stop.map(|stop| (stop, false));
        self
    }

    /// Whether a replay lane has nothing more to hand out (and if so, says so to the replay).
    fn stopped(&self) -> bool {
        self.stop.as_ref().is_some_and(|(stop, reached)| {
            let stopped = *reached || stop.nothing || self.progress.next().is_some_and(|next| next >= stop.at);
            if stopped {
                stop.reached();
            }
            stopped
        })
    }

    fn set_paused(&self, paused: bool) {
        set_paused(&self.consumer, &self.this, &self.topic, self.partition(), paused);
        if paused {
            return;
        }
        if let Some(offset) = self.batches.rewind() {
            // A fetch error moved librdkafka's restart position past a message not taken yet.
            tracing::warn!(
                topic = %self.topic,
                partition = self.partition(),
                offset,
                "resumed after a fetch error; seeking back to the next offset not read"
            );
            if let Err(error) =
                self.consumer.seek(&self.topic, self.partition(), Offset::Offset(offset), std::time::Duration::ZERO)
            {
                tracing::error!(topic = %self.topic, partition = self.partition(), offset, %error, "seek failed");
            }
        }
    }
}

/// Pauses or resumes the one partition of `this` at the consumer. librdkafka keeps fetching from
/// the application's position on a resume, which is past the batch a lane holds, so the batch
/// stays valid across a pause.
fn set_paused<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    this: &TopicPartitionList,
    topic: &str,
    partition: i32,
    paused: bool,
) {
    let result = if paused { consumer.pause(this) } else { consumer.resume(this) };
    if let Err(error) = result {
        // A partition being revoked can no longer be paused; its lane is about to be dropped.
        tracing::warn!(topic, partition, paused, %error, "pause/resume failed");
    }
}

impl<C: ConsumerContext + 'static> Lane for KafkaLane<C> {
    fn topic(&self) -> &str {
        &self.topic
    }

    fn is_finished(&self) -> bool {
        self.stopped()
    }

    fn partition(&self) -> i32 {
        self.batches.partition()
    }

    fn next(&mut self) -> Option<Result<Record<'_>, SourceError>> {
        if self.stopped() {
            return None;
        }
        if let Some(paused) = self.start.before_poll() {
            self.set_paused(paused);
        }
        let partition = self.partition();
        #[cfg(feature = "fault-injection")]
        if self.stall_fault.armed && self.progress.next().is_some() {
            self.stall_fault.armed = false;
            tracing::warn!(partition, "ETL_FAULT: pausing the partition at the consumer behind the runtime's back");
            set_paused(&self.consumer, &self.this, &self.topic, partition, true);
        }
        let KafkaLane { batches, consumer, this, topic, start, progress, stop, .. } = self;
        let message = match batches.poll()? {
            Ok(message) => message,
            // Only with `enable.partition.eof`, which the source does not set: nothing to hand out.
            Err(RDKafkaErrorCode::PartitionEOF) => return None,
            Err(code) => return Some(Err(lane_error(partition, code))),
        };
        if let Some(paused) = start.on_message() {
            set_paused(consumer, this, topic, partition, paused);
        }
        let offset = message.offset();
        debug_assert_eq!(message.partition(), partition);
        if let Some((stop, reached)) = stop {
            if offset >= stop.at {
                // Written after the replay started (by this replay, among others): not this run's.
                *reached = true;
                return None;
            }
            stop.count_read();
        }
        progress.handed(offset);
        Some(Ok(Record {
            payload: message.payload(),
            key: message.key(),
            topic,
            partition,
            offset,
            timestamp_ms: message.timestamp_ms(),
            headers: message.headers(),
        }))
    }

    fn pause(&mut self) {
        if let Some(paused) = self.start.pause() {
            self.set_paused(paused);
        }
    }

    fn resume(&mut self) {
        if let Some(paused) = self.start.resume() {
            self.set_paused(paused);
        }
    }

    /// Records past the next one this lane hands out, from the high watermark of the last fetch
    /// response (librdkafka's cached value). A partition whose leader the statistics show down is
    /// in an outage; one never answered has no known end. Before the lane handed out anything, its
    /// position is where librdkafka fetches from (statistics), or where the assignment put it;
    /// without either it counts as caught up, so an idle partition is never taken for a stalled one.
    fn backlog(&self) -> Backlog {
        let fetch = self.progress.fetch();
        if fetch.as_ref().is_some_and(|f| f.leader_up == Some(false)) {
            return Backlog::SourceDown;
        }
        let Some(high) = self.batches.high_watermark() else { return Backlog::Unknown };
        let position =
            self.progress.next().or_else(|| fetch.map(|f| f.next_fetch).filter(|&next| next >= 0)).or(self.assigned_at);
        Backlog::Records(position.map_or(0, |position| high - position))
    }

    /// Seeks the partition to the next offset not handed out (the assignment's offset, or the
    /// committed one, before the first record), after dropping the records taken and not handed
    /// out, and resumes it. Long after the assignment, this cannot race librdkafka's fetch start
    /// (see [`Start`]); from here on the consumer's pause state is the runtime's (not paused).
    fn refetch(&mut self) -> Result<(), SourceError> {
        let offset = match self.progress.next().or(self.assigned_at) {
            Some(next) => Offset::Offset(next),
            None => Offset::Stored,
        };
        self.batches.discard_unread();
        let partition = self.partition();
        tracing::info!(topic = %self.topic, partition, ?offset, "restarting the partition's fetch");
        self.consumer
            .seek(&self.topic, partition, offset, std::time::Duration::ZERO)
            .map_err(|e| SourceError::transient(format!("seeking partition {partition} to {offset:?}: {e}")))?;
        self.start = Start::Running;
        set_paused(&self.consumer, &self.this, &self.topic, partition, false);
        #[cfg(feature = "fault-injection")]
        {
            self.stall_fault.armed = self.stall_fault.always;
        }
        Ok(())
    }

    fn describe_fetch(&self) -> String {
        let offset = |o: Option<i64>| o.map_or_else(|| "none".to_owned(), |o| o.to_string());
        let stats = match self.progress.fetch() {
            Some(f) => format!(
                "librdkafka fetch_state={} fetchq_cnt={} next_fetch_offset={} leader_up={}",
                f.state,
                f.queued,
                f.next_fetch,
                f.leader_up.map_or_else(|| "unknown".to_owned(), |up| up.to_string())
            ),
            None => "no librdkafka statistics yet".to_owned(),
        };
        format!(
            "next_offset={} stored_offset={} high_watermark={} unread_in_batch={} pause_state={:?}; {stats}",
            offset(self.progress.next()),
            offset(self.progress.stored()),
            offset(self.batches.high_watermark()),
            self.batches.held(),
            self.start,
        )
    }

    /// Stores `next_offset` with the list form of `rd_kafka_offsets_store`, which takes the next
    /// offset to consume, unlike `store_offset(topic, partition, offset)` which adds one.
    fn store_offset(&mut self, next_offset: i64) -> Result<(), SourceError> {
        self.store
            .set_partition_offset(&self.topic, self.partition(), Offset::Offset(next_offset))
            .map_err(|e| SourceError::transient(format!("partition {}: {e}", self.partition())))?;
        self.consumer.store_offsets(&self.store).map_err(|e| {
            SourceError::transient(format!("storing offset {next_offset} of partition {}: {e}", self.partition()))
        })?;
        self.progress.stored.store(next_offset, Ordering::Release);
        Ok(())
    }
}

fn lane_error(partition: i32, code: RDKafkaErrorCode) -> SourceError {
    match code {
        RDKafkaErrorCode::Fatal => SourceError::fatal(format!("partition {partition}: fatal consumer error: {code}")),
        other => SourceError::transient(format!("partition {partition}: message consumption error: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::Start;

    #[derive(Debug, Clone, Copy)]
    enum Op {
        Pause,
        Resume,
        /// A poll; `true` when it returns a message.
        Poll(bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![Just(Op::Pause), Just(Op::Resume), any::<bool>().prop_map(Op::Poll)]
    }

    proptest! {
        /// Invariant 5, the lane's half: a lane not paused at its assignment makes no pause or
        /// resume call to the consumer before its first message (such a call can race
        /// librdkafka's fetch start); whenever the runtime polls, the partition is not paused at
        /// the consumer (a paused one would never deliver); and once a message arrived (or, paused
        /// at the assignment, once the runtime polled or decided anything), the consumer's pause state is
        /// the runtime's. The runtime never polls a lane it has paused.
        #[test]
        fn the_consumer_follows_the_runtime_without_racing_the_first_fetch(
            paused_at_assign in any::<bool>(),
            ops in proptest::collection::vec(op(), 0..40),
        ) {
            let mut start = if paused_at_assign { Start::PausedAtAssign } else { Start::AwaitingFirst { paused: false } };
            let mut consumer_paused = paused_at_assign;
            let mut runtime_paused = false;
            let (mut calls, mut fetched) = (0u32, false);
            for op in ops {
                let set = match op {
                    Op::Pause => { runtime_paused = true; start.pause() }
                    Op::Resume => { runtime_paused = false; start.resume() }
                    Op::Poll(_) if runtime_paused => continue,
                    Op::Poll(message) => {
                        let before = start.before_poll();
                        if let Some(paused) = before { consumer_paused = paused; calls += 1; }
                        prop_assert!(!consumer_paused, "polled a partition paused at the consumer");
                        if message { fetched = true; start.on_message() } else { None }
                    }
                };
                if let Some(paused) = set {
                    consumer_paused = paused;
                    calls += 1;
                }
                if !paused_at_assign && !fetched {
                    prop_assert_eq!(calls, 0, "a consumer call before the first message");
                }
                if fetched || paused_at_assign {
                    prop_assert_eq!(consumer_paused, runtime_paused, "the consumer's pause state is not the runtime's");
                }
            }
        }
    }
}
