//! E0607: `format` names exactly one payload format.

use crate::diag::{Diagnostic, Rule};
use crate::model::Format;

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0607",
    name: "format-choice",
    summary: "`format` names no payload format, or more than one",
    doc: "Each pipeline reads one encoding: exactly one of `format.avro` and `format.json`. \
(Protobuf is not supported yet.)",
};

/// The diagnostic, if `format` does not name exactly one encoding.
pub(crate) fn check(format: &Format) -> Option<Diagnostic> {
    match (&format.avro, &format.json) {
        (Some(_), None) | (None, Some(_)) => None,
        (None, None) => Some(Diagnostic::error(&RULE, "format", "`format` names no payload format").help(
            "add `avro: { schema: schemas/x.avsc }` or `json: { schema: schemas/x.schema.json }` under `format:`",
        )),
        (Some(_), Some(_)) => Some(
            Diagnostic::error(&RULE, "format.json", "`format` names both `avro` and `json`")
                .help("keep the one the topic's messages are written in"),
        ),
    }
}
