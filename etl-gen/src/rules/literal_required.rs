//! E0105: `${VAR}` used where a build-time check needs a literal.

use crate::diag::Rule;

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0105",
    name: "literal-required",
    summary: "`${VAR}` in a key that the build-time checks depend on",
    doc: "Only values that are fixed at deploy time may come from the environment: broker \
addresses, the topic and group id, URLs, credentials, paths of the file sink, the DLQ \
topic, the admin address, librdkafka property values and ClickHouse settings. Everything \
else (every number in the sizing rule, the schema path, the transform, the sink's table \
and shard key) is compiled into the binary and checked by `gen`, so it must be written \
out. Generate one binary per environment if these differ.",
};
