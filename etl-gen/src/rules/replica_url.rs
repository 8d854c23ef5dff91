//! E0203: ClickHouse replica addresses must be http(s) URLs.

use super::Context;
use crate::diag::{Diagnostic, Rule};
use crate::model::Sink;
use crate::template::Part;

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0203",
    name: "replica-url",
    summary: "a ClickHouse replica that is not an `http://` or `https://` URL",
    doc: "The sink talks to ClickHouse over its HTTP interface (port 8123, or 8443 for \
TLS). A replica is written `http://host:port` or `https://host:port`; the native protocol \
port (9000) does not work. For `${VAR}` replicas, the literal parts and the default are \
checked.",
};

/// Reports each replica whose known start (its literal prefix, or the default of a lone `${VAR}`)
/// is not `http://` or `https://`.
pub(crate) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let Sink::Clickhouse(c) = &cx.model.sink else { return };
    for (s, shard) in c.shards.iter().enumerate() {
        for (r, replica) in shard.replicas.iter().enumerate() {
            // What the URL starts with, as far as it is known at gen time.
            let known = match replica.parts().first() {
                Some(Part::Lit(text)) => Some(text.as_str()),
                Some(Part::Var { default: Some(d), .. }) if replica.parts().len() == 1 && !d.is_empty() => {
                    Some(d.as_str())
                }
                _ => None,
            };
            if let Some(start) = known {
                let ok = ["http://", "https://"].iter().any(|p| start.starts_with(p) || p.starts_with(start));
                if !ok {
                    let path = format!("sink.clickhouse.shards[{s}].replicas[{r}]");
                    out.push(
                        Diagnostic::error(
                            &RULE,
                            &path,
                            format!("replica `{replica}` is not an http:// or https:// URL"),
                        )
                        .on_value()
                        .help(format!(
                            "write `http://{}` (the HTTP interface, port 8123 by default)",
                            start.trim_start_matches("tcp://")
                        )),
                    );
                }
            }
        }
    }
}
