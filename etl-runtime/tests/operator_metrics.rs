//! The metrics an operator alerts on and graphs (examples/monitoring): end-to-end latency per
//! durable batch, the checkpoint's watermark age, the memory bound and the budget's watermarks.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{GatedSink, MemLane, PassThrough, RecordingSink, Stored, config, metric, metric_opt, wait_for};
use etl_runtime::{MemoryBound, Pipeline};

/// Milliseconds since the Unix epoch.
fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// A lane of `end` records whose Kafka timestamps are 10 s old.
fn stamped_10_s_ago(partition: i32, end: i64, stored: &Stored) -> MemLane {
    MemLane { timestamp_ms: Some(now_ms() - 10_000), ..MemLane::new(partition, Some(end), stored) }
}

/// A metric summed over the shards 0 and 1.
fn both_shards(text: &str, name: &str) -> f64 {
    metric(text, &format!(r#"{name}{{output="",shard="0"}}"#))
        + metric(text, &format!(r#"{name}{{output="",shard="1"}}"#))
}

// Records stamped 10 s ago reach a sink that answers at once: every durable batch is observed once
// in etl_end_to_end_latency_seconds, at 10 s and a little more; records without a timestamp are
// not observed at all.
#[test]
fn end_to_end_latency_is_observed_once_per_durable_batch_from_the_kafka_timestamp() {
    let sink = RecordingSink::default();
    let pipeline = Pipeline::start(config(1, 2), || PassThrough, sink.clone(), None).unwrap();
    let stored = Stored::default();
    pipeline.handle().add_lane(Box::new(stamped_10_s_ago(0, 2_000, &stored)));
    assert!(wait_for(Duration::from_secs(10), || stored.lock().unwrap().get(&0) == Some(&2_000)));

    let text = pipeline.metrics_text();
    let count = both_shards(&text, "etl_end_to_end_latency_seconds_count");
    let sum = both_shards(&text, "etl_end_to_end_latency_seconds_sum");
    let batches = sink.batches.load(Ordering::Relaxed) as f64;
    assert!(batches > 1.0, "2,000 rows of 64 bytes make several 16 KiB batches");
    assert_eq!(count, batches, "one observation per durable batch:\n{text}");
    let mean = sum / count;
    assert!((10.0..20.0).contains(&mean), "mean latency {mean} s for records stamped 10 s ago");

    // A partition whose records carry no timestamp adds batches but no observation.
    let before = sink.batches.load(Ordering::Relaxed);
    pipeline.handle().add_lane(Box::new(MemLane::new(1, Some(2_000), &stored)));
    assert!(wait_for(Duration::from_secs(10), || stored.lock().unwrap().get(&1) == Some(&2_000)));
    assert!(sink.batches.load(Ordering::Relaxed) > before);
    let text = pipeline.metrics_text();
    assert_eq!(both_shards(&text, "etl_end_to_end_latency_seconds_count"), count);
    assert_eq!(metric(&text, "etl_memory_bound_bytes"), 0.0, "no bound without a generated main");
    assert!(pipeline.shutdown(Duration::from_secs(5)).complete);
}

// While the sink holds every write, the partition's stored offset stands still with records past
// it, and etl_checkpoint_watermark_age_seconds grows with the time held: it reaches 3 s, never
// exceeds the time since the records arrived, and never goes back. Once the writes land it falls
// back to 0 while the lane (caught up, not ended) and its series remain.
#[test]
fn the_watermark_age_grows_while_records_wait_and_falls_to_zero_once_they_are_durable() {
    let sink = GatedSink::default();
    let pipeline = Pipeline::start(config(1, 2), || PassThrough, sink.clone(), None).unwrap();
    let stored = Stored::default();
    let added = Instant::now();
    pipeline.handle().add_lane(Box::new(MemLane { endless: true, ..stamped_10_s_ago(3, 500, &stored) }));
    let series = r#"etl_checkpoint_watermark_age_seconds{partition="3",topic="orders"}"#;

    // Sampled until it reaches 3 s: bounded above by the time since the lane was added (on a busy
    // machine the once-a-second report may come late, never early), and monotonic.
    let mut previous = 0.0;
    let reached = wait_for(Duration::from_secs(30), || {
        let text = pipeline.metrics_text();
        // The series appears once the pipeline thread has taken the lane.
        let Some(age) = metric_opt(&text, series) else { return false };
        let since_added = added.elapsed().as_secs_f64();
        assert!(age <= since_added, "age {age} s only {since_added} s after the records arrived:\n{text}");
        assert!(age >= previous, "the age went back from {previous} s to {age} s");
        previous = age;
        age >= 3.0
    });
    assert!(reached, "the age never reached 3 s with every write held:\n{}", pipeline.metrics_text());
    assert!(stored.lock().unwrap().get(&3).is_none_or(|&s| s == 0), "nothing was durable, nothing past 0 stored");

    // The lane read everything and takes no turns while it waits for its writes: its lag still
    // grows, from records stamped 10 s before they arrived.
    let text = pipeline.metrics_text();
    let (age, lag) = (metric(&text, series), metric(&text, r#"etl_source_lag_seconds{partition="3",topic="orders"}"#));
    let bound = 10.0 + added.elapsed().as_secs_f64();
    assert!(lag >= 10.0 + age - 1.0 && lag <= bound, "lag {lag} s, age {age} s, at most {bound} s");
    sink.open.store(true, Ordering::Release);
    assert!(wait_for(Duration::from_secs(10), || stored.lock().unwrap().get(&3) == Some(&500)));
    assert!(
        wait_for(Duration::from_secs(5), || metric(&pipeline.metrics_text(), series) == 0.0),
        "the age falls to 0 once everything is stored:\n{}",
        pipeline.metrics_text()
    );
    assert!(pipeline.shutdown(Duration::from_secs(5)).complete);
}

// etl_memory_bound_bytes is gen --memory's bound for the most partitions owned at once: the
// fixed part before any lane, growing with lanes, not shrinking when they go. The budget's
// watermarks are exported beside it.
#[test]
fn the_memory_bound_follows_the_most_partitions_owned_and_the_watermarks_are_exported() {
    let mut cfg = config(2, 2);
    cfg.memory_bound = Some(MemoryBound { fixed_bytes: 64 << 20, per_partition_bytes: 19 << 20 });
    let max = cfg.backpressure.max_inflight_bytes as f64;
    let (high, low) = (max * cfg.backpressure.high_ratio, max * cfg.backpressure.low_ratio);
    let pipeline = Pipeline::start(cfg, || PassThrough, RecordingSink::default(), None).unwrap();
    let bound = || metric(&pipeline.metrics_text(), "etl_memory_bound_bytes");
    assert_eq!(bound(), f64::from(64 << 20));

    let stored = Stored::default();
    for partition in 0..3 {
        pipeline.handle().add_lane(Box::new(MemLane::new(partition, Some(10), &stored)));
    }
    assert_eq!(bound(), f64::from((64 << 20) + 3 * (19 << 20)));
    assert!(wait_for(Duration::from_secs(5), || pipeline.handle().live_lanes() == 0), "finished lanes drain away");
    pipeline.handle().add_lane(Box::new(MemLane::new(7, Some(10), &stored)));
    assert_eq!(bound(), f64::from((64 << 20) + 3 * (19 << 20)), "the peak stays");

    let text = pipeline.metrics_text();
    assert_eq!(metric(&text, "etl_backpressure_high_watermark_bytes"), high.trunc());
    assert_eq!(metric(&text, "etl_backpressure_low_watermark_bytes"), low.trunc());
    assert!(metric(&text, "process_resident_memory_bytes") > 0.0, "RSS is exported:\n{text}");
    assert!(metric(&text, "process_start_time_seconds") > 0.0);
    assert!(pipeline.shutdown(Duration::from_secs(5)).complete);
}
