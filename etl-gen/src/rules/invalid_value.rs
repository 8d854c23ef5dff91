//! E0104: a value of the wrong type or form.

use crate::diag::Rule;

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
