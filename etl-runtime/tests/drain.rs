//! Drains, shutdown bounds, fatal sink errors and the per-record error policies.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{MemLane, PassThrough, RecordingSink, Stored, config, metric, rows_of, wait_for};
use etl_runtime::{
    Batch, Chain, DeadLetter, DeadLetterAck, DeadRecord, ErrorPolicy, LaneKey, Pipeline, Record, RecordError,
    RecordErrorKind, RetryConfig, RowOut, Sink, SinkError, Wake,
};

/// A sink whose writes never finish.
struct StuckSink;

impl Sink for StuckSink {
    async fn write(&self, _shard: usize, _batch: &Batch) -> Result<(), SinkError> {
        std::future::pending().await
    }

    async fn check(&self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// Filters the records below `keep_from`, passes the rest through.
struct FilterBelow(i64);

impl Chain for FilterBelow {
    fn process(&mut self, record: &Record<'_>, out: &mut RowOut<'_>) -> Result<(), RecordError> {
        if record.offset < self.0 { Ok(()) } else { PassThrough.process(record, out) }
    }
}

// Invariants 3 and 4: with a sink that never finishes, shutdown returns within drain_timeout plus a
// small slack, and the stored offset covers the filtered records but not one unwritten row.
#[test]
fn shutdown_respects_drain_timeout_with_stuck_sink() {
    let drain_timeout = Duration::from_millis(500);
    let mut cfg = config(1, 1);
    cfg.drain_timeout = drain_timeout;
    let pipeline = Pipeline::start(cfg, || FilterBelow(10), StuckSink, None).unwrap();
    let stored = Stored::default();
    pipeline.handle().add_lane(Box::new(MemLane::new(0, Some(50), &stored)));
    assert!(wait_for(Duration::from_secs(10), || stored.lock().unwrap().get(&0) == Some(&10)));

    let started = Instant::now();
    let report = pipeline.shutdown(drain_timeout);
    let took = started.elapsed();
    assert!(took < drain_timeout + Duration::from_millis(700), "shutdown took {took:?}");
    assert!(!report.complete);
    assert_eq!(report.offsets, vec![(LaneKey::new("orders", 0), Some(10))]);
    assert_eq!(stored.lock().unwrap().get(&0), Some(&10), "the offset stops at the first unwritten row");
}

// Invariant 4: draining one partition flushes its open buffers at once (the batch linger is far
// longer than the test), waits for its acks, stores and returns its final offset, and leaves the
// other lanes running.
#[test]
fn drain_partitions_returns_final_offsets() {
    let mut cfg = config(2, 2);
    cfg.batch.linger = Duration::from_secs(30);
    let sink = RecordingSink::default();
    let pipeline = Pipeline::start(cfg, || PassThrough, sink.clone(), None).unwrap();
    let stored = Stored::default();
    pipeline.handle().add_lane(Box::new(MemLane::new(0, None, &stored)));
    pipeline.handle().add_lane(Box::new(MemLane::new(1, None, &stored)));
    std::thread::sleep(Duration::from_millis(100));

    let offsets = pipeline.handle().drain_partitions(&[LaneKey::new("orders", 0)], Duration::from_secs(5));
    let [(ref lane, Some(next))] = offsets[..] else { panic!("unexpected drain result {offsets:?}") };
    assert_eq!(lane, &LaneKey::new("orders", 0));
    assert!(next > 0);
    assert_eq!(stored.lock().unwrap().get(&0), Some(&next));
    assert_eq!(pipeline.handle().live_lanes(), 1);
    {
        let rows = sink.rows.lock().unwrap();
        assert!((0..next).all(|o| rows.get(&(0, o)) == Some(&1)), "every drained row written once");
        assert!(!rows.contains_key(&(0, next)), "nothing past the final offset");
    }
    pipeline.shutdown(Duration::from_secs(5));
}

/// Fails every batch that holds a row at or past `fail_from` on partition 0; records the lowest
/// offset of such a batch.
struct FailingSink {
    fail_from: i64,
    kind: fn(String) -> SinkError,
    lowest_failed: Arc<Mutex<Option<i64>>>,
}

impl Sink for FailingSink {
    async fn write(&self, _shard: usize, batch: &Batch) -> Result<(), SinkError> {
        let rows = rows_of(batch);
        if rows.iter().any(|&(_, o)| o >= self.fail_from) {
            let low = rows.iter().map(|&(_, o)| o).min().unwrap();
            let mut lowest = self.lowest_failed.lock().unwrap();
            *lowest = Some(lowest.map_or(low, |l: i64| l.min(low)));
            return Err((self.kind)(format!("batch {} refused", batch.token())));
        }
        Ok(())
    }

    async fn check(&self) -> Result<(), SinkError> {
        Ok(())
    }
}

fn fatal_sink_case(kind: fn(String) -> SinkError, max_attempts: u32) -> (Wake, Option<i64>, i64, String) {
    let mut cfg = config(1, 1);
    cfg.retry = RetryConfig {
        max_attempts: Some(max_attempts),
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
    };
    let lowest_failed = Arc::new(Mutex::new(None));
    let sink = FailingSink { fail_from: 500, kind, lowest_failed: lowest_failed.clone() };
    let pipeline = Pipeline::start(cfg, || PassThrough, sink, None).unwrap();
    let stored = Stored::default();
    pipeline.handle().add_lane(Box::new(MemLane::new(0, Some(2_000), &stored)));
    let wake = pipeline.wait(Duration::from_secs(20));
    let metrics = pipeline.metrics_text();
    pipeline.abort();
    let lowest = lowest_failed.lock().unwrap().expect("a batch failed");
    let stored = stored.lock().unwrap().get(&0).copied();
    (wake, stored, lowest, metrics)
}

// Invariant 3: a fatal sink error stops the pipeline and the stored offset never passes the
// failed batch.
#[test]
fn fatal_sink_error_stops_without_storing_failed_offsets() {
    let (wake, stored, lowest, _) = fatal_sink_case(SinkError::fatal, 5);
    assert!(matches!(wake, Wake::Fatal(ref m) if m.contains("refused")), "{wake:?}");
    assert!(stored.is_some_and(|s| s <= lowest), "stored {stored:?} passes failed batch at {lowest}");
}

// Invariant 3: a retryable error is retried up to max_attempts under the same token, then stops
// the pipeline, and the stored offset never passes the failed batch.
#[test]
fn retry_exhaustion_stops_without_storing_failed_offsets() {
    let (wake, stored, lowest, metrics) = fatal_sink_case(SinkError::retryable, 3);
    assert!(matches!(wake, Wake::Fatal(ref m) if m.contains("after 3 attempt(s)")), "{wake:?}");
    assert!(stored.is_some_and(|s| s <= lowest), "stored {stored:?} passes failed batch at {lowest}");
    assert!(metric(&metrics, r#"etl_sink_retries_total{output="",shard="0"}"#) >= 2.0);
}

/// A sink that is down (every write a retryable error, counted) while `down` is set, and writes
/// like [`RecordingSink`] otherwise.
#[derive(Clone)]
struct OutageSink {
    down: Arc<std::sync::atomic::AtomicBool>,
    failed: Arc<std::sync::atomic::AtomicU64>,
    up: RecordingSink,
}

impl Sink for OutageSink {
    async fn write(&self, shard: usize, batch: &Batch) -> Result<(), SinkError> {
        use std::sync::atomic::Ordering;
        if self.down.load(Ordering::SeqCst) {
            self.failed.fetch_add(1, Ordering::SeqCst);
            return Err(SinkError::retryable("connection refused"));
        }
        self.up.write(shard, batch).await
    }

    async fn check(&self) -> Result<(), SinkError> {
        Ok(())
    }
}

// Invariant 3 under the default retry: an outage of any length (here many more failed attempts
// than any former default allowed) stops nothing. The pipeline neither exits nor stores an offset
// while the shard is down, `/readyz` answers not ready and etl_sink_shard_failing_seconds counts;
// once the shard is back, everything is written once and the pipeline is ready again.
#[test]
fn an_outage_of_any_length_is_retried_by_default() {
    use std::sync::atomic::Ordering;
    let mut cfg = config(1, 1);
    assert_eq!(cfg.retry.max_attempts, None, "unlimited is the default");
    cfg.retry.initial_backoff = Duration::from_millis(1);
    cfg.retry.max_backoff = Duration::from_millis(4);
    let sink = OutageSink { down: Arc::new(true.into()), failed: Arc::new(0.into()), up: RecordingSink::default() };
    let pipeline = Pipeline::start(cfg, || PassThrough, sink.clone(), None).unwrap();
    pipeline.handle().set_source_ready(true);
    let stored = Stored::default();
    pipeline.handle().add_lane(Box::new(MemLane::new(0, Some(2_000), &stored)));
    assert!(wait_for(Duration::from_secs(30), || sink.failed.load(Ordering::SeqCst) >= 300), "the writes are retried");
    assert!(matches!(pipeline.wait(Duration::from_millis(100)), Wake::Timeout), "the outage is not fatal");
    assert!(!pipeline.handle().is_ready(), "/readyz is not ready while the shard fails");
    let failing = metric(&pipeline.metrics_text(), r#"etl_sink_shard_failing_seconds{output="",shard="0"}"#);
    assert!(failing > 0.0, "the failing gauge counts: {failing}");
    let before = stored.lock().unwrap().get(&0).copied();
    assert!(matches!(before, None | Some(0)), "no offset passes a row while nothing is durable: {before:?}");

    sink.down.store(false, Ordering::SeqCst);
    assert!(wait_for(Duration::from_secs(30), || stored.lock().unwrap().get(&0) == Some(&2_000)), "writing resumes");
    assert!(pipeline.handle().is_ready(), "ready again once the shard accepts writes");
    assert_eq!(metric(&pipeline.metrics_text(), r#"etl_sink_shard_failing_seconds{output="",shard="0"}"#), 0.0);
    assert_eq!(sink.up.assert_exactly_once(&[(0, 2_000)].into()), 2_000);
    pipeline.shutdown(Duration::from_secs(5));
}

/// Fails on every record whose offset is a multiple of 7 (offset 0 included).
struct FailSevens;

impl Chain for FailSevens {
    fn process(&mut self, record: &Record<'_>, out: &mut RowOut<'_>) -> Result<(), RecordError> {
        // The row is pushed first so the test also checks that a failing record leaves no row.
        PassThrough.process(record, out)?;
        if record.offset % 7 == 0 {
            return Err(RecordError::new(RecordErrorKind::Operator, "division by zero"));
        }
        Ok(())
    }
}

// Invariant 3: under errors.policy = skip a failing record counts as done, leaves no row behind,
// and is counted as dropped.
#[test]
fn skip_policy_drops_failing_records() {
    let sink = RecordingSink::default();
    let pipeline = Pipeline::start(config(1, 2), || FailSevens, sink.clone(), None).unwrap();
    let stored = Stored::default();
    pipeline.handle().add_lane(Box::new(MemLane::new(0, Some(700), &stored)));
    assert!(wait_for(Duration::from_secs(20), || pipeline.handle().live_lanes() == 0));
    let metrics = pipeline.metrics_text();
    pipeline.shutdown(Duration::from_secs(5));
    assert_eq!(stored.lock().unwrap().get(&0), Some(&700));
    assert_eq!(metric(&metrics, r#"etl_records_dropped_total{reason="error"}"#), 100.0);
    let rows = sink.rows.lock().unwrap();
    assert_eq!(rows.len(), 600);
    assert!(rows.keys().all(|&(_, o)| o % 7 != 0));
}

// Invariant 3: under errors.policy = fail the pipeline stops and the watermark never passes the
// failing record.
#[test]
fn fail_policy_stops_before_the_failing_record() {
    let mut cfg = config(1, 1);
    cfg.error_policy = ErrorPolicy::Fail;
    let pipeline = Pipeline::start(cfg, || FailSevens, RecordingSink::default(), None).unwrap();
    let stored = Stored::default();
    let mut lane = MemLane::new(0, Some(100), &stored);
    lane.next = 1;
    pipeline.handle().add_lane(Box::new(lane));
    let wake = pipeline.wait(Duration::from_secs(20));
    assert!(matches!(wake, Wake::Fatal(ref m) if m.contains("offset 7")), "{wake:?}");
    pipeline.abort();
    let stored = stored.lock().unwrap().get(&0).copied();
    assert!(stored.is_none_or(|s| s <= 7), "stored {stored:?} passes the failing record");
}

/// Holds dead-letter acks until the test completes them.
#[derive(Default)]
struct HeldDeadLetters {
    held: Mutex<Vec<(DeadRecord, DeadLetterAck)>>,
}

impl DeadLetter for HeldDeadLetters {
    fn send(&self, record: DeadRecord, ack: DeadLetterAck) {
        self.held.lock().unwrap().push((record, ack));
    }
}

// Invariant 3: under errors.policy = dlq a failing record's offset is done only once the
// dead-letter write is acknowledged.
#[test]
fn dead_letter_offsets_wait_for_the_dead_letter_ack() {
    let mut cfg = config(1, 1);
    cfg.error_policy = ErrorPolicy::DeadLetter;
    let dead_letters = Arc::new(HeldDeadLetters::default());
    let pipeline = Pipeline::start(
        cfg,
        || FailSevens,
        RecordingSink::default(),
        Some(dead_letters.clone() as Arc<dyn DeadLetter>),
    )
    .unwrap();
    let stored = Stored::default();
    let mut lane = MemLane::new(0, Some(20), &stored);
    lane.next = 1;
    pipeline.handle().add_lane(Box::new(lane));
    // Records 1..=6 are written; 7 and 14 wait in the dead-letter sink.
    assert!(wait_for(Duration::from_secs(10), || stored.lock().unwrap().get(&0) == Some(&7)));
    assert!(wait_for(Duration::from_secs(10), || dead_letters.held.lock().unwrap().len() == 2));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(stored.lock().unwrap().get(&0), Some(&7), "the offset waits for the dead-letter ack");

    let held: Vec<_> = dead_letters.held.lock().unwrap().drain(..).collect();
    let offsets: HashMap<i64, String> = held.iter().map(|(r, _)| (r.offset, r.error.clone())).collect();
    assert!(offsets.contains_key(&7) && offsets.contains_key(&14));
    for (_, ack) in held {
        ack.complete(Ok(()));
    }
    assert!(wait_for(Duration::from_secs(10), || stored.lock().unwrap().get(&0) == Some(&20)));
    pipeline.shutdown(Duration::from_secs(5));
}

// A drained (revoked) partition's lag series disappear from /metrics: another member owns it.
#[test]
fn drained_partitions_drop_their_lag_series() {
    let pipeline = Pipeline::start(config(1, 1), || PassThrough, RecordingSink::default(), None).unwrap();
    let stored = Stored::default();
    pipeline.handle().add_lane(Box::new(MemLane::new(3, None, &stored)));
    pipeline.handle().set_lag_records("orders", 3, 42);
    assert!(wait_for(Duration::from_secs(10), || pipeline
        .metrics_text()
        .contains(r#"etl_source_lag_seconds{partition="3",topic="orders"}"#)));
    assert!(pipeline.metrics_text().contains(r#"etl_source_lag_records{partition="3",topic="orders"} 42"#));
    pipeline.handle().drain_partitions(&[LaneKey::new("orders", 3)], Duration::from_secs(5));
    let text = pipeline.metrics_text();
    pipeline.shutdown(Duration::from_secs(5));
    assert!(!text.contains(r#"etl_source_lag_records{partition="3",topic="orders"}"#), "{text}");
    assert!(!text.contains(r#"etl_source_lag_seconds{partition="3",topic="orders"}"#), "{text}");
}

// What a source reports as abandoned by a drain timeout is exported for alerting.
#[test]
fn abandoned_records_are_counted() {
    let pipeline = Pipeline::start(config(1, 1), || PassThrough, RecordingSink::default(), None).unwrap();
    pipeline.handle().record_abandoned(7);
    pipeline.handle().record_abandoned(5);
    let text = pipeline.metrics_text();
    pipeline.shutdown(Duration::from_secs(5));
    assert_eq!(metric(&text, "etl_source_abandoned_records_total"), 12.0);
}
