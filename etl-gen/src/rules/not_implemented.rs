//! E0901: configuration the model accepts but this version cannot run yet.

use super::Context;
use crate::diag::{Diagnostic, Rule};
use crate::model::Sink;

/// The rule.
pub static RULE: Rule = Rule {
    code: "E0901",
    name: "not-implemented",
    summary: "a documented feature that this version of etl-rs does not implement yet",
    doc: "Some keys are part of the configuration contract before their feature lands. \
Rather than accept them and silently behave differently, `gen` rejects them. Currently: \
`sink.clickhouse.exactly_once: true`. README.md lists what is missing.",
};

pub(crate) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    if let Sink::Clickhouse(c) = &cx.model.sink
        && c.exactly_once
    {
        out.push(
            Diagnostic::error(
                &RULE,
                "sink.clickhouse.exactly_once",
                "exactly-once inserts are not implemented in this version",
            )
            .on_value()
            .note("the sink is at-least-once: after a crash or rebalance some rows can be written twice")
            .help("remove `exactly_once: true` (or set it to false)"),
        );
    }
}
