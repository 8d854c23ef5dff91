//! The stall watchdog end to end through the engine (Invariant 9): a lane whose source holds
//! records and delivers none is counted, recovered through `Lane::refetch`, and stops the pipeline
//! (the fatal path of exit code 1) when it stalls again, storing nothing past durable data.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{PassThrough, ROW, RecordingSink, Stored, config, metric, wait_for};
use etl_runtime::{Backlog, Lane, Pipeline, Record, RuntimeConfig, SourceError, Wake};

const STALL_TIMEOUT: Duration = Duration::from_secs(2);
const END: i64 = 5_000;
const STALL_AT: i64 = 1_000;

/// A source partition of `END` records that stops delivering at `STALL_AT` while it says it holds
/// the rest, as a partition whose fetch librdkafka dropped would; `refetch` restarts it unless the
/// source is broken for good.
struct StallingLane {
    next: i64,
    stalled: bool,
    broken: bool,
    refetches: Arc<AtomicU64>,
    stored: Stored,
    payload: Vec<u8>,
}

impl StallingLane {
    fn new(broken: bool, stored: &Stored, refetches: &Arc<AtomicU64>) -> Self {
        StallingLane {
            next: 0,
            stalled: false,
            broken,
            refetches: refetches.clone(),
            stored: stored.clone(),
            payload: vec![0; ROW],
        }
    }
}

impl Lane for StallingLane {
    fn topic(&self) -> &str {
        "orders"
    }

    fn partition(&self) -> i32 {
        0
    }

    fn next(&mut self) -> Option<Result<Record<'_>, SourceError>> {
        if self.next == STALL_AT && self.refetches.load(Ordering::SeqCst) == 0 {
            self.stalled = true;
        }
        if self.stalled || self.next >= END {
            return None;
        }
        let offset = self.next;
        self.next += 1;
        self.payload[4..12].copy_from_slice(&offset.to_le_bytes());
        Some(Ok(Record {
            payload: Some(&self.payload),
            key: None,
            topic: "orders",
            partition: 0,
            offset,
            timestamp_ms: None,
            headers: etl_runtime::Headers::NONE,
        }))
    }

    fn pause(&mut self) {}

    fn resume(&mut self) {}

    fn store_offset(&mut self, next_offset: i64) -> Result<(), SourceError> {
        self.stored.lock().unwrap().insert(0, next_offset);
        Ok(())
    }

    fn backlog(&self) -> Backlog {
        Backlog::Records(END - self.next)
    }

    fn refetch(&mut self) -> Result<(), SourceError> {
        self.refetches.fetch_add(1, Ordering::SeqCst);
        self.stalled = self.broken;
        Ok(())
    }

    fn describe_fetch(&self) -> String {
        format!("next_offset={}", self.next)
    }
}

fn watched() -> RuntimeConfig {
    RuntimeConfig { stall_timeout: STALL_TIMEOUT, ..config(1, 1) }
}

// Invariant 9: a stalled partition is counted in etl_source_stalled_partitions, its fetch restarted
// once, and it is healthy again (the gauge back at 0) once it caught up; every record arrives once.
#[test]
fn a_stalled_lane_is_counted_and_recovered_by_restarting_its_fetch() {
    let sink = RecordingSink::default();
    let pipeline = Pipeline::start(watched(), || PassThrough, sink.clone(), None).unwrap();
    let (stored, refetches) = (Stored::default(), Arc::new(AtomicU64::new(0)));
    pipeline.handle().add_lane(Box::new(StallingLane::new(false, &stored, &refetches)));
    assert!(wait_for(Duration::from_secs(10), || stored.lock().unwrap().get(&0) == Some(&STALL_AT)));
    let stalled_at = Instant::now();
    let mut seen_stalled = false;
    assert!(wait_for(STALL_TIMEOUT * 3, || {
        seen_stalled |= metric(&pipeline.metrics_text(), "etl_source_stalled_partitions") == 1.0;
        seen_stalled
    }));
    assert!(stalled_at.elapsed() >= STALL_TIMEOUT - Duration::from_secs(1), "counted before stall_timeout");
    assert!(wait_for(Duration::from_secs(10), || stored.lock().unwrap().get(&0) == Some(&END)));
    assert!(wait_for(Duration::from_secs(5), || {
        metric(&pipeline.metrics_text(), "etl_source_stalled_partitions") == 0.0
    }));
    let metrics = pipeline.metrics_text();
    let report = pipeline.shutdown(Duration::from_secs(5));
    assert_eq!(report.fatal, None);
    assert_eq!(refetches.load(Ordering::SeqCst), 1, "one recovery");
    assert_eq!(metric(&metrics, "etl_source_stall_recoveries_total"), 1.0);
    assert_eq!(sink.assert_exactly_once(&stored.lock().unwrap()), END as u64);
}

// Invariant 9: a lane that stalls again for stall_timeout after its recovery stops the pipeline
// (a fatal error: exit code 1), between two and three stall timeouts after it stopped delivering,
// and no offset past the records durably written is stored.
#[test]
fn a_lane_that_stalls_again_stops_the_pipeline_without_storing_past_durable_data() {
    let sink = RecordingSink::default();
    let pipeline = Pipeline::start(watched(), || PassThrough, sink.clone(), None).unwrap();
    let (stored, refetches) = (Stored::default(), Arc::new(AtomicU64::new(0)));
    pipeline.handle().add_lane(Box::new(StallingLane::new(true, &stored, &refetches)));
    assert!(wait_for(Duration::from_secs(10), || stored.lock().unwrap().get(&0) == Some(&STALL_AT)));
    let stalled_at = Instant::now();
    let wake = pipeline.wait(STALL_TIMEOUT * 4);
    let elapsed = stalled_at.elapsed();
    let Wake::Fatal(message) = wake else { panic!("the pipeline did not stop: {wake:?}") };
    assert!(message.contains("partition orders[0] stalled again"), "{message}");
    assert!(
        elapsed >= STALL_TIMEOUT * 2 - Duration::from_secs(1) && elapsed <= STALL_TIMEOUT * 3 + Duration::from_secs(1),
        "stopped {elapsed:?} after the stall, stall_timeout {STALL_TIMEOUT:?}"
    );
    assert_eq!(refetches.load(Ordering::SeqCst), 1, "one recovery before giving up");
    let report = pipeline.abort();
    assert!(report.fatal.is_some());
    let stored = stored.lock().unwrap().clone();
    assert_eq!(stored.get(&0), Some(&STALL_AT), "nothing stored past the durable records");
    assert_eq!(sink.assert_exactly_once(&stored), STALL_AT as u64);
}
