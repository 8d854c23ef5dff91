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

use super::lane::{KafkaLane, LaneProgress};
use crate::engine::handle::PipelineHandle;
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

pub(crate) struct SourceContext {
    pub(crate) topic: Arc<str>,
    pub(crate) pipeline: PipelineHandle,
    /// Set right after the consumer is created; `split_partition_queue` needs the `Arc`.
    pub(crate) consumer: OnceLock<Weak<Consumer>>,
    pub(crate) drain_timeout: Duration,
    pub(crate) startup: Mutex<Startup>,
    pub(crate) startup_changed: Condvar,
    progress: Mutex<HashMap<i32, Arc<LaneProgress>>>,
    pub(crate) counters: Arc<Counters>,
}

impl SourceContext {
    pub(crate) fn new(
        topic: Arc<str>,
        pipeline: PipelineHandle,
        drain_timeout: Duration,
        counters: Arc<Counters>,
    ) -> Self {
        SourceContext {
            topic,
            pipeline,
            consumer: OnceLock::new(),
            drain_timeout,
            startup: Mutex::new(Startup::default()),
            startup_changed: Condvar::new(),
            progress: Mutex::new(HashMap::new()),
            counters,
        }
    }

    fn partitions_of(&self, tpl: &TopicPartitionList) -> Vec<i32> {
        tpl.elements_for_topic(&self.topic).iter().map(|e| e.partition()).collect()
    }

    fn one_topic_list(&self, partitions: &[i32]) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::with_capacity(partitions.len());
        for &p in partitions {
            tpl.add_partition(&self.topic, p);
        }
        tpl
    }

    /// Invariant 5: split each new partition's queue (before the assignment, so the fetcher never
    /// forwards it to the main queue), pause the partitions (before any fetch can start), assign, then
    /// hand each partition over as a lane, which resumes it on its first poll.
    fn on_assign(&self, consumer: &Consumer, tpl: &TopicPartitionList) {
        let partitions = self.partitions_of(tpl);
        let (assignment, mut replays) = if self.pipeline.exactly_once() && !partitions.is_empty() {
            match self.replay_plans(consumer, tpl, &partitions) {
                Ok(planned) => planned,
                Err(error) => {
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
        for &partition in &partitions {
            match shared.split_partition_queue(&self.topic, partition) {
                Some(queue) => queues.push((partition, queue)),
                None => {
                    self.pipeline.report_fatal(format!("could not split the queue of partition {partition}"));
                }
            }
        }
        let list = self.one_topic_list(&partitions);
        // The split created the partition objects, so the pause applies before the assignment starts
        // the fetcher (librdkafka keeps the application's pause flag across `assign`).
        let paused_before = !partitions.is_empty() && consumer.pause(&list).is_ok();
        if let Err(error) = consumer.assign(tpl) {
            self.pipeline.report_fatal(format!("assigning partitions {partitions:?} failed: {error}"));
            return;
        }
        if !paused_before && !partitions.is_empty() {
            // Still before any fetch: the assignment first looks up the committed offsets.
            if let Err(error) = consumer.pause(&list) {
                tracing::warn!(%error, ?partitions, "pausing newly assigned partitions failed");
            }
        }
        {
            let mut progress = self.progress.lock().expect("progress lock");
            for (partition, queue) in queues {
                let lane_progress = Arc::new(LaneProgress::new());
                progress.insert(partition, lane_progress.clone());
                let lane = KafkaLane::new(shared.clone(), queue, self.topic.clone(), partition, lane_progress);
                self.pipeline.add_lane_replaying(Box::new(lane), replays.remove(&partition));
            }
        }
        self.counters.assignments.fetch_add(1, Ordering::Relaxed);
        tracing::info!(topic = %self.topic, ?partitions, "partitions assigned");
        // Joined the group, even with no partition: /readyz says so (docs/METRICS.md).
        self.pipeline.set_source_ready(true);
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
        partitions: &[i32],
    ) -> Result<(TopicPartitionList, HashMap<i32, Replay>), String> {
        let committed = consumer
            .committed_offsets(self.one_topic_list(partitions), COMMITTED_TIMEOUT)
            .map_err(|e| format!("exactly-once: reading the committed offsets of partitions {partitions:?}: {e}"))?;
        let mut watermarks: Vec<(i32, Option<i64>)> = Vec::with_capacity(partitions.len());
        for &p in partitions {
            let element = committed.find_partition(&self.topic, p);
            // A per-partition error is not "nothing committed": that would replay from the oldest
            // recorded span, or from the reset policy.
            if let Some(Err(error)) = element.as_ref().map(|e| e.error()) {
                return Err(format!("exactly-once: reading the committed offset of partition {p}: {error}"));
            }
            let watermark = match element.map(|e| e.offset()) {
                Some(Offset::Offset(next)) => Some(next - 1),
                _ => None,
            };
            watermarks.push((p, watermark));
        }
        let plans = self.pipeline.recover(&watermarks).map_err(|e| e.to_string())?;
        let mut assignment = tpl.clone();
        let mut replays = HashMap::new();
        for ((partition, _), plan) in watermarks.into_iter().zip(plans) {
            if let Some(start) = plan.start() {
                assignment
                    .set_partition_offset(&self.topic, partition, Offset::Offset(start))
                    .map_err(|e| format!("exactly-once: positioning partition {partition} at {start}: {e}"))?;
            }
            replays.insert(partition, plan);
        }
        Ok((assignment, replays))
    }

    /// Invariant 4: drain the revoked lanes (bounded by the drain timeout; the lanes store their final
    /// offsets), commit synchronously while the partitions are still owned, then unassign.
    fn on_revoke(&self, consumer: &Consumer, tpl: &TopicPartitionList) {
        let partitions = self.partitions_of(tpl);
        let lost = consumer.assignment_lost();
        tracing::info!(topic = %self.topic, ?partitions, lost, "partitions revoked; draining");
        if lost {
            // Another member may own them already (and, under exactly-once, be reading the
            // ledger): write nothing more of them.
            self.pipeline.fence_partitions(&partitions);
        }
        let offsets = self.pipeline.drain_partitions(&partitions, self.drain_timeout);
        tracing::debug!(?offsets, "revoked lanes drained");
        {
            // Counted from what the lanes stored, not from the drain's answer: at shutdown the
            // runtime's final drain already removed the lanes, so this drain finds none.
            let mut progress = self.progress.lock().expect("progress lock");
            for partition in &partitions {
                let Some(lane) = progress.remove(partition) else { continue };
                let abandoned = lane.abandoned();
                if abandoned > 0 {
                    self.counters.abandoned_records.fetch_add(abandoned as u64, Ordering::Relaxed);
                    self.pipeline.record_abandoned(abandoned as u64);
                    tracing::warn!(
                        partition,
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
            tracing::warn!(?partitions, "assignment lost; not committing");
        } else {
            commit_sync(consumer, &self.counters, "revocation");
        }
        if let Err(error) = consumer.unassign() {
            tracing::error!(%error, "unassign failed");
        }
        self.counters.revocations.fetch_add(1, Ordering::Relaxed);
        self.startup.lock().expect("startup lock").owned = 0;
    }

    /// Sets `etl_source_lag_records{partition}` from librdkafka's per-partition `consumer_lag`.
    fn on_statistics(&self, json: &[u8]) {
        let stats: serde_json::Value = match serde_json::from_slice(json) {
            Ok(v) => v,
            Err(error) => {
                tracing::warn!(%error, "unreadable librdkafka statistics");
                return;
            }
        };
        let Some(partitions) = stats["topics"][&*self.topic]["partitions"].as_object() else { return };
        let owned = self.progress.lock().expect("progress lock");
        for (key, partition) in partitions {
            let (Ok(id), Some(lag)) = (key.parse::<i32>(), partition["consumer_lag"].as_i64()) else { continue };
            // -1 means unknown (nothing committed or no high watermark yet).
            if lag >= 0 && owned.contains_key(&id) {
                self.pipeline.set_lag_records(id, lag);
            }
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
                for element in offsets.elements_for_topic(&self.topic) {
                    if let (Offset::Offset(offset), Ok(())) = (element.offset(), element.error()) {
                        self.counters.commits.fetch_add(1, Ordering::Relaxed);
                        self.pipeline.record_commit(element.partition(), offset);
                    }
                }
            }
            // Auto-commit with nothing new stored.
            Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Err(error) => {
                self.counters.commit_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, "offset commit failed; the stored offsets are retried at the next commit");
            }
        }
    }

    fn main_queue_min_poll_interval(&self) -> rdkafka::util::Timeout {
        rdkafka::util::Timeout::After(Duration::from_millis(100))
    }
}

/// Forwards a librdkafka log line to `tracing`.
pub(crate) fn log_to_tracing(level: RDKafkaLogLevel, fac: &str, message: &str) {
    match level {
        RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical | RDKafkaLogLevel::Error => {
            tracing::error!(target: "librdkafka", fac, "{message}")
        }
        RDKafkaLogLevel::Warning => tracing::warn!(target: "librdkafka", fac, "{message}"),
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => tracing::info!(target: "librdkafka", fac, "{message}"),
        RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", fac, "{message}"),
    }
}
