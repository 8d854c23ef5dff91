//! E0301: librdkafka properties the framework owns, and their aliases.

use super::Context;
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

/// An owned property: its name, the canonical name it aliases (if any), why it is owned,
/// and the fix.
pub(crate) struct Owned {
    /// The property as written.
    pub name: &'static str,
    /// The canonical property, when `name` is an alias.
    pub alias_of: Option<&'static str>,
    /// Why etl-rs owns it.
    pub reason: &'static str,
    /// What to do instead.
    pub fix: &'static str,
}

/// The denylist.
pub(crate) static OWNED: &[Owned] = &[
    Owned {
        name: "enable.auto.offset.store",
        alias_of: None,
        reason: "etl-rs stores an offset only when every record below it is durably written; librdkafka storing consumed positions would commit unwritten data",
        fix: "remove it; etl-rs always sets it to false",
    },
    Owned {
        name: "enable.auto.commit",
        alias_of: None,
        reason: "librdkafka's interval commit is how stored offsets get committed; without it nothing is ever committed",
        fix: "remove it (etl-rs always sets it to true); tune `source.kafka.commit_interval` instead",
    },
    Owned {
        name: "auto.commit.enable",
        alias_of: Some("enable.auto.commit"),
        reason: "librdkafka's interval commit is how stored offsets get committed; without it nothing is ever committed",
        fix: "remove it (etl-rs always sets it to true); tune `source.kafka.commit_interval` instead",
    },
    Owned {
        name: "auto.commit.interval.ms",
        alias_of: None,
        reason: "the commit interval is the typed key `source.kafka.commit_interval`",
        fix: "remove it and set `source.kafka.commit_interval` (e.g. `5s`)",
    },
    Owned {
        name: "enable.partition.eof",
        alias_of: None,
        reason: "end-of-partition events would enter the partition queues the pipeline threads poll",
        fix: "remove it",
    },
    Owned {
        name: "bootstrap.servers",
        alias_of: None,
        reason: "the brokers are the typed key `source.kafka.brokers`",
        fix: "remove it and set `source.kafka.brokers`",
    },
    Owned {
        name: "metadata.broker.list",
        alias_of: Some("bootstrap.servers"),
        reason: "the brokers are the typed key `source.kafka.brokers`",
        fix: "remove it and set `source.kafka.brokers`",
    },
    Owned {
        name: "group.id",
        alias_of: None,
        reason: "the consumer group is the typed key `source.kafka.group_id`",
        fix: "remove it and set `source.kafka.group_id`",
    },
    Owned {
        name: "statistics.interval.ms",
        alias_of: None,
        reason: "statistics feed the lag metrics; the interval is the typed key `source.kafka.statistics_interval`",
        fix: "remove it and set `source.kafka.statistics_interval` (`0s` disables statistics)",
    },
    Owned {
        name: "group.protocol",
        alias_of: None,
        reason: "etl-rs supports only the classic consumer protocol with eager rebalancing",
        fix: "remove it",
    },
];

/// The owned entry for a property name, if it is owned.
pub(crate) fn lookup(name: &str) -> Option<&'static Owned> {
    OWNED.iter().find(|o| o.name == name)
}

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
