//! The Kafka source (one rdkafka consumer per process whose assigned partitions become lanes) and the
//! Kafka dead-letter producer.
//!
//! # Threads and queues
//!
//! One [`BaseConsumer`](rdkafka::consumer::BaseConsumer) per process, one consumer-group member. A
//! source thread (`etl-kafka`) polls the consumer's main queue forever, every 100 ms at most, until
//! [`Source::shutdown`]: rebalance callbacks, commit results, statistics and errors are served there.
//! Messages never arrive on the main queue: each assigned partition's queue is split off
//! ([`PartitionBatches::split`]) and polled, without blocking, by the pipeline thread that owns its
//! lane, up to [`BATCH_MESSAGES`] messages per librdkafka call (`rd_kafka_consume_batch_queue`, so
//! its per-poll bookkeeping is paid per batch). A lane hands the messages of its batch out one at a
//! time, each borrowed from librdkafka until the next; a paused or revoked lane still holds the rest
//! of its batch, which `gen --memory` counts, and a revoked lane's are dropped unprocessed (they were
//! never stored, so the next owner reads them). A resumed partition is fetched from librdkafka's
//! application position, past the batch; a fetch error in a batch can put that position past a
//! message not read yet, so the lane then seeks back after the resume (`batches.rs`, `Position`).
//! A `None` from the main queue's `poll` does not mean idle (it also follows every rebalance), so the
//! loop never draws conclusions from it. Because the main queue is polled all the time, a paused
//! pipeline never exceeds `max.poll.interval.ms` (Invariant 6).
//!
//! # Assignment (Invariant 5; eager rebalancing only)
//!
//! The rebalance callback replaces rdkafka's default. On an assignment it
//! 1. splits each new partition's queue: this creates librdkafka's partition object and marks its
//!    fetch queue as forwarded by the application, so the fetcher never forwards it to the main queue
//!    (not a single message can leak past the split);
//! 2. pauses the partitions, still before `assign`, so no fetch can start (if librdkafka refuses the
//!    early pause it pauses right after `assign`, which is still before any fetch: the assignment
//!    first looks up the committed offsets);
//! 3. assigns (eager `assign`, never `incremental_assign`);
//! 4. hands each partition to the runtime as a [`Lane`](crate::engine::lane::Lane) with `add_lane`. The lane resumes
//!    its partition on its first poll, unless the runtime paused it first; from then on only the
//!    runtime pauses and resumes it, one partition at a time.
//!
//! The first assignment, even an empty one, marks the source ready for `/readyz`. Cooperative
//! strategies and `group.protocol` are rejected by `gen` and again by [`KafkaSource::new`].
//!
//! # Offsets (Invariant 3)
//!
//! `enable.auto.offset.store=false` and `enable.auto.commit=true` are forced:
//! librdkafka commits what the source stored every `commit_interval` (`auto.commit.interval.ms`) and
//! nothing else. A lane stores `next_offset` (last done + 1) when its checkpointer says so, with the
//! list form of `rd_kafka_offsets_store` (which takes next offsets, unlike `store_offset(topic,
//! partition, offset)` which adds one).
//!
//! # Revocation and shutdown (Invariant 4)
//!
//! On a revocation the callback calls `drain_partitions` with the drain timeout (the lanes store their
//! final offsets), then commits synchronously while the partitions are still owned, then unassigns.
//! Records a drain timeout abandons (handed to the pipeline, not durable) are logged and counted in
//! [`KafkaSourceStats::abandoned_records`]; they are redelivered to the next owner, never lost. When
//! librdkafka reports the assignment as lost (session timed out) the commit is skipped: another member
//! may own the partitions already. [`Source::shutdown`] runs after the runtime's final drain: it stops
//! the source thread, commits synchronously, and closes the consumer (which leaves the group).
//!
//! The drain timeout is the runtime's `checkpoint.drain_timeout`; it must stay below
//! `max.poll.interval.ms` (the group's rebalance timeout), or the group may evict this member during a
//! long drain. [`KafkaSource::new`] uses the default of 25 s; [`KafkaSource::with_drain_timeout`] sets
//! another value.
//!
//! # Start-up
//!
//! [`Source::start`] creates the consumer, subscribes, starts the source thread and blocks until the
//! first assignment that carries a partition, or an empty assignment while the topic exists (more
//! members than partitions), at most `startup_timeout`. Otherwise it returns an error (exit code 2)
//! that names the likely cause, checked with a metadata request bounded by 2 s: the brokers are
//! unreachable, the topic does not exist, or the group assigned nothing.
//!
//! # Prefetch and the memory bound per owned partition (Invariant 7)
//!
//! Once a partition's queue is split, librdkafka applies `queued.max.messages.kbytes` and
//! `queued.min.messages` to that partition queue alone. The defaults here (overridable with the
//! `rdkafka:` passthrough) are `queued.max.messages.kbytes=8192` (8 MiB),
//! `queued.min.messages=100000` (librdkafka's own, so the kbytes cap binds) and
//! `fetch.queue.backoff.ms=10` (with librdkafka's 1000 ms a small cap collapses consumption about
//! 40-fold). `fetch.wait.max.ms` stays at librdkafka's 500 ms: a broker
//! that reads its log from object storage spends that wait reading, and answers with what it read
//! by then (see `properties::DEFAULT_FETCH_WAIT_MAX_MS`). Pausing a partition purges its queue;
//! once resumed it waits for the fetch in flight, which the broker may hold up to
//! `fetch.wait.max.ms` when nothing else has new data. A partition stops fetching once its queue holds
//! 100 000 messages or 8 MiB; the fetch in flight can add one more response for it, up to
//! `fetch.message.max.bytes` (1 MiB by default; some brokers ignore it and send up to `fetch.max.bytes`,
//! 50 MiB by default, per broker connection). A lane's batch is taken from the queue in one
//! non-blocking pass: at most what the queue held plus a response landing meanwhile, and no longer
//! counted by the queue, which refills. So the bound is about
//! `partitions × (2 × queued.max.messages.kbytes + 3 × fetch.message.max.bytes)` + `brokers × fetch.max.bytes`,
//! i.e. 19 MiB per owned partition with the defaults, plus the pipeline's in-flight budget.
//!
//! # Records
//!
//! A record carries the message's payload (`None` for a tombstone, to which the runtime applies
//! `errors.tombstones`), key, partition, offset and timestamp (create or log-append time, in ms); the
//! runtime derives `etl_source_lag_seconds` from the timestamps. Payload and key are borrowed from
//! librdkafka's message until the lane takes the next one (see [`partition_lane`]). `statistics_interval` (`statistics.interval.ms`; 0 disables)
//! feeds `etl_source_lag_records{partition}` from librdkafka's `consumer_lag`; commit results feed
//! `etl_source_commits_total` and `etl_source_committed_offset`.
//!
//! # Secrets
//!
//! Every `rdkafka:` property is passed to librdkafka verbatim. Values of keys that look secret
//! (`*password*`, `*secret*`, `ssl.key.*`, `sasl.oauthbearer.config`) are masked in the configuration
//! log line, in `Debug` output and in configuration errors.

pub(crate) mod auth;
mod oidc;
// Unsafe code: librdkafka's batch consumption, which rdkafka does not wrap (and, in
// `allocator`, mimalloc's option defaults).
#[allow(unsafe_code)]
mod batches;
mod context;
mod dead_letter;
pub(crate) mod offsets;
mod partition_lane;
mod properties;
pub(crate) mod replay;
mod subscription;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::config::FromClientConfigAndContext;
use rdkafka::consumer::Consumer as _;
use rdkafka::error::KafkaError;
use rdkafka::message::Message as _;
use rdkafka::types::RDKafkaErrorCode;

use self::context::{Consumer, Counters, SourceContext, commit_sync};
use self::subscription::Subscription;
use crate::engine::errors::SourceError;
use crate::engine::handle::PipelineHandle;
use crate::engine::source::Source;

pub use self::auth::KafkaAuth;
pub use self::batches::{BATCH_MESSAGES, BatchMessage, PartitionBatches};
pub use self::dead_letter::KafkaDeadLetter;
pub use self::offsets::{OffsetsCommand, ResetTarget};
pub use self::properties::prefetch_properties;
pub use self::replay::DlqReplay;
pub use self::subscription::{topic_list, topic_pattern};

/// The default drain bound of a revocation, `checkpoint.drain_timeout`'s default.
const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(25);

/// How long the source thread waits on the main queue per poll: it bounds how late a shutdown request
/// is noticed.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// The bound on the metadata request that diagnoses a start-up timeout.
const DIAGNOSIS_TIMEOUT: Duration = Duration::from_secs(2);

/// How long closing the consumer (leaving the group) may take at shutdown.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// `source.kafka`, with every value resolved from the environment.
#[derive(Clone)]
pub struct KafkaSourceConfig {
    /// `brokers`: comma-separated bootstrap servers.
    pub brokers: String,
    /// What to consume, in librdkafka's form: a topic (`source.kafka.topic`), topics separated by
    /// commas (`source.kafka.topics`; a topic name cannot hold a comma), or a regular expression
    /// that starts with `^` (`source.kafka.topic_pattern`; topics created later that match it are
    /// picked up within `topic.metadata.refresh.interval.ms`).
    pub topic: String,
    /// `group_id`: the consumer group.
    pub group_id: String,
    /// `commit_interval`: `auto.commit.interval.ms`, how often stored offsets are committed.
    pub commit_interval: Duration,
    /// `startup_timeout`: no partition assigned by then is a fatal start-up error.
    pub startup_timeout: Duration,
    /// `statistics_interval`: `statistics.interval.ms`, feeds the lag metrics; zero disables them.
    pub statistics_interval: Duration,
    /// `rdkafka:`: raw librdkafka properties, passed verbatim (after the framework-owned ones were
    /// rejected by `gen`).
    pub properties: Vec<(String, String)>,
    /// `source.kafka.auth`: authentication the framework does (AWS MSK IAM), with the
    /// properties it needs set after the passthrough.
    pub auth: Option<KafkaAuth>,
}

impl fmt::Debug for KafkaSourceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSourceConfig")
            .field("brokers", &self.brokers)
            .field("topic", &self.topic)
            .field("group_id", &self.group_id)
            .field("commit_interval", &self.commit_interval)
            .field("startup_timeout", &self.startup_timeout)
            .field("statistics_interval", &self.statistics_interval)
            .field("properties", &properties::describe(&self.properties))
            .field("auth", &self.auth)
            .finish()
    }
}

/// What the source did so far, for tests and diagnostics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KafkaSourceStats {
    /// Assignments received (eager: every rebalance brings one).
    pub assignments: u64,
    /// Revocations handled.
    pub revocations: u64,
    /// Revocations of an assignment librdkafka reported as lost (no clean hand-over).
    pub assignments_lost: u64,
    /// Records handed to the pipeline that a revocation's drain timeout left undurable (they are
    /// redelivered, never lost).
    pub abandoned_records: u64,
    /// Partition offsets committed successfully.
    pub commits: u64,
    /// Failed commits (retried by the next interval commit).
    pub commit_failures: u64,
}

/// The Kafka source. See the module documentation for the protocol.
pub struct KafkaSource {
    config: KafkaSourceConfig,
    subscription: Subscription,
    client_config: ClientConfig,
    /// The OAUTHBEARER tokens of `auth`, shared by every client the source makes.
    tokens: auth::TokenSource,
    drain_timeout: Duration,
    counters: Arc<Counters>,
    running: Option<Running>,
    /// `dlq replay`: where each partition stops; the source is then finite.
    replay: Option<Arc<replay::Stops>>,
}

struct Running {
    consumer: Arc<Consumer>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSource")
            .field("config", &self.config)
            .field("drain_timeout", &self.drain_timeout)
            .field("running", &self.running.is_some())
            .finish()
    }
}

impl KafkaSource {
    /// Checks the configuration (framework-owned properties, cooperative strategies, and every
    /// property against librdkafka's own parser). Nothing connects before [`Source::start`].
    pub fn new(config: KafkaSourceConfig) -> Result<Self, SourceError> {
        for (name, value) in [("brokers", &config.brokers), ("group_id", &config.group_id)] {
            if value.trim().is_empty() {
                return Err(SourceError::fatal(format!("source.kafka.{name} is empty")));
            }
        }
        let subscription = Subscription::parse(&config.topic, "source.kafka.topic")?;
        properties::check_passthrough(&config.properties)?;
        auth::check(config.auth.as_ref(), &config.properties)?;
        let mut passthrough = config.properties.clone();
        let tokens = auth::TokenSource::new(config.auth.as_ref(), &mut passthrough)?;
        let mut all = properties::consumer_properties(&properties::ConsumerProperties {
            brokers: &config.brokers,
            group_id: &config.group_id,
            commit_interval: config.commit_interval,
            statistics_interval: config.statistics_interval,
            passthrough: &passthrough,
        });
        all.extend(auth::properties(config.auth.as_ref()));
        let client_config = properties::client_config(&all, "source.kafka")?;
        tracing::info!(
            topic = %subscription,
            group_id = %config.group_id,
            properties = %properties::describe(&all),
            "kafka source configured"
        );
        Ok(KafkaSource {
            config,
            subscription,
            client_config,
            tokens,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            counters: Arc::default(),
            running: None,
            replay: None,
        })
    }

    /// Sets the bound of a revocation's drain (`checkpoint.drain_timeout`; 25 s by default).
    pub fn with_drain_timeout(mut self, drain_timeout: Duration) -> Self {
        self.drain_timeout = drain_timeout;
        self
    }

    /// What the source did so far.
    pub fn stats(&self) -> KafkaSourceStats {
        let c = &self.counters;
        KafkaSourceStats {
            assignments: c.assignments.load(Ordering::Relaxed),
            revocations: c.revocations.load(Ordering::Relaxed),
            assignments_lost: c.assignments_lost.load(Ordering::Relaxed),
            abandoned_records: c.abandoned_records.load(Ordering::Relaxed),
            commits: c.commits.load(Ordering::Relaxed),
            commit_failures: c.commit_failures.load(Ordering::Relaxed),
        }
    }

    /// Waits for the first useful assignment; see "Start-up" in the module docs. A shutdown asked
    /// for meanwhile (SIGTERM while the brokers are away) ends the wait at once: the run then
    /// stops cleanly with nothing to drain.
    fn wait_for_assignment(&self, consumer: &Consumer, pipeline: &PipelineHandle) -> Result<(), SourceError> {
        let context = consumer.context();
        let deadline = Instant::now() + self.config.startup_timeout;
        let mut checked_empty = None;
        loop {
            let first = {
                let startup = context.startup.lock().expect("startup lock");
                let now = Instant::now();
                let (startup, _) = context
                    .startup_changed
                    .wait_timeout(startup, deadline.saturating_duration_since(now).min(Duration::from_millis(250)))
                    .expect("startup lock");
                startup.first_assignment.map(|n| (n, startup.owned))
            };
            if pipeline.shutdown_requested() {
                tracing::info!(topic = %self.subscription, "shutdown requested while waiting for the first assignment");
                return Ok(());
            }
            match first {
                Some((_, owned)) if owned > 0 => return Ok(()),
                // Joined without a partition: fine if a subscribed topic exists (more members
                // than partitions); no such topic keeps us waiting until the deadline.
                Some(_) if checked_empty.is_none_or(|at: Instant| at.elapsed() > Duration::from_secs(1)) => {
                    checked_empty = Some(Instant::now());
                    if let Ok(metadata) = consumer.fetch_metadata(self.metadata_topic(), DIAGNOSIS_TIMEOUT)
                        && metadata.topics().iter().any(|t| {
                            self.subscription.matches(t.name()) && t.error().is_none() && !t.partitions().is_empty()
                        })
                    {
                        tracing::info!(topic = %self.subscription, "joined the group without a partition");
                        return Ok(());
                    }
                }
                _ => {}
            }
            if Instant::now() >= deadline {
                return Err(SourceError::fatal(self.diagnose(consumer)));
            }
        }
    }

    /// The one topic a metadata request asks about; `None` (every topic) for a list or pattern.
    fn metadata_topic(&self) -> Option<&str> {
        match &self.subscription {
            Subscription::Topics(topics) if topics.len() == 1 => Some(&topics[0]),
            _ => None,
        }
    }

    /// Explains why no partition was assigned within `startup_timeout`.
    fn diagnose(&self, consumer: &Consumer) -> String {
        let c = &self.config;
        let last_error = consumer.context().startup.lock().expect("startup lock").last_error.clone();
        let last = last_error.as_ref().map(|(code, reason)| format!("; last client error: {code} ({reason})"));
        let last = last.unwrap_or_default();
        let topic = match &self.subscription {
            Subscription::Topics(topics) if topics.len() == 1 => topics[0].clone(),
            subscription => return self.diagnose_several(consumer, subscription, &last),
        };
        let waited = format!("no partition of topic `{topic}` was assigned within {:?}", c.startup_timeout);
        match consumer.fetch_metadata(Some(&topic), DIAGNOSIS_TIMEOUT) {
            Err(error) => format!("{waited}: the Kafka brokers `{}` are unreachable ({error}){last}", c.brokers),
            Ok(metadata) => match metadata.topics().iter().find(|t| t.name() == topic) {
                None => format!("{waited}: topic `{}` does not exist on brokers `{}`", topic, c.brokers),
                Some(found) => match found.error() {
                    Some(code) if RDKafkaErrorCode::from(code) == RDKafkaErrorCode::UnknownTopicOrPartition => {
                        format!("{waited}: topic `{}` does not exist on brokers `{}`", topic, c.brokers)
                    }
                    Some(code) => format!("{waited}: topic `{}`: {}{last}", topic, RDKafkaErrorCode::from(code)),
                    None if found.partitions().is_empty() => {
                        format!("{waited}: topic `{}` has no partitions", topic)
                    }
                    None => format!(
                        "{waited}: the topic has {} partitions but group `{}` assigned none to this member (group \
                         coordinator unavailable, or other members own them all){last}",
                        found.partitions().len(),
                        c.group_id
                    ),
                },
            },
        }
    }

    /// [`KafkaSource::diagnose`] for a list of topics or a pattern: which topics exist, and
    /// which are missing.
    fn diagnose_several(&self, consumer: &Consumer, subscription: &Subscription, last: &str) -> String {
        let c = &self.config;
        let waited = format!("no partition of `{subscription}` was assigned within {:?}", c.startup_timeout);
        let metadata = match consumer.fetch_metadata(None, DIAGNOSIS_TIMEOUT) {
            Ok(metadata) => metadata,
            Err(error) => {
                return format!("{waited}: the Kafka brokers `{}` are unreachable ({error}){last}", c.brokers);
            }
        };
        let existing: Vec<&str> = metadata
            .topics()
            .iter()
            .filter(|t| t.error().is_none() && !t.partitions().is_empty() && subscription.matches(t.name()))
            .map(|t| t.name())
            .collect();
        match subscription {
            Subscription::Pattern { text, .. } if existing.is_empty() => {
                format!("{waited}: no topic on brokers `{}` matches `{text}`{last}", c.brokers)
            }
            Subscription::Topics(topics) if existing.len() < topics.len() => {
                let missing: Vec<&str> = topics.iter().map(String::as_str).filter(|t| !existing.contains(t)).collect();
                format!("{waited}: topics `{}` do not exist on brokers `{}`{last}", missing.join("`, `"), c.brokers)
            }
            _ => format!(
                "{waited}: the topics `{}` exist but group `{}` assigned no partition to this member (group \
                 coordinator unavailable, or other members own them all){last}",
                existing.join("`, `"),
                c.group_id
            ),
        }
    }

    fn stop_thread(running: &mut Running) {
        running.stop.store(true, Ordering::Release);
        if let Some(thread) = running.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the kafka source thread panicked");
        }
    }
}

impl Source for KafkaSource {
    fn start(&mut self, pipeline: PipelineHandle) -> Result<(), SourceError> {
        if self.running.is_some() {
            return Err(SourceError::fatal("the kafka source was started twice"));
        }
        let subscription: Arc<str> = Arc::from(self.subscription.to_string());
        let mut context = SourceContext::new(subscription, pipeline.clone(), self.drain_timeout, self.counters.clone());
        context.stops = self.replay.clone();
        context.tokens = self.tokens.clone();
        let consumer = Consumer::from_config_and_context(&self.client_config, context)
            .map_err(|e| SourceError::fatal(format!("creating the kafka consumer: {e}")))?;
        let consumer = Arc::new(consumer);
        let _ = consumer.context().consumer.set(Arc::downgrade(&consumer));
        consumer
            .subscribe(&self.subscription.entries())
            .map_err(|e| SourceError::fatal(format!("subscribing to `{}`: {e}", self.subscription)))?;

        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let weak = Arc::downgrade(&consumer);
            let stop = stop.clone();
            let pipeline = pipeline.clone();
            std::thread::Builder::new()
                .name("etl-kafka".into())
                .spawn(move || poll_main_queue(weak, stop, pipeline))
                .map_err(|e| SourceError::fatal(format!("spawning the kafka source thread: {e}")))?
        };
        let mut running = Running { consumer: consumer.clone(), stop, thread: Some(thread) };
        match self.wait_for_assignment(&consumer, &pipeline) {
            Ok(()) => {
                self.running = Some(running);
                Ok(())
            }
            Err(error) => {
                Self::stop_thread(&mut running);
                Err(error)
            }
        }
    }

    fn reads_topic(&self, topic: &str) -> bool {
        // A replay reads the dead-letter topic by design, and only up to its stop offsets, which
        // the letters it writes back come after.
        self.replay.is_none() && self.subscription.matches(topic)
    }

    fn is_finite(&self) -> bool {
        self.replay.is_some()
    }

    fn shutdown(&mut self) -> Result<(), SourceError> {
        let Some(mut running) = self.running.take() else { return Ok(()) };
        Self::stop_thread(&mut running);
        let consumer = running.consumer;
        // Partitions still waiting for their replay plans hold the consumer through their queues.
        consumer.context().forget_deferred(&[]);
        // The runtime's final drain stored every lane's offset; commit them while still a member.
        commit_sync(&consumer, &self.counters, "shutdown");
        // Leave the group. Dropping the last handle closes the consumer (which runs the revocation
        // callback: nothing left to drain); a helper thread bounds how long that may take. Closing
        // explicitly instead would make rdkafka's `Drop` log a spurious close error.
        let holders = Arc::strong_count(&consumer);
        if holders > 1 {
            tracing::warn!(holders, "the kafka consumer is still referenced; it closes when the last lane is dropped");
        }
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        std::thread::Builder::new()
            .name("etl-kafka-close".into())
            .spawn(move || {
                drop(consumer);
                let _ = done_tx.send(());
            })
            .map_err(|e| SourceError::transient(format!("spawning the kafka close thread: {e}")))?;
        let closed = done_rx.recv_timeout(CLOSE_TIMEOUT).is_ok();
        tracing::info!(topic = %self.subscription, closed, stats = ?self.stats(), "kafka source closed");
        if closed {
            Ok(())
        } else {
            Err(SourceError::transient(format!("closing the kafka consumer took more than {CLOSE_TIMEOUT:?}")))
        }
    }
}

impl Drop for KafkaSource {
    fn drop(&mut self) {
        if let Some(running) = self.running.as_mut() {
            Self::stop_thread(running);
        }
    }
}

/// The source thread: serves the main queue (rebalances, commits, statistics, errors) until `stop`.
fn poll_main_queue(consumer: Weak<Consumer>, stop: Arc<AtomicBool>, pipeline: PipelineHandle) {
    while !stop.load(Ordering::Acquire) {
        let Some(consumer) = consumer.upgrade() else { return };
        consumer.context().hand_over_planned(&consumer);
        match consumer.poll(POLL_INTERVAL) {
            // After a rebalance `poll` returns `None` too: it never means idle, so just poll again.
            None => {}
            Some(Ok(message)) => {
                // Impossible with split queues; if it happened, a lane would skip this offset and a
                // later store could pass it, so stop rather than risk a loss.
                consumer.context().counters.leaked_messages.fetch_add(1, Ordering::Relaxed);
                pipeline.report_fatal(format!(
                    "a message of partition {} offset {} reached the main queue instead of its lane",
                    message.partition(),
                    message.offset()
                ));
            }
            Some(Err(KafkaError::MessageConsumptionFatal(code))) => {
                pipeline.report_fatal(format!("fatal kafka consumer error: {code}"));
            }
            // Already logged by the context's error callback; librdkafka retries by itself.
            Some(Err(_)) => {}
        }
    }
}
