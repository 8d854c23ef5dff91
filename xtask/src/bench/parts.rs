//! Where the pipeline's CPU goes: the sum of its parts, each measured alone in the same run (the
//! honest limit of what a record must cost), the pipeline's CPU by thread, and `report.json`,
//! the figures a script or a reviewer reads without parsing Markdown.
//!
//! The parts, each in CPU seconds per million records of the topic:
//! - `consume`: the raw consumer (`bench-raw consume`), the whole process (the median of three
//!   reads, `limits::consume`);
//! - `decode`: the generated decoder alone, on the topic's own payloads (`benches/parts.rs`);
//! - `chain`: the rest of the generated chain on them: operators and row encoding (the whole
//!   chain's CPU less the decoder's);
//! - `native`: the Native transposition of the rows written (zero for `format: rowbinary`);
//! - `compress`: their lz4 compression, framed as the clickhouse crate frames it;
//! - `insert`: the raw inserter's CPU less that compression (it compresses as it sends).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use super::Measured;
use super::rates::per_million;

/// The parts, in the order of a record's path.
pub(crate) const PARTS: [(&str, &str); 6] = [
    ("consume", "librdkafka consume-and-discard (the raw consumer, every thread)"),
    ("decode", "the generated decoder alone"),
    ("chain", "operators and row encoding (the generated chain less its decoder)"),
    ("native", "the Native transposition of the rows"),
    ("compress", "lz4 of the insert bodies"),
    ("insert", "the raw inserter less its compression"),
];

/// Thread classes by name prefix, in the order they are reported: what each runs.
const THREADS: [(&str, &str, &str); 6] = [
    ("rdk:broker", "librdkafka_broker", "librdkafka broker threads (fetch requests, batch parsing)"),
    ("rdk:", "librdkafka_other", "librdkafka's main and internal threads (timers, statistics, the group)"),
    ("etl-pipeline-", "pipeline", "pipeline threads (decode, chain, row encoding, hand-off to the shards)"),
    ("etl-shard-", "shard_workers", "shard workers (batching, insert bookkeeping)"),
    ("etl-sink", "sink_runtime", "the sink's async runtime (HTTP, Native columns, compression; admin server)"),
    ("etl-kafka", "source_poller", "the source's event poller (rebalances, commits, statistics callbacks)"),
];

/// The class of a thread named `name` (its `comm`): a key of [`THREADS`], or `other` (the main
/// thread and helpers).
pub(crate) fn thread_class(name: &str) -> &'static str {
    THREADS.iter().find(|(prefix, ..)| name.starts_with(prefix)).map_or("other", |(_, key, _)| key)
}

/// The pipeline's threads' CPU seconds summed by class.
fn by_class(threads: &[(String, f64)]) -> BTreeMap<&'static str, f64> {
    let mut classes = BTreeMap::new();
    for (name, seconds) in threads {
        *classes.entry(thread_class(name)).or_insert(0.0) += seconds;
    }
    classes
}

/// Each part's CPU seconds per million records of the topic; `None` without the chain's parts.
pub(crate) fn parts(m: &Measured, records: u64) -> Option<Vec<(&'static str, f64)>> {
    let chain = m.chain_parts.as_ref()?;
    let (c, i) = (&m.consume, &m.insert);
    // The decoder and chain ran on a sample of the topic (its first records): per record, scaled.
    let sampled = |seconds: f64| seconds / chain["records"] * 1e6;
    let compress = i.values["compress_cpu_seconds"];
    let values = [
        c.cpu_per_million(),
        sampled(chain["decode_cpu_seconds"]),
        sampled((chain["chain_cpu_seconds"] - chain["decode_cpu_seconds"]).max(0.0)),
        per_million(i.values["native_cpu_seconds"], records),
        per_million(compress, records),
        per_million((i.values["cpu_seconds"] - compress).max(0.0), records),
    ];
    Some(PARTS.iter().map(|(name, _)| *name).zip(values).collect())
}

/// The Markdown section: the parts and their sum against the pipeline, then its threads against
/// the raw consumer's librdkafka threads.
pub(crate) fn markdown(out: &mut String, m: &Measured, records: u64) {
    let p = &m.pipeline;
    if let Some(parts) = parts(m, records) {
        let sum: f64 = parts.iter().map(|(_, v)| v).sum();
        let _ = writeln!(out, "\nThe sum of the parts, each measured alone in this run (CPU s per M records):\n");
        let _ = writeln!(out, "| part | what | CPU s / M |");
        let _ = writeln!(out, "|---|---|---|");
        for ((name, value), (_, what)) in parts.iter().zip(PARTS) {
            let _ = writeln!(out, "| {name} | {what} | {value:.3} |");
        }
        let _ = writeln!(out, "| **sum** | | **{sum:.3}** |");
        let _ = writeln!(
            out,
            "\n- the pipeline's client CPU {:.3} s/M = **{:.2}×** the sum of its parts (target ≤ 1.3×)",
            p.cpu_per_million(),
            p.cpu_per_million() / sum
        );
    }
    let classes = by_class(&p.threads);
    if classes.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nThe pipeline's CPU by thread (`/proc/PID/task/*/stat`, from the last scrape before the first record to \
         the last record done), s per M records:\n"
    );
    let _ = writeln!(out, "| threads | what | CPU s / M | share |");
    let _ = writeln!(out, "|---|---|---|---|");
    let total: f64 = classes.values().sum();
    let keys = THREADS.iter().map(|(_, key, what)| (*key, *what)).chain([("other", "the main thread and helpers")]);
    for (key, what) in keys {
        let seconds = classes.get(key).copied().unwrap_or(0.0);
        let _ = writeln!(
            out,
            "| {key} | {what} | {:.3} | {:.0}% |",
            per_million(seconds, records),
            100.0 * seconds / total.max(f64::MIN_POSITIVE)
        );
    }
    let (pipeline_rdk, raw_rdk) = librdkafka(m, records);
    let _ = writeln!(
        out,
        "\n- librdkafka's threads: pipeline {pipeline_rdk:.3} s/M, raw consumer {raw_rdk:.3} s/M: **{:.2}×** \
         (target ≤ 1.15×)",
        pipeline_rdk / raw_rdk.max(f64::MIN_POSITIVE)
    );
}

/// librdkafka's threads' CPU per million records: the pipeline's and the raw consumer's.
fn librdkafka(m: &Measured, records: u64) -> (f64, f64) {
    let classes = by_class(&m.pipeline.threads);
    let pipeline = classes.get("librdkafka_broker").copied().unwrap_or(0.0)
        + classes.get("librdkafka_other").copied().unwrap_or(0.0);
    let raw = m.consume.values.get("cpu_librdkafka_seconds").copied().unwrap_or(0.0);
    (per_million(pipeline, records), per_million(raw, records))
}

/// `report.json`: the run's headline figures under stable keys.
pub(crate) fn json(m: &Measured, records: u64, partitions: u32, commit: &str) -> Value {
    let (c, i, p) = (&m.consume, &m.insert, &m.pipeline);
    let whole_box =
        |client: f64, load: &super::cpu_time::Load| per_million(client + load.broker + load.clickhouse, records);
    let mut parts_json = serde_json::Map::new();
    if let Some(parts) = parts(m, records) {
        let sum: f64 = parts.iter().map(|(_, v)| v).sum();
        parts_json.insert("sum_cpu_s_per_m".into(), json!(sum));
        for (name, value) in &parts {
            parts_json.insert(format!("{name}_cpu_s_per_m"), json!(value));
        }
    }
    let threads: serde_json::Map<String, Value> = by_class(&p.threads)
        .into_iter()
        .map(|(class, seconds)| (format!("{class}_cpu_s_per_m"), json!(per_million(seconds, records))))
        .collect();
    let (pipeline_rdk, raw_rdk) = librdkafka(m, records);
    let sum = parts_json.get("sum_cpu_s_per_m").and_then(Value::as_f64);
    json!({
        "commit": commit,
        "records": records,
        "partitions": partitions,
        "pipeline": {
            "records_per_s": p.records_per_second(),
            "client_cpu_s_per_m": p.cpu_per_million(),
            "whole_box_cpu_s_per_m": whole_box(p.cpu_seconds, &p.load),
            "client_cpu_over_parts_sum": sum.map(|s| p.cpu_per_million() / s),
            "librdkafka_cpu_s_per_m": pipeline_rdk,
            "librdkafka_over_raw_consumer": pipeline_rdk / raw_rdk.max(f64::MIN_POSITIVE),
            "threads": threads,
            "peak_rss_bytes": p.peak_rss,
            "join_s": p.join_seconds,
            "join_cpu_s": p.join_cpu_seconds,
        },
        "parts": parts_json,
        "raw_source": {
            "records_per_s": c.records_per_second(),
            "cpu_s_per_m": c.cpu_per_million(),
            "cpu_s_per_m_runs": c.runs_cpu_per_million,
            "librdkafka_cpu_s_per_m": raw_rdk,
        },
        "raw_sink": {
            "records_per_s": i.records_per_second(),
            "cpu_s_per_m": i.cpu_per_million(),
        },
        "exactly_once": m.exactly_once.as_ref().map(|(eo, _)| json!({
            "records_per_s": eo.records_per_second(),
            "client_cpu_s_per_m": eo.cpu_per_million(),
            "whole_box_cpu_s_per_m": whole_box(eo.cpu_seconds, &eo.load),
            "over_at_least_once_records_per_s": eo.records_per_second() / p.records_per_second(),
        })),
    })
}

#[cfg(test)]
mod tests {
    use super::thread_class;

    #[test]
    fn threads_are_classed_by_their_names() {
        assert_eq!(thread_class("rdk:broker1"), "librdkafka_broker");
        assert_eq!(thread_class("rdk:main"), "librdkafka_other");
        assert_eq!(thread_class("etl-pipeline-0"), "pipeline");
        assert_eq!(thread_class("etl-shard-1"), "shard_workers");
        assert_eq!(thread_class("etl-sink"), "sink_runtime");
        assert_eq!(thread_class("etl-kafka"), "source_poller");
        assert_eq!(thread_class("bench-orders"), "other");
    }
}
