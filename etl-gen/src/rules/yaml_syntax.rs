//! E0101: the file is not valid YAML.

use crate::diag::Rule;

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0101",
    name: "yaml-syntax",
    summary: "pipeline.yaml is not valid YAML",
    doc: "The YAML parser stopped at the position shown. Common causes are tabs used for \
indentation, a missing space after `:`, and unbalanced quotes or brackets. Nothing else is \
checked until the file parses.",
};
