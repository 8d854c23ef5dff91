//! E0206: mutual TLS to ClickHouse needs a client certificate and its key together.

use super::Context;
use crate::diag::{Diagnostic, Rule};
use crate::model::Sink;

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0206",
    name: "client-certificate",
    summary: "`sink.clickhouse.client_cert` without `client_key`, or the key without the certificate",
    doc: "For a ClickHouse that requires client certificates (mutual TLS), the sink shows \
`client_cert` (a PEM certificate, with its chain) and proves it with `client_key` (the PEM \
private key) on every `https://` replica. One without the other cannot make a TLS client \
identity, so both are set or neither. Either may be a `${VAR}`, e.g. paths mounted from a \
Kubernetes Secret.",
};

/// Reports a client certificate without its key, or a key without its certificate.
pub(crate) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let Sink::Clickhouse(c) = &cx.model.sink else { return };
    let (set, missing) = match (&c.client_cert, &c.client_key) {
        (Some(_), None) => ("client_cert", "client_key"),
        (None, Some(_)) => ("client_key", "client_cert"),
        _ => return,
    };
    out.push(
        Diagnostic::error(&RULE, format!("sink.clickhouse.{set}"), format!("`{set}` needs `{missing}`"))
            .help(format!("add `{missing}:` under `sink.clickhouse` (a PEM file), or remove `{set}`")),
    );
}
