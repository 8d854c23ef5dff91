//! E0201: the pipeline name must be usable as a crate and binary name.

use super::Context;
use crate::diag::{Diagnostic, Rule};

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0201",
    name: "pipeline-name",
    summary: "`pipeline.name` is not of the form `[a-z][a-z0-9-]*`",
    doc: "The name becomes the generated crate's name, the binary's name, the image name \
and a metric label, so it is restricted to lowercase ASCII letters, digits and `-`, \
starting with a letter.",
};

/// Whether `name` matches `[a-z][a-z0-9-]*`.
pub(crate) fn is_valid(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some('a'..='z')) && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '-'))
}

/// `name` made into a pipeline name: lowercase, `-` for anything else, from the first letter on
/// (not necessarily valid: check with [`is_valid`]).
pub(crate) fn suggest(name: &str) -> String {
    name.to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .skip_while(|c| !c.is_ascii_lowercase())
        .collect()
}

/// Reports a name not of the form `[a-z][a-z0-9-]*`, suggesting the nearest one that is.
pub(crate) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let name = &cx.model.pipeline.name;
    if !is_valid(name) {
        let suggestion = suggest(name);
        let mut d = Diagnostic::error(
            &RULE,
            "pipeline.name",
            format!("pipeline name `{name}` is not of the form [a-z][a-z0-9-]*"),
        )
        .on_value()
        .note("the name becomes the crate, binary and image name");
        if is_valid(&suggestion) {
            d = d.help(format!("write `name: {suggestion}`"));
        } else {
            d = d.help("start with a lowercase letter; use only a-z, 0-9 and `-`");
        }
        out.push(d);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names() {
        assert!(super::is_valid("orders"));
        assert!(super::is_valid("orders-eu-2"));
        assert!(!super::is_valid("Orders"));
        assert!(!super::is_valid("2orders"));
        assert!(!super::is_valid("orders_eu"));
        assert!(!super::is_valid(""));
    }
}
