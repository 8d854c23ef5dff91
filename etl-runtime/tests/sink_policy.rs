//! What the runtime does with rows a sink refuses, and with a sink whose start-up check
//! fails: DESIGN §3 `errors.policy` for refused rows, exit code 2 for a bad sink.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{MemLane, PassThrough, Stored, config, metric, wait_for};
use etl_runtime::{
    Batch, ErrorPolicy, Pipeline, RunOutcome, Sink, SinkError, SinkErrorKind, Source, SourceError, Wake,
};

/// Refuses the first row of every batch, writing the rest; counts the rows it kept.
#[derive(Clone, Default)]
struct RefusesFirstRow {
    kept: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
}

impl Sink for RefusesFirstRow {
    async fn write(&self, _shard: usize, batch: &Batch) -> Result<(), SinkError> {
        self.kept.fetch_add(batch.rows() - 1, Ordering::SeqCst);
        self.refused.fetch_add(1, Ordering::SeqCst);
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
