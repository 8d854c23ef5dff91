//! The Avro reader: an `.avsc` file's types that etl-rs can decode, named types resolved
//! ([`AvroType`], what the generated Avro decoder walks), and their column view in the IR
//! ([`record_ty`]), documented in [`MAPPING`].

use std::collections::HashMap;

use apache_avro::Schema;

use crate::ir::{Column, EnumColumn, RecordTy, TimeUnit, Ty};

/// A supported Avro type.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum AvroType {
    /// `boolean`
    Boolean,
    /// `int`
    Int,
    /// `long`
    Long,
    /// `float`
    Float,
    /// `double`
    Double,
    /// `bytes`
    Bytes,
    /// `string`
    String,
    /// `enum`
    Enum {
        /// The enum's full name.
        name: String,
        /// Its symbols, in order.
        symbols: Vec<String>,
    },
    /// `array`
    Array(Box<AvroType>),
    /// `map` (keys are strings)
    Map(Box<AvroType>),
    /// A union of `null` and one other type.
    Nullable {
        /// The other type.
        inner: Box<AvroType>,
        /// The branch index of `null` (0 or 1), which the encoding uses.
        null_index: u8,
    },
    /// A nested `record`.
    Record(AvroRecord),
    /// `long` with logicalType `timestamp-millis`
    TimestampMillis,
    /// `long` with logicalType `timestamp-micros`
    TimestampMicros,
    /// `int` with logicalType `date`
    Date,
    /// `bytes` or `fixed` with logicalType `decimal`
    Decimal {
        /// Total digits.
        precision: u32,
        /// Digits after the point.
        scale: u32,
        /// The fixed size when the decimal is stored in a `fixed`.
        fixed_size: Option<usize>,
    },
    /// `string` with logicalType `uuid`
    Uuid,
    /// `int` with logicalType `time-millis`
    TimeMillis,
    /// `long` with logicalType `time-micros`
    TimeMicros,
    /// `string` with logicalType `json` (ours: apache-avro keeps no unknown logical type)
    Json,
    /// A union of several non-null types (null among them or not) → Variant.
    Variant {
        /// The branches in the schema's order (their numbers on the wire): `None` for null.
        branches: Vec<Option<AvroType>>,
    },
}

impl AvroType {
    /// The fewest bytes one value of this type takes in Avro's binary encoding: the decoder's
    /// guard against block counts that cannot fit in what is left of a message.
    pub(crate) fn min_encoded_bytes(&self) -> u64 {
        match self {
            AvroType::Float => 4,
            AvroType::Double => 8,
            AvroType::Decimal { fixed_size: Some(n), .. } => *n as u64,
            AvroType::Record(r) => r.fields.iter().map(|f| f.ty.min_encoded_bytes()).sum(),
            // A varint, a length, an index or a block count: at least one byte each.
            _ => 1,
        }
    }
}

/// A record and its fields, in order.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AvroRecord {
    /// The record's full name.
    pub name: String,
    /// Its fields.
    pub fields: Vec<AvroField>,
}

/// One record field.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AvroField {
    /// The field's name.
    pub name: String,
    /// Its type.
    pub ty: AvroType,
}

/// The column view of an Avro record: what `ir::input_row` flattens into the input row, and the
/// one place the Avro-to-ClickHouse mapping is decided ([`MAPPING`] documents it).
pub(crate) fn record_ty(record: &AvroRecord) -> RecordTy {
    let fields = record.fields.iter().map(|f| Column { name: f.name.clone(), ty: column_ty(&f.ty) }).collect();
    RecordTy { name: record.name.clone(), fields }
}

/// The IR type of an Avro type.
pub(crate) fn column_ty(avro: &AvroType) -> Ty {
    match avro {
        AvroType::Boolean => Ty::Bool,
        AvroType::Int => Ty::Int32,
        AvroType::Long => Ty::Int64,
        AvroType::Float => Ty::Float32,
        AvroType::Double => Ty::Float64,
        AvroType::Bytes => Ty::Bytes,
        AvroType::String => Ty::String,
        AvroType::Enum { name, symbols } => {
            Ty::Enum { name: name.clone(), symbols: symbols.clone(), column: EnumColumn::default() }
        }
        AvroType::Array(t) => Ty::Array(Box::new(column_ty(t))),
        AvroType::Map(t) => Ty::Map(Box::new(Ty::String), Box::new(column_ty(t))),
        // ClickHouse has no Nullable(Array) or Nullable(Map): null reads as empty, as JSON's
        // null arrays do.
        AvroType::Nullable { inner, .. } if matches!(**inner, AvroType::Array(_) | AvroType::Map(_)) => {
            column_ty(inner)
        }
        AvroType::Nullable { inner, .. } => Ty::Nullable(Box::new(column_ty(inner))),
        AvroType::Record(r) => Ty::Record(Box::new(record_ty(r))),
        AvroType::TimestampMillis => Ty::Timestamp(TimeUnit::Millis),
        AvroType::TimestampMicros => Ty::Timestamp(TimeUnit::Micros),
        AvroType::Date => Ty::Date,
        AvroType::Decimal { precision, scale, .. } => Ty::Decimal { precision: *precision, scale: *scale },
        AvroType::Uuid => Ty::Uuid,
        AvroType::TimeMillis => Ty::Time(TimeUnit::Millis),
        AvroType::TimeMicros => Ty::Time(TimeUnit::Micros),
        AvroType::Json => Ty::Json,
        AvroType::Variant { branches } => {
            let members = branches.iter().flatten().map(column_ty).collect();
            crate::ir::variant(members).expect("the reader checked the members")
        }
    }
}

/// The Avro-to-ClickHouse type table of docs/configuration.md: what [`column_ty`] does, in
/// words. `mapping_matches_column_ty` checks each row's types against it.
pub(crate) const MAPPING: &[(&str, &str)] = &[
    ("`long` / `int`", "`Int64` / `Int32`"),
    ("`float` / `double`", "`Float32` / `Float64`"),
    ("`boolean`", "`Bool`"),
    ("`string`, `bytes`", "`String`"),
    ("`enum`", "`LowCardinality(String)`, or `Enum8`/`Enum16` with `sink.clickhouse.enum: enum`"),
    ("`[\"null\", T]`", "`Nullable(T)`"),
    (
        "a union of several non-null types, with or without `null` (`[\"null\", \"string\", \"long\"]`)",
        "`Variant(Int64, String)`: the members in ClickHouse's order, `null` the variant's NULL; members are scalars (no enums, records, arrays or maps), each a different ClickHouse type; expressions read a member as `v.Int64` (null unless the variant holds it)",
    ),
    ("`array<T>` / `map<T>`", "`Array(T)` / `Map(String, T)`; a key written twice keeps its last value"),
    (
        "`[\"null\", array<T>]` / `[\"null\", map<T>]`",
        "`Array(T)` / `Map(String, T)`: null reads as empty (ClickHouse has no `Nullable(Array)`)",
    ),
    ("record (nested)", "flattened into `parent_child` columns; inside an array or map, `Tuple(...)`"),
    (
        "`[\"null\", record]`",
        "flattened into `Nullable` columns, all NULL (arrays and maps empty) when the record is null; inside an array or map it is refused (no `Nullable(Tuple)`: drop `null` from the element's union)",
    ),
    ("`timestamp-millis` / `timestamp-micros`", "`DateTime64(3, 'UTC')` / `DateTime64(6, 'UTC')`"),
    (
        "`local-timestamp-millis` / `local-timestamp-micros`",
        "`DateTime64(3, 'UTC')` / `DateTime64(6, 'UTC')`: the wall-clock time as written, shown as UTC (no zone is applied)",
    ),
    ("`time-millis` / `time-micros`", "`Time64(3)` / `Time64(6)` (ClickHouse 25.6 or later)"),
    ("`date`", "`Date32`"),
    ("`decimal(p, s)`, p ≤ 38", "`Decimal(p, s)`"),
    ("`uuid`", "`UUID`"),
    (
        "`string` with `\"logicalType\": \"json\"` (etl-rs's own logical type; other readers see a string)",
        "`JSON`; a string that is not a JSON object is a record error; see [the JSON type](#the-json-type)",
    ),
];

use super::Unsupported;

/// The paths (as [`convert`] names them: `a.b`, `items[]`, `attrs{}`) of the strings whose
/// schema says `"logicalType": "json"`, found in the schema's JSON text: apache-avro drops a
/// logical type it does not know.
pub(crate) fn json_strings(raw: &serde_json::Value) -> std::collections::HashSet<String> {
    use serde_json::Value;
    fn walk(t: &Value, path: &str, out: &mut std::collections::HashSet<String>) {
        match t {
            Value::Array(branches) => branches.iter().for_each(|b| walk(b, path, out)),
            Value::Object(o) => match o.get("type").and_then(Value::as_str) {
                Some("string") if o.get("logicalType").and_then(Value::as_str) == Some("json") => {
                    out.insert(path.to_owned());
                }
                Some("record" | "error") => {
                    for f in o.get("fields").and_then(Value::as_array).into_iter().flatten() {
                        let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
                        let field_path = if path.is_empty() { name.to_owned() } else { format!("{path}.{name}") };
                        if let Some(ft) = f.get("type") {
                            walk(ft, &field_path, out);
                        }
                    }
                }
                Some("array") => {
                    if let Some(items) = o.get("items") {
                        walk(items, &format!("{path}[]"), out);
                    }
                }
                Some("map") => {
                    if let Some(values) = o.get("values") {
                        walk(values, &format!("{path}{{}}"), out);
                    }
                }
                _ => {}
            },
            _ => {}
        }
    }
    let mut out = std::collections::HashSet::new();
    walk(raw, "", &mut out);
    out
}

/// The schema datagen draws from: the reader schema with each record field that holds strings of
/// logicalType json (directly, or through unions, arrays and maps) marked `"etl_json": true`,
/// a field attribute apache-avro keeps, so that datagen writes JSON objects there.
pub(crate) fn datagen_schema(text: &str) -> String {
    use serde_json::Value;
    fn holds_json(t: &Value) -> bool {
        match t {
            Value::Array(branches) => branches.iter().any(holds_json),
            Value::Object(o) => match o.get("type").and_then(Value::as_str) {
                Some("string") => o.get("logicalType").and_then(Value::as_str) == Some("json"),
                Some("array") => o.get("items").is_some_and(holds_json),
                Some("map") => o.get("values").is_some_and(holds_json),
                _ => false,
            },
            _ => false,
        }
    }
    fn mark(t: &mut Value) {
        match t {
            Value::Array(branches) => branches.iter_mut().for_each(mark),
            Value::Object(o) => {
                if let Some(Value::Array(fields)) = o.get_mut("fields") {
                    for f in fields {
                        if f.get("type").is_some_and(holds_json) {
                            f["etl_json"] = Value::Bool(true);
                        }
                        if let Some(ft) = f.get_mut("type") {
                            mark(ft);
                        }
                    }
                }
                for key in ["items", "values"] {
                    if let Some(inner) = o.get_mut(key) {
                        mark(inner);
                    }
                }
            }
            _ => {}
        }
    }
    match serde_json::from_str::<Value>(text) {
        Ok(mut schema) if text.contains("\"json\"") => {
            mark(&mut schema);
            schema.to_string()
        }
        _ => text.to_owned(),
    }
}

/// Converts a parsed schema, listing every unsupported type rather than the first; the strings
/// at `json_strings` (see [`json_strings`]) are JSON columns.
pub(crate) fn convert(
    schema: &Schema,
    json_strings: &std::collections::HashSet<String>,
) -> Result<AvroRecord, Vec<Unsupported>> {
    let mut cx = Converter { json_strings: json_strings.clone(), ..Converter::default() };
    let converted = match schema {
        Schema::Record(_) => cx.convert(schema, ""),
        other => {
            cx.unsupported(
                "",
                format!("the top-level schema is {}, not a record", describe(other)),
                "the reader schema must be a record",
            );
            None
        }
    };
    match converted {
        Some(AvroType::Record(record)) if cx.errors.is_empty() => Ok(record),
        _ => Err(cx.errors),
    }
}

#[derive(Default)]
struct Converter {
    named: HashMap<String, AvroType>,
    in_progress: Vec<String>,
    errors: Vec<Unsupported>,
    /// How many arrays and maps enclose the type being converted.
    containers: usize,
    /// The paths of strings with `"logicalType": "json"`.
    json_strings: std::collections::HashSet<String>,
}

impl Converter {
    fn unsupported(&mut self, path: &str, what: String, fix: &str) {
        let path = if path.is_empty() { "(top level)".to_owned() } else { path.to_owned() };
        self.errors.push(Unsupported { path, what, fix: fix.to_owned() });
    }

    fn convert(&mut self, schema: &Schema, path: &str) -> Option<AvroType> {
        Some(match schema {
            Schema::Boolean => AvroType::Boolean,
            Schema::Int => AvroType::Int,
            Schema::Long => AvroType::Long,
            Schema::Float => AvroType::Float,
            Schema::Double => AvroType::Double,
            Schema::Bytes => AvroType::Bytes,
            Schema::String if self.json_strings.contains(path) => AvroType::Json,
            Schema::String => AvroType::String,
            Schema::Uuid => AvroType::Uuid,
            Schema::Date => AvroType::Date,
            Schema::TimestampMillis => AvroType::TimestampMillis,
            Schema::TimestampMicros => AvroType::TimestampMicros,
            // A local timestamp is a wall-clock reading with no zone: the same ticks, kept as
            // written in a UTC column so that the wall clock reads back unchanged.
            Schema::LocalTimestampMillis => AvroType::TimestampMillis,
            Schema::LocalTimestampMicros => AvroType::TimestampMicros,
            Schema::TimeMillis => AvroType::TimeMillis,
            Schema::TimeMicros => AvroType::TimeMicros,
            Schema::Decimal(d) => {
                let fixed_size = match d.inner.as_ref() {
                    Schema::Fixed(f) => Some(f.size),
                    _ => None,
                };
                // Values are carried as i128, which holds 38 decimal digits (Decimal128).
                if d.precision == 0 || d.precision > 38 {
                    self.unsupported(
                        path,
                        format!("decimal precision {} is outside the supported 1 to 38", d.precision),
                        "use a precision between 1 and 38 (Decimal256 is not supported yet)",
                    );
                    return None;
                }
                AvroType::Decimal { precision: d.precision as u32, scale: d.scale as u32, fixed_size }
            }
            Schema::Enum(e) => {
                let ty = AvroType::Enum { name: e.name.fullname(None), symbols: e.symbols.clone() };
                self.named.insert(e.name.fullname(None), ty.clone());
                ty
            }
            Schema::Array(a) => {
                self.containers += 1;
                let items = self.convert(&a.items, &format!("{path}[]"));
                self.containers -= 1;
                AvroType::Array(Box::new(items?))
            }
            Schema::Map(m) => {
                self.containers += 1;
                let values = self.convert(&m.types, &format!("{path}{{}}"));
                self.containers -= 1;
                AvroType::Map(Box::new(values?))
            }
            Schema::Union(u) => return self.union(u, path),
            Schema::Record(r) => return self.record(r, path),
            Schema::Ref { name } => return self.reference(name, path),
            other => return self.refuse(other, path),
        })
    }

    /// `["null", T]`, the only union with a column type.
    fn union(&mut self, u: &apache_avro::schema::UnionSchema, path: &str) -> Option<AvroType> {
        let variants = u.variants();
        let null_index = variants.iter().position(|v| matches!(v, Schema::Null));
        match (variants.len(), null_index) {
            (2, Some(null_index)) => {
                let other = &variants[1 - null_index];
                if matches!(other, Schema::Union(_)) {
                    self.unsupported(path, "a nested union is not supported".into(), "use [\"null\", T]");
                    return None;
                }
                let inner = self.convert(other, path)?;
                // At the top level a nullable record flattens into Nullable columns and
                // a nullable array or map reads null as empty; inside an array or map
                // neither has a ClickHouse type (no Nullable(Tuple), Nullable(Array)).
                if self.containers > 0 && matches!(inner, AvroType::Array(_) | AvroType::Map(_) | AvroType::Record(_)) {
                    self.unsupported(
                        path,
                        format!("a nullable {} inside an array or map is not supported", describe(other)),
                        "remove \"null\" from the element's union (use an empty array or map, or a record whose fields are nullable)",
                    );
                    return None;
                }
                Some(AvroType::Nullable { inner: Box::new(inner), null_index: null_index as u8 })
            }
            (n, null) if n - usize::from(null.is_some()) >= 2 => {
                let names: Vec<String> = variants.iter().map(describe).collect();
                let mut branches = Vec::with_capacity(n);
                for v in variants {
                    branches.push(match v {
                        Schema::Null => None,
                        v => Some(self.convert(v, path)?),
                    });
                }
                let members = branches.iter().flatten().map(column_ty).collect();
                match crate::ir::variant(members) {
                    Ok(_) => Some(AvroType::Variant { branches }),
                    Err(why) => {
                        self.unsupported(
                            path,
                            format!("a union of [{}] has no Variant column: {why}", names.join(", ")),
                            "keep a union's members scalars of different ClickHouse types, or split the field",
                        );
                        None
                    }
                }
            }
            _ => {
                let names: Vec<String> = variants.iter().map(describe).collect();
                self.unsupported(
                    path,
                    format!("a union of [{}] is not supported", names.join(", ")),
                    "a union is [\"null\", T] (Nullable) or of several scalar types (a Variant)",
                );
                None
            }
        }
    }

    /// A record: its fields converted in order; it names a type later fields may refer to.
    fn record(&mut self, r: &apache_avro::schema::RecordSchema, path: &str) -> Option<AvroType> {
        let name = r.name.fullname(None);
        self.in_progress.push(name.clone());
        let mut fields = Vec::with_capacity(r.fields.len());
        let mut ok = true;
        for f in &r.fields {
            let field_path = if path.is_empty() { f.name.clone() } else { format!("{path}.{}", f.name) };
            match self.convert(&f.schema, &field_path) {
                Some(ty) => fields.push(AvroField { name: f.name.clone(), ty }),
                None => ok = false,
            }
        }
        self.in_progress.pop();
        if !ok {
            return None;
        }
        let ty = AvroType::Record(AvroRecord { name: name.clone(), fields });
        self.named.insert(name, ty.clone());
        Some(ty)
    }

    /// A reference to a named type defined before it (not to one that encloses it).
    fn reference(&mut self, name: &apache_avro::schema::Name, path: &str) -> Option<AvroType> {
        let full = name.fullname(None);
        if self.in_progress.contains(&full) {
            self.unsupported(
                path,
                format!("a recursive reference to `{full}` is not supported"),
                "recursive types have no column mapping; cut the recursion",
            );
            return None;
        }
        match self.named.get(&full) {
            Some(ty) => Some(ty.clone()),
            None => {
                self.unsupported(
                    path,
                    format!("a reference to `{full}`, which is not defined before it"),
                    "define the named type before using it",
                );
                None
            }
        }
    }

    /// A type without a column mapping: why, and what to use instead.
    fn refuse(&mut self, other: &Schema, path: &str) -> Option<AvroType> {
        let fix = match other {
            Schema::Null => "`null` alone carries no data; use [\"null\", T] for an optional field",
            Schema::Fixed(_) => "use `bytes`, or a `decimal` logical type on the fixed",
            Schema::TimestampNanos => "use timestamp-micros",
            Schema::LocalTimestampNanos => "use local-timestamp-micros",
            Schema::BigDecimal => "use the `decimal` logical type with a fixed precision and scale",
            _ => "see docs/configuration.md for the supported types",
        };
        self.unsupported(path, format!("{} is not supported", describe(other)), fix);
        None
    }
}

/// How a schema is named in messages.
fn describe(schema: &Schema) -> String {
    match schema {
        Schema::Null => "null".into(),
        Schema::Boolean => "boolean".into(),
        Schema::Int => "int".into(),
        Schema::Long => "long".into(),
        Schema::Float => "float".into(),
        Schema::Double => "double".into(),
        Schema::Bytes => "bytes".into(),
        Schema::String => "string".into(),
        Schema::Array(_) => "array".into(),
        Schema::Map(_) => "map".into(),
        Schema::Union(_) => "union".into(),
        Schema::Record(r) => format!("record `{}`", r.name.fullname(None)),
        Schema::Enum(e) => format!("enum `{}`", e.name.fullname(None)),
        Schema::Fixed(f) => format!("fixed `{}`", f.name.fullname(None)),
        Schema::Decimal(_) => "decimal".into(),
        Schema::BigDecimal => "big-decimal".into(),
        Schema::Uuid => "uuid".into(),
        Schema::Date => "date".into(),
        Schema::TimeMillis => "time-millis".into(),
        Schema::TimeMicros => "time-micros".into(),
        Schema::TimestampMillis => "timestamp-millis".into(),
        Schema::TimestampMicros => "timestamp-micros".into(),
        Schema::TimestampNanos => "timestamp-nanos".into(),
        Schema::LocalTimestampMillis => "local-timestamp-millis".into(),
        Schema::LocalTimestampMicros => "local-timestamp-micros".into(),
        Schema::LocalTimestampNanos => "local-timestamp-nanos".into(),
        Schema::Duration => "duration".into(),
        Schema::Ref { name } => format!("reference `{}`", name.fullname(None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readers::documents;

    fn parse(json: &str) -> Result<AvroRecord, Vec<Unsupported>> {
        convert(&Schema::parse_str(json).unwrap(), &json_strings(&serde_json::from_str(json).unwrap()))
    }

    #[test]
    fn converts_every_supported_type() {
        let record = parse(
            r#"{"type":"record","name":"R","fields":[
                {"name":"b","type":"boolean"},{"name":"i","type":"int"},{"name":"l","type":"long"},
                {"name":"f","type":"float"},{"name":"d","type":"double"},{"name":"s","type":"string"},
                {"name":"by","type":"bytes"},
                {"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]}},
                {"name":"e2","type":"E"},
                {"name":"a","type":{"type":"array","items":"long"}},
                {"name":"m","type":{"type":"map","values":"string"}},
                {"name":"n","type":["null","string"]},
                {"name":"n2","type":["string","null"]},
                {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
                {"name":"tu","type":{"type":"long","logicalType":"timestamp-micros"}},
                {"name":"dt","type":{"type":"int","logicalType":"date"}},
                {"name":"dec","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
                {"name":"u","type":{"type":"string","logicalType":"uuid"}},
                {"name":"nested","type":{"type":"record","name":"N","fields":[{"name":"x","type":"int"}]}}
            ]}"#,
        )
        .unwrap();
        assert_eq!(record.fields.len(), 19);
        assert_eq!(record.fields[8].ty, record.fields[7].ty, "a named type resolves to its definition");
        assert_eq!(record.fields[12].ty, AvroType::Nullable { inner: Box::new(AvroType::String), null_index: 1 });
        assert_eq!(record.fields[16].ty, AvroType::Decimal { precision: 12, scale: 2, fixed_size: None });
    }

    #[test]
    fn lists_every_unsupported_type() {
        let errors = parse(
            r#"{"type":"record","name":"R","fields":[
                {"name":"u","type":["string",{"type":"array","items":"long"}]},
                {"name":"items","type":{"type":"array","items":{"type":"record","name":"I","fields":[
                    {"name":"t","type":{"type":"long","logicalType":"timestamp-nanos"}}]}}},
                {"name":"fx","type":{"type":"fixed","name":"F","size":4}}
            ]}"#,
        )
        .unwrap_err();
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["u", "items[].t", "fx"]);
        assert!(errors[0].what.contains("union of [string, array]"), "{}", errors[0].what);
    }

    // ClickHouse has no Nullable(Array), Nullable(Map) or Nullable(Tuple): a nullable record
    // flattens into Nullable columns, a nullable array or map is a plain one (null reads empty).
    #[test]
    fn nullable_containers_map_to_types_clickhouse_has() {
        let record = parse(
            r#"{"type":"record","name":"R","fields":[
                {"name":"o","type":["null",{"type":"record","name":"O","fields":[
                    {"name":"x","type":"int"},{"name":"w","type":{"type":"array","items":"string"}},
                    {"name":"n","type":["null","string"]},
                    {"name":"i","type":["null",{"type":"record","name":"I","fields":[{"name":"y","type":"long"}]}]}]}]},
                {"name":"a","type":["null",{"type":"array","items":"long"}]},
                {"name":"m","type":[{"type":"map","values":"string"},"null"]}
            ]}"#,
        )
        .unwrap();
        let columns = crate::ir::input_row(&record_ty(&record));
        let types: Vec<(String, String)> = columns.iter().map(|c| (c.name.clone(), c.ty.clickhouse())).collect();
        let expected = [
            ("o_x", "Nullable(Int32)"),
            ("o_w", "Array(String)"),
            ("o_n", "Nullable(String)"),
            ("o_i_y", "Nullable(Int64)"),
            ("a", "Array(Int64)"),
            ("m", "Map(String, String)"),
        ];
        let expected: Vec<(String, String)> = expected.iter().map(|(n, t)| ((*n).into(), (*t).into())).collect();
        assert_eq!(types, expected);
    }

    #[test]
    fn nullable_containers_inside_containers_are_refused() {
        let errors = parse(
            r#"{"type":"record","name":"R","fields":[
                {"name":"a","type":{"type":"array","items":["null",{"type":"array","items":"int"}]}},
                {"name":"m","type":{"type":"map","values":["null",{"type":"record","name":"V","fields":[{"name":"v","type":"int"}]}]}},
                {"name":"ok","type":{"type":"array","items":["null","int"]}}
            ]}"#,
        )
        .unwrap_err();
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["a[]", "m{}"]);
        assert!(errors[0].what.contains("nullable array inside an array or map"), "{}", errors[0].what);
        assert!(errors[0].fix.contains("remove \"null\""), "{}", errors[0].fix);
    }

    #[test]
    fn top_level_must_be_a_record() {
        let errors = convert(&Schema::parse_str(r#""string""#).unwrap(), &Default::default()).unwrap_err();
        assert_eq!(errors[0].path, "(top level)");
    }

    // A string of logicalType json is a JSON column wherever it stands; a plain string is not.
    #[test]
    fn json_strings_are_found_by_path() {
        let record = parse(
            r#"{"type":"record","name":"R","fields":[
                {"name":"doc","type":{"type":"string","logicalType":"json"}},
                {"name":"maybe","type":["null",{"type":"string","logicalType":"json"}]},
                {"name":"docs","type":{"type":"array","items":{"type":"string","logicalType":"json"}}},
                {"name":"inner","type":{"type":"record","name":"I","fields":[
                    {"name":"by_key","type":{"type":"map","values":{"type":"string","logicalType":"json"}}},
                    {"name":"plain","type":"string"}]}},
                {"name":"plain","type":"string"}
            ]}"#,
        )
        .unwrap();
        let columns: Vec<(String, String)> =
            crate::ir::input_row(&record_ty(&record)).into_iter().map(|c| (c.name, c.ty.clickhouse())).collect();
        let expected = [
            ("doc", "JSON"),
            ("maybe", "Nullable(JSON)"),
            ("docs", "Array(JSON)"),
            ("inner_by_key", "Map(String, JSON)"),
            ("inner_plain", "String"),
            ("plain", "String"),
        ];
        let expected: Vec<(String, String)> =
            expected.iter().map(|(n, t)| ((*n).to_owned(), (*t).to_owned())).collect();
        assert_eq!(columns, expected);
    }

    // docs/configuration.md's table is MAPPING: each row names what `column_ty` makes of its types.
    #[test]
    fn mapping_matches_column_ty() {
        let cases: &[(usize, &str, Option<&str>)] = &[
            (0, r#""long""#, None),
            (0, r#""int""#, None),
            (1, r#""float""#, None),
            (1, r#""double""#, None),
            (2, r#""boolean""#, None),
            (3, r#""string""#, None),
            (3, r#""bytes""#, None),
            (4, r#"{"type":"enum","name":"E","symbols":["A"]}"#, None),
            (5, r#"["null","long"]"#, Some("Int64")),
            (6, r#"["null","string","long"]"#, None),
            (7, r#"{"type":"array","items":"long"}"#, Some("Int64")),
            (7, r#"{"type":"map","values":"long"}"#, Some("Int64")),
            (8, r#"["null",{"type":"array","items":"long"}]"#, Some("Int64")),
            (8, r#"["null",{"type":"map","values":"long"}]"#, Some("Int64")),
            (11, r#"{"type":"long","logicalType":"timestamp-millis"}"#, None),
            (11, r#"{"type":"long","logicalType":"timestamp-micros"}"#, None),
            (12, r#"{"type":"long","logicalType":"local-timestamp-millis"}"#, None),
            (12, r#"{"type":"long","logicalType":"local-timestamp-micros"}"#, None),
            (13, r#"{"type":"int","logicalType":"time-millis"}"#, None),
            (13, r#"{"type":"long","logicalType":"time-micros"}"#, None),
            (14, r#"{"type":"int","logicalType":"date"}"#, None),
            (15, r#"{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}"#, Some("12, 2")),
            (16, r#"{"type":"string","logicalType":"uuid"}"#, None),
            (17, r#"{"type":"string","logicalType":"json"}"#, None),
        ];
        for &(row, ty, inner) in cases {
            let record =
                parse(&format!(r#"{{"type":"record","name":"R","fields":[{{"name":"f","type":{ty}}}]}}"#)).unwrap();
            let column = crate::ir::input_row(&record_ty(&record)).remove(0).ty.clickhouse();
            let cell = MAPPING[row].1.replace("(p, s)", "(T)");
            assert!(documents(&cell, &column, inner), "{ty} maps to {column}, but the table says {:?}", MAPPING[row]);
        }
    }
}
