//! E0501: the dead-letter policy needs a topic and a Kafka source.

use super::Context;
use crate::diag::{Diagnostic, Rule};
use crate::model::{ErrorPolicy, Source};

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0501",
    name: "dlq-topic",
    summary: "`errors.policy: dlq` without `errors.dlq_topic`, or without a Kafka source",
    doc: "With `errors.policy: dlq` a record that fails to decode or transform is written, \
raw and with error headers, to `errors.dlq_topic` on the source's brokers before its \
offset counts as done. The topic is therefore required, and the source must be Kafka. A \
`dlq_topic` with another policy is reported as a warning because it has no effect.",
};

/// Reports `policy: dlq` without a topic or with an empty one, or with a source other than
/// Kafka, and warns of a `dlq_topic` that another policy ignores.
pub(crate) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let errors = &cx.model.errors;
    match (errors.policy, &errors.dlq_topic) {
        (ErrorPolicy::Dlq, None) => out.push(
            Diagnostic::error(&RULE, "errors.policy", "`errors.policy: dlq` needs `errors.dlq_topic`")
                .on_value()
                .help(format!("add `dlq_topic: {}-dlq` under `errors:`", cx.model.pipeline.name)),
        ),
        (ErrorPolicy::Dlq, Some(topic)) if topic.as_str().trim().is_empty() => out.push(
            Diagnostic::error(&RULE, "errors.dlq_topic", "`errors.dlq_topic` is empty")
                .on_value()
                .help("name the dead-letter topic"),
        ),
        (ErrorPolicy::Skip | ErrorPolicy::Fail, Some(_)) => out.push(
            Diagnostic::warning(
                &RULE,
                "errors.dlq_topic",
                "`errors.dlq_topic` has no effect unless `errors.policy` is `dlq`",
            )
            .help("remove it, or set `policy: dlq`"),
        ),
        _ => {}
    }
    if errors.policy == ErrorPolicy::Dlq && !matches!(cx.model.source, Source::Kafka(_)) {
        out.push(
            Diagnostic::error(
                &RULE,
                "errors.policy",
                "`errors.policy: dlq` needs a Kafka source to write the dead letters to",
            )
            .on_value()
            .help("use `policy: skip` or `policy: fail` with this source"),
        );
    }
}
