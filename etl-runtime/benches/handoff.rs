//! The hand-off path: records through a trivial chain into chunks, through the shard queues to the
//! shard workers and a null sink, and the acks back to the checkpointers, in records per second.

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use etl_runtime::{
    Batch, Chain, Lane, Pipeline, Record, RecordError, RowOut, RuntimeConfig, Sink, SinkError, SourceError,
};

const ROW: usize = 64;
const RECORDS_PER_LANE: i64 = 200_000;

/// Produces `end` fixed-size records as fast as it is asked.
struct BenchLane {
    partition: i32,
    next: i64,
    end: i64,
    payload: [u8; ROW],
}

impl Lane for BenchLane {
    fn topic(&self) -> &str {
        "orders"
    }

    fn partition(&self) -> i32 {
        self.partition
    }

    fn next(&mut self) -> Option<Result<Record<'_>, SourceError>> {
        if self.next >= self.end {
            return None;
        }
        let offset = self.next;
        self.next += 1;
        self.payload[..8].copy_from_slice(&offset.to_le_bytes());
        Some(Ok(Record {
            payload: Some(&self.payload),
            key: None,
            topic: "orders",
            partition: self.partition,
            offset,
            timestamp_ms: None,
            headers: etl_runtime::Headers::NONE,
        }))
    }

    fn is_finished(&self) -> bool {
        self.next >= self.end
    }

    fn pause(&mut self) {}

    fn resume(&mut self) {}

    fn store_offset(&mut self, _next_offset: i64) -> Result<(), SourceError> {
        Ok(())
    }
}

/// Copies the payload as one row, round-robin over the shards.
struct Copy;

impl Chain for Copy {
    fn process(&mut self, record: &Record<'_>, out: &mut RowOut<'_>) -> Result<(), RecordError> {
        let shard = out.round_robin();
        out.push_row(shard, |buf| buf.extend_from_slice(record.payload.unwrap_or_default()));
        Ok(())
    }
}

/// Accepts every batch at once.
struct NullSink;

impl Sink for NullSink {
    async fn write(&self, _shard: usize, _batch: &Batch) -> Result<(), SinkError> {
        Ok(())
    }

    async fn check(&self) -> Result<(), SinkError> {
        Ok(())
    }
}

fn handoff(c: &mut Criterion) {
    let mut group = c.benchmark_group("handoff");
    group.sample_size(10).measurement_time(Duration::from_secs(10));
    for (threads, shards) in [(1, 1), (2, 2)] {
        // With an instant sink, a queue rejection is a scheduling hiccup, not a slow sink: a short
        // min_pause keeps the figure about the hand-off rather than about the pause policy.
        let mut config = RuntimeConfig { threads, shards, ..RuntimeConfig::default() };
        config.backpressure.min_pause = Duration::from_millis(1);
        let pipeline = Pipeline::start(config, || Copy, NullSink, None).expect("pipeline starts");
        let handle = pipeline.handle();
        let lanes = threads as i32;
        group.throughput(Throughput::Elements(RECORDS_PER_LANE as u64 * lanes as u64));
        group.bench_function(format!("{threads}_threads_{shards}_shards_null_sink"), |b| {
            b.iter(|| {
                for partition in 0..lanes {
                    handle.add_lane(Box::new(BenchLane {
                        partition,
                        next: 0,
                        end: RECORDS_PER_LANE,
                        payload: [7; ROW],
                    }));
                }
                // A finished lane leaves once every one of its rows is acknowledged.
                while handle.live_lanes() > 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
            });
        });
        pipeline.shutdown(Duration::from_secs(5));
    }
    group.finish();
}

criterion_group!(benches, handoff);
criterion_main!(benches);
