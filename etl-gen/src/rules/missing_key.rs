//! E0103: a required key is absent. serde finds it (a field without a default); the loader
//! reports it through [`missing`], or [`empty_file`] when there is no key at all.

use crate::diag::{Diagnostic, Rule};
use crate::source_map::join;

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0103",
    name: "missing-key",
    summary: "a required key is absent",
    doc: "Required keys have no sensible default: `pipeline.name`, `source.kafka.brokers`, \
`group_id`, the `schema` of `format.avro`, `format.json` or `format.protobuf` (and its `message`), `sink.clickhouse.table`, `sink.file.path`, \
and the sections `pipeline`, `source`, `format` and `sink`.",
};

/// The diagnostic for a file that holds no document (it parses as null).
pub(crate) fn empty_file() -> Diagnostic {
    Diagnostic::error(&RULE, "", "the file is empty")
        .help("start from examples/quickstart/pipeline.yaml; `pipeline`, `source`, `format` and `sink` are required")
}

/// The diagnostic for the required key `field`, absent under `path` (empty for the top level).
pub(crate) fn missing(path: &str, field: &str) -> Diagnostic {
    let full = join(path, field);
    Diagnostic::error(&RULE, path, format!("missing required key `{full}`")).help(if path.is_empty() {
        format!("add a `{field}:` section")
    } else {
        format!("add `{field}:` under `{path}`")
    })
}
