//! E0605–E0606: a JSON Schema parses and uses only the subset that maps to columns.

use crate::diag::{Diagnostic, Rule};
use crate::readers::json::{self as json_schema, JField};

/// The schema file is not a JSON Schema object.
pub(crate) static INVALID: Rule = Rule {
    code: "E0605",
    name: "json-schema-invalid",
    summary: "`format.json.schema` is not a JSON document holding a schema object",
    doc: "The file is parsed as JSON; its message is shown. The top level must be a JSON \
Schema object describing one message: `{\"type\": \"object\", \"properties\": {...}}`.",
};

/// The schema uses a construct with no column mapping.
pub(crate) static UNSUPPORTED: Rule = Rule {
    code: "E0606",
    name: "json-schema-unsupported",
    summary: "the JSON Schema uses a construct with no ClickHouse mapping",
    doc: "Supported: `type` (one type, or one type and `\"null\"`), `properties`, `required`, \
`additionalProperties` with a schema (a map), `items` with one schema, string `enum`, the \
string formats `date-time`, `date` and `uuid`, `$ref` to `#/$defs/...` or \
`#/definitions/...` in the same file, and `oneOf`/`anyOf` of one schema and \
`{\"type\": \"null\"}`. Not supported: `oneOf`/`anyOf` beyond nullability, `allOf`, `not`, \
`if`/`then`/`else`, `patternProperties`, `dependentSchemas`, tuples (`prefixItems`, `items` \
as a list), a value of several types, remote or recursive `$ref`s, and nullable arrays, maps or \
objects inside an array or map. Each place is listed with its path inside the schema \
(`items[].sku`). Keys that are not column names (`user-agent`) become columns with `_` for \
each other character; two keys that become the same column are reported here too.",
};

/// The key that names the schema file: where its diagnostics point.
const PATH: &str = "format.json.schema";

/// Parses the schema text of the file `relative` into its fields.
pub(crate) fn convert(relative: &str, text: &str) -> Result<Vec<JField>, Vec<Diagnostic>> {
    match json_schema::parse(text) {
        Err(json_schema::Invalid(why)) => Err(vec![
            Diagnostic::error(&INVALID, PATH, format!("`{relative}` is not a JSON Schema: {why}"))
                .on_value()
                .help("write one object schema: {\"type\": \"object\", \"properties\": {...}}"),
        ]),
        Ok(Err(found)) => Err(super::schema_file::unsupported(&UNSUPPORTED, PATH, relative, "at", found)),
        Ok(Ok(fields)) => Ok(fields),
    }
}
