//! The JSON Schema reader: the fields etl-schema's walker reads from the schema file ([`JField`],
//! what the generated JSON decoder walks) and their column view in the IR ([`record_ty`]),
//! documented in [`MAPPING`].

pub(crate) use etl_schema::json::{Invalid, JField, JType, parse};

use crate::ir::{Column, EnumColumn, RecordTy, TimeUnit, Ty};

/// The column view of the fields: what `ir::input_row` flattens into the input row, and what
/// datagen synthesizes values from.
///
/// A property that is not required, or whose type allows `null`, is Nullable; so is every
/// property below an object that is optional or nullable (an absent object has absent
/// children). Arrays and maps are never Nullable (ClickHouse has no `Nullable(Array)`): an
/// absent or `null` one reads as empty.
pub(crate) fn record_ty(fields: &[JField]) -> RecordTy {
    RecordTy { name: "Message".to_owned(), fields: columns(fields, false) }
}

fn columns(fields: &[JField], optional_above: bool) -> Vec<Column> {
    fields
        .iter()
        .map(|f| {
            let nullable = matches!(f.ty, JType::Nullable(_));
            let optional = optional_above || !f.required || nullable;
            let ty = match f.ty.non_null() {
                JType::Object { name, fields } => {
                    Ty::Record(Box::new(RecordTy { name: name.clone(), fields: columns(fields, optional) }))
                }
                t if optional => column_type(t).or_null(),
                t => column_type(t),
            };
            Column { name: f.name.clone(), ty }
        })
        .collect()
}

/// An Avro schema (JSON text) of the documents themselves, for datagen, `produce` and the fuzz
/// test: objects stay nested (a nullable or optional one is a union with null), a property keeps
/// its own presence (`["null", T]` when it is optional or nullable), and a key that is no Avro name
/// carries it in a `json_key` attribute, under which datagen writes it. So synthesized documents
/// are valid for the JSON Schema, absent values written as `null`.
pub(crate) fn datagen_schema(fields: &[JField]) -> String {
    use serde_json::{Value, json};
    fn ty(t: &JType) -> Value {
        match t {
            JType::Integer => json!("long"),
            JType::Number => json!("double"),
            JType::Boolean => json!("boolean"),
            JType::String => json!("string"),
            JType::DateTime => json!({"type": "long", "logicalType": "timestamp-micros"}),
            JType::Date => json!({"type": "int", "logicalType": "date"}),
            JType::Uuid => json!({"type": "string", "logicalType": "uuid"}),
            // Avro has no address type: a fixed of the address's bytes, which datagen writes as
            // the address's text (`json_format`). Fixed types need unique names.
            // Any object will do: a map of numbers is written as one.
            JType::Json => json!({"type": "map", "values": "long"}),
            JType::Ipv4 | JType::Ipv6 => {
                let (size, format) = if *t == JType::Ipv4 { (4, "ipv4") } else { (16, "ipv6") };
                let n = FIXED.with(|c| c.replace(c.get() + 1));
                json!({"type": "fixed", "name": format!("etl_{format}_{n}"), "size": size, "json_format": format})
            }
            // Avro symbols are names; a JSON enum's strings need not be (`"with space"`, `""`):
            // then the symbols are placeholders and `json_symbols` holds the strings datagen writes.
            JType::Enum { name, symbols } if symbols.iter().all(|s| is_avro_name(s)) => {
                json!({"type": "enum", "name": name, "symbols": symbols})
            }
            JType::Enum { name, symbols } => {
                let placeholders: Vec<String> = (0..symbols.len()).map(|i| format!("S{i}")).collect();
                json!({"type": "enum", "name": name, "symbols": placeholders, "json_symbols": symbols})
            }
            JType::Array(t) => json!({"type": "array", "items": ty(t)}),
            JType::Map(t) => json!({"type": "map", "values": ty(t)}),
            JType::Object { name, fields } => record(name, fields),
            JType::Nullable(t) => or_null(ty(t)),
            // A union of the members: datagen picks one and writes it as its JSON.
            JType::Variant(members) => Value::Array(members.iter().map(ty).collect()),
        }
    }
    // `null` joins a union rather than nesting one (Avro has no union of unions).
    fn or_null(t: Value) -> Value {
        match t {
            Value::Array(mut branches) => {
                branches.insert(0, json!("null"));
                Value::Array(branches)
            }
            t => json!(["null", t]),
        }
    }
    fn record(name: &str, fields: &[JField]) -> Value {
        let fields: Vec<Value> = fields
            .iter()
            .map(|f| {
                let t = match &f.ty {
                    JType::Nullable(_) => ty(&f.ty),
                    t if !f.required => or_null(ty(t)),
                    t => ty(t),
                };
                let mut field = json!({"name": f.name, "type": t});
                if f.key != f.name {
                    field["json_key"] = json!(f.key);
                }
                field
            })
            .collect();
        json!({"type": "record", "name": name, "fields": fields})
    }
    FIXED.with(|c| c.set(0));
    serde_json::to_string_pretty(&record("Message", fields)).expect("a JSON value prints")
}

thread_local! {
    /// How many address fixeds [`datagen_schema`] has named so far.
    static FIXED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Whether `s` is an Avro name (`[A-Za-z_][A-Za-z0-9_]*`).
fn is_avro_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The column type of a value inside a container (where presence is not a question).
pub(crate) fn column_type(t: &JType) -> Ty {
    match t {
        JType::Integer => Ty::Int64,
        JType::Number => Ty::Float64,
        JType::Boolean => Ty::Bool,
        JType::String => Ty::String,
        JType::DateTime => Ty::Timestamp(TimeUnit::Micros),
        JType::Date => Ty::Date,
        JType::Uuid => Ty::Uuid,
        JType::Ipv4 => Ty::Ipv4,
        JType::Json => Ty::Json,
        JType::Variant(members) => crate::ir::variant(members.iter().map(column_type).collect())
            .expect("etl-schema keeps one member per kind of value"),
        JType::Ipv6 => Ty::Ipv6,
        JType::Enum { name, symbols } => {
            Ty::Enum { name: name.clone(), symbols: symbols.clone(), column: EnumColumn::default() }
        }
        JType::Array(t) => Ty::Array(Box::new(column_type(t))),
        JType::Map(t) => Ty::Map(Box::new(Ty::String), Box::new(column_type(t))),
        JType::Object { name, fields } => {
            Ty::Record(Box::new(RecordTy { name: name.clone(), fields: columns(fields, false) }))
        }
        // Arrays and maps have no Nullable form: a null one reads as empty.
        JType::Nullable(t) => column_type(t).or_null(),
    }
}

/// The JSON Schema-to-ClickHouse type table of docs/configuration.md: what [`record_ty`] does, in
/// words. `mapping_matches_record_ty` checks the ClickHouse types it names.
pub(crate) const MAPPING: &[(&str, &str)] = &[
    ("`integer`", "`Int64` (`1.0` and `2e3` are read as integers; a fraction is a record error)"),
    ("`number`", "`Float64`"),
    ("`boolean`", "`Bool`"),
    ("`string`", "`String` (other `format`s, `pattern`, `maxLength` are not enforced)"),
    (
        "`string` with `format: date-time`",
        "`DateTime64(6, 'UTC')`: RFC 3339 with `Z` or an offset, converted to UTC; digits beyond microseconds are truncated",
    ),
    ("`string` with `format: date`", "`Date32`"),
    ("`string` with `format: uuid`", "`UUID`"),
    ("`string` with `format: ipv4` / `ipv6`", "`IPv4` / `IPv6` (an IPv4 address is read as an `ipv6` too, mapped)"),
    (
        "string `enum`",
        "`LowCardinality(String)`, or `Enum8`/`Enum16` with `sink.clickhouse.enum: enum`; another string is a record error",
    ),
    ("`array` with `items`", "`Array(T)`; absent or `null` reads as empty"),
    (
        "`object` with `additionalProperties: {schema}` and no `properties`",
        "`Map(String, T)`; absent or `null` reads as empty",
    ),
    ("`object` with `properties`", "flattened into `parent_child` columns; inside an array or map, `Tuple(...)`"),
    (
        "a property not in `required`, or whose `type` includes `\"null\"` (also `oneOf`/`anyOf` of one schema and `{\"type\": \"null\"}`)",
        "`Nullable(T)`",
    ),
    (
        "every property below an object that is optional or nullable",
        "`Nullable(T)` (an absent object has absent fields)",
    ),
    ("`$ref` to `#/$defs/X` or `#/definitions/X`", "the referenced schema (no remote or recursive references)"),
    (
        "`object` with no `properties` and no `additionalProperties` schema, or any schema with `\"x-clickhouse-type\": \"JSON\"`",
        "`JSON`: the object as it arrived (another kind of value is a record error); see [the JSON type](#the-json-type)",
    ),
    (
        "`type: [string, integer]` (several of `integer`, `number`, `boolean`, `string`), or a `oneOf`/`anyOf` of such scalar schemas (`string` with a format included)",
        "`Variant(...)` of their types (`Variant(Int64, String)`): the value's kind picks the member (a number written without a fraction or exponent that fits Int64, `-0` excepted, is the integer member when there is one, as serde_json reads it); `null`, when allowed, is the variant's NULL; one member per kind of value",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readers::documents;

    fn ok(text: &str) -> Vec<JField> {
        parse(text).unwrap().unwrap()
    }

    fn errors(text: &str) -> Vec<etl_schema::Unsupported> {
        parse(text).unwrap().unwrap_err()
    }

    #[test]
    fn maps_every_supported_type_to_its_column() {
        let fields = ok(r#"{
            "type": "object", "required": ["id", "at", "tags", "address"],
            "properties": {
                "id": {"type": "integer"},
                "price": {"type": "number"},
                "ok": {"type": ["boolean", "null"]},
                "at": {"type": "string", "format": "date-time"},
                "day": {"type": "string", "format": "date"},
                "uid": {"type": "string", "format": "uuid"},
                "status": {"enum": ["new", "paid"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "attrs": {"type": "object", "additionalProperties": {"type": "number"}},
                "address": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}, "zip": {"type": "string"}}},
                "user-agent": {"anyOf": [{"type": "string"}, {"type": "null"}]}
            }}"#);
        let rec = record_ty(&fields);
        let columns = crate::ir::input_row(&rec);
        let shown: Vec<String> = columns.iter().map(|c| format!("{} {}", c.name, c.ty.clickhouse())).collect();
        assert_eq!(
            shown,
            [
                "id Int64",
                "price Nullable(Float64)",
                "ok Nullable(Bool)",
                "at DateTime64(6, 'UTC')",
                "day Nullable(Date32)",
                "uid Nullable(UUID)",
                "status LowCardinality(Nullable(String))",
                "tags Array(String)",
                "attrs Map(String, Float64)",
                "address_city String",
                "address_zip Nullable(String)",
                "user_agent Nullable(String)",
            ]
        );
        assert_eq!(fields[10].key, "user-agent", "the document's key is kept for decoding");
    }

    #[test]
    fn children_of_an_optional_object_are_nullable() {
        let fields = ok(r#"{"type": "object", "properties": {
            "geo": {"type": "object", "required": ["lat"], "properties": {"lat": {"type": "number"}}}}}"#);
        let columns = crate::ir::input_row(&record_ty(&fields));
        assert_eq!(columns[0].ty.clickhouse(), "Nullable(Float64)");
    }

    #[test]
    fn objects_in_arrays_are_tuples_and_refs_resolve() {
        let fields = ok(r##"{"type": "object", "required": ["items"], "properties": {
            "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}}},
            "$defs": {"Item": {"type": "object", "required": ["sku"], "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}}}}"##);
        let columns = crate::ir::input_row(&record_ty(&fields));
        assert_eq!(columns[0].ty.clickhouse(), "Array(Tuple(sku String, qty Nullable(Int64)))");
    }

    #[test]
    fn lists_every_unsupported_construct_with_its_path() {
        let errs = errors(
            r##"{"type": "object", "properties": {
            "a": {"oneOf": [{"type": "string"}, {"type": "object", "properties": {"x": {"type": "string"}}}]},
            "b": {"type": "object", "patternProperties": {"^x": {"type": "string"}}},
            "c": {"$ref": "https://example.com/s.json"},
            "d": {"type": "array", "items": {"type": "object", "properties": {"e": {"type": ["string", "array"]}}}},
            "f": {"$ref": "#/$defs/Node"}},
            "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}}}"##,
        );
        let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["a", "b", "c", "d[].e", "f.next"]);
        assert!(errs[0].what.contains("oneOf"));
        assert!(errs[1].what.contains("patternProperties"));
        assert!(errs[2].what.contains("https://example.com/s.json"));
        assert!(errs[4].what.contains("recursive"));
    }

    #[test]
    fn keys_that_collide_as_columns_are_reported() {
        let errs =
            errors(r#"{"type": "object", "properties": {"a-b": {"type": "string"}, "a_b": {"type": "string"}}}"#);
        assert!(errs[0].what.contains("`a-b` and `a_b`"), "{:?}", errs);
    }

    #[test]
    fn the_top_level_must_be_an_object() {
        assert!(parse("[1]").is_err());
        assert!(parse("{").is_err());
        assert_eq!(errors(r#"{"type": "string"}"#)[0].path, "(top level)");
    }

    // docs/configuration.md's table is MAPPING: each row names what `record_ty` makes of its types.
    #[test]
    fn mapping_matches_record_ty() {
        let cases: &[(usize, &str, Option<&str>)] = &[
            (0, r#"{"type": "integer"}"#, None),
            (1, r#"{"type": "number"}"#, None),
            (2, r#"{"type": "boolean"}"#, None),
            (3, r#"{"type": "string"}"#, None),
            (4, r#"{"type": "string", "format": "date-time"}"#, None),
            (5, r#"{"type": "string", "format": "date"}"#, None),
            (6, r#"{"type": "string", "format": "uuid"}"#, None),
            (7, r#"{"type": "string", "format": "ipv4"}"#, None),
            (7, r#"{"type": "string", "format": "ipv6"}"#, None),
            (8, r#"{"enum": ["a", "b"]}"#, None),
            (9, r#"{"type": "array", "items": {"type": "integer"}}"#, Some("Int64")),
            (10, r#"{"type": "object", "additionalProperties": {"type": "integer"}}"#, Some("Int64")),
            (12, r#"{"type": ["integer", "null"]}"#, Some("Int64")),
            (15, r#"{"type": "object"}"#, None),
            (15, r#"{"type": "array", "x-clickhouse-type": "JSON"}"#, None),
        ];
        for &(row, ty, inner) in cases {
            let fields = ok(&format!(r#"{{"type": "object", "required": ["f"], "properties": {{"f": {ty}}}}}"#));
            let column = crate::ir::input_row(&record_ty(&fields)).remove(0).ty.clickhouse();
            assert!(
                documents(MAPPING[row].1, &column, inner),
                "{ty} maps to {column}, but the table says {:?}",
                MAPPING[row]
            );
        }
        // Not in `required`: Nullable.
        let fields = ok(r#"{"type": "object", "properties": {"f": {"type": "integer"}}}"#);
        let column = crate::ir::input_row(&record_ty(&fields)).remove(0).ty.clickhouse();
        assert!(documents(MAPPING[12].1, &column, Some("Int64")), "{column}");
    }
}
