//! The Kafka source against a real Kafka-protocol broker (started on demand, see `support`) and
//! librdkafka's mock cluster: consumption through lanes, commits, pauses, rebalances, a frozen broker,
//! injected request errors, start-up diagnosis and the dead-letter producer.

mod common;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use etl_runtime::{
    Batch, Chain, ErrorPolicy, KafkaDeadLetter, KafkaSource, KafkaSourceConfig, PartitionBatches, Pipeline, Record,
    RecordError, RecordErrorKind, RowOut, RunOutcome, RuntimeConfig, Sink, SinkError, SinkErrorKind, Source,
    TombstonePolicy,
};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use common::{GatedSink, ROW, RecordingSink};
use support::{Delivered, committed, create_topic, fixtures, kafka_brokers, produce, unique};

const PARTITIONS: i32 = 4;

/// Writes one fixed-width row per record: partition and offset, as `common::rows_of` reads them (the
/// partition of the `i`th topic written as `i * TOPIC_STRIDE + partition`). It checks that the
/// topic, key, offset and timestamp reached the chain, and fails records whose payload starts with
/// `bad` (for the dead-letter test).
struct Meta {
    /// The topics records may name.
    topics: Vec<String>,
}

/// How a row tells the topics of a several-topic pipeline apart (see [`Meta`]).
const TOPIC_STRIDE: i32 = 100;

/// The chain factory of a pipeline reading `topic`.
fn meta(topic: &str) -> impl Fn() -> Meta + Send + Sync + 'static {
    metas(&[topic])
}

/// The chain factory of a pipeline reading `topics`.
fn metas(topics: &[&str]) -> impl Fn() -> Meta + Send + Sync + use<> {
    let topics: Vec<String> = topics.iter().map(|t| (*t).to_owned()).collect();
    move || Meta { topics: topics.clone() }
}

impl Chain for Meta {
    fn process(&mut self, record: &Record<'_>, out: &mut RowOut<'_>) -> Result<(), RecordError> {
        let payload = record.payload.expect("tombstones never reach the chain");
        if payload.starts_with(b"bad") {
            return Err(RecordError::new(RecordErrorKind::Decode, "not a datum"));
        }
        let seq = std::str::from_utf8(&payload[1..]).map(str::trim).unwrap_or_default();
        let key = record.key.and_then(|k| std::str::from_utf8(k).ok()).unwrap_or_default();
        let topic_index = self.topics.iter().position(|t| t == record.topic);
        if key.strip_prefix('k') != Some(seq) || record.timestamp_ms.is_none_or(|ts| ts <= 0) || topic_index.is_none() {
            // Under `errors.policy: fail` this stops the pipeline and fails the test.
            let topic = record.topic;
            return Err(RecordError::new(
                RecordErrorKind::Operator,
                format!("metadata mismatch: key {key:?}, topic {topic:?}"),
            ));
        }
        let shard = out.round_robin();
        out.push_row(shard, |buf| {
            let start = buf.len();
            let topic_index = topic_index.unwrap_or_default() as i32;
            buf.extend_from_slice(&(topic_index * TOPIC_STRIDE + record.partition).to_le_bytes());
            buf.extend_from_slice(&record.offset.to_le_bytes());
            buf.resize(start + ROW, 0);
        });
        Ok(())
    }
}

fn runtime_config(threads: usize) -> RuntimeConfig {
    RuntimeConfig {
        error_policy: ErrorPolicy::Fail,
        tombstones: TombstonePolicy::Skip,
        drain_timeout: Duration::from_secs(5),
        ..common::config(threads, 1)
    }
}

/// A configuration with room enough that backpressure rarely pauses a lane.
fn roomy(threads: usize) -> RuntimeConfig {
    let mut config = runtime_config(threads);
    config.backpressure.max_inflight_bytes = 64 << 20;
    config.chunk_target_bytes = 64 << 10;
    config.batch.max_bytes = 1 << 20;
    config.batch.max_rows = 100_000;
    config
}

fn source_config(brokers: &str, topic: &str, group: &str, extra: &[(&str, &str)]) -> KafkaSourceConfig {
    let mut properties: Vec<(String, String)> = vec![
        ("auto.offset.reset".into(), "earliest".into()),
        ("session.timeout.ms".into(), "6000".into()),
        ("heartbeat.interval.ms".into(), "500".into()),
    ];
    properties.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    KafkaSourceConfig {
        brokers: brokers.to_owned(),
        topic: topic.to_owned(),
        group_id: group.to_owned(),
        commit_interval: Duration::from_millis(200),
        startup_timeout: Duration::from_secs(30),
        statistics_interval: Duration::from_millis(500),
        properties,
        auth: None,
    }
}

/// A pipeline with a Kafka source and a sink.
struct Running<K: Sink + Clone> {
    pipeline: Pipeline,
    source: KafkaSource,
    sink: K,
}

fn start<K: Sink + Clone>(config: KafkaSourceConfig, runtime: RuntimeConfig, sink: K) -> Running<K> {
    etl_runtime::init_logging();
    let pipeline = Pipeline::start(runtime, meta(&config.topic), sink.clone(), None).expect("pipeline");
    let mut source = KafkaSource::new(config).expect("source").with_drain_timeout(Duration::from_secs(5));
    source.start(pipeline.handle()).expect("source start");
    Running { pipeline, source, sink }
}

impl<K: Sink + Clone> Running<K> {
    /// Graceful stop as `run` does it: drain and store, then the source commits and leaves the group.
    fn stop(mut self) -> (BTreeMap<i32, Option<i64>>, KafkaSource) {
        let report = self.pipeline.shutdown(Duration::from_secs(10));
        assert!(report.complete, "the shutdown drain completed");
        assert_eq!(report.fatal, None);
        self.source.shutdown().expect("source shutdown");
        (report.offsets.into_iter().map(|(lane, next)| (lane.partition, next)).collect(), self.source)
    }
}

fn rows(sink: &RecordingSink) -> BTreeMap<(i32, i64), u32> {
    sink.rows.lock().unwrap().iter().map(|(&k, &v)| (k, v)).collect()
}

fn wait_rows(sink: &RecordingSink, expected: &BTreeSet<(i32, i64)>, limit: Duration) -> bool {
    common::wait_for(limit, || {
        let rows = sink.rows.lock().unwrap();
        rows.len() >= expected.len() && expected.iter().all(|k| rows.contains_key(k))
    })
}

// Invariants 3, 4 and 5: N messages (with tombstones) on 4 partitions consumed through split-queue
// lanes: every offset with a payload processed exactly once, tombstones skipped, key/offset/timestamp
// reach the chain, the committed offsets read back by another consumer of the group equal the end
// offsets from the delivery reports, and lag and commit metrics are exported.
#[test]
fn consumes_every_offset_once_and_commits_the_end_offsets() {
    let brokers = kafka_brokers();
    let (topic, group) = (unique("consume"), unique("consume-g"));
    create_topic(&brokers, &topic, PARTITIONS);
    let delivered = produce(&brokers, &topic, &fixtures(0, 40_000, PARTITIONS, 500));
    let expected = delivered.with_payload();
    assert_eq!(delivered.tombstones.len(), 80);

    let run = start(source_config(&brokers, &topic, &group, &[]), roomy(2), RecordingSink::default());
    let t0 = Instant::now();
    assert!(wait_rows(&run.sink, &expected, Duration::from_secs(30)), "all rows within 30 s");
    eprintln!("consumed 40 000 messages in {:?}; {:?}", t0.elapsed(), run.pipeline.stats());
    // Let at least one statistics interval pass so the lag gauge is set.
    std::thread::sleep(Duration::from_millis(700));
    let metrics = run.pipeline.metrics_text();
    let sink = run.sink.clone();
    let (stored, source) = run.stop();
    let stats = source.stats();

    let rows = rows(&sink);
    assert_eq!(rows.keys().copied().collect::<BTreeSet<_>>(), expected);
    assert!(rows.values().all(|&n| n == 1), "no duplicate");
    let end = delivered.end_offsets();
    assert_eq!(stored, end.iter().map(|(&p, &o)| (p, Some(o))).collect());
    assert_eq!(committed(&brokers, &group, &topic, PARTITIONS), end);
    assert_eq!((stats.assignments, stats.revocations, stats.abandoned_records), (1, 1, 0));
    assert!(stats.commits > 0);
    assert!(metrics.contains(&format!("etl_source_lag_records{{partition=\"0\",topic=\"{topic}\"}}")), "{metrics}");
    assert!(common::metric(&metrics, "etl_source_commits_total") > 0.0);
}

// Several topics in one pipeline: a `^` pattern subscribes to every matching topic and
// to one created while the pipeline runs (picked up within topic.metadata.refresh.interval.ms);
// a topic that does not match is never read. Lanes are (topic, partition): both topics have
// partitions 0 and 1, and every record of every topic arrives once, each naming its own topic,
// with each topic's offsets committed to its end.
#[test]
fn a_pattern_consumes_every_matching_topic_and_one_created_while_running() {
    let brokers = kafka_brokers();
    let (prefix, group) = (unique("pattern"), unique("pattern-g"));
    let topics = [format!("{prefix}-eu"), format!("{prefix}-us"), format!("{prefix}-ap")];
    let other = format!("{prefix}x-other");
    for topic in [&topics[0], &topics[1], &other] {
        create_topic(&brokers, topic, 2);
    }
    let produced: Vec<Delivered> =
        [&topics[0], &topics[1], &other].iter().map(|t| produce(&brokers, t, &fixtures(0, 600, 2, 0))).collect();
    let expected = |index: usize, delivered: &Delivered| -> BTreeSet<(i32, i64)> {
        delivered.all.iter().map(|&(p, o)| (index as i32 * TOPIC_STRIDE + p, o)).collect()
    };
    let mut want: BTreeSet<(i32, i64)> =
        expected(0, &produced[0]).into_iter().chain(expected(1, &produced[1])).collect();

    etl_runtime::init_logging();
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let sink = RecordingSink::default();
    // A record of `other` would fail the chain, and `errors.policy: fail` stops the pipeline.
    let pipeline = Pipeline::start(runtime_config(2), metas(&names), sink.clone(), None).expect("pipeline");
    let pattern = format!("^{prefix}-(eu|us|ap)$");
    let config = source_config(&brokers, &pattern, &group, &[("topic.metadata.refresh.interval.ms", "1000")]);
    let mut source = KafkaSource::new(config).expect("source").with_drain_timeout(Duration::from_secs(5));
    source.start(pipeline.handle()).expect("source start");
    assert!(wait_rows(&sink, &want, Duration::from_secs(30)), "both matching topics are read");

    create_topic(&brokers, &topics[2], 2);
    let late = produce(&brokers, &topics[2], &fixtures(0, 600, 2, 0));
    want.extend(expected(2, &late));
    let t0 = Instant::now();
    let arrived = wait_rows(&sink, &want, Duration::from_secs(30));
    eprintln!("the topic created while running was read after {:?}", t0.elapsed());
    std::thread::sleep(Duration::from_millis(700));
    let metrics = pipeline.metrics_text();
    let report = pipeline.shutdown(Duration::from_secs(10));
    source.shutdown().expect("source shutdown");
    assert!(arrived, "the matching topic created while running is read ({} of {} rows)", rows(&sink).len(), want.len());
    assert_eq!(report.fatal, None, "no record of `{other}` reached the chain");
    let rows = rows(&sink);
    assert_eq!(rows.keys().copied().collect::<BTreeSet<_>>(), want);
    assert!(rows.values().all(|&n| n == 1), "no duplicate");
    for (topic, delivered) in [(&topics[0], &produced[0]), (&topics[1], &produced[1]), (&topics[2], &late)] {
        assert_eq!(committed(&brokers, &group, topic, 2), delivered.end_offsets(), "{topic} committed to its end");
        let lag = format!("etl_source_lag_records{{partition=\"1\",topic=\"{topic}\"}}");
        assert!(metrics.contains(&lag), "{lag} in {metrics}");
    }
    let lanes: BTreeSet<String> = report.offsets.iter().map(|(lane, _)| lane.to_string()).collect();
    assert_eq!(lanes.len(), 6, "six lanes, two per topic: {lanes:?}");
    assert!(committed(&brokers, &group, &other, 2).is_empty(), "`{other}` is not consumed");
}

// A new consumer group does not silently start at the end of the topic: with no
// `auto.offset.reset` in the passthrough properties, the framework's default (`earliest`) makes
// a group without committed offsets read what the topic already held before it joined.
#[test]
fn a_new_group_without_auto_offset_reset_reads_from_the_beginning() {
    let brokers = kafka_brokers();
    let (topic, group) = (unique("reset"), unique("reset-g"));
    create_topic(&brokers, &topic, PARTITIONS);
    let delivered = produce(&brokers, &topic, &fixtures(0, 2_000, PARTITIONS, 0));
    let expected = delivered.with_payload();
    let mut config = source_config(&brokers, &topic, &group, &[]);
    config.properties.retain(|(k, _)| k != "auto.offset.reset");
    let run = start(config, roomy(1), RecordingSink::default());
    let arrived = wait_rows(&run.sink, &expected, Duration::from_secs(30));
    let sink = run.sink.clone();
    let (stored, _) = run.stop();
    assert!(arrived, "every record already in the topic arrives ({} of {})", rows(&sink).len(), expected.len());
    assert_eq!(stored, delivered.end_offsets().iter().map(|(&p, &o)| (p, Some(o))).collect());
}

// Invariant 6: with the sink stuck, every lane pauses its partition at the consumer, and stays paused
// longer than max.poll.interval.ms (10 s) while the source thread keeps polling: no rebalance, the lag
// gauge shows the backlog, and after the sink recovers each partition resumes at its next offset (no
// gap, no duplicate).
#[test]
fn partition_paused_longer_than_max_poll_interval_keeps_membership() {
    let brokers = kafka_brokers();
    let (topic, group) = (unique("paused"), unique("paused-g"));
    create_topic(&brokers, &topic, PARTITIONS);
    let delivered = produce(&brokers, &topic, &fixtures(0, 20_000, PARTITIONS, 0));
    let expected = delivered.with_payload();

    let config = source_config(&brokers, &topic, &group, &[("max.poll.interval.ms", "10000")]);
    // A budget this small is crossed while the sink is stuck, so every lane pauses and none may resume
    // until the sink releases bytes (Invariant 6).
    let mut runtime = runtime_config(2);
    runtime.backpressure.max_inflight_bytes = 16 << 10;
    let run = start(config, runtime, GatedSink::default());
    // Generous: CI runs this beside the end-to-end scenarios, on the broker they share.
    assert!(common::wait_for(Duration::from_secs(45), || run.pipeline.stats().paused_lanes == 4), "all lanes pause");
    let paused_at = Instant::now();
    while paused_at.elapsed() < Duration::from_secs(12) {
        assert_eq!(run.pipeline.stats().paused_lanes, 4, "the lanes stay paused while the sink is stuck");
        std::thread::sleep(Duration::from_millis(200));
    }
    // A partition whose lag librdkafka cannot tell yet (nothing committed, nothing handed out)
    // has no series; the backlog must show in the others (the gauge follows librdkafka's
    // statistics, so give it a few intervals).
    let lag = || {
        let metrics = run.pipeline.metrics_text();
        (0..PARTITIONS)
            .filter_map(|p| {
                common::metric_opt(&metrics, &format!("etl_source_lag_records{{partition=\"{p}\",topic=\"{topic}\"}}"))
            })
            .sum::<f64>()
    };
    assert!(
        common::wait_for(Duration::from_secs(20), || lag() > 0.0),
        "the backlog shows in etl_source_lag_records:\n{}",
        run.pipeline.metrics_text()
    );
    assert_eq!(run.pipeline.stats().paused_lanes, 4, "the lanes stay paused while the sink is stuck");
    assert_eq!(run.source.stats().revocations, 0, "no rebalance while paused");

    run.sink.open.store(true, Ordering::SeqCst);
    // With a 16 KiB budget the lanes take turns; beside the end-to-end scenarios on a 2-core CI
    // machine one partition was seen 20% short after 30 s, so allow 90. A resume that never
    // happened is not hidden by the wait: the stall watchdog would restart that fetch after
    // its 60 s, and its counter must stay 0.
    let arrived = wait_rows(&run.sink.inner, &expected, Duration::from_secs(90));
    let metrics = run.pipeline.metrics_text();
    assert!(arrived, "all rows after the resume ({} of {}):\n{metrics}", rows(&run.sink.inner).len(), expected.len());
    assert_eq!(
        common::metric_opt(&metrics, "etl_source_stall_recoveries_total"),
        Some(0.0),
        "every partition resumed by itself, not by the stall watchdog"
    );
    let sink = run.sink.inner.clone();
    let (_, source) = run.stop();
    let rows = rows(&sink);
    assert_eq!(rows.keys().copied().collect::<BTreeSet<_>>(), expected);
    assert!(rows.values().all(|&n| n == 1), "no duplicate");
    assert_eq!(committed(&brokers, &group, &topic, PARTITIONS), delivered.end_offsets());
    let stats = source.stats();
    assert_eq!((stats.assignments, stats.revocations), (1, 1), "only the shutdown revoked: {stats:?}");
}

// Invariants 4 and 5: a second member joins mid-run. Eager rebalance: the first member's revocation
// drains its lanes and commits synchronously, both members are assigned from the committed offsets.
// Nothing is lost, and duplicates come only from what was not committed, i.e. at most what a drain
// timeout abandoned (0 here, the drains complete).
#[test]
fn second_member_joining_rebalances_without_loss() {
    let brokers = kafka_brokers();
    let (topic, group) = (unique("rebalance"), unique("rebalance-g"));
    create_topic(&brokers, &topic, PARTITIONS);
    let delivered = produce(&brokers, &topic, &fixtures(0, 40_000, PARTITIONS, 0));
    let expected = delivered.with_payload();

    let throttled = || RecordingSink::throttled(Duration::from_millis(40));
    let first = start(source_config(&brokers, &topic, &group, &[]), runtime_config(1), throttled());
    assert!(common::wait_for(Duration::from_secs(20), || first.sink.rows.lock().unwrap().len() >= 4_000));
    let second = start(source_config(&brokers, &topic, &group, &[]), runtime_config(1), throttled());
    let before_rebalance_done = first.sink.rows.lock().unwrap().len();
    assert!(before_rebalance_done < expected.len(), "the second member joined mid-run");

    let union_complete = common::wait_for(Duration::from_secs(60), || {
        let (a, b) = (first.sink.rows.lock().unwrap(), second.sink.rows.lock().unwrap());
        expected.iter().all(|k| a.contains_key(k) || b.contains_key(k))
    });
    assert!(union_complete, "every offset reaches one of the members");
    let (sink_a, sink_b) = (first.sink.clone(), second.sink.clone());
    let (_, source_a) = first.stop();
    let (_, source_b) = second.stop();
    let (a, b) = (rows(&sink_a), rows(&sink_b));
    let (stats_a, stats_b) = (source_a.stats(), source_b.stats());
    eprintln!("first {stats_a:?} ({} rows), second {stats_b:?} ({} rows)", a.len(), b.len());

    let mut all: BTreeMap<(i32, i64), u32> = a.clone();
    for (k, n) in &b {
        *all.entry(*k).or_insert(0) += n;
    }
    assert_eq!(all.keys().copied().collect::<BTreeSet<_>>(), expected, "nothing lost");
    let duplicates: u64 = all.values().map(|&n| u64::from(n - 1)).sum();
    let abandoned = stats_a.abandoned_records + stats_b.abandoned_records;
    assert!(duplicates <= abandoned, "{duplicates} duplicates, more than the drains abandoned ({abandoned})");
    // The throttled sink writes what the first member holds well within the 5 s drain timeout.
    assert_eq!(abandoned, 0, "the drains complete, so a clean hand-over duplicates nothing");
    assert!(stats_a.revocations >= 2 && stats_a.assignments >= 2, "the first member was rebalanced: {stats_a:?}");
    assert!(!b.is_empty(), "the second member consumed");
    assert_eq!(stats_a.commit_failures + stats_b.commit_failures, 0);
    assert_eq!(committed(&brokers, &group, &topic, PARTITIONS), delivered.end_offsets());
}

// Invariants 3 and 6: the broker frozen (SIGSTOP) for 8 s mid-run, then thawed (SIGCONT; a restarted
// Tansu would forget everything): the source recovers by itself, consumes what was produced before and
// after, loses nothing, and the committed offsets reach the end offsets.
#[test]
fn frozen_broker_recovers_without_loss() {
    let brokers = support::spare_brokers();
    let pid = support::spare_broker_pid();
    let (topic, group) = (unique("frozen"), unique("frozen-g"));
    create_topic(&brokers, &topic, PARTITIONS);
    let mut delivered = produce(&brokers, &topic, &fixtures(0, 30_000, PARTITIONS, 0));

    let run = start(
        source_config(&brokers, &topic, &group, &[]),
        runtime_config(2),
        RecordingSink::throttled(Duration::from_millis(20)),
    );
    assert!(common::wait_for(Duration::from_secs(20), || run.sink.rows.lock().unwrap().len() >= 3_000));
    // Rows written past the committed offsets: what the next owner writes again if the freeze
    // costs the assignment. Commits cannot land while the broker is frozen, so the offsets
    // committed before it bound the committed ones until the partitions are assigned again.
    let committed_before: i64 = committed(&brokers, &group, &topic, PARTITIONS).values().sum();
    let written = || -> i64 { run.sink.rows.lock().unwrap().values().map(|&n| i64::from(n)).sum() };
    let mut at_risk = 0i64;
    {
        let _frozen = support::Frozen::new(pid);
        let thaw = Instant::now() + Duration::from_secs(8);
        while Instant::now() < thaw {
            at_risk = at_risk.max(written() - committed_before);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    delivered.extend(produce(&brokers, &topic, &fixtures(30_000, 2_000, PARTITIONS, 0)));
    let expected = delivered.with_payload();
    let arrived = common::wait_for(Duration::from_secs(60), || {
        let stats = run.source.stats();
        if stats.assignments_lost == 0 || stats.assignments < 2 {
            at_risk = at_risk.max(written() - committed_before);
        }
        let rows = run.sink.rows.lock().unwrap();
        expected.iter().all(|k| rows.contains_key(k))
    });
    assert!(arrived, "everything arrives after the thaw");
    let sink = run.sink.clone();
    let (_, source) = run.stop();
    let rows = rows(&sink);
    assert_eq!(rows.keys().copied().collect::<BTreeSet<_>>(), expected, "nothing lost");
    let duplicates: i64 = rows.values().map(|&n| i64::from(n) - 1).sum();
    let stats = source.stats();
    eprintln!("frozen broker: {duplicates} duplicates, at most {at_risk} written past the commits; {stats:?}");
    if stats.assignments_lost == 0 {
        assert_eq!(duplicates, 0, "the member kept its assignment: nothing is read twice");
    } else {
        assert!(duplicates <= at_risk, "duplicates only from rows written past the committed offsets");
    }
    assert_eq!(committed(&brokers, &group, &topic, PARTITIONS), delivered.end_offsets());
}

// Invariant 3 under injected request errors (librdkafka's mock cluster, in addition to the real
// broker): failing fetches are retried by librdkafka, failing interval commits are counted and the
// next commit carries the stored offsets; every offset is processed once and the end offsets are
// committed.
#[test]
fn mock_cluster_fetch_and_commit_errors_are_survived() {
    etl_runtime::init_logging();
    let mock = MockCluster::new(1).expect("mock cluster");
    let brokers = mock.bootstrap_servers();
    let (topic, group) = (unique("mock"), unique("mock-g"));
    mock.create_topic(&topic, PARTITIONS, 1).expect("mock topic");
    let delivered = produce(&brokers, &topic, &fixtures(0, 4_000, PARTITIONS, 0));
    let expected = delivered.with_payload();
    mock.request_errors(RDKafkaApiKey::Fetch, &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION; 3]);
    mock.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_COMMIT_OFFSET_SIZE; 2],
    );

    let run = start(source_config(&brokers, &topic, &group, &[]), roomy(2), RecordingSink::default());
    assert!(wait_rows(&run.sink, &expected, Duration::from_secs(30)), "all rows despite fetch errors");
    // Interval commits run every 200 ms: give the failing ones and a good one time to happen.
    assert!(common::wait_for(Duration::from_secs(10), || {
        let stats = run.source.stats();
        stats.commit_failures >= 1 && stats.commits > 0
    }));
    let text = run.pipeline.metrics_text();
    assert!(common::metric(&text, "etl_source_commit_failures_total") >= 1.0, "failed commits are counted:\n{text}");
    let sink = run.sink.clone();
    let (_, source) = run.stop();
    let rows = rows(&sink);
    assert_eq!(rows.keys().copied().collect::<BTreeSet<_>>(), expected);
    assert!(rows.values().all(|&n| n == 1), "no duplicate");
    eprintln!("mock cluster: {:?}", source.stats());
    assert_eq!(committed(&brokers, &group, &topic, PARTITIONS), delivered.end_offsets());
}

// The lane's batched read (`PartitionBatches`, librdkafka's `rd_kafka_consume_batch_queue`) on the
// mock cluster, under Invariants 3 and 7: every message of a partition is handed out once, in
// offset order, with its key, payload (none for a tombstone) and timestamp, also when the
// partition is paused and resumed at the consumer while part of a batch is held (librdkafka
// resumes fetching past the batch, which stays valid); nothing leaks to the main queue; a lane
// holds more than one message at a time (it is a batch); and
// dropping it with messages held lets the consumer close (a message left alive would keep
// librdkafka from shutting down).
#[test]
fn batches_hand_out_every_message_once_in_order_across_pauses() {
    let mock = MockCluster::new(1).expect("mock cluster");
    let brokers = mock.bootstrap_servers();
    let topic = unique("batches");
    mock.create_topic(&topic, 1, 1).expect("mock topic");
    const N: usize = 3_000;
    let messages = fixtures(0, N, 1, 7);
    produce(&brokers, &topic, &messages);
    let consumer: Arc<BaseConsumer> = Arc::new(
        ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .set("group.id", unique("batches-g"))
            .set("enable.auto.commit", "false")
            .set("queued.min.messages", "400")
            .create()
            .expect("consumer"),
    );
    let mut batches = PartitionBatches::split(&consumer, &topic, 0).expect("split");
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(&topic, 0, Offset::Beginning).unwrap();
    consumer.assign(&list).expect("assign");
    let mut this = TopicPartitionList::new();
    this.add_partition(&topic, 0);

    let (mut seen, mut most_held, mut pauses, mut next_pause) = (Vec::new(), 0, 0, 100);
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.len() < N && Instant::now() < deadline {
        if let Some(leaked) = consumer.poll(Duration::ZERO) {
            panic!("the main queue delivered {:?}", leaked.map(|m| m.offset()));
        }
        match batches.poll() {
            None => std::thread::sleep(Duration::from_millis(1)),
            Some(Err(code)) => panic!("consuming: {code}"),
            Some(Ok(message)) => {
                let offset = message.offset();
                let expected = &messages[offset as usize];
                assert_eq!(message.key(), Some(&expected.key[..]), "key of offset {offset}");
                assert_eq!(message.payload(), expected.payload.as_deref(), "payload of offset {offset}");
                assert!(message.timestamp_ms().is_some_and(|ts| ts > 0), "timestamp of offset {offset}");
                assert_eq!(message.partition(), 0);
                seen.push(offset);
            }
        }
        most_held = most_held.max(batches.held());
        if seen.len() >= next_pause && batches.held() > 0 {
            consumer.pause(&this).expect("pause");
            std::thread::sleep(Duration::from_millis(30));
            assert!(consumer.poll(Duration::from_millis(20)).is_none(), "the main queue stays empty");
            consumer.resume(&this).expect("resume");
            pauses += 1;
            next_pause += 400;
        }
    }
    assert_eq!(seen, (0..N as i64).collect::<Vec<_>>(), "every offset once, in order");
    assert!(most_held > 1, "a batch held {most_held} message(s) at most");
    assert!(pauses >= 5, "paused {pauses} times while holding part of a batch");

    // librdkafka 2.12's destroy waits forever once a manually assigned partition whose queue was
    // split has been paused and resumed (rdkafka's own `PartitionQueue` does the same; the
    // source assigns through the group protocol, whose close every other test here runs), so
    // this consumer is left to the process.
    std::mem::forget(batches);
    std::mem::forget(consumer);

    // A fresh consumer whose lane is dropped while it holds most of a batch: the consumer closes.
    let consumer: Arc<BaseConsumer> = Arc::new(
        ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .set("group.id", unique("batches-h"))
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer"),
    );
    let mut batches = PartitionBatches::split(&consumer, &topic, 0).expect("split");
    consumer.assign(&list).expect("assign");
    let deadline = Instant::now() + Duration::from_secs(30);
    while batches.held() == 0 {
        assert!(Instant::now() < deadline, "no batch from the second consumer");
        if batches.poll().is_none() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    drop(batches);
    let closing = std::thread::spawn(move || drop(consumer));
    assert!(
        common::wait_for(Duration::from_secs(30), || closing.is_finished()),
        "the consumer did not close after a lane holding messages was dropped"
    );
}

// Invariant 3 through what only a multi-broker cluster does (librdkafka's mock cluster of three): the
// partitions' leaders move to another broker, that broker answers with a 300 ms round trip, the group
// coordinator moves, and the broker that led everything goes down and comes back, all while records
// stream in. librdkafka follows the leaders and the coordinator; the source neither stops nor loses
// an offset, a revocation is the only source of duplicates, and the end offsets are committed.
#[test]
fn mock_cluster_leader_moves_slow_broker_and_coordinator_change_are_survived() {
    use rdkafka::mocking::MockCoordinator;
    etl_runtime::init_logging();
    let mock = MockCluster::new(3).expect("mock cluster");
    let brokers = mock.bootstrap_servers();
    let (topic, group) = (unique("mock-moves"), unique("mock-moves-g"));
    mock.create_topic(&topic, PARTITIONS, 3).expect("mock topic");
    for partition in 0..PARTITIONS {
        mock.partition_leader(&topic, partition, Some(1)).expect("leader 1");
    }
    mock.coordinator(MockCoordinator::Group(group.clone()), 1).expect("coordinator 1");
    let mut delivered = produce(&brokers, &topic, &fixtures(0, 3_000, PARTITIONS, 0));
    let run = start(source_config(&brokers, &topic, &group, &[]), roomy(2), RecordingSink::default());
    assert!(wait_rows(&run.sink, &delivered.with_payload(), Duration::from_secs(30)), "the first records");

    for partition in 0..PARTITIONS {
        mock.partition_leader(&topic, partition, Some(2)).expect("leader 2");
    }
    mock.broker_round_trip_time(2, Duration::from_millis(300)).expect("slow broker 2");
    delivered.extend(produce(&brokers, &topic, &fixtures(3_000, 3_000, PARTITIONS, 0)));
    assert!(
        wait_rows(&run.sink, &delivered.with_payload(), Duration::from_secs(60)),
        "records from the new, slow leader"
    );

    mock.coordinator(MockCoordinator::Group(group.clone()), 3).expect("coordinator 3");
    mock.broker_down(1).expect("broker 1 down");
    delivered.extend(produce(&brokers, &topic, &fixtures(6_000, 3_000, PARTITIONS, 0)));
    std::thread::sleep(Duration::from_secs(2));
    mock.broker_up(1).expect("broker 1 up");
    mock.broker_round_trip_time(2, Duration::ZERO).expect("broker 2 fast again");
    let expected = delivered.with_payload();
    assert!(wait_rows(&run.sink, &expected, Duration::from_secs(60)), "every record after the moves");
    let end = delivered.end_offsets();
    assert!(
        common::wait_for(Duration::from_secs(30), || committed(&brokers, &group, &topic, PARTITIONS) == end),
        "the end offsets are committed through the new coordinator"
    );
    let sink = run.sink.clone();
    let (_, source) = run.stop();
    let rows = rows(&sink);
    assert_eq!(rows.keys().copied().collect::<BTreeSet<_>>(), expected, "nothing lost");
    let duplicates: u32 = rows.values().map(|n| n - 1).sum();
    let stats = source.stats();
    eprintln!("mock cluster moves: {duplicates} duplicates; {stats:?}");
    assert!(duplicates == 0 || stats.revocations > 0, "duplicates only from a revocation ({duplicates})");
}

// `source.kafka.startup_timeout`: unreachable brokers end `run` with a start-up error (exit code 2) that
// says so, within about startup_timeout.
#[test]
fn startup_timeout_names_unreachable_brokers() {
    etl_runtime::init_logging();
    let mut config = source_config("127.0.0.1:1", "nowhere", &unique("nowhere-g"), &[]);
    config.startup_timeout = Duration::from_secs(3);
    let source = KafkaSource::new(config).expect("source");
    let t0 = Instant::now();
    let outcome = etl_runtime::run(runtime_config(1), source, meta("nowhere"), RecordingSink::default(), None);
    let elapsed = t0.elapsed();
    match &outcome {
        RunOutcome::Startup(message) => {
            assert!(message.contains("unreachable") && message.contains("127.0.0.1:1"), "{message}")
        }
        other => panic!("expected a start-up error, got {other:?}"),
    }
    assert_eq!(outcome.exit_code(), 2);
    assert!(elapsed < Duration::from_secs(8), "took {elapsed:?}");
}

// A source that would read its own dead-letter topic (a pattern that a templated DLQ topic
// matches, which `gen` cannot see) is a start-up error (exit code 2), before anything connects;
// a DLQ topic outside the subscription is fine.
#[test]
fn run_refuses_a_source_that_reads_its_own_dead_letter_topic() {
    etl_runtime::init_logging();
    let runtime = RuntimeConfig { error_policy: ErrorPolicy::DeadLetter, ..runtime_config(1) };
    let dead_letter = |topic: &str| -> Arc<dyn etl_runtime::DeadLetter> {
        Arc::new(KafkaDeadLetter::new("127.0.0.1:1", topic, &[], None).expect("dead letter"))
    };
    let source = KafkaSource::new(source_config("127.0.0.1:1", "^orders-.*", "g", &[])).expect("source");
    let outcome = etl_runtime::run(
        runtime.clone(),
        source,
        meta("nowhere"),
        RecordingSink::default(),
        Some(dead_letter("orders-dlq")),
    );
    match &outcome {
        RunOutcome::Startup(message) => {
            assert!(message.contains("`orders-dlq` is a topic the source reads"), "{message}")
        }
        other => panic!("expected a start-up error, got {other:?}"),
    }
    assert_eq!(outcome.exit_code(), 2);
    // Outside the subscription it starts (and then fails on the unreachable brokers, as usual).
    let mut config = source_config("127.0.0.1:1", "^orders-.*", "g", &[]);
    config.startup_timeout = Duration::from_secs(1);
    let source = KafkaSource::new(config).expect("source");
    let outcome =
        etl_runtime::run(runtime, source, meta("nowhere"), RecordingSink::default(), Some(dead_letter("dlq-orders")));
    match &outcome {
        RunOutcome::Startup(message) => assert!(message.contains("unreachable"), "{message}"),
        other => panic!("expected the brokers' start-up error, got {other:?}"),
    }
}

// A shutdown asked for while the source waits for its first assignment (SIGTERM with the brokers
// away) ends the wait at once: the start returns, and the pipeline stops cleanly with nothing to
// drain, long before startup_timeout.
#[test]
fn a_shutdown_ends_the_wait_for_the_first_assignment() {
    etl_runtime::init_logging();
    let mut config = source_config("127.0.0.1:1", "nowhere", &unique("nowhere-g"), &[]);
    config.startup_timeout = Duration::from_secs(60);
    let pipeline =
        Pipeline::start(runtime_config(1), meta("nowhere"), RecordingSink::default(), None).expect("pipeline");
    let handle = pipeline.handle();
    let asker = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        handle.request_shutdown();
    });
    let mut source = KafkaSource::new(config).expect("source");
    let t0 = Instant::now();
    source.start(pipeline.handle()).expect("a start interrupted by a shutdown is not an error");
    let elapsed = t0.elapsed();
    asker.join().unwrap();
    assert!(elapsed < Duration::from_secs(5), "the wait ended {elapsed:?} after the start, not at once");
    assert!(pipeline.shutdown(Duration::from_secs(5)).complete);
    source.shutdown().expect("source shutdown");
}

// `source.kafka.startup_timeout`: a topic that does not exist is a start-up error that says so.
#[test]
fn startup_timeout_names_a_missing_topic() {
    etl_runtime::init_logging();
    let brokers = kafka_brokers();
    let topic = unique("missing");
    let mut config = source_config(&brokers, &topic, &unique("missing-g"), &[]);
    config.startup_timeout = Duration::from_secs(4);
    let pipeline =
        Pipeline::start(runtime_config(1), meta("nowhere"), RecordingSink::default(), None).expect("pipeline");
    let mut source = KafkaSource::new(config).expect("source");
    let t0 = Instant::now();
    let error = source.start(pipeline.handle()).expect_err("no assignment");
    let elapsed = t0.elapsed();
    assert!(error.message.contains("does not exist") && error.message.contains(&topic), "{error}");
    assert!(elapsed < Duration::from_secs(9), "took {elapsed:?}");
    pipeline.abort();
}

// `source.kafka.startup_timeout` with several topics: a list of topics that do not exist names
// them, and a pattern that matches no topic says so.
#[test]
fn startup_timeout_names_missing_topics_of_a_list_and_an_unmatched_pattern() {
    etl_runtime::init_logging();
    let brokers = kafka_brokers();
    let missing = unique("missing");
    let prefix = unique("unmatched");
    for (subscription, says) in [
        (format!("{missing},{}", unique("missing")), format!("topics `{missing}`")),
        (format!("^{prefix}-.*"), format!("no topic on brokers `{brokers}` matches `^{prefix}-.*`")),
    ] {
        let mut config = source_config(&brokers, &subscription, &unique("missing-g"), &[]);
        config.startup_timeout = Duration::from_secs(4);
        let pipeline =
            Pipeline::start(runtime_config(1), meta("nowhere"), RecordingSink::default(), None).expect("pipeline");
        let mut source = KafkaSource::new(config).expect("source");
        let error = source.start(pipeline.handle()).expect_err("no assignment");
        assert!(error.message.contains(&says), "{subscription}: {error}");
        pipeline.abort();
    }
    // A subscription the runtime cannot use is refused before anything connects.
    let error = KafkaSource::new(source_config(&brokers, "orders eu", "g", &[])).expect_err("not a topic name");
    assert!(error.message.contains("source.kafka.topic") && error.message.contains("`orders eu`"), "{error}");
}

// Invariant 3 with `errors.policy: dlq`: failing records go to the dead-letter topic raw, with the
// error headers, and their offsets count as done only once the producer's delivery report came back:
// the committed offsets still reach the end offsets.
#[test]
fn dead_letter_records_carry_headers_and_complete_offsets() {
    let brokers = kafka_brokers();
    let (topic, dlq, group) = (unique("dlq-src"), unique("dlq"), unique("dlq-g"));
    create_topic(&brokers, &topic, PARTITIONS);
    create_topic(&brokers, &dlq, 1);
    let mut messages = fixtures(0, 2_000, PARTITIONS, 0);
    for (i, m) in messages.iter_mut().enumerate().filter(|(i, _)| i % 10 == 0) {
        m.payload = Some(format!("bad{i}").into_bytes());
    }
    let delivered = produce(&brokers, &topic, &messages);

    etl_runtime::init_logging();
    let dead_letter = KafkaDeadLetter::new(&brokers, &dlq, &[], None).expect("dead letter").with_source_topic(&topic);
    let runtime = RuntimeConfig { error_policy: ErrorPolicy::DeadLetter, ..roomy(2) };
    let sink = RecordingSink::default();
    let pipeline = Pipeline::start(runtime, meta(&topic), sink.clone(), Some(Arc::new(dead_letter))).expect("pipeline");
    let mut source = KafkaSource::new(source_config(&brokers, &topic, &group, &[])).expect("source");
    source.start(pipeline.handle()).expect("start");
    assert!(common::wait_for(Duration::from_secs(30), || sink.rows.lock().unwrap().len() == 1_800));
    let end = delivered.end_offsets();
    let report = pipeline.shutdown(Duration::from_secs(10));
    assert!(report.complete);
    source.shutdown().expect("source shutdown");
    let stored: BTreeMap<i32, i64> =
        report.offsets.into_iter().map(|(p, o)| (p.partition, o.expect("stored"))).collect();
    assert_eq!(stored, end, "dead-lettered offsets count as done");
    assert_eq!(committed(&brokers, &group, &topic, PARTITIONS), end);

    let good: BTreeSet<(i32, i64)> = sink.rows.lock().unwrap().keys().copied().collect();
    let bad: BTreeSet<(i32, i64)> = delivered.all.difference(&good).copied().collect();
    assert_eq!(bad.len(), 200);
    let mut seen = BTreeSet::new();
    for letter in read_dead_letters(&brokers, &dlq, bad.len()) {
        assert_eq!(letter.header("etl.error.kind"), "decode");
        assert!(letter.header("etl.error").contains("not a datum"));
        assert_eq!(letter.header("etl.source.topic"), topic);
        assert_eq!(letter.payload.strip_prefix("bad"), letter.key.strip_prefix('k'), "raw key and payload");
        assert!(seen.insert(letter.source()), "one dead letter per record");
    }
    assert_eq!(seen, bad);
}

/// What a [`HeaderProbe`] saw of each record: its headers in order and `header('trace')`.
type SeenHeaders = Arc<std::sync::Mutex<BTreeMap<(i32, i64), (Vec<etl_runtime::OwnedHeader>, Option<Vec<u8>>)>>>;

/// Records every record's headers as the chain reads them, and fails the ones whose payload
/// starts with `bad` (so that their headers go to the dead-letter topic).
struct HeaderProbe {
    seen: SeenHeaders,
}

impl Chain for HeaderProbe {
    fn process(&mut self, record: &Record<'_>, out: &mut RowOut<'_>) -> Result<(), RecordError> {
        let headers = record.headers.to_owned_headers();
        let trace = record.headers.last("trace").map(<[u8]>::to_vec);
        self.seen.lock().unwrap().insert((record.partition, record.offset), (headers, trace));
        if record.payload.is_some_and(|p| p.starts_with(b"bad")) {
            return Err(RecordError::new(RecordErrorKind::Decode, "not a datum"));
        }
        let shard = out.round_robin();
        out.push_row(shard, |buf| {
            let start = buf.len();
            buf.extend_from_slice(&record.partition.to_le_bytes());
            buf.extend_from_slice(&record.offset.to_le_bytes());
            buf.resize(start + ROW, 0);
        });
        Ok(())
    }
}

// A record's Kafka headers reach the chain as the producer wrote them (order, repeated
// names, binary and null values; none at all), `last` reads the last of a name, and a record
// that fails keeps its own headers in the dead-letter topic beside the `etl.*` ones.
#[test]
fn headers_reach_the_chain_as_produced_and_dead_letters_keep_them() {
    let brokers = kafka_brokers();
    let (topic, dlq, group) = (unique("headers"), unique("headers-dlq"), unique("headers-g"));
    create_topic(&brokers, &topic, 2);
    create_topic(&brokers, &dlq, 1);
    let mut messages = fixtures(0, 200, 2, 0);
    for (i, m) in messages.iter_mut().enumerate() {
        if i % 4 == 3 {
            continue; // no headers at all
        }
        m.headers = vec![
            ("trace".into(), Some(format!("first-{i}").into_bytes())),
            ("bin".into(), Some(vec![0x00, 0xff, i as u8])),
            ("nothing".into(), None),
            ("trace".into(), Some(format!("last-{i}").into_bytes())),
        ];
        if i % 10 == 0 {
            m.payload = Some(format!("bad{i}").into_bytes());
        }
    }
    let delivered = produce(&brokers, &topic, &messages);

    etl_runtime::init_logging();
    let seen = SeenHeaders::default();
    let probe = {
        let seen = seen.clone();
        move || HeaderProbe { seen: seen.clone() }
    };
    let dead_letter = KafkaDeadLetter::new(&brokers, &dlq, &[], None).expect("dead letter").with_source_topic(&topic);
    let runtime = RuntimeConfig { error_policy: ErrorPolicy::DeadLetter, ..roomy(2) };
    let sink = RecordingSink::default();
    let pipeline = Pipeline::start(runtime, probe, sink.clone(), Some(Arc::new(dead_letter))).expect("pipeline");
    let mut source = KafkaSource::new(source_config(&brokers, &topic, &group, &[])).expect("source");
    source.start(pipeline.handle()).expect("start");
    assert!(common::wait_for(Duration::from_secs(30), || sink.rows.lock().unwrap().len() == 180), "the good rows");
    let report = pipeline.shutdown(Duration::from_secs(10));
    assert!(report.complete);
    source.shutdown().expect("source shutdown");

    // Messages are produced round-robin over the partitions, in order within each.
    let mut offsets = BTreeMap::<i32, i64>::new();
    let seen = seen.lock().unwrap();
    for (i, m) in messages.iter().enumerate() {
        let offset = offsets.entry(m.partition).or_insert(0);
        let at = (m.partition, *offset);
        *offset += 1;
        assert!(delivered.all.contains(&at));
        let (headers, trace) = seen.get(&at).unwrap_or_else(|| panic!("message {i} at {at:?} reached the chain"));
        let expected: Vec<etl_runtime::OwnedHeader> =
            m.headers.iter().map(|(n, v)| (n.as_bytes().into(), v.as_deref().map(Into::into))).collect();
        assert_eq!(headers, &expected, "message {i}: headers in order, repeated, binary and null");
        let last = (i % 4 != 3).then(|| format!("last-{i}").into_bytes());
        assert_eq!(trace, &last, "message {i}: the last `trace` header");
    }
    let letters = read_dead_letters(&brokers, &dlq, 20);
    assert_eq!(letters.len(), 20);
    for letter in letters {
        let i: usize = letter.payload.strip_prefix("bad").expect("a bad record").parse().unwrap();
        let own: Vec<(String, Option<Vec<u8>>)> =
            letter.all_headers.iter().filter(|(n, _)| !n.starts_with("etl.")).cloned().collect();
        assert_eq!(own, messages[i].headers, "dead letter {i} keeps the record's headers, in order");
        assert_eq!(letter.header("etl.error.kind"), "decode");
    }
}

// Issue "Kafka source": client properties pass through `rdkafka:` untouched, TLS among them. The
// source consumes from a broker reachable only through TLS (librdkafka's OpenSSL handshake, the
// certificate checked against a private CA from `ssl.ca.location`), every offset once, the
// committed offsets equal the end offsets, and a secret property never shows in the metrics.
#[test]
fn consumes_over_tls_with_a_private_ca() {
    let tls = support::kafka_tls();
    let (topic, group) = (unique("tls"), unique("tls-g"));
    create_topic(&tls.brokers, &topic, 2);
    let delivered = produce(&tls.brokers, &topic, &fixtures(0, 2_000, 2, 0));
    let expected = delivered.with_payload();

    let mut extra: Vec<(&str, &str)> = tls.properties.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    // Unused without SASL, but a secret all the same: it must not leak anywhere.
    extra.push(("sasl.password", "hunter2-tls"));
    let run = start(source_config(&tls.brokers, &topic, &group, &extra), roomy(2), RecordingSink::default());
    assert!(wait_rows(&run.sink, &expected, Duration::from_secs(30)), "all rows within 30 s over TLS");
    let metrics = run.pipeline.metrics_text();
    let sink = run.sink.clone();
    let (stored, _source) = run.stop();

    let rows = rows(&sink);
    assert_eq!(rows.keys().copied().collect::<BTreeSet<_>>(), expected);
    assert!(rows.values().all(|&n| n == 1), "no duplicate");
    let end = delivered.end_offsets();
    assert_eq!(stored, end.iter().map(|(&p, &o)| (p, Some(o))).collect());
    assert_eq!(committed(&tls.brokers, &group, &topic, 2), end);
    assert!(!metrics.contains("hunter2"), "a secret reached the metrics");
}

// The same TLS broker without its CA: the certificate check fails, and the start-up error says that
// the TLS handshake failed rather than only that no partition was assigned.
#[test]
fn an_untrusted_broker_certificate_is_a_startup_error_that_says_so() {
    etl_runtime::init_logging();
    let tls = support::kafka_tls();
    let mut config = source_config(
        &tls.brokers,
        &unique("tls-untrusted"),
        &unique("tls-untrusted-g"),
        &[("security.protocol", "ssl"), ("ssl.ca.location", "/etc/ssl/certs/ca-certificates.crt")],
    );
    config.startup_timeout = Duration::from_secs(4);
    let source = KafkaSource::new(config).expect("source");
    let outcome = etl_runtime::run(runtime_config(1), source, meta("nowhere"), RecordingSink::default(), None);
    match &outcome {
        RunOutcome::Startup(message) => assert!(
            message.contains("SSL") && message.contains("certificate verify failed"),
            "the error names the failed certificate check: {message}"
        ),
        other => panic!("expected a start-up error, got {other:?}"),
    }
    assert_eq!(outcome.exit_code(), 2);
}

/// A sink that refuses every row whose source offset is ≡ 3 (mod 7), as ClickHouse refuses rows
/// that break a constraint, and writes the others.
#[derive(Clone, Default)]
struct RefusingSink {
    inner: RecordingSink,
}

impl Sink for RefusingSink {
    async fn write(&self, _shard: usize, batch: &Batch) -> Result<(), SinkError> {
        let rows = common::rows_of(batch);
        let refused: Vec<u64> = (0..rows.len() as u64).filter(|&i| rows[i as usize].1 % 7 == 3).collect();
        let mut written = self.inner.rows.lock().unwrap();
        for (i, row) in rows.iter().enumerate() {
            if !refused.contains(&(i as u64)) {
                *written.entry(*row).or_insert(0) += 1;
            }
        }
        if refused.is_empty() {
            return Ok(());
        }
        Err(SinkError { kind: SinkErrorKind::Data { rows: refused }, message: "CHECK constraint failed".into() })
    }

    async fn check(&self) -> Result<(), SinkError> {
        Ok(())
    }
}

// Issue "ClickHouse sink", rows ClickHouse refuses under `errors.policy: dlq`: only the refused rows'
// records go to the dead-letter topic, raw (read again from the source by partition and offset),
// with `etl.error.kind: sink`; every other row is written once; the batches complete, so the
// committed offsets still reach the end offsets.
#[test]
fn rows_the_sink_refuses_are_dead_lettered_raw() {
    let brokers = kafka_brokers();
    let (topic, dlq, group) = (unique("refused-src"), unique("refused-dlq"), unique("refused-g"));
    create_topic(&brokers, &topic, PARTITIONS);
    create_topic(&brokers, &dlq, 1);
    let delivered = produce(&brokers, &topic, &fixtures(0, 2_000, PARTITIONS, 0));
    let refused: BTreeSet<(i32, i64)> = delivered.all.iter().copied().filter(|(_, o)| o % 7 == 3).collect();
    assert!(!refused.is_empty());

    etl_runtime::init_logging();
    let dead_letter = KafkaDeadLetter::new(&brokers, &dlq, &[], None).expect("dead letter").with_source_topic(&topic);
    let runtime = RuntimeConfig { error_policy: ErrorPolicy::DeadLetter, ..roomy(2) };
    let sink = RefusingSink::default();
    let pipeline = Pipeline::start(runtime, meta(&topic), sink.clone(), Some(Arc::new(dead_letter))).expect("pipeline");
    let mut source = KafkaSource::new(source_config(&brokers, &topic, &group, &[])).expect("source");
    source.start(pipeline.handle()).expect("start");
    let written = delivered.all.len() - refused.len();
    assert!(common::wait_for(Duration::from_secs(30), || sink.inner.rows.lock().unwrap().len() == written));
    let end = delivered.end_offsets();
    assert!(common::wait_for(Duration::from_secs(30), || {
        pipeline
            .metrics_text()
            .contains(&format!("etl_records_dropped_total{{reason=\"dead_letter\"}} {}", refused.len()))
    }));
    let report = pipeline.shutdown(Duration::from_secs(10));
    assert!(report.complete);
    assert_eq!(report.fatal, None);
    source.shutdown().expect("source shutdown");
    let stored: BTreeMap<i32, i64> =
        report.offsets.into_iter().map(|(p, o)| (p.partition, o.expect("stored"))).collect();
    assert_eq!(stored, end, "batches with refused rows complete once their records are dead-lettered");
    assert_eq!(committed(&brokers, &group, &topic, PARTITIONS), end);
    let rows = sink.inner.rows.lock().unwrap().clone();
    assert!(rows.values().all(|&n| n == 1), "every other row written once");
    assert!(rows.keys().all(|row| !refused.contains(row)));

    let mut seen = BTreeSet::new();
    for letter in read_dead_letters(&brokers, &dlq, refused.len()) {
        assert_eq!(letter.header("etl.error.kind"), "sink");
        assert!(letter.header("etl.error").contains("CHECK constraint failed"));
        assert_eq!(letter.header("etl.source.topic"), topic);
        assert_eq!(
            letter.payload.trim_end().strip_prefix('v'),
            letter.key.strip_prefix('k'),
            "the raw key and payload"
        );
        assert!(seen.insert(letter.source()), "one dead letter per refused record");
    }
    assert_eq!(seen, refused);
}

// Several topics under `errors.policy: dlq`: a source that reads a list of topics,
// whose dead-letter producer was given no source topic (the generated code of a several-topic
// pipeline gives none). Rows the sink refuses, of both topics, are dead-lettered raw, each read
// again from its own topic and headed with it; every other row is written once, and each topic's
// offsets are committed to its end.
#[test]
fn refused_rows_of_several_topics_are_read_again_from_their_own_topic() {
    let brokers = kafka_brokers();
    let (eu, us, dlq, group) = (unique("refused-eu"), unique("refused-us"), unique("refused-dlq"), unique("refused-g"));
    // One partition each: the records to read again alternate between the topics' partition 0,
    // at offsets that keep growing, which is where a reader that knew only the partition went on
    // reading the wrong topic.
    for topic in [&eu, &us] {
        create_topic(&brokers, topic, 1);
    }
    create_topic(&brokers, &dlq, 1);
    // Keys (and payloads) differ between the topics, so a record read again from the wrong
    // topic at the same partition and offset would show.
    let from_eu = produce(&brokers, &eu, &fixtures(0, 400, 1, 0));
    let from_us = produce(&brokers, &us, &fixtures(5_000, 400, 1, 0));
    let refused = |delivered: &Delivered| -> BTreeSet<(i32, i64)> {
        delivered.all.iter().copied().filter(|(_, o)| o % 7 == 3).collect()
    };
    let refused_count = refused(&from_eu).len() + refused(&from_us).len();

    etl_runtime::init_logging();
    let dead_letter = KafkaDeadLetter::new(&brokers, &dlq, &[], None).expect("dead letter");
    let mut runtime = RuntimeConfig { error_policy: ErrorPolicy::DeadLetter, ..roomy(2) };
    // Small batches (a few per topic), so that the reads alternate between the topics. Each
    // switch costs the reader a new assignment and a fetch round trip.
    runtime.batch.max_rows = 50;
    runtime.chunk_target_bytes = 4 << 10;
    let sink = RefusingSink::default();
    let chains = metas(&[&eu, &us]);
    let pipeline = Pipeline::start(runtime, chains, sink.clone(), Some(Arc::new(dead_letter))).expect("pipeline");
    let subscription = format!("{eu},{us}");
    let mut source = KafkaSource::new(source_config(&brokers, &subscription, &group, &[])).expect("source");
    source.start(pipeline.handle()).expect("start");
    let written = from_eu.all.len() + from_us.all.len() - refused_count;
    assert!(common::wait_for(Duration::from_secs(30), || sink.inner.rows.lock().unwrap().len() == written));
    assert!(common::wait_for(Duration::from_secs(30), || {
        pipeline
            .metrics_text()
            .contains(&format!("etl_records_dropped_total{{reason=\"dead_letter\"}} {refused_count}"))
    }));
    let report = pipeline.shutdown(Duration::from_secs(10));
    assert!(report.complete);
    assert_eq!(report.fatal, None);
    source.shutdown().expect("source shutdown");
    assert_eq!(committed(&brokers, &group, &eu, 1), from_eu.end_offsets());
    assert_eq!(committed(&brokers, &group, &us, 1), from_us.end_offsets());
    let rows = sink.inner.rows.lock().unwrap().clone();
    assert!(rows.values().all(|&n| n == 1), "every other row written once");

    let mut seen: BTreeMap<String, BTreeSet<(i32, i64)>> = BTreeMap::new();
    for letter in read_dead_letters(&brokers, &dlq, refused_count) {
        assert_eq!(letter.header("etl.error.kind"), "sink");
        let topic = letter.header("etl.source.topic").to_owned();
        let key: usize = letter.key.strip_prefix('k').and_then(|k| k.parse().ok()).expect("a fixture key");
        assert_eq!(key >= 5_000, topic == us, "`{topic}`'s record was read again from it (key {key})");
        assert_eq!(letter.payload.trim_end().strip_prefix('v'), letter.key.strip_prefix('k'), "the raw record");
        assert!(seen.entry(topic).or_default().insert(letter.source()), "one dead letter per refused record");
    }
    assert_eq!(seen.get(&eu), Some(&refused(&from_eu)));
    assert_eq!(seen.get(&us), Some(&refused(&from_us)));
}

/// A record read back from a dead-letter topic.
struct DeadLetterRead {
    headers: BTreeMap<String, String>,
    /// Every header in order, values raw (`None` for a null value).
    all_headers: Vec<(String, Option<Vec<u8>>)>,
    key: String,
    payload: String,
}

impl DeadLetterRead {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).unwrap_or_else(|| panic!("header {name}: {:?}", self.headers))
    }

    /// `(etl.source.partition, etl.source.offset)`.
    fn source(&self) -> (i32, i64) {
        (self.header("etl.source.partition").parse().unwrap(), self.header("etl.source.offset").parse().unwrap())
    }
}

/// Reads up to `count` records of the one-partition topic `dlq` from its beginning (20 s at most).
fn read_dead_letters(brokers: &str, dlq: &str, count: usize) -> Vec<DeadLetterRead> {
    // `assign` needs a group id even though the reader never joins the group.
    let reader: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", unique("dlq-reader"))
        .create()
        .expect("reader");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(dlq, 0, rdkafka::Offset::Beginning).unwrap();
    reader.assign(&tpl).unwrap();
    let mut letters = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while letters.len() < count && Instant::now() < deadline {
        let Some(message) = reader.poll(Duration::from_millis(200)) else { continue };
        let message = message.expect("dlq message");
        let text = |bytes: Option<&[u8]>| String::from_utf8_lossy(bytes.expect("present")).into_owned();
        let headers = message.headers().expect("headers");
        letters.push(DeadLetterRead {
            headers: headers
                .iter()
                .map(|h| (h.key.to_owned(), String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned()))
                .collect(),
            all_headers: headers.iter().map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec))).collect(),
            key: text(message.key()),
            payload: text(message.payload()),
        });
    }
    letters
}
