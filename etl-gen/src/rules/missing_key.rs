//! E0103: a required key is absent.

use crate::diag::Rule;

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0103",
    name: "missing-key",
    summary: "a required key is absent",
    doc: "Required keys have no sensible default: `pipeline.name`, `source.kafka.brokers`, \
`topic` and `group_id`, the `schema` of `format.avro` or `format.json`, `sink.clickhouse.table`, `sink.file.path`, \
and the sections `pipeline`, `source`, `format` and `sink`.",
};
