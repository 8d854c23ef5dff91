//! E0202: numbers and strings outside the range that makes sense.

use super::{Context, sink_path};
use crate::diag::{Diagnostic, Rule};
use crate::model::{Sink, Source};

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0202",
    name: "value-range",
    summary: "a count, size or name that is zero or empty where that cannot work",
    doc: "Counts such as `pipeline.threads`, `inflight.max_per_shard`, `queue.capacity`, \
`batch.max_rows` and `retry.max_attempts` must be at least 1; sizes such as \
`batch.max_bytes`, `chunk.target_bytes` and `max_inflight_bytes` must be positive; the \
topic, group id, table and broker list must not be empty; `sink.clickhouse.shards` needs \
at least one shard and each shard at least one replica; `retry.initial_backoff` must not \
exceed `retry.max_backoff`.",
};

/// Reports counts and sizes of 0, empty names and addresses, a ClickHouse sink without shards or
/// replicas, and an initial back-off longer than the maximum.
pub(crate) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let m = cx.model;
    let at_least_one = |out: &mut Vec<Diagnostic>, path: String, value: u64| {
        if value == 0 {
            out.push(Diagnostic::error(&RULE, &path, format!("`{path}` is 0")).on_value().help("use 1 or more"));
        }
    };
    if let Some(threads) = m.pipeline.threads {
        at_least_one(out, "pipeline.threads".into(), u64::from(threads));
    }
    if let Source::Datagen(d) = &m.source {
        at_least_one(out, "source.datagen.partitions".into(), u64::from(d.partitions));
    }
    let flow = m.sink.flow();
    at_least_one(out, sink_path(cx, "inflight.max_per_shard"), flow.inflight.max_per_shard);
    at_least_one(out, sink_path(cx, "queue.capacity"), flow.queue.capacity);
    at_least_one(out, sink_path(cx, "batch.max_rows"), flow.batch.max_rows);
    at_least_one(out, sink_path(cx, "batch.max_bytes"), flow.batch.max_bytes.bytes());
    at_least_one(out, sink_path(cx, "chunk.target_bytes"), flow.chunk.target_bytes.bytes());
    at_least_one(out, "backpressure.max_inflight_bytes".into(), m.backpressure.max_inflight_bytes.bytes());
    at_least_one(out, "format.max_message_bytes".into(), m.format.max_message_bytes.bytes());

    let not_empty = |out: &mut Vec<Diagnostic>, path: &str, value: &str| {
        if value.trim().is_empty() {
            out.push(Diagnostic::error(&RULE, path, format!("`{path}` is empty")).on_value().help("give it a value"));
        }
    };
    if let Source::Kafka(k) = &m.source {
        not_empty(out, "source.kafka.brokers", k.brokers.as_str());
        if let Some(topic) = &k.topic {
            not_empty(out, "source.kafka.topic", topic.as_str());
        }
        if let Some(pattern) = &k.topic_pattern {
            not_empty(out, "source.kafka.topic_pattern", pattern.as_str());
        }
        not_empty(out, "source.kafka.group_id", k.group_id.as_str());
    }
    match &m.sink {
        Sink::Clickhouse(c) => {
            if let Some(table) = &c.table {
                not_empty(out, "sink.clickhouse.table", table);
            }
            for (name, o) in &m.outputs {
                not_empty(out, &format!("outputs.{name}.table"), &o.table);
                if let Some(database) = &o.database {
                    not_empty(out, &format!("outputs.{name}.database"), database);
                }
            }
            not_empty(out, "sink.clickhouse.database", &c.database);
            if c.shards.is_empty() {
                out.push(
                    Diagnostic::error(&RULE, "sink.clickhouse.shards", "`sink.clickhouse.shards` has no shard")
                        .help("list at least one shard: `shards: [{ replicas: [\"http://host:8123\"] }]`"),
                );
            }
            for (i, shard) in c.shards.iter().enumerate() {
                if shard.replicas.is_empty() {
                    let path = format!("sink.clickhouse.shards[{i}].replicas");
                    out.push(
                        Diagnostic::error(&RULE, &path, format!("shard {i} has no replica"))
                            .help("list at least one replica URL"),
                    );
                }
            }
            if let Some(attempts) = c.retry.max_attempts.limit() {
                at_least_one(out, "sink.clickhouse.retry.max_attempts".into(), u64::from(attempts));
            }
            if c.retry.max_backoff < c.retry.initial_backoff {
                out.push(
                    Diagnostic::error(
                        &RULE,
                        "sink.clickhouse.retry.initial_backoff",
                        format!(
                            "`initial_backoff` ({}) is longer than `max_backoff` ({})",
                            c.retry.initial_backoff, c.retry.max_backoff
                        ),
                    )
                    .on_value()
                    .help("make `initial_backoff` at most `max_backoff`"),
                );
            }
        }
        Sink::File(f) => not_empty(out, "sink.file.path", f.path.as_str()),
    }
}
