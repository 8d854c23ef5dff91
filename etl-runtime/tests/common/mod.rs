//! Shared pieces of the integration tests: in-memory lanes, recording sinks, a small configuration.
#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etl_runtime::{
    BackpressureConfig, Batch, BatchConfig, Chain, Lane, Record, RecordError, RowOut, RuntimeConfig, Sink, SinkError,
    SourceError,
};

/// Every row in these tests is this long: partition (4 bytes), offset (8 bytes), padding.
pub const ROW: usize = 64;

/// The offsets each partition stored, shared between lanes and the test.
pub type Stored = Arc<Mutex<BTreeMap<i32, i64>>>;

/// An in-memory lane that produces records as fast as it is asked, up to `end` (exclusive) if set.
pub struct MemLane {
    pub partition: i32,
    pub next: i64,
    pub end: Option<i64>,
    pub payload: Vec<u8>,
    pub paused: bool,
    pub stored: Stored,
    /// Set when `next` is called while paused, which the runtime must never do.
    pub polled_while_paused: Arc<AtomicBool>,
    /// The Kafka timestamp every record carries (`None`: records without one).
    pub timestamp_ms: Option<i64>,
    /// The lane never finishes, even past `end` (a partition that is caught up, not ended): it
    /// stays owned, with its metric series, until it is drained.
    pub endless: bool,
}

impl MemLane {
    pub fn new(partition: i32, end: Option<i64>, stored: &Stored) -> Self {
        MemLane {
            partition,
            next: 0,
            end,
            payload: vec![0; ROW],
            paused: false,
            stored: stored.clone(),
            polled_while_paused: Arc::new(AtomicBool::new(false)),
            timestamp_ms: None,
            endless: false,
        }
    }
}

impl Lane for MemLane {
    fn topic(&self) -> &str {
        "orders"
    }

    fn partition(&self) -> i32 {
        self.partition
    }

    fn next(&mut self) -> Option<Result<Record<'_>, SourceError>> {
        if self.paused {
            self.polled_while_paused.store(true, Ordering::SeqCst);
            return None;
        }
        if self.end.is_some_and(|end| self.next >= end) {
            return None;
        }
        let offset = self.next;
        self.next += 1;
        self.payload[..4].copy_from_slice(&self.partition.to_le_bytes());
        self.payload[4..12].copy_from_slice(&offset.to_le_bytes());
        Some(Ok(Record {
            payload: Some(&self.payload),
            key: None,
            topic: "orders",
            partition: self.partition,
            offset,
            timestamp_ms: self.timestamp_ms,
            headers: etl_runtime::Headers::NONE,
        }))
    }

    fn is_finished(&self) -> bool {
        !self.endless && self.end.is_some_and(|end| self.next >= end)
    }

    fn pause(&mut self) {
        self.paused = true;
    }

    fn resume(&mut self) {
        self.paused = false;
    }

    fn store_offset(&mut self, next_offset: i64) -> Result<(), SourceError> {
        let mut stored = self.stored.lock().unwrap();
        let previous = stored.insert(self.partition, next_offset);
        assert!(previous.is_none_or(|p| p < next_offset), "stored offsets must grow");
        Ok(())
    }
}

/// Copies each payload as one row, round-robin over the shards.
pub struct PassThrough;

impl Chain for PassThrough {
    fn process(&mut self, record: &Record<'_>, out: &mut RowOut<'_>) -> Result<(), RecordError> {
        let shard = out.round_robin();
        out.push_row(shard, |buf| buf.extend_from_slice(record.payload.unwrap_or_default()));
        Ok(())
    }
}

/// Decodes the (partition, offset) pairs of a batch's fixed-width rows.
pub fn rows_of(batch: &Batch) -> Vec<(i32, i64)> {
    let mut rows = Vec::new();
    for chunk in batch.chunks() {
        assert_eq!(chunk.bytes().len(), chunk.rows() as usize * ROW);
        for row in chunk.bytes().chunks(ROW) {
            let partition = i32::from_le_bytes(row[..4].try_into().unwrap());
            let offset = i64::from_le_bytes(row[4..12].try_into().unwrap());
            rows.push((partition, offset));
        }
    }
    rows
}

/// A sink that sleeps `delay` per batch and counts every row it receives.
#[derive(Clone, Default)]
pub struct RecordingSink {
    pub delay: Duration,
    pub rows: Arc<Mutex<HashMap<(i32, i64), u32>>>,
    pub batches: Arc<AtomicU64>,
}

impl RecordingSink {
    pub fn throttled(delay: Duration) -> Self {
        RecordingSink { delay, ..RecordingSink::default() }
    }

    /// Asserts every partition's rows are exactly the offsets below its stored offset, once each.
    pub fn assert_exactly_once(&self, stored: &BTreeMap<i32, i64>) -> u64 {
        let rows = self.rows.lock().unwrap();
        let mut total = 0;
        for (&partition, &next) in stored {
            for offset in 0..next {
                assert_eq!(rows.get(&(partition, offset)).copied(), Some(1), "partition {partition} offset {offset}");
            }
            total += next as u64;
        }
        assert_eq!(rows.len() as u64, total, "rows past the stored offsets");
        total
    }
}

impl Sink for RecordingSink {
    async fn write(&self, _shard: usize, batch: &Batch) -> Result<(), SinkError> {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let mut rows = self.rows.lock().unwrap();
        for row in rows_of(batch) {
            *rows.entry(row).or_insert(0) += 1;
        }
        self.batches.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    async fn check(&self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// A sink that holds every write until the gate opens, then records it.
#[derive(Clone, Default)]
pub struct GatedSink {
    pub open: Arc<AtomicBool>,
    pub inner: RecordingSink,
}

impl Sink for GatedSink {
    async fn write(&self, shard: usize, batch: &Batch) -> Result<(), SinkError> {
        while !self.open.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.inner.write(shard, batch).await
    }

    async fn check(&self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// A small configuration that satisfies the sizing rule.
pub fn config(threads: usize, shards: usize) -> RuntimeConfig {
    RuntimeConfig {
        threads,
        shards,
        backpressure: BackpressureConfig {
            max_inflight_bytes: 1 << 20,
            high_ratio: 0.9,
            low_ratio: 0.5,
            min_pause: Duration::from_millis(20),
        },
        batch: BatchConfig { max_rows: 1000, max_bytes: 16 << 10, linger: Duration::from_millis(5) },
        chunk_target_bytes: 1024,
        drain_timeout: Duration::from_secs(5),
        ..RuntimeConfig::default()
    }
}

/// Polls `condition` every few milliseconds until it holds or `limit` passes; returns whether it held.
pub fn wait_for(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    condition()
}

/// The value of one series (its name and labels exactly, e.g. `etl_queue_depth{output="",shard="0"}`) in the
/// Prometheus text. A series that is not exported panics: it never passes for a zero.
pub fn metric(text: &str, series: &str) -> f64 {
    metric_opt(text, series).unwrap_or_else(|| panic!("no series {series} in /metrics:\n{text}"))
}

/// The value of one series, or `None` when it is not exported.
pub fn metric_opt(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}
