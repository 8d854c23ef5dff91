//! E0301: librdkafka properties the framework owns, and their aliases. The table is the
//! runtime's (`contract::owned_properties`), shared by `#[path]`.

use super::Context;
use crate::contract::owned_properties::lookup;
use crate::diag::{Diagnostic, Rule};
use crate::model::Source;

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0301",
    name: "rdkafka-owned-property",
    summary: "a librdkafka property (or alias) in `source.kafka.rdkafka` that the framework owns",
    doc: "These properties are set by etl-rs because its delivery guarantee or threading \
model depends on them. Passthrough values and framework values would be applied in an \
unspecified order, so aliases are rejected with their canonical names.\n\n\
| property | why it is owned | set instead |\n|---|---|---|\n\
| `enable.auto.offset.store` | offsets are stored only once every record below them is durably written; letting librdkafka store consumed positions would commit unwritten data | nothing: always `false` |\n\
| `enable.auto.commit`, `auto.commit.enable` (alias) | stored offsets are committed by librdkafka's interval commit; turning it off means nothing is ever committed | nothing: always `true` |\n\
| `auto.commit.interval.ms` | the commit interval is a typed key | `source.kafka.commit_interval` |\n\
| `enable.partition.eof` | end-of-partition events would enter the partition queues the pipeline threads poll | nothing |\n\
| `bootstrap.servers`, `metadata.broker.list` (alias) | the brokers are a typed key | `source.kafka.brokers` |\n\
| `group.id` | the group is a typed key | `source.kafka.group_id` |\n\
| `statistics.interval.ms` | statistics feed the lag metrics | `source.kafka.statistics_interval` |\n\
| `group.protocol` | only the classic protocol with eager rebalancing is supported | nothing |",
};

/// Reports each property in `source.kafka.rdkafka` that the framework owns, alias or not.
pub(crate) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let Source::Kafka(kafka) = &cx.model.source else { return };
    for key in kafka.rdkafka.keys() {
        if let Some(owned) = lookup(key) {
            let what = match owned.alias_of {
                Some(canonical) => format!("`{key}` (an alias of `{canonical}`) is owned by etl-rs"),
                None => format!("`{key}` is owned by etl-rs"),
            };
            out.push(
                Diagnostic::error(&RULE, format!("source.kafka.rdkafka.{key}"), what)
                    .note(owned.reason)
                    .help(owned.fix),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::owned_properties::OWNED;

    // The rule's doc (docs/diagnostics.md) is written out by hand; it must name every property
    // of the shared table.
    #[test]
    fn the_doc_names_every_owned_property() {
        for owned in OWNED {
            assert!(RULE.doc.contains(&format!("`{}`", owned.name)), "E0301's doc lacks `{}`", owned.name);
        }
    }
}
