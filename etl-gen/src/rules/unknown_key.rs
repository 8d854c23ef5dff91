//! E0102: a key the configuration does not have.

use crate::diag::Rule;

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0102",
    name: "unknown-key",
    summary: "a key that is not part of the configuration (at any depth)",
    doc: "Every section rejects keys it does not know, so a misspelt key fails the build \
instead of being silently ignored. The message lists the keys that are allowed at that \
place; docs/configuration.md documents them all. `source:` and `sink:` take exactly one \
of their kinds (`kafka`/`datagen`, `clickhouse`/`file`), and each operator of \
`transform:` is a one-key mapping.",
};
