//! E0604: Confluent-framed messages need to know which schema ids are the reader schema.

use super::Context;
use crate::diag::{Diagnostic, Rule};
use crate::model::{Encoding, Wire};

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0604",
    name: "schema-id-unknowable",
    summary: "`wire: confluent` with neither a `registry` nor a `schema_id` under `format`",
    doc: "A Confluent-framed message names the id of the schema it was written with. Decoding \
it with the reader schema is only right when that id is the reader schema's: a message \
written after a producer evolved its schema (a field inserted, say) would be mis-decoded \
without any error. So the binary must either know the reader schema's ids \
(`format.avro.schema_id: 7`, or a list) and treat any other id as a record error, or ask a \
schema registry (`format.avro.registry`) for every other id: Avro writer schemas are resolved \
to the reader schema, JSON Schema and Protobuf ones are checked by the rules of \
`gen --check --registry` (a writer the reader cannot read makes its messages record errors). \
A registry given as `${VAR}` passes this check; if the variable is empty at start-up and no \
`schema_id` is set, the binary exits with code 2. The same holds for `format.json` and \
`format.protobuf`.",
};

/// Reports Confluent framing with neither `schema_id` nor a registry, and an empty `schema_id`
/// list.
pub(crate) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let Some(format) = cx.model.format.selected() else { return };
    if format.wire != Wire::Confluent {
        return;
    }
    let registry = format.registry.is_some_and(|t| !(t.is_literal() && t.as_str().trim().is_empty()));
    if format.schema_id.is_none() && !registry {
        let resolve = match format.encoding {
            Encoding::Avro => "to resolve writer schemas",
            Encoding::Json | Encoding::Protobuf => "to check writer schemas",
        };
        let help = format!(
            "add `schema_id: <the reader schema's registry id>` under `{}:` (other ids then become record errors), \
             or `registry: ${{SCHEMA_REGISTRY_URL}}` {resolve}, or `wire: raw` if the messages carry no header",
            format.path("")
        );
        out.push(
            Diagnostic::error(
                &RULE,
                format.path(""),
                "Confluent-framed messages carry a schema id, but nothing says which ids are the reader schema's",
            )
            .help(help),
        );
    }
    if let Some(ids) = format.schema_id
        && ids.ids().is_empty()
    {
        let path = format.path("schema_id");
        out.push(
            Diagnostic::error(&RULE, &path, format!("`{path}` is an empty list"))
                .on_value()
                .help("list the reader schema's registry ids, e.g. `schema_id: [7]`"),
        );
    }
}
