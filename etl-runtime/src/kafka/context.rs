//! The consumer's context: the rebalance choreography (split, pause, assign, hand over; drain, commit,
//! unassign), commit and statistics callbacks, and librdkafka's logs and errors routed to `tracing`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer as _, ConsumerContext};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};
use rdkafka::{Offset, TopicPartitionList};

use super::batches::PartitionBatches;
use super::partition_lane::{FetchStats, KafkaLane, LaneProgress, Start};
use super::properties::log_to_tracing;
use crate::engine::errors::SinkErrorKind;
use crate::engine::handle::{LedgerReadError, PipelineHandle};
use crate::engine::lane::{LaneKey, named};
use crate::engine::ledger::Replay;

/// The bound on reading the committed offsets of a new assignment (exactly-once).
const COMMITTED_TIMEOUT: Duration = Duration::from_secs(10);

/// The consumer type of the source.
pub(crate) type Consumer = BaseConsumer<SourceContext>;

/// Counters of what the source did; read through `KafkaSource::stats`.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) assignments: AtomicU64,
    pub(crate) revocations: AtomicU64,
    pub(crate) assignments_lost: AtomicU64,
    pub(crate) abandoned_records: AtomicU64,
    pub(crate) commits: AtomicU64,
    pub(crate) commit_failures: AtomicU64,
    pub(crate) leaked_messages: AtomicU64,
}

/// What `start` waits for.
#[derive(Debug, Default)]
pub(crate) struct Startup {
    /// The number of partitions of the first assignment (the group was joined).
    pub(crate) first_assignment: Option<usize>,
    /// Partitions owned now.
    pub(crate) owned: usize,
    /// The last client-level error, for the startup diagnosis.
    pub(crate) last_error: Option<(RDKafkaErrorCode, String)>,
}

/// Exactly-once partitions whose replay plans could not be read at their assignment (the ledger's
/// shard was down): assigned and paused, their queues split, no lane yet. A thread of their own
/// retries the ledger; the source thread hands each over as a lane once its plan is in, so the
/// member stays in its group (and keeps polling) through an outage of any length.
#[derive(Default)]
pub(crate) struct Deferred {
    /// Bumped by every revocation: a plan read for an earlier assignment is dropped.
    generation: u64,
    waiting: HashMap<LaneKey, PartitionBatches<SourceContext>>,
    ready: Vec<(LaneKey, Replay)>,
    /// The thread reading the plans: joined by a revocation, so that none of its claims lands
    /// after the assignment is over.
    reader: Option<std::thread::JoinHandle<()>>,
}

/// Why an exactly-once assignment has no replay plans.
enum PlanError {
    /// The ledger could not be read within its retries: the plans are read later.
    LedgerUnavailable { watermarks: Vec<(LaneKey, Option<i64>)>, error: LedgerReadError },
    /// Anything else stops the source.
    Fatal(String),
}

pub(crate) struct SourceContext {
    /// What the consumer subscribed to (topic names, or a `^` pattern), for log lines: an
    /// assignment may carry partitions of several topics, each lane names its own.
    pub(crate) subscription: Arc<str>,
    pub(crate) pipeline: PipelineHandle,
    /// Set right after the consumer is created; `split_partition_queue` needs the `Arc`.
    pub(crate) consumer: OnceLock<Weak<Consumer>>,
    pub(crate) drain_timeout: Duration,
    pub(crate) startup: Mutex<Startup>,
    pub(crate) startup_changed: Condvar,
    progress: Mutex<HashMap<LaneKey, Arc<LaneProgress>>>,
    pub(crate) counters: Arc<Counters>,
    deferred: Arc<Mutex<Deferred>>,
    /// `dlq replay`: each lane's stop offset.
    pub(crate) stops: Option<Arc<super::replay::Stops>>,
    /// OAUTHBEARER tokens (`source.kafka.auth`).
    pub(crate) tokens: super::auth::TokenSource,
}

impl SourceContext {
    pub(crate) fn new(
        subscription: Arc<str>,
        pipeline: PipelineHandle,
        drain_timeout: Duration,
        counters: Arc<Counters>,
    ) -> Self {
        SourceContext {
            subscription,
            pipeline,
            consumer: OnceLock::new(),
            drain_timeout,
            startup: Mutex::new(Startup::default()),
            startup_changed: Condvar::new(),
            progress: Mutex::new(HashMap::new()),
            counters,
            deferred: Arc::new(Mutex::new(Deferred::default())),
            stops: None,
            tokens: super::auth::TokenSource::default(),
        }
    }

    /// The lanes of every partition in `tpl`, of whichever topic (a list or a pattern
    /// subscription assigns partitions of several topics at once).
    fn lanes_of(tpl: &TopicPartitionList) -> Vec<LaneKey> {
        let mut topics: HashMap<String, Arc<str>> = HashMap::new();
        tpl.elements()
            .iter()
            .map(|e| {
                let topic = topics.entry(e.topic().to_owned()).or_insert_with(|| Arc::from(e.topic())).clone();
                LaneKey { topic, partition: e.partition() }
            })
            .collect()
    }

    fn list_of(lanes: &[LaneKey]) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::with_capacity(lanes.len());
        for lane in lanes {
            tpl.add_partition(&lane.topic, lane.partition);
        }
        tpl
    }

    /// Invariant 5: split each new partition's queue (before the assignment, so the fetcher never
    /// forwards it to the main queue), set the partitions' pause state (exactly-once: paused until
    /// the lane's first poll; at least once: not paused, and left alone until the lane's first
    /// message, see `partition_lane::Start`), assign, then hand each partition over as a lane.
    fn on_assign(&self, consumer: &Consumer, tpl: &TopicPartitionList) {
        let partitions = Self::lanes_of(tpl);
        let mut later = None;
        let (assignment, mut replays) = if self.pipeline.exactly_once() && !partitions.is_empty() {
            match self.replay_plans(consumer, tpl, &partitions) {
                Ok(planned) => planned,
                Err(PlanError::LedgerUnavailable { watermarks, error }) => {
                    tracing::error!(
                        partitions = %named(&partitions),
                        %error,
                        "exactly-once: the ledger cannot be read (a shard is down); the partitions stay paused, and \
                         the member in its group, until it can"
                    );
                    // At the committed offsets already read, so that librdkafka need not fetch
                    // them: the partitions are then positioned, and the seek to the replay start
                    // applies to a settled position.
                    let mut assignment = tpl.clone();
                    for (lane, watermark) in &watermarks {
                        if let Some(watermark) = watermark {
                            let _ = assignment.set_partition_offset(
                                &lane.topic,
                                lane.partition,
                                Offset::Offset(watermark + 1),
                            );
                        }
                    }
                    later = Some(watermarks);
                    (assignment, HashMap::new())
                }
                Err(PlanError::Fatal(error)) => {
                    self.pipeline.report_fatal(error);
                    return;
                }
            }
        } else {
            (tpl.clone(), HashMap::new())
        };
        let tpl = &assignment;
        let Some(shared) = self.consumer.get().and_then(Weak::upgrade) else {
            // Only while the consumer is being dropped; nothing will poll the lanes anyway.
            if let Err(error) = consumer.assign(tpl) {
                tracing::error!(%error, "assign failed");
            }
            return;
        };
        let mut queues = Vec::with_capacity(partitions.len());
        for lane in &partitions {
            match PartitionBatches::split(&shared, &lane.topic, lane.partition) {
                Some(queue) => queues.push((lane.clone(), queue)),
                None => {
                    self.pipeline.report_fatal(format!("could not split the queue of partition {lane}"));
                }
            }
        }
        let list = Self::list_of(&partitions);
        // The split created the partition objects, and librdkafka keeps the application's pause
        // flag across assignments. Exactly-once pauses them before the assignment (its lanes wait
        // for their replay plans, and its assignment carries explicit offsets, so no fetch start
        // follows it later). At least once nothing pauses them here: the split alone keeps their
        // messages off the main queue, and a lane touches the consumer's pause state only from its
        // first message on (`Start`); a pause an earlier assignment left is cleared now, before
        // the assignment, where it cannot race librdkafka's own fetch start.
        let exactly_once = self.pipeline.exactly_once();
        let start = if exactly_once { Start::PausedAtAssign } else { Start::AwaitingFirst { paused: false } };
        let set_before = partitions.is_empty()
            || match if exactly_once { consumer.pause(&list) } else { consumer.resume(&list) } {
                Ok(()) => true,
                Err(error) => {
                    tracing::warn!(%error, partitions = %named(&partitions), exactly_once, "setting the pause state of newly assigned partitions failed");
                    false
                }
            };
        if let Err(error) = consumer.assign(tpl) {
            self.pipeline.report_fatal(format!("assigning partitions {} failed: {error}", named(&partitions)));
            return;
        }
        if exactly_once && !set_before {
            // Still before any fetch: the partitions wait for their plans.
            if let Err(error) = consumer.pause(&list) {
                tracing::warn!(%error, partitions = %named(&partitions), "pausing newly assigned partitions failed");
            }
        }
        if let Some(watermarks) = later {
            let generation = {
                let mut deferred = self.deferred.lock().expect("deferred lock");
                deferred.waiting.extend(queues);
                deferred.generation
            };
            let (deferred, pipeline) = (self.deferred.clone(), self.pipeline.clone());
            let spawned = std::thread::Builder::new()
                .name("etl-replay-plans".into())
                .spawn(move || read_plans_later(&deferred, generation, &pipeline, &watermarks));
            match spawned {
                Ok(reader) => self.deferred.lock().expect("deferred lock").reader = Some(reader),
                Err(error) => self.pipeline.report_fatal(format!("spawning the replay plan thread: {error}")),
            }
            queues = Vec::new();
        }
        {
            let mut progress = self.progress.lock().expect("progress lock");
            for (key, queue) in queues {
                let lane_progress = Arc::new(LaneProgress::new());
                progress.insert(key.clone(), lane_progress.clone());
                let assigned_at = match tpl.find_partition(&key.topic, key.partition).map(|e| e.offset()) {
                    Some(Offset::Offset(offset)) => Some(offset),
                    _ => None,
                };
                let replay = replays.remove(&key);
                let stop = self.stops.as_ref().map(|stops| stops.lane(&key));
                let lane =
                    KafkaLane::new(shared.clone(), queue, key.topic, lane_progress, start, assigned_at).with_stop(stop);
                self.pipeline.add_lane_replaying(Box::new(lane), replay);
            }
        }
        self.counters.assignments.fetch_add(1, Ordering::Relaxed);
        self.pipeline.record_assignment();
        tracing::info!(subscription = %self.subscription, partitions = %named(&partitions), "partitions assigned");
        // Joined the group, even with no partition: /readyz says so (docs/METRICS.md), unless
        // partitions wait for their replay plans (they are not read yet).
        let waiting = !self.deferred.lock().expect("deferred lock").waiting.is_empty();
        self.pipeline.set_source_ready(!waiting);
        let mut startup = self.startup.lock().expect("startup lock");
        startup.owned = partitions.len();
        startup.first_assignment.get_or_insert(partitions.len());
        self.startup_changed.notify_all();
    }

    /// Exactly-once: reads the committed offsets of the new partitions and the spans recorded
    /// above them, and returns the assignment positioned at each partition's replay start
    /// (Invariant 8) with the plans the lanes re-cut their batches with.
    fn replay_plans(
        &self,
        consumer: &Consumer,
        tpl: &TopicPartitionList,
        partitions: &[LaneKey],
    ) -> Result<(TopicPartitionList, HashMap<LaneKey, Replay>), PlanError> {
        let committed = consumer.committed_offsets(Self::list_of(partitions), COMMITTED_TIMEOUT).map_err(|e| {
            PlanError::Fatal(format!(
                "exactly-once: reading the committed offsets of partitions {}: {e}",
                named(partitions)
            ))
        })?;
        let mut watermarks: Vec<(LaneKey, Option<i64>)> = Vec::with_capacity(partitions.len());
        for p in partitions {
            let element = committed.find_partition(&p.topic, p.partition);
            // A per-partition error is not "nothing committed": that would replay from the oldest
            // recorded span, or from the reset policy.
            if let Some(Err(error)) = element.as_ref().map(|e| e.error()) {
                return Err(PlanError::Fatal(format!(
                    "exactly-once: reading the committed offset of partition {p}: {error}"
                )));
            }
            let watermark = match element.map(|e| e.offset()) {
                Some(Offset::Offset(next)) => Some(next - 1),
                _ => None,
            };
            watermarks.push((p.clone(), watermark));
        }
        let plans = match self.pipeline.recover(&watermarks) {
            Ok(plans) => plans,
            Err(error) if error.source.kind == SinkErrorKind::Retryable => {
                return Err(PlanError::LedgerUnavailable { watermarks, error });
            }
            Err(error) => return Err(PlanError::Fatal(error.to_string())),
        };
        let mut assignment = tpl.clone();
        let mut replays = HashMap::new();
        for ((lane, _), plan) in watermarks.into_iter().zip(plans) {
            if let Some(start) = plan.start() {
                assignment.set_partition_offset(&lane.topic, lane.partition, Offset::Offset(start)).map_err(|e| {
                    PlanError::Fatal(format!("exactly-once: positioning partition {lane} at {start}: {e}"))
                })?;
            }
            replays.insert(lane, plan);
        }
        Ok((assignment, replays))
    }

    /// Drops the deferred state of `partitions` (all of them when empty) and waits for the plan
    /// reader to notice: it claims nothing after this returns. Also called at shutdown, since the
    /// kept queues hold the consumer, which could not close otherwise.
    pub(crate) fn forget_deferred(&self, partitions: &[LaneKey]) {
        let reader = {
            let mut deferred = self.deferred.lock().expect("deferred lock");
            deferred.generation += 1;
            if partitions.is_empty() {
                deferred.waiting.clear();
                deferred.ready.clear();
            } else {
                deferred.waiting.retain(|p, _| !partitions.contains(p));
                deferred.ready.retain(|(p, _)| !partitions.contains(p));
            }
            deferred.reader.take()
        };
        if let Some(reader) = reader {
            // At most one ledger request: the reader checks the generation before each claim.
            let _ = reader.join();
        }
    }

    /// Hands over, as lanes, the deferred partitions whose plans came in (the source thread calls
    /// it between polls): each is positioned at its replay start first. It is still paused and was
    /// never fetched, so the seek decides where its lane starts.
    pub(crate) fn hand_over_planned(&self, consumer: &Arc<Consumer>) {
        let planned: Vec<(LaneKey, Replay, PartitionBatches<SourceContext>)> = {
            let mut deferred = self.deferred.lock().expect("deferred lock");
            if deferred.ready.is_empty() {
                return;
            }
            let ready = std::mem::take(&mut deferred.ready);
            let planned = ready
                .into_iter()
                .filter_map(|(p, plan)| deferred.waiting.remove(&p).map(|queue| (p, plan, queue)))
                .collect();
            if deferred.waiting.is_empty() {
                self.pipeline.set_source_ready(true);
            }
            planned
        };
        let mut progress = self.progress.lock().expect("progress lock");
        for (key, plan, queue) in planned {
            if let Some(start) = plan.start() {
                // A partition whose position librdkafka is still looking up refuses a seek for a
                // moment (its fetch has not started): retry for a while before giving up.
                let deadline = std::time::Instant::now() + COMMITTED_TIMEOUT;
                let seek = || consumer.seek(&key.topic, key.partition, Offset::Offset(start), COMMITTED_TIMEOUT);
                let mut sought = seek();
                while sought.is_err() && std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(100));
                    sought = seek();
                }
                if let Err(error) = sought {
                    self.pipeline.report_fatal(format!(
                        "exactly-once: positioning partition {key} at its replay start {start}: {error}"
                    ));
                    return;
                }
            }
            tracing::info!(topic = %key.topic, partition = key.partition, start = ?plan.start(), "exactly-once: the ledger is readable again; the partition resumes");
            let lane_progress = Arc::new(LaneProgress::new());
            progress.insert(key.clone(), lane_progress.clone());
            // Paused before the assignment, like every exactly-once partition.
            let stop = self.stops.as_ref().map(|stops| stops.lane(&key));
            let lane =
                KafkaLane::new(consumer.clone(), queue, key.topic, lane_progress, Start::PausedAtAssign, plan.start())
                    .with_stop(stop);
            self.pipeline.add_lane_replaying(Box::new(lane), Some(plan));
        }
    }

    /// Invariant 4: drain the revoked lanes (bounded by the drain timeout; the lanes store their final
    /// offsets), commit synchronously while the partitions are still owned, then unassign.
    fn on_revoke(&self, consumer: &Consumer, tpl: &TopicPartitionList) {
        let partitions = Self::lanes_of(tpl);
        // Deferred partitions have no lane to drain; a plan still being read is for an assignment
        // that is over.
        self.forget_deferred(&partitions);
        let lost = consumer.assignment_lost();
        if lost {
            // Another member may own them already (and, under exactly-once, be reading the
            // ledger): write nothing more of them.
            tracing::warn!(
                partitions = %named(&partitions),
                "partitions revoked and assignment lost: the group gave them away without a clean revoke (this member \
                 stalled past session.timeout.ms or lost its coordinator); fencing their lanes, committing nothing \
                 for them; the next owner reads from the committed offsets"
            );
            self.counters.assignments_lost.fetch_add(1, Ordering::Relaxed);
            self.pipeline.record_assignment_lost();
            self.pipeline.fence_partitions(&partitions);
        } else {
            tracing::info!(partitions = %named(&partitions), "partitions revoked; draining");
        }
        let offsets = self.pipeline.drain_partitions(&partitions, self.drain_timeout);
        tracing::debug!(?offsets, "revoked lanes drained");
        {
            // Counted from what the lanes stored, not from the drain's answer: at shutdown the
            // runtime's final drain already removed the lanes, so this drain finds none.
            let mut progress = self.progress.lock().expect("progress lock");
            for key in &partitions {
                let Some(lane) = progress.remove(key) else { continue };
                let abandoned = lane.abandoned();
                if abandoned > 0 {
                    self.counters.abandoned_records.fetch_add(abandoned as u64, Ordering::Relaxed);
                    self.pipeline.record_abandoned(abandoned as u64);
                    tracing::warn!(
                        topic = %key.topic,
                        partition = key.partition,
                        abandoned,
                        next_offset = ?lane.stored(),
                        "the drain timed out: records handed to the pipeline are not durable; they will be redelivered"
                    );
                }
            }
        }
        if lost {
            // The group already gave the partitions to someone else: a commit would be refused, and
            // what this member stored stays safe to redeliver.
            tracing::warn!(partitions = %named(&partitions), "assignment lost; not committing");
        } else {
            commit_sync(consumer, &self.counters, "revocation");
        }
        if let Err(error) = consumer.unassign() {
            tracing::error!(%error, "unassign failed");
        }
        self.counters.revocations.fetch_add(1, Ordering::Relaxed);
        self.pipeline.record_revocation();
        self.startup.lock().expect("startup lock").owned = 0;
    }

    /// Sets `etl_source_lag_records{partition}` from librdkafka's per-partition `consumer_lag`, and
    /// gives each owned partition's lane what the statistics say of its fetch (the stall
    /// watchdog's view of it: fetch state, queue, leader up or down).
    fn on_statistics(&self, json: &[u8]) {
        let stats: serde_json::Value = match serde_json::from_slice(json) {
            Ok(v) => v,
            Err(error) => {
                tracing::warn!(%error, "unreadable librdkafka statistics");
                return;
            }
        };
        let Some(topics) = stats["topics"].as_object() else { return };
        let brokers_up: HashMap<i64, bool> = stats["brokers"]
            .as_object()
            .map(|brokers| {
                brokers.values().filter_map(|b| Some((b["nodeid"].as_i64()?, b["state"].as_str()? == "UP"))).collect()
            })
            .unwrap_or_default();
        let owned = self.progress.lock().expect("progress lock");
        let partitions = topics.iter().filter_map(|(topic, t)| Some((topic, t["partitions"].as_object()?)));
        for (topic, key, partition) in partitions.flat_map(|(topic, ps)| ps.iter().map(move |(k, p)| (topic, k, p))) {
            let Ok(id) = key.parse::<i32>() else { continue };
            let Some(lane) = owned.get(&LaneKey::new(topic.as_str(), id)) else { continue };
            // -1 means unknown (nothing committed or no high watermark yet).
            if let Some(lag) = partition["consumer_lag"].as_i64().filter(|&lag| lag >= 0) {
                self.pipeline.set_lag_records(topic, id, lag);
            }
            lane.set_fetch(FetchStats {
                state: partition["fetch_state"].as_str().unwrap_or("unknown").to_owned(),
                queued: partition["fetchq_cnt"].as_i64().unwrap_or(-1),
                next_fetch: partition["next_offset"].as_i64().unwrap_or(-1),
                leader_up: partition["leader"].as_i64().and_then(|leader| brokers_up.get(&leader).copied()),
            });
        }
    }
}

/// Commits the stored offsets of the current assignment and waits for the broker's answer. "No offset
/// stored" means everything stored is committed already.
pub(crate) fn commit_sync(consumer: &Consumer, counters: &Counters, why: &str) {
    match consumer.commit_consumer_state(CommitMode::Sync) {
        Ok(()) => tracing::debug!(why, "offsets committed"),
        Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
        Err(error) => {
            counters.commit_failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(why, %error, "synchronous commit failed; the stored offsets are committed later");
        }
    }
}

impl ClientContext for SourceContext {
    // librdkafka asks for a token (an event the consumer's poll hands over) only when the SASL
    // mechanism is OAUTHBEARER: with `source.kafka.auth`, or a passthrough that says so.
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(
        &self,
        _config: Option<&str>,
    ) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
        self.tokens.token()
    }

    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_to_tracing(level, fac, message);
    }

    fn stats_raw(&self, statistics: &[u8]) {
        self.on_statistics(statistics);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let code = error.rdkafka_error_code();
        tracing::warn!(%error, reason, "kafka client error");
        if let Some(code) = code {
            let mut startup = self.startup.lock().expect("startup lock");
            // "All broker connections are down" follows the error that brought the last one
            // down (a refused connection, a failed TLS handshake, a SASL failure): keep the
            // cause, which is what an operator can act on.
            if code != RDKafkaErrorCode::AllBrokersDown || startup.last_error.is_none() {
                startup.last_error = Some((code, reason.to_owned()));
            }
        }
    }
}

impl ConsumerContext for SourceContext {
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => self.on_assign(consumer, tpl),
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => self.on_revoke(consumer, tpl),
            other => {
                // librdkafka asks the application to drop its assignment on a rebalance error.
                let code: RDKafkaErrorCode = other.into();
                tracing::error!(error = %code, "rebalance error; dropping the assignment");
                match consumer.assignment() {
                    Ok(current) => self.on_revoke(consumer, &current),
                    Err(error) => tracing::error!(%error, "reading the assignment failed"),
                }
            }
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        match result {
            Ok(()) => {
                for element in offsets.elements() {
                    match (element.offset(), element.error()) {
                        (Offset::Offset(offset), Ok(())) => {
                            self.counters.commits.fetch_add(1, Ordering::Relaxed);
                            self.pipeline.record_commit(element.topic(), element.partition(), offset);
                        }
                        (_, Err(error)) => {
                            self.counters.commit_failures.fetch_add(1, Ordering::Relaxed);
                            self.pipeline.record_commit_failure();
                            tracing::warn!(topic = element.topic(), partition = element.partition(), %error, "offset commit of a partition failed; its stored offset is retried at the next commit");
                        }
                        _ => {}
                    }
                }
            }
            // Auto-commit with nothing new stored.
            Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Err(error) => {
                self.counters.commit_failures.fetch_add(1, Ordering::Relaxed);
                self.pipeline.record_commit_failure();
                tracing::warn!(%error, "offset commit failed; the stored offsets are retried at the next commit");
            }
        }
    }

    fn main_queue_min_poll_interval(&self) -> rdkafka::util::Timeout {
        rdkafka::util::Timeout::After(Duration::from_millis(100))
    }
}

/// The thread of a deferred assignment: reads the replay plan of each partition in turn until the
/// ledger answers (each `recover` retries for `drain_timeout`), and leaves each plan for the source
/// thread as soon as it is read, so a partition resumes without waiting for the others. It gives
/// up when the assignment is revoked meanwhile, and stops the pipeline on a fatal ledger error.
fn read_plans_later(
    deferred: &Mutex<Deferred>,
    generation: u64,
    pipeline: &PipelineHandle,
    watermarks: &[(LaneKey, Option<i64>)],
) {
    for watermark in watermarks {
        loop {
            if deferred.lock().expect("deferred lock").generation != generation || pipeline.is_stopping() {
                return;
            }
            let cancelled = || deferred.lock().expect("deferred lock").generation != generation;
            match pipeline.recover_unless(std::slice::from_ref(watermark), &cancelled) {
                Ok(None) => return,
                Ok(Some(mut plans)) => {
                    let mut deferred = deferred.lock().expect("deferred lock");
                    if deferred.generation == generation
                        && let Some(plan) = plans.pop()
                    {
                        deferred.ready.push((watermark.0.clone(), plan));
                    }
                    break;
                }
                Err(error) if error.source.kind == SinkErrorKind::Retryable => {
                    tracing::warn!(%error, "exactly-once: the ledger still cannot be read; retrying");
                    std::thread::sleep(Duration::from_secs(1));
                }
                Err(error) => {
                    pipeline.report_fatal(error.to_string());
                    return;
                }
            }
        }
    }
}
