//! The librdkafka properties etl-rs owns, with their aliases: why each is owned and what to
//! set instead; and the framework's default for `auto.offset.reset`, which `rdkafka:` may
//! override.
//!
//! One table for both sides: `gen` rejects these properties in `source.kafka.rdkafka` (rule
//! E0301, whose diagnostics quote `reason` and `fix`), and the runtime's Kafka source rejects
//! them again for a hand-written caller. This file depends on `std` alone because etl-gen
//! compiles it too (`#[path]`), so the generator takes no dependency on the runtime.

/// An owned property: its name, the canonical name it aliases (if any), why it is owned,
/// and the fix.
pub(crate) struct Owned {
    /// The property as written.
    pub(crate) name: &'static str,
    /// The canonical property, when `name` is an alias.
    pub(crate) alias_of: Option<&'static str>,
    /// Why etl-rs owns it.
    pub(crate) reason: &'static str,
    /// What to do instead.
    pub(crate) fix: &'static str,
}

/// The denylist, aliases included (librdkafka accepts both names, so both are owned).
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

/// librdkafka's `auto.offset.reset` unless `rdkafka:` says otherwise: the beginning, so a new
/// consumer group (or one whose committed offsets expired) never skips what the topic holds.
pub(crate) const AUTO_OFFSET_RESET: &str = "earliest";
