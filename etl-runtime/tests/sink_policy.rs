//! What the runtime does with rows a sink refuses, and with a sink whose start-up check
//! fails: `errors.policy` for refused rows, exit code 2 for a bad sink.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{MemLane, PassThrough, Stored, config, metric, wait_for};
use etl_runtime::{
    Batch, DeadLetter, DeadLetterAck, DeadRecord, ErrorPolicy, LaneKey, Pipeline, RunOutcome, Sink, SinkError,
    SinkErrorKind, Source, SourceError, Wake,
};

/// Refuses the first row of every batch, writing the rest; counts the rows it kept and records
/// the (partition, offset) each refused row came from.
#[derive(Clone, Default)]
struct RefusesFirstRow {
    kept: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
    refused_rows: Arc<Mutex<BTreeSet<(i32, i64)>>>,
}

impl Sink for RefusesFirstRow {
    async fn write(&self, _shard: usize, batch: &Batch) -> Result<(), SinkError> {
        self.kept.fetch_add(batch.rows() - 1, Ordering::SeqCst);
        self.refused.fetch_add(1, Ordering::SeqCst);
        self.refused_rows.lock().unwrap().insert(common::rows_of(batch)[0]);
        Err(SinkError { kind: SinkErrorKind::Data { rows: vec![0] }, message: "CHECK constraint failed".into() })
    }

    async fn check(&self) -> Result<(), SinkError> {
        Ok(())
    }
}

// Invariant 3: under `skip`, rows the sink refused count as intentionally dropped; the rest of
// the batch is durable, the batch completes and the offsets reach the end.
#[test]
fn refused_rows_are_skipped_under_skip() {
    let sink = RefusesFirstRow::default();
    let mut cfg = config(1, 1);
    cfg.error_policy = ErrorPolicy::Skip;
    let pipeline = Pipeline::start(cfg, || PassThrough, sink.clone(), None).unwrap();
    let stored = Stored::default();
    pipeline.handle().add_lane(Box::new(MemLane::new(0, Some(1_000), &stored)));
    assert!(wait_for(Duration::from_secs(20), || stored.lock().unwrap().get(&0) == Some(&1_000)));
    let metrics = pipeline.metrics_text();
    let report = pipeline.shutdown(Duration::from_secs(5));
    assert!(report.fatal.is_none(), "{:?}", report.fatal);
    let refused = sink.refused.load(Ordering::SeqCst);
    assert!(refused >= 1);
    assert_eq!(sink.kept.load(Ordering::SeqCst) + refused, 1_000);
    assert_eq!(metric(&metrics, r#"etl_records_dropped_total{reason="sink_refused"}"#), refused as f64);
}

// Invariant 3: under `fail`, a refused row stops the pipeline and its batch's offsets are never
// stored.
#[test]
fn refused_rows_stop_the_pipeline_under_fail() {
    let sink = RefusesFirstRow::default();
    let mut cfg = config(1, 1);
    cfg.error_policy = ErrorPolicy::Fail;
    let pipeline = Pipeline::start(cfg, || PassThrough, sink, None).unwrap();
    let stored = Stored::default();
    pipeline.handle().add_lane(Box::new(MemLane::new(0, Some(1_000), &stored)));
    let wake = pipeline.wait(Duration::from_secs(20));
    pipeline.abort();
    assert!(matches!(wake, Wake::Fatal(ref m) if m.contains("CHECK constraint")), "{wake:?}");
    assert_eq!(stored.lock().unwrap().get(&0).copied().unwrap_or(0), 0, "no batch completed");
}

/// A dead-letter sink that records the refused rows' records it is handed, and completes them
/// (or fails them, with `fail`).
#[derive(Clone, Default)]
struct RecordingDeadLetter {
    refused: Arc<Mutex<BTreeSet<(i32, i64)>>>,
    fail: bool,
}

impl DeadLetter for RecordingDeadLetter {
    fn send(&self, _record: DeadRecord, ack: DeadLetterAck) {
        ack.complete(Err(SinkError::fatal("no chain error expected here")));
    }

    fn send_refused(&self, lane: &LaneKey, offset: i64, error: String, ack: DeadLetterAck) {
        assert!(error.contains("CHECK constraint failed"), "{error}");
        if self.fail {
            return ack.complete(Err(SinkError::fatal("the dead-letter topic is gone")));
        }
        self.refused.lock().unwrap().insert((lane.partition, offset));
        ack.complete(Ok(()));
    }
}

// Invariants 3 and 7 under `dlq`: each refused row is traced back to its source record (the chunks
// keep every row's offset), that record goes to the dead-letter sink, and the batch completes only
// then; the offsets reach the end, and the budget gets back every byte it counted (the rows'
// offsets included).
#[test]
fn refused_rows_go_to_the_dead_letter_sink_under_dlq() {
    let sink = RefusesFirstRow::default();
    let dead_letter = RecordingDeadLetter::default();
    let mut cfg = config(1, 1);
    cfg.error_policy = ErrorPolicy::DeadLetter;
    let pipeline = Pipeline::start(cfg, || PassThrough, sink.clone(), Some(Arc::new(dead_letter.clone()))).unwrap();
    let stored = Stored::default();
    pipeline.handle().add_lane(Box::new(MemLane::new(0, Some(1_000), &stored)));
    assert!(wait_for(Duration::from_secs(20), || stored.lock().unwrap().get(&0) == Some(&1_000)));
    let metrics = pipeline.metrics_text();
    let stats = pipeline.stats();
    let report = pipeline.shutdown(Duration::from_secs(5));
    assert!(report.fatal.is_none(), "{:?}", report.fatal);
    let refused = sink.refused_rows.lock().unwrap().clone();
    assert!(!refused.is_empty());
    assert_eq!(*dead_letter.refused.lock().unwrap(), refused, "exactly the refused rows' records");
    assert_eq!(sink.kept.load(Ordering::SeqCst) + refused.len() as u64, 1_000);
    assert_eq!(metric(&metrics, r#"etl_records_dropped_total{reason="dead_letter"}"#), refused.len() as f64);
    assert_eq!(stats.inflight_bytes, 0, "every counted byte was given back");
}

// Invariant 3: when dead-lettering a refused row fails, the pipeline stops and the batch's offsets
// are never stored.
#[test]
fn a_failed_dead_letter_of_a_refused_row_stops_the_pipeline() {
    let dead_letter = RecordingDeadLetter { fail: true, ..RecordingDeadLetter::default() };
    let mut cfg = config(1, 1);
    cfg.error_policy = ErrorPolicy::DeadLetter;
    let pipeline =
        Pipeline::start(cfg, || PassThrough, RefusesFirstRow::default(), Some(Arc::new(dead_letter))).unwrap();
    let stored = Stored::default();
    pipeline.handle().add_lane(Box::new(MemLane::new(0, Some(1_000), &stored)));
    let wake = pipeline.wait(Duration::from_secs(20));
    pipeline.abort();
    assert!(matches!(wake, Wake::Fatal(ref m) if m.contains("the dead-letter topic is gone")), "{wake:?}");
    assert_eq!(stored.lock().unwrap().get(&0).copied().unwrap_or(0), 0, "no batch completed");
}

/// A sink whose start-up check says the table does not match.
struct MismatchedTable;

impl Sink for MismatchedTable {
    async fn write(&self, _shard: usize, _batch: &Batch) -> Result<(), SinkError> {
        Ok(())
    }

    async fn check(&self) -> Result<(), SinkError> {
        Err(SinkError::fatal("column `total`: the table has Float32, the pipeline writes Float64"))
    }
}

/// A source that records whether it was started.
struct WatchedSource(Arc<AtomicU64>);

impl Source for WatchedSource {
    fn start(&mut self, _pipeline: etl_runtime::PipelineHandle) -> Result<(), SourceError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

// A fatal start-up check is a start-up error (exit code 2) and nothing is consumed.
#[test]
fn a_fatal_sink_check_stops_before_the_source_starts() {
    let started = Arc::new(AtomicU64::new(0));
    let outcome = etl_runtime::run(config(1, 1), WatchedSource(started.clone()), || PassThrough, MismatchedTable, None);
    assert!(matches!(outcome, RunOutcome::Startup(ref m) if m.contains("column `total`")), "{outcome:?}");
    assert_eq!(outcome.exit_code(), 2);
    assert_eq!(started.load(Ordering::SeqCst), 0, "the source must not start");
}

/// Passes every record through, except that record `offset` finds its dependency (a schema
/// registry) unavailable while `failures` lasts (forever when it starts at `u64::MAX`).
struct UnavailableAt {
    offset: i64,
    failures: Arc<AtomicU64>,
}

impl etl_runtime::Chain for UnavailableAt {
    fn process(
        &mut self,
        record: &etl_runtime::Record<'_>,
        out: &mut etl_runtime::RowOut<'_>,
    ) -> Result<(), etl_runtime::RecordError> {
        if record.offset == self.offset && self.failures.load(Ordering::SeqCst) > 0 {
            self.failures.fetch_sub(u64::from(self.failures.load(Ordering::SeqCst) != u64::MAX), Ordering::SeqCst);
            return Err(etl_runtime::RecordError::new(
                etl_runtime::RecordErrorKind::Unavailable,
                "schema registry: HTTP 503",
            ));
        }
        common::PassThrough.process(record, out)
    }
}

fn run_with_unavailable(failures: u64, timeout: Duration) -> (common::RecordingSink, Stored, String, Duration) {
    let sink = common::RecordingSink::default();
    let mut cfg = config(1, 1);
    cfg.error_policy = ErrorPolicy::Skip;
    cfg.unavailable_timeout = timeout;
    let failures = Arc::new(AtomicU64::new(failures));
    let pipeline =
        Pipeline::start(cfg, move || UnavailableAt { offset: 10, failures: failures.clone() }, sink.clone(), None)
            .unwrap();
    let stored = Stored::default();
    let started = std::time::Instant::now();
    pipeline.handle().add_lane(Box::new(MemLane::new(0, Some(1_000), &stored)));
    let mut stored_below = true;
    let done = wait_for(Duration::from_secs(30), || {
        let next = stored.lock().unwrap().get(&0).copied().unwrap_or(0);
        // While the record at offset 10 is held, nothing at or past it is stored.
        stored_below &= next <= 10 || sink.rows.lock().unwrap().contains_key(&(0, 10)) || started.elapsed() >= timeout;
        next == 1_000
    });
    let elapsed = started.elapsed();
    let metrics = pipeline.metrics_text();
    let report = pipeline.shutdown(Duration::from_secs(5));
    assert!(done, "every offset is stored in the end: {:?}", stored.lock().unwrap());
    assert!(stored_below, "no offset was stored past the held record");
    assert!(report.fatal.is_none(), "an unavailable dependency never stops the pipeline: {:?}", report.fatal);
    (sink, stored, metrics, elapsed)
}

// A dependency that is down for a while (a registry blip) neither drops the record nor stops the
// pipeline: the record is held with its lane paused and tried again with backoff, and every record
// arrives once, the held one included.
#[test]
fn an_unavailable_dependency_holds_the_record_and_loses_nothing() {
    let (sink, stored, metrics, _) = run_with_unavailable(3, Duration::from_secs(60));
    let total = sink.assert_exactly_once(&stored.lock().unwrap());
    assert_eq!(total, 1_000);
    assert_eq!(metric(&metrics, "etl_records_unavailable_retries_total"), 3.0, "{metrics}");
    assert!(metric(&metrics, "etl_backpressure_pause_events_total") >= 1.0, "the lane paused while it waited");
}

// A dependency that stays down makes the record a record error only once `unavailable_timeout`
// (`format.avro.registry_timeout`) has passed since its first failure; `errors.policy: skip`
// then drops it and the lane goes on.
#[test]
fn an_unavailable_dependency_holds_the_record_until_the_timeout() {
    let timeout = Duration::from_millis(700);
    let (sink, _, metrics, elapsed) = run_with_unavailable(u64::MAX, timeout);
    assert!(elapsed >= timeout, "the record was given up after {elapsed:?}, before the timeout {timeout:?}");
    let rows = sink.rows.lock().unwrap();
    assert!(!rows.contains_key(&(0, 10)), "the record that never decoded is skipped");
    assert_eq!(rows.len(), 999, "every other record arrives");
    assert_eq!(metric(&metrics, r#"etl_records_dropped_total{reason="error"}"#), 1.0, "{metrics}");
    assert!(metric(&metrics, "etl_records_unavailable_retries_total") >= 3.0, "retried with backoff: {metrics}");
}
