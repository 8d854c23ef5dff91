//! E0602–E0603: an Avro schema file parses and uses only supported types.

use crate::diag::{Diagnostic, Rule};
use crate::readers::avro::{self, AvroRecord};

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
    let json_strings = serde_json::from_str(text).map(|raw| avro::json_strings(&raw)).unwrap_or_default();
    avro::convert(&parsed, &json_strings)
        .map_err(|found| super::schema_file::unsupported(&UNSUPPORTED, PATH, relative, "field", found))
}
