//! E0901: what `sink.clickhouse.exactly_once: true` needs from the rest of the configuration.

use super::Context;
use crate::diag::{Diagnostic, Rule};
use crate::model::{ScalarValue, Sink, Source};

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0901",
    name: "exactly-once",
    summary: "`exactly_once: true` without a source it can replay, or with async inserts it cannot deduplicate",
    doc: "Exactly-once replays a partition from its committed offset and re-cuts the replayed \
records at the batch spans recorded in ClickHouse (docs/adr/0001-exactly-once.md). That needs \
a Kafka source: `datagen` has no committed offsets to resume from. With `settings.async_insert: 1` \
ClickHouse deduplicates inserts only with `async_insert_deduplicate: 1`, so that pair is required. \
The table itself must deduplicate inserts (`gen --ddl` prints `non_replicated_deduplication_window` \
for a MergeTree table, and the ledger table); the binary checks the live tables at start-up.",
};

/// Reports what `exactly_once: true` conflicts with: a source other than Kafka, and
/// `async_insert` without `async_insert_deduplicate`.
pub(crate) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let Sink::Clickhouse(c) = &cx.model.sink else { return };
    if !c.exactly_once {
        return;
    }
    if !matches!(cx.model.source, Source::Kafka(_)) {
        out.push(
            Diagnostic::error(&RULE, "sink.clickhouse.exactly_once", "exactly-once needs a Kafka source")
                .on_value()
                .note("a replay starts from the committed offset of each partition; `datagen` commits none")
                .help("use `source.kafka`, or remove `exactly_once: true`"),
        );
    }
    let enabled = |key: &str| match c.settings.get(key) {
        Some(ScalarValue::Bool(b)) => *b,
        Some(ScalarValue::Int(n)) => *n != 0,
        Some(ScalarValue::Text(t)) => !matches!(t.as_str().trim(), "0" | "false" | ""),
        _ => false,
    };
    if enabled("async_insert") && !enabled("async_insert_deduplicate") {
        out.push(
            Diagnostic::error(
                &RULE,
                "sink.clickhouse.settings.async_insert",
                "with `async_insert: 1` ClickHouse drops replayed batches only with `async_insert_deduplicate: 1`",
            )
            .on_value()
            .help("add `async_insert_deduplicate: 1` under `settings:`, or remove `async_insert`"),
        );
    }
}
