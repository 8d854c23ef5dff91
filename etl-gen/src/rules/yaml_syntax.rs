//! E0101: the file is not valid YAML. [`parse`] is its check, the first step of reading
//! pipeline.yaml.

use serde_yaml::Value;

use crate::diag::{Diagnostic, Rule};

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0101",
    name: "yaml-syntax",
    summary: "pipeline.yaml is not valid YAML",
    doc: "The YAML parser stopped at the position shown. Common causes are tabs used for \
indentation, a missing space after `:`, and unbalanced quotes or brackets. Nothing else is \
checked until the file parses.",
};

/// Parses `text` into a YAML value with its `<<` merge keys applied, or reports why it does not
/// parse.
pub(crate) fn parse(text: &str, out: &mut Vec<Diagnostic>) -> Option<Value> {
    let mut value: Value = match serde_yaml::from_str(text) {
        Ok(value) => value,
        Err(e) => {
            let span = e.location().map(|l| l.index()..l.index() + 1).unwrap_or(0..0);
            let message = e.to_string();
            // serde_yaml appends " at line L column C"; the rendered label shows that already.
            let message = message.split(" at line ").next().unwrap_or(&message).to_owned();
            out.push(
                Diagnostic::error(&RULE, "", format!("YAML syntax error: {message}"))
                    .with_span(span)
                    .help("fix the YAML at the marked position (indent with spaces, put a space after `:`)"),
            );
            return None;
        }
    };
    if let Err(e) = value.apply_merge() {
        out.push(Diagnostic::error(&RULE, "", format!("YAML merge key error: {e}")).help("fix the `<<` merge"));
        return None;
    }
    Some(value)
}
