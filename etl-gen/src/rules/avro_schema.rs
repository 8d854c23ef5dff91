//! E0601–E0603: the reader schema file exists (any format), and an Avro one parses and uses
//! only supported types.

use crate::diag::{Diagnostic, Rule};
use crate::readers::{
    Unsupported,
    avro::{self, AvroRecord},
};

/// The schema file is missing or unreadable.
pub(crate) static MISSING: Rule = Rule {
    code: "E0601",
    name: "schema-missing",
    summary: "`format.<avro|json>.schema` names a file that cannot be read",
    doc: "The reader schema is compiled into the binary, so it must exist at gen time. The \
path is relative to the directory of pipeline.yaml.",
};

/// The schema file is not a valid Avro schema.
pub(crate) static INVALID: Rule = Rule {
    code: "E0602",
    name: "avro-schema-invalid",
    summary: "the schema file is not a valid Avro schema",
    doc: "The file is parsed with apache-avro; its message is shown. Check that the file is \
JSON and follows the Avro specification (names, field types, defaults).",
};

/// The schema uses a type that etl-rs cannot decode or map to a column.
pub(crate) static UNSUPPORTED: Rule = Rule {
    code: "E0603",
    name: "avro-type-unsupported",
    summary: "the schema uses a type with no ClickHouse mapping",
    doc: "Supported: boolean, int, long, float, double, string, bytes, enum, array, map, \
records (nested fields are flattened as `parent_child`), unions of null and one other \
type, and the logical types timestamp-millis, timestamp-micros, date, decimal (precision \
1 to 38) and uuid. Not supported: other unions, plain `fixed`, time-of-day, local and \
nanosecond timestamps, `duration`, and recursive types. Each unsupported place is listed \
with its path inside the schema (`items[].price`).",
};

/// The key that names the schema file: where its diagnostics point.
const PATH: &str = "format.avro.schema";

/// The diagnostic for a schema file that cannot be read (the loader reads it); `path` is the
/// key that names it.
pub(crate) fn unreadable(path: &str, relative: &str, e: &std::io::Error) -> Diagnostic {
    Diagnostic::error(&MISSING, path, format!("cannot read the schema `{relative}`: {e}"))
        .on_value()
        .note("the path is relative to the directory of pipeline.yaml")
        .help("check the path, or create the schema file")
}

/// Parses the schema text of the file `relative` and reduces it to the supported types.
pub(crate) fn convert(relative: &str, text: &str) -> Result<AvroRecord, Vec<Diagnostic>> {
    let parsed = apache_avro::Schema::parse_str(text).map_err(|e| {
        vec![
            Diagnostic::error(&INVALID, PATH, format!("`{relative}` is not a valid Avro schema"))
                .on_value()
                .note(format!("apache-avro: {e}"))
                .help("fix the schema so that it follows the Avro specification"),
        ]
    })?;
    avro::convert(&parsed).map_err(|found| unsupported(&UNSUPPORTED, PATH, relative, "field", found))
}

/// The diagnostics of a schema's unsupported constructs (every format's), each naming the schema
/// file, the construct's place (`field` or `at` its path) and the fix.
pub(crate) fn unsupported(
    rule: &'static Rule,
    path: &str,
    relative: &str,
    place: &str,
    found: Vec<Unsupported>,
) -> Vec<Diagnostic> {
    found
        .into_iter()
        .map(|u| {
            Diagnostic::error(rule, path, format!("`{relative}`, {place} `{}`: {}", u.path, u.what))
                .on_value()
                .help(u.fix)
        })
        .collect()
}
