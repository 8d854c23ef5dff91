//! E0302: cooperative (incremental) partition assignment is not supported.

use super::Context;
use crate::diag::{Diagnostic, Rule};
use crate::model::Source;

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0302",
    name: "cooperative-assignment",
    summary: "a cooperative strategy in `partition.assignment.strategy`",
    doc: "etl-rs relies on eager rebalancing: on every rebalance all partitions are revoked, \
drained and committed, then the new assignment is paused, split into per-partition queues \
and resumed. Cooperative (incremental) assignment changes that protocol, so any list that \
names a cooperative strategy (e.g. `cooperative-sticky`, alone or among others) is \
rejected. Use `range`, `roundrobin`, or both.",
};

/// The property this rule reads.
pub(crate) const PROPERTY: &str = "partition.assignment.strategy";

/// Reports a cooperative strategy in `partition.assignment.strategy`; the fix keeps the eager
/// strategies of the list.
pub(crate) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let Source::Kafka(kafka) = &cx.model.source else { return };
    let Some(value) = kafka.rdkafka.get(PROPERTY) else { return };
    let text = value.to_text();
    let strategies: Vec<&str> = text.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    let cooperative: Vec<&str> =
        strategies.iter().copied().filter(|s| s.to_ascii_lowercase().contains("cooperative")).collect();
    if cooperative.is_empty() {
        return;
    }
    let eager: Vec<&str> = strategies.iter().copied().filter(|s| !cooperative.contains(s)).collect();
    let help = if eager.is_empty() {
        format!("write `{PROPERTY}: range` (or `roundrobin`)")
    } else {
        format!("write `{PROPERTY}: {}`", eager.join(","))
    };
    out.push(
        Diagnostic::error(
            &RULE,
            format!("source.kafka.rdkafka.{PROPERTY}"),
            format!("cooperative assignment `{}` is not supported", cooperative.join(", ")),
        )
        .on_value()
        .note("etl-rs drains and commits all partitions on every rebalance, which needs eager assignment")
        .help(help),
    );
}
