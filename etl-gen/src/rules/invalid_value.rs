//! E0104: a value of the wrong type or form. serde finds it (the model's types parse
//! durations, sizes, ratios and enumerations); `structure` reads its error, and the functions
//! here say it.

use crate::diag::{Diagnostic, Rule};

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0104",
    name: "invalid-value",
    summary: "a value of the wrong type or form (durations, sizes, ratios, enums, numbers)",
    doc: "Durations are written `250ms`, `5s`, `2m` or `1h`. Sizes are `512KiB`, `16MiB`, \
`1GiB` (binary), `16MB` (decimal) or plain bytes. Ratios are decimals such as `0.9`. \
Enumerations accept the values the message lists. `${...}` must be a valid variable \
reference: `${NAME}` or `${NAME:-default}`.",
};

/// The diagnostic for `variant` at `path`, which is not one of the values serde `expected` (an
/// enumeration such as `wire: avro`); `suggestion` is the expected value nearest to it.
pub(crate) fn unknown_variant(path: &str, variant: &str, expected: &str, suggestion: Option<&str>) -> Diagnostic {
    let d = Diagnostic::error(&RULE, path, format!("`{variant}` is not a valid value for `{path}`"))
        .on_value()
        .note(format!("expected {expected}"));
    match suggestion {
        Some(s) => d.help(format!("did you mean `{s}`?")),
        None => d.help(format!("use {expected}")),
    }
}

/// The diagnostic for a mapping at `path` that must name its kind by its one key (a source, a
/// sink, an operator) but has none or several.
pub(crate) fn not_one_key(path: &str) -> Diagnostic {
    Diagnostic::error(&RULE, path, format!("`{path}` must have exactly one key, naming its kind"))
        .note("a pipeline has exactly one source (`kafka` or `datagen`) and one sink (`clickhouse` or `file`); each operator is a one-key mapping")
        .help("keep one of the keys")
}

/// The diagnostic for any other value at `path` that serde rejects, with serde's `message`.
pub(crate) fn other(path: &str, message: &str) -> Diagnostic {
    Diagnostic::error(&RULE, path, format!("invalid value for `{path}`: {message}"))
        .on_value()
        .help("see docs/configuration.md for the accepted forms of this key")
}
