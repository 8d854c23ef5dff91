//! The Protobuf reader: the message etl-schema reads from the `.proto` file ([`PField`]s, what the
//! generated Protobuf decoder dispatches on) and its column view in the IR ([`record_ty`]),
//! documented in [`MAPPING`].

pub(crate) use etl_schema::protobuf::{Invalid, Message, PField, PType, Scalar, parse, record_name};

use crate::ir::{Column, EnumColumn, RecordTy, TimeUnit, Ty};

/// The column type of a scalar: its ClickHouse twin.
pub(crate) fn scalar_column(s: Scalar) -> Ty {
    match s {
        Scalar::Int32 | Scalar::Sint32 | Scalar::Sfixed32 => Ty::Int32,
        Scalar::Int64 | Scalar::Sint64 | Scalar::Sfixed64 => Ty::Int64,
        Scalar::Uint32 | Scalar::Fixed32 => Ty::UInt32,
        Scalar::Uint64 | Scalar::Fixed64 => Ty::UInt64,
        Scalar::Bool => Ty::Bool,
        Scalar::Float => Ty::Float32,
        Scalar::Double => Ty::Float64,
        Scalar::String => Ty::String,
        Scalar::Bytes => Ty::Bytes,
    }
}

/// The column view of the fields: what `ir::input_row` flattens into the input row, and what
/// datagen synthesizes values from.
///
/// A field with presence (proto3 or proto2 `optional`, a `oneof` member) and a wrapper are
/// Nullable; every field below a message with presence is too (an absent message has absent
/// fields). A field without presence reads as its type's default when absent, and a message
/// without presence as its fields' defaults. Repeated fields and maps are never Nullable.
pub(crate) fn record_ty(message: &Message) -> RecordTy {
    RecordTy { name: record_name(&message.name), fields: columns(&message.fields, false) }
}

fn columns(fields: &[PField], optional_above: bool) -> Vec<Column> {
    fields
        .iter()
        .map(|f| {
            let optional = optional_above || f.presence;
            let ty = match &f.ty {
                _ if f.repeated => Ty::Array(Box::new(column_type(&f.ty))),
                PType::Map { .. } => column_type(&f.ty),
                PType::Message { name, fields } => {
                    Ty::Record(Box::new(RecordTy { name: record_name(name), fields: columns(fields, optional) }))
                }
                PType::Wrapper(_) | PType::JsonValue => column_type(&f.ty),
                t if optional => column_type(t).or_null(),
                t => column_type(t),
            };
            Column { name: f.name.clone(), ty }
        })
        .collect()
}

/// The column type of a value inside a container, or of a field without presence.
fn column_type(t: &PType) -> Ty {
    match t {
        PType::Scalar(s) => scalar_column(*s),
        PType::Enum { name, symbols, .. } => {
            Ty::Enum { name: name.clone(), symbols: symbols.clone(), column: EnumColumn::default() }
        }
        PType::Timestamp => Ty::Timestamp(TimeUnit::Nanos),
        PType::Struct => Ty::Json,
        PType::JsonValue => Ty::Nullable(Box::new(Ty::Json)),
        PType::Wrapper(s) => Ty::Nullable(Box::new(scalar_column(*s))),
        PType::Message { name, fields } => {
            Ty::Record(Box::new(RecordTy { name: record_name(name), fields: columns(fields, false) }))
        }
        PType::Map { key, value } => Ty::Map(Box::new(scalar_column(*key)), Box::new(column_type(value))),
    }
}

/// An Avro schema (JSON text) of the messages, for datagen, `produce` and the fuzz test. Each
/// field carries a `proto` attribute (its number and wire type; for an enum its numbers, for a map
/// its key type and its value's) from which datagen writes Protobuf bytes, and the record carries
/// `proto_indexes`, the message-index path of the Confluent framing. Presence is a union with
/// null; a repeated field is an array; a map is a map.
pub(crate) fn datagen_schema(message: &Message) -> String {
    use std::collections::HashSet;

    use serde_json::{Value, json};
    /// A named type is defined where it first appears and referred to by name after.
    fn shape(t: &PType, defined: &mut HashSet<String>) -> Value {
        match t {
            PType::Scalar(s) => json!(match scalar_column(*s) {
                Ty::Int32 => "int",
                Ty::Int64 | Ty::UInt32 | Ty::UInt64 => "long",
                Ty::Bool => "boolean",
                Ty::Float32 => "float",
                Ty::Float64 => "double",
                Ty::String => "string",
                _ => "bytes",
            }),
            PType::Enum { name, symbols, .. } => {
                let name = record_name(name);
                if defined.insert(name.clone()) {
                    json!({"type": "enum", "name": name, "symbols": symbols})
                } else {
                    json!(name)
                }
            }
            PType::Timestamp => json!({"type": "long", "logicalType": "timestamp-nanos"}),
            // Structs of numbers: datagen writes a map's entries as number_values.
            PType::Struct => json!({"type": "map", "values": "long"}),
            PType::JsonValue => json!(["null", {"type": "map", "values": "long"}]),
            PType::Wrapper(s) => json!(["null", shape(&PType::Scalar(*s), defined)]),
            PType::Message { name, fields } => {
                let name = record_name(name);
                if defined.insert(name.clone()) { record(&name, fields, defined) } else { json!(name) }
            }
            PType::Map { value, .. } => json!({"type": "map", "values": shape(value, defined)}),
        }
    }
    fn wire(t: &PType) -> Value {
        match t {
            PType::Scalar(s) => json!({"type": s.name()}),
            PType::Enum { numbers, .. } => json!({"type": "enum", "numbers": numbers}),
            PType::Timestamp => json!({"type": "timestamp"}),
            PType::Struct => json!({"type": "struct"}),
            PType::JsonValue => json!({"type": "jsonvalue"}),
            PType::Wrapper(s) => json!({"type": "wrapper", "of": s.name()}),
            PType::Message { .. } => json!({"type": "message"}),
            PType::Map { key, value } => json!({"type": "map", "key": key.name(), "value": wire(value)}),
        }
    }
    fn record(name: &str, fields: &[PField], defined: &mut HashSet<String>) -> Value {
        let fields: Vec<Value> = fields
            .iter()
            .map(|f| {
                let t = shape(&f.ty, defined);
                let t = if f.repeated {
                    json!({"type": "array", "items": t})
                } else if f.presence && !matches!(f.ty, PType::Wrapper(_)) {
                    json!(["null", t])
                } else {
                    t
                };
                let mut proto = wire(&f.ty);
                proto["number"] = json!(f.number);
                if f.repeated {
                    proto["repeated"] = json!(true);
                }
                json!({"name": f.name, "type": t, "proto": proto})
            })
            .collect();
        json!({"type": "record", "name": name, "fields": fields})
    }
    let top_name = record_name(&message.name);
    let mut defined = HashSet::from([top_name.clone()]);
    let mut top = record(&top_name, &message.fields, &mut defined);
    top["proto_indexes"] = json!(message.indexes);
    serde_json::to_string_pretty(&top).expect("a JSON value prints")
}

/// The Protobuf-to-ClickHouse type table of docs/configuration.md: what [`record_ty`] does, in
/// words. `mapping_matches_record_ty` checks the ClickHouse types it names.
pub(crate) const MAPPING: &[(&str, &str)] = &[
    ("`int32`, `sint32`, `sfixed32`", "`Int32`"),
    ("`int64`, `sint64`, `sfixed64`", "`Int64`"),
    ("`uint32`, `fixed32`", "`UInt32`"),
    ("`uint64`, `fixed64`", "`UInt64` (expressions do not read it: no signed type holds all of it)"),
    ("`float` / `double`", "`Float32` / `Float64`"),
    ("`bool`", "`Bool`"),
    ("`string`, `bytes`", "`String`"),
    (
        "`enum`",
        "`LowCardinality(String)`, the symbol's name (or `Enum8`/`Enum16` numbering the symbols from 0 in declaration order, with `sink.clickhouse.enum: enum`); a number the enum does not define is a record error",
    ),
    ("`google.protobuf.Timestamp`", "`DateTime64(9, 'UTC')`; absent reads as 1970-01-01 (its fields' defaults)"),
    ("`google.protobuf.Int64Value` and the other wrappers", "`Nullable(T)` of the wrapped type"),
    (
        "`optional T` (proto3 or proto2)",
        "`Nullable(T)`; of a message, every field (NULL when the message is absent); of a Timestamp, `Nullable(DateTime64(9, 'UTC'))`",
    ),
    (
        "a member of a `oneof`",
        "`Nullable(T)`; of a message member, every field; the last member to arrive is the one set",
    ),
    ("`repeated T`", "`Array(T)`, packed or not (both are read)"),
    (
        "`map<K, V>`",
        "`Map(K, V)`, the key's own type (`string`, `bool` and each integer type map as above); a key that repeats keeps its last entry",
    ),
    ("a message field (nested)", "flattened into `parent_child` columns; inside an array or map, `Tuple(...)`"),
    (
        "`google.protobuf.Struct`",
        "`JSON`, the object (`Nullable(JSON)` when `optional` or in a oneof); absent reads as `{}`; a number that is NaN or infinite is a record error",
    ),
    (
        "`google.protobuf.Value`",
        "`Nullable(JSON)`: a `struct_value` is the object, `null_value` or no kind is NULL; a number, string, bool or list is a record error (a `JSON` column holds objects)",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readers::documents;

    fn write(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    const CLICK: &str = r#"
        syntax = "proto3";
        package web;
        import "google/protobuf/timestamp.proto";
        import "google/protobuf/wrappers.proto";
        import "common.proto";
        message Other { int32 x = 1; }
        message Click {
          enum Kind { KIND_UNSPECIFIED = 0; VIEW = 1; BUY = 5; }
          message Item { string sku = 1; uint32 qty = 2; }
          int64 id = 1;
          sint32 delta = 2;
          uint64 big = 3;
          fixed32 f32 = 4;
          Kind kind = 5;
          google.protobuf.Timestamp at = 6;
          google.protobuf.Int64Value maybe = 7;
          optional string note = 8;
          repeated Item items = 9;
          repeated int64 tags = 10;
          map<string, double> attrs = 11;
          map<int32, Kind> kinds = 12;
          common.Geo geo = 13;
          oneof target { string url = 14; common.Geo place = 15; }
          bytes raw = 16;
        }"#;
    const COMMON: &str = r#"
        syntax = "proto3";
        package common;
        message Geo { double lat = 1; double lon = 2; }"#;

    fn click() -> Message {
        let dir = write(&[("click.proto", CLICK), ("common.proto", COMMON)]);
        parse(&dir.path().join("click.proto"), "web.Click").unwrap().unwrap()
    }

    #[test]
    fn maps_every_supported_type_to_its_column() {
        let m = click();
        assert_eq!(m.indexes, vec![1]);
        let columns: Vec<(String, String)> = {
            let cols = crate::ir::input_row(&record_ty(&m));
            cols.into_iter().map(|c| (c.name, c.ty.clickhouse())).collect()
        };
        let expected = [
            ("id", "Int64"),
            ("delta", "Int32"),
            ("big", "UInt64"),
            ("f32", "UInt32"),
            ("kind", "LowCardinality(String)"),
            ("at", "DateTime64(9, 'UTC')"),
            ("maybe", "Nullable(Int64)"),
            ("note", "Nullable(String)"),
            ("items", "Array(Tuple(sku String, qty UInt32))"),
            ("tags", "Array(Int64)"),
            ("attrs", "Map(String, Float64)"),
            ("kinds", "Map(Int32, LowCardinality(String))"),
            ("geo_lat", "Float64"),
            ("geo_lon", "Float64"),
            ("url", "Nullable(String)"),
            ("place_lat", "Nullable(Float64)"),
            ("place_lon", "Nullable(Float64)"),
            ("raw", "String"),
        ];
        let expected: Vec<(String, String)> = expected.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        assert_eq!(columns, expected);
        let url = m.fields.iter().find(|f| f.name == "url").unwrap();
        let place = m.fields.iter().find(|f| f.name == "place").unwrap();
        assert!(url.presence && url.oneof.is_some() && url.oneof == place.oneof);
        let note = m.fields.iter().find(|f| f.name == "note").unwrap();
        assert!(note.presence && note.oneof.is_none(), "proto3 optional is no oneof of its own");
    }

    #[test]
    fn an_unknown_message_lists_the_file_s_messages() {
        let dir = write(&[("click.proto", CLICK), ("common.proto", COMMON)]);
        let Err(Invalid::UnknownMessage(defined)) = parse(&dir.path().join("click.proto"), "web.Clik") else {
            panic!("an unknown message is reported")
        };
        assert_eq!(defined, vec!["web.Other", "web.Click", "web.Click.Item"]);
    }

    #[test]
    fn a_file_that_does_not_compile_says_where() {
        let dir = write(&[("bad.proto", "syntax = \"proto3\";\nmessage A { int32 x = ; }")]);
        let Err(Invalid::Compile(why)) = parse(&dir.path().join("bad.proto"), "A") else { panic!("not compiled") };
        assert!(why.contains("bad.proto"), "{why}");
    }

    #[test]
    fn lists_every_unsupported_construct_with_its_path() {
        let text = r#"
            syntax = "proto2";
            import "google/protobuf/any.proto";
            message Node { optional Node next = 1; }
            message Ext { extensions 100 to 200; optional int32 a = 1; }
            message Top {
              optional group G = 1 { optional int32 x = 2; }
              optional google.protobuf.Any any = 3;
              optional Node node = 4;
              optional Ext ext = 5;
            }"#;
        let dir = write(&[("top.proto", text)]);
        let errors = parse(&dir.path().join("top.proto"), "Top").unwrap().unwrap_err();
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, vec!["g", "any", "node.next", "ext"], "{errors:#?}");
    }

    #[test]
    fn types_whose_generated_names_meet_are_reported() {
        let text = r#"
            syntax = "proto3";
            message Foo { message Bar { int32 x = 1; } }
            message FooBar { string y = 1; }
            message Chain { int32 z = 1; }
            message M { repeated Foo.Bar a = 1; repeated FooBar b = 2; Chain c = 3; Foo.Bar d = 4; }"#;
        let dir = write(&[("m.proto", text)]);
        let errors = parse(&dir.path().join("m.proto"), "M").unwrap().unwrap_err();
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, vec!["b", "c"], "{errors:#?}");
        assert!(errors[0].what.contains("`FooBar` and `Foo.Bar`"), "{errors:#?}");
    }

    #[test]
    fn the_datagen_schema_is_avro_and_carries_the_wire_types() {
        let m = click();
        let text = datagen_schema(&m);
        apache_avro::Schema::parse_str(&text).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["proto_indexes"], serde_json::json!([1]));
        assert_eq!(v["fields"][1]["proto"], serde_json::json!({"type": "sint32", "number": 2}));
        assert_eq!(v["fields"][4]["proto"], serde_json::json!({"type": "enum", "numbers": [0, 1, 5], "number": 5}));
    }

    // docs/configuration.md's table is MAPPING: each row names what `record_ty` makes of the
    // fields of `CLICK`.
    #[test]
    fn mapping_matches_record_ty() {
        let m = click();
        let columns = crate::ir::input_row(&record_ty(&m));
        let cases: &[(usize, &str, Option<&str>)] = &[
            (1, "id", None),
            (0, "delta", None),
            (3, "big", None),
            (2, "f32", None),
            (7, "kind", None),
            (8, "at", None),
            (9, "maybe", Some("Int64")),
            (10, "note", Some("String")),
            (12, "tags", Some("Int64")),
            (13, "attrs", Some("Float64")),
            (11, "url", Some("String")),
            (6, "raw", None),
        ];
        for &(row, name, inner) in cases {
            let column = columns.iter().find(|c| c.name == name).unwrap().ty.clickhouse();
            // `attrs` is a map<string, double>.
            let cell = MAPPING[row].1.replace("(K, V)", "(String, V)");
            assert!(documents(&cell, &column, inner), "{name} maps to {column}, but the table says {:?}", MAPPING[row]);
        }
    }
}
