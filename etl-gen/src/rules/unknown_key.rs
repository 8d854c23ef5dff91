//! E0102: a key the configuration does not have. serde finds it (`deny_unknown_fields`
//! everywhere); `structure` reads its error, and [`diagnostic`] says it.

use crate::diag::{Diagnostic, Rule};
use crate::source_map::parent;

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

/// The diagnostic for `key`, written at `path` where its section does not have it. `expected`
/// is serde's list of the keys the section has, when serde gives one, and `suggestion` the one
/// of them nearest to `key`.
pub(crate) fn diagnostic(path: &str, key: &str, expected: Option<&str>, suggestion: Option<&str>) -> Diagnostic {
    let mut d =
        Diagnostic::error(&RULE, path, format!("unknown key `{key}` in `{}`", parent(path).unwrap_or("the top level")));
    if let Some(expected) = expected {
        d = d.note(format!("expected {expected}"));
    }
    match suggestion {
        Some(s) => d.help(format!("did you mean `{s}`?")),
        None => d.help("remove it; docs/configuration.md lists every key"),
    }
}
