//! The Prometheus metrics of DESIGN §5, registered in one registry the runtime owns.

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// One metric's documentation: the source of `docs/METRICS.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricDoc {
    /// The metric name.
    pub name: &'static str,
    /// `counter`, `gauge` or `histogram`.
    pub kind: &'static str,
    /// The label names.
    pub labels: &'static [&'static str],
    /// What it measures.
    pub help: &'static str,
}

/// Every metric the runtime exports, with its type, labels and meaning.
pub fn metric_catalogue() -> Vec<MetricDoc> {
    CATALOGUE.to_vec()
}

const CATALOGUE: &[MetricDoc] = &[
    MetricDoc {
        name: "etl_queue_depth",
        kind: "gauge",
        labels: &["shard"],
        help: "Chunks waiting in the shard queue between the pipeline threads and the shard worker.",
    },
    MetricDoc {
        name: "etl_queue_full_events_total",
        kind: "counter",
        labels: &["shard"],
        help: "Chunks the shard queue rejected because it was full; each one pauses the lanes sending to that shard.",
    },
    MetricDoc {
        name: "etl_backpressure_paused",
        kind: "gauge",
        labels: &[],
        help: "1 while at least one lane is paused by backpressure, else 0.",
    },
    MetricDoc {
        name: "etl_backpressure_pause_events_total",
        kind: "counter",
        labels: &[],
        help: "Lane pauses (a queue rejection or the budget reaching its high watermark); fast growth means flapping or an undersized budget.",
    },
    MetricDoc {
        name: "etl_backpressure_inflight_bytes",
        kind: "gauge",
        labels: &[],
        help: "Bytes sealed into chunks and not yet durably written (queued chunks plus batches being written).",
    },
    MetricDoc {
        name: "etl_source_lag_records",
        kind: "gauge",
        labels: &["partition"],
        help: "Records between the partition's high watermark and the consumer position, as reported by the source.",
    },
    MetricDoc {
        name: "etl_source_lag_seconds",
        kind: "gauge",
        labels: &["partition"],
        help: "Age of the newest consumed record's timestamp.",
    },
    MetricDoc {
        name: "etl_sink_errors_total",
        kind: "counter",
        labels: &["shard"],
        help: "Failed sink write attempts, retried or not.",
    },
    MetricDoc {
        name: "etl_sink_retries_total",
        kind: "counter",
        labels: &["shard"],
        help: "Sink write attempts made again after a retryable error.",
    },
    MetricDoc { name: "etl_records_in_total", kind: "counter", labels: &[], help: "Records taken from the source." },
    MetricDoc {
        name: "etl_records_out_total",
        kind: "counter",
        labels: &[],
        help: "Rows durably written by the sink.",
    },
    MetricDoc {
        name: "etl_records_dropped_total",
        kind: "counter",
        labels: &["reason"],
        help: "Records that produced no row: reason is filtered (the chain emitted nothing), error (skipped by errors.policy), tombstone or dead_letter.",
    },
    MetricDoc { name: "etl_sink_batch_rows", kind: "histogram", labels: &["shard"], help: "Rows per written batch." },
    MetricDoc {
        name: "etl_sink_batch_bytes",
        kind: "histogram",
        labels: &["shard"],
        help: "Encoded bytes per written batch.",
    },
    MetricDoc {
        name: "etl_sink_insert_duration_seconds",
        kind: "histogram",
        labels: &["shard"],
        help: "Duration of successful sink writes.",
    },
    MetricDoc {
        name: "etl_sink_replica_healthy",
        kind: "gauge",
        labels: &["shard", "replica"],
        help: "ClickHouse sink: 1 while the replica answers (its last request succeeded or none failed yet), 0 after a connection error, timeout or server error; replica is its URL without credentials.",
    },
    MetricDoc {
        name: "etl_sink_errors_by_class_total",
        kind: "counter",
        labels: &["shard", "class"],
        help: "ClickHouse sink: failed requests by class: retryable (retried, replica rotated), fatal (stops the pipeline) or data (ClickHouse refused rows; they are isolated by bisection).",
    },
    MetricDoc {
        name: "etl_source_commits_total",
        kind: "counter",
        labels: &[],
        help: "Offset commits reported by the source.",
    },
    MetricDoc {
        name: "etl_source_committed_offset",
        kind: "gauge",
        labels: &["partition"],
        help: "The last committed offset per partition, as reported by the source.",
    },
    MetricDoc {
        name: "etl_build_info",
        kind: "gauge",
        labels: &["pipeline", "config_hash", "version"],
        help: "Always 1; the labels name the pipeline, its config hash and the binary version.",
    },
];

fn help(name: &str) -> &'static str {
    CATALOGUE.iter().find(|m| m.name == name).map_or("", |m| m.help)
}

fn opts(name: &str) -> Opts {
    Opts::new(name, help(name))
}

/// Metrics a sink owns. A sink is built before the pipeline whose registry serves `/metrics`, so
/// these are process-wide families that every pipeline's registry registers as well.
#[derive(Debug)]
pub(crate) struct SinkMetrics {
    pub(crate) replica_healthy: IntGaugeVec,
    pub(crate) errors_by_class: IntCounterVec,
}

/// The process-wide [`SinkMetrics`].
pub(crate) fn sink_metrics() -> &'static SinkMetrics {
    static METRICS: std::sync::OnceLock<SinkMetrics> = std::sync::OnceLock::new();
    METRICS.get_or_init(|| SinkMetrics {
        replica_healthy: IntGaugeVec::new(opts("etl_sink_replica_healthy"), &["shard", "replica"])
            .expect("static metric options are valid"),
        errors_by_class: IntCounterVec::new(opts("etl_sink_errors_by_class_total"), &["shard", "class"])
            .expect("static metric options are valid"),
    })
}

/// The runtime's metric handles. Per-shard handles are resolved once so hot paths do no label
/// look-ups.
#[derive(Debug, Clone)]
pub(crate) struct Metrics {
    pub(crate) registry: Registry,
    pub(crate) queue_depth: Vec<IntGauge>,
    pub(crate) queue_full: Vec<IntCounter>,
    pub(crate) paused: IntGauge,
    pub(crate) pause_events: IntCounter,
    pub(crate) inflight_bytes: IntGauge,
    pub(crate) lag_records: IntGaugeVec,
    pub(crate) lag_seconds: prometheus::GaugeVec,
    pub(crate) sink_errors: Vec<IntCounter>,
    pub(crate) sink_retries: Vec<IntCounter>,
    pub(crate) records_in: IntCounter,
    pub(crate) records_out: IntCounter,
    pub(crate) dropped_filtered: IntCounter,
    pub(crate) dropped_error: IntCounter,
    pub(crate) dropped_tombstone: IntCounter,
    pub(crate) dropped_dead_letter: IntCounter,
    pub(crate) dropped_sink_refused: IntCounter,
    pub(crate) batch_rows: Vec<Histogram>,
    pub(crate) batch_bytes: Vec<Histogram>,
    pub(crate) insert_duration: Vec<Histogram>,
    pub(crate) commits: IntCounter,
    pub(crate) committed_offset: IntGaugeVec,
}

impl Metrics {
    pub(crate) fn new(
        shards: usize,
        pipeline: &str,
        config_hash: &str,
        version: &str,
    ) -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let reg = |c: Box<dyn prometheus::core::Collector>| registry.register(c);
        let per_shard_gauge = IntGaugeVec::new(opts("etl_queue_depth"), &["shard"])?;
        let queue_full = IntCounterVec::new(opts("etl_queue_full_events_total"), &["shard"])?;
        let paused = IntGauge::with_opts(opts("etl_backpressure_paused"))?;
        let pause_events = IntCounter::with_opts(opts("etl_backpressure_pause_events_total"))?;
        let inflight_bytes = IntGauge::with_opts(opts("etl_backpressure_inflight_bytes"))?;
        let lag_records = IntGaugeVec::new(opts("etl_source_lag_records"), &["partition"])?;
        let lag_seconds = prometheus::GaugeVec::new(opts("etl_source_lag_seconds"), &["partition"])?;
        let sink_errors = IntCounterVec::new(opts("etl_sink_errors_total"), &["shard"])?;
        let sink_retries = IntCounterVec::new(opts("etl_sink_retries_total"), &["shard"])?;
        let records_in = IntCounter::with_opts(opts("etl_records_in_total"))?;
        let records_out = IntCounter::with_opts(opts("etl_records_out_total"))?;
        let dropped = IntCounterVec::new(opts("etl_records_dropped_total"), &["reason"])?;
        let hist = |name: &str, buckets: Vec<f64>| {
            HistogramVec::new(HistogramOpts::new(name, help(name)).buckets(buckets), &["shard"])
        };
        let batch_rows = hist("etl_sink_batch_rows", prometheus::exponential_buckets(1.0, 4.0, 11)?)?;
        let batch_bytes = hist("etl_sink_batch_bytes", prometheus::exponential_buckets(1024.0, 4.0, 10)?)?;
        let insert_duration =
            hist("etl_sink_insert_duration_seconds", prometheus::exponential_buckets(0.001, 2.0, 16)?)?;
        let commits = IntCounter::with_opts(opts("etl_source_commits_total"))?;
        let committed_offset = IntGaugeVec::new(opts("etl_source_committed_offset"), &["partition"])?;
        let build_info = IntGaugeVec::new(opts("etl_build_info"), &["pipeline", "config_hash", "version"])?;
        build_info.with_label_values(&[pipeline, config_hash, version]).set(1);

        reg(Box::new(per_shard_gauge.clone()))?;
        reg(Box::new(queue_full.clone()))?;
        reg(Box::new(paused.clone()))?;
        reg(Box::new(pause_events.clone()))?;
        reg(Box::new(inflight_bytes.clone()))?;
        reg(Box::new(lag_records.clone()))?;
        reg(Box::new(lag_seconds.clone()))?;
        reg(Box::new(sink_errors.clone()))?;
        reg(Box::new(sink_retries.clone()))?;
        reg(Box::new(records_in.clone()))?;
        reg(Box::new(records_out.clone()))?;
        reg(Box::new(dropped.clone()))?;
        reg(Box::new(batch_rows.clone()))?;
        reg(Box::new(batch_bytes.clone()))?;
        reg(Box::new(insert_duration.clone()))?;
        reg(Box::new(commits.clone()))?;
        reg(Box::new(committed_offset.clone()))?;
        reg(Box::new(build_info))?;
        reg(Box::new(sink_metrics().replica_healthy.clone()))?;
        reg(Box::new(sink_metrics().errors_by_class.clone()))?;

        let labels: Vec<String> = (0..shards).map(|s| s.to_string()).collect();
        let each = |f: &dyn Fn(&str) -> IntCounter| labels.iter().map(|l| f(l)).collect::<Vec<_>>();
        Ok(Metrics {
            queue_depth: labels.iter().map(|l| per_shard_gauge.with_label_values(&[l.as_str()])).collect(),
            queue_full: each(&|l| queue_full.with_label_values(&[l])),
            paused,
            pause_events,
            inflight_bytes,
            lag_records,
            lag_seconds,
            sink_errors: each(&|l| sink_errors.with_label_values(&[l])),
            sink_retries: each(&|l| sink_retries.with_label_values(&[l])),
            records_in,
            records_out,
            dropped_filtered: dropped.with_label_values(&["filtered"]),
            dropped_error: dropped.with_label_values(&["error"]),
            dropped_tombstone: dropped.with_label_values(&["tombstone"]),
            dropped_sink_refused: dropped.with_label_values(&["sink_refused"]),
            dropped_dead_letter: dropped.with_label_values(&["dead_letter"]),
            batch_rows: labels.iter().map(|l| batch_rows.with_label_values(&[l.as_str()])).collect(),
            batch_bytes: labels.iter().map(|l| batch_bytes.with_label_values(&[l.as_str()])).collect(),
            insert_duration: labels.iter().map(|l| insert_duration.with_label_values(&[l.as_str()])).collect(),
            commits,
            committed_offset,
            registry,
        })
    }

    /// Renders the registry in the Prometheus text format.
    pub(crate) fn render(&self) -> String {
        let encoder = prometheus::TextEncoder::new();
        encoder
            .encode_to_string(&self.registry.gather())
            .unwrap_or_else(|error| format!("# encoding failed: {error}\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every name of DESIGN §5 is registered and rendered, so scrapes and dashboards find them.
    #[test]
    fn catalogue_matches_registry() {
        let metrics = Metrics::new(2, "orders", "abc", "0.1.0").unwrap();
        metrics.lag_records.with_label_values(&["0"]).set(3);
        metrics.lag_seconds.with_label_values(&["0"]).set(1.5);
        metrics.committed_offset.with_label_values(&["0"]).set(7);
        sink_metrics().replica_healthy.with_label_values(&["0", "http://replica"]).set(1);
        sink_metrics().errors_by_class.with_label_values(&["0", "retryable"]).inc_by(0);
        let text = metrics.render();
        for doc in metric_catalogue() {
            assert!(text.contains(&format!("# TYPE {} {}", doc.name, doc.kind)), "{} missing:\n{text}", doc.name);
        }
        assert!(text.contains(r#"etl_build_info{config_hash="abc",pipeline="orders",version="0.1.0"} 1"#));
    }
}
