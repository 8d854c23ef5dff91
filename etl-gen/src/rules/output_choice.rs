//! E0205: `outputs` names ClickHouse tables, each written by one output, and takes the place
//! of `sink.clickhouse.table` and `shard_key`; without it, `sink.clickhouse.table` is required.

use super::Context;
use super::missing_key;
use crate::diag::{Diagnostic, Rule};
use crate::model::Sink;

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0205",
    name: "output-choice",
    summary: "`outputs` beside `sink.clickhouse.table` or `shard_key`, with a file sink, a bad output \
name, or two outputs of one table",
    doc: "A pipeline writes one table (`sink.clickhouse.table`) or several (`outputs:`, one entry \
per table), not both: with `outputs`, each output names its `table` and, if it shards by a \
key, its `shard_key`, so `sink.clickhouse.table` and `sink.clickhouse.shard_key` are refused \
and their diagnostic points to `outputs`. `outputs` needs `sink.clickhouse` (a file sink has \
one output). An output's name is `[a-z][a-z0-9_]*` (it labels metrics and the generated code). \
No two outputs may write one table: their exactly-once ledgers would be one, and each would \
take the other's recorded batches for its own.",
};

/// Reports `outputs` that contradict the sink, bad names and shared tables, and a ClickHouse sink
/// without any table.
pub(crate) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let m = cx.model;
    if m.outputs.is_empty() {
        if let Sink::Clickhouse(c) = &m.sink
            && c.table.is_none()
            && cx.source_map.key("outputs").is_none()
        {
            out.push(missing_key::missing("sink.clickhouse", "table"));
        }
        if cx.source_map.key("outputs").is_some() {
            out.push(
                Diagnostic::error(&RULE, "outputs", "`outputs` names no output")
                    .help("add one entry per table (`orders: { table: orders }`), or remove `outputs`"),
            );
        }
        return;
    }
    let Sink::Clickhouse(c) = &m.sink else {
        out.push(
            Diagnostic::error(&RULE, "outputs", "`outputs` needs `sink.clickhouse`: a file sink has one output")
                .help("remove `outputs`, or write to ClickHouse"),
        );
        return;
    };
    for key in ["table", "shard_key"] {
        let path = format!("sink.clickhouse.{key}");
        let given = match key {
            "table" => c.table.is_some(),
            _ => c.shard_key.is_some(),
        };
        if given {
            out.push(
                Diagnostic::error(&RULE, &path, format!("`{path}` cannot be used with `outputs`"))
                    .on_value()
                    .help(format!("each output names its own: move it to `outputs.<name>.{key}`")),
            );
        }
    }
    let tables = m.output_tables();
    for (i, (name, t)) in m.outputs.keys().zip(&tables).enumerate() {
        if !is_output_name(name) {
            out.push(
                Diagnostic::error(&RULE, format!("outputs.{name}"), format!("`{name}` is not an output name"))
                    .help("name it with `[a-z][a-z0-9_]*`: it labels metrics and names generated code"),
            );
        }
        if let Some(first) = tables[..i].iter().find(|o| o.database == t.database && o.table == t.table) {
            out.push(
                Diagnostic::error(
                    &RULE,
                    format!("outputs.{name}.table"),
                    format!(
                        "`{}.{}` is already written by `outputs.{}`",
                        t.database,
                        t.table,
                        first.name.unwrap_or_default()
                    ),
                )
                .on_value()
                .help("give each output a table of its own (one output may test several kinds in its `when`)"),
            );
        }
    }
}

/// `[a-z][a-z0-9_]*`.
fn is_output_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}
