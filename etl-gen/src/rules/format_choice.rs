//! E0607: `format` names exactly one payload format.

use crate::diag::{Diagnostic, Rule};
use crate::model::Format;

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0607",
    name: "format-choice",
    summary: "`format` names no payload format, or more than one",
    doc: "Each pipeline reads one encoding: exactly one of `format.avro`, `format.json` and \
`format.protobuf`.",
};

/// The diagnostic, if `format` does not name exactly one encoding.
pub(crate) fn check(format: &Format) -> Option<Diagnostic> {
    let named: Vec<&str> = [
        format.avro.as_ref().map(|_| "avro"),
        format.json.as_ref().map(|_| "json"),
        format.protobuf.as_ref().map(|_| "protobuf"),
    ]
    .into_iter()
    .flatten()
    .collect();
    match named.as_slice() {
        [_] => None,
        [] => Some(Diagnostic::error(&RULE, "format", "`format` names no payload format").help(
            "add `avro: { schema: schemas/x.avsc }`, `json: { schema: schemas/x.schema.json }` or \
             `protobuf: { schema: schemas/x.proto, message: pkg.X }` under `format:`",
        )),
        [.., last] => Some(
            Diagnostic::error(&RULE, format!("format.{last}"), format!("`format` names {}", names(&named)))
                .help("keep the one the topic's messages are written in"),
        ),
    }
}

/// The formats `format` names, in prose: "both `a` and `b`" or "all of `a`, `b`, `c`".
fn names(named: &[&str]) -> String {
    let quoted: Vec<String> = named.iter().map(|n| format!("`{n}`")).collect();
    match quoted.as_slice() {
        [a, b] => format!("both {a} and {b}"),
        _ => format!("all of {}", quoted.join(", ")),
    }
}
