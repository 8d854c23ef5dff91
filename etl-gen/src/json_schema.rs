//! JSON Schema as the generator sees it: the subset that maps to ClickHouse columns, read from
//! the schema file into [`JField`]s (what the generated decoder walks) and reduced to the
//! column view every format shares ([`RecordType`]).
//!
//! The subset: `type` (one type, or one type and `"null"`), `properties`, `required`,
//! `additionalProperties` (a schema: a map), `items` (one schema), string `enum`, the string
//! `format`s `date-time`, `date` and `uuid`, local `$ref`s into `definitions` or `$defs`, and
//! `oneOf`/`anyOf` of one schema and `{"type": "null"}`. Validation keywords that do not change
//! a value's shape (`minimum`, `pattern`, `maxLength`, ...) and annotations are accepted and not
//! enforced. Everything else that changes the shape is reported with its path.

use std::collections::{BTreeSet, HashSet};

use indexmap::IndexMap;
use serde::Deserialize;

use crate::schema::{AvroType, Field, RecordType, Unsupported};

/// A JSON value with the order of object members kept (properties become columns in order).
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
enum J {
    Null,
    Bool(bool),
    Str(String),
    Arr(Vec<J>),
    Obj(IndexMap<String, J>),
    /// A number: no schema keyword's shape depends on its value.
    Other(serde::de::IgnoredAny),
}

/// The shape of a JSON value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum JType {
    /// `integer` → Int64
    Integer,
    /// `number` → Float64
    Number,
    /// `boolean` → Bool
    Boolean,
    /// `string` → String
    String,
    /// `string` with `format: date-time` → DateTime64(6, 'UTC')
    DateTime,
    /// `string` with `format: date` → Date32
    Date,
    /// `string` with `format: uuid` → UUID
    Uuid,
    /// A string `enum` → LowCardinality(String)
    Enum {
        /// A name for the enum, unique in the schema.
        name: String,
        /// The symbols, in order.
        symbols: Vec<String>,
    },
    /// `array` → Array(T)
    Array(Box<JType>),
    /// An object with an `additionalProperties` schema and no `properties` → Map(String, T)
    Map(Box<JType>),
    /// An object with `properties`: flattened as `parent_child` in a row, a Tuple in a container.
    Object {
        /// A name for the record, unique in the schema.
        name: String,
        /// Its properties, in order.
        fields: Vec<JField>,
    },
    /// The type and `null`.
    Nullable(Box<JType>),
}

impl JType {
    /// The type without `Nullable`.
    pub(crate) fn non_null(&self) -> &JType {
        match self {
            JType::Nullable(t) => t,
            t => t,
        }
    }
}

/// One property of an object.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct JField {
    /// The key as it appears in documents.
    pub key: String,
    /// The column (part) name: the key with every character outside `[A-Za-z0-9_]` replaced by
    /// `_` (and a leading digit prefixed with `_`).
    pub name: String,
    /// Its shape.
    pub ty: JType,
    /// Whether the object's `required` lists it.
    pub required: bool,
}

/// The top level of the schema file failed to parse as JSON or is not an object schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Invalid(pub String);

/// Reads a JSON Schema: every unsupported construct is listed, not just the first.
pub(crate) fn parse(text: &str) -> Result<Result<Vec<JField>, Vec<Unsupported>>, Invalid> {
    let root: J = serde_json::from_str(text).map_err(|e| Invalid(format!("not JSON: {e}")))?;
    let J::Obj(ref map) = root else {
        return Err(Invalid("the top level is not a JSON Schema object".into()));
    };
    let mut cx = Walker { root: map, resolving: Vec::new(), errors: Vec::new(), names: HashSet::new() };
    let fields = match cx.shape(&root, "", "Message") {
        Some(JType::Object { fields, .. }) => Some(fields),
        Some(_) => {
            cx.unsupported(
                "",
                "the top level is not an object with `properties`",
                "describe one message as an object: `{\"type\": \"object\", \"properties\": {...}}`",
            );
            None
        }
        None => None,
    };
    match fields {
        Some(fields) if cx.errors.is_empty() => Ok(Ok(fields)),
        _ => Ok(Err(cx.errors)),
    }
}

/// The column view of the fields: what `ir::input_row` flattens into the input row, and what
/// datagen synthesizes values from.
///
/// A property that is not required, or whose type allows `null`, is Nullable; so is every
/// property below an object that is optional or nullable (an absent object has absent
/// children). Arrays and maps are never Nullable (ClickHouse has no `Nullable(Array)`): an
/// absent or `null` one reads as empty.
pub(crate) fn record(name: &str, fields: &[JField]) -> RecordType {
    RecordType { name: name.to_owned(), fields: columns(fields, false) }
}

fn columns(fields: &[JField], optional_above: bool) -> Vec<Field> {
    fields
        .iter()
        .map(|f| {
            let nullable = matches!(f.ty, JType::Nullable(_));
            let optional = optional_above || !f.required || nullable;
            let ty = match f.ty.non_null() {
                JType::Object { name, fields } => {
                    AvroType::Record(RecordType { name: name.clone(), fields: columns(fields, optional) })
                }
                t @ (JType::Array(_) | JType::Map(_)) => column_type(t),
                t if optional => AvroType::Nullable { inner: Box::new(column_type(t)), null_index: 0 },
                t => column_type(t),
            };
            Field { name: f.name.clone(), ty }
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
            JType::Enum { name, symbols } => json!({"type": "enum", "name": name, "symbols": symbols}),
            JType::Array(t) => json!({"type": "array", "items": ty(t)}),
            JType::Map(t) => json!({"type": "map", "values": ty(t)}),
            JType::Object { name, fields } => record(name, fields),
            JType::Nullable(t) => json!(["null", ty(t)]),
        }
    }
    fn record(name: &str, fields: &[JField]) -> Value {
        let fields: Vec<Value> = fields
            .iter()
            .map(|f| {
                let t = match &f.ty {
                    JType::Nullable(_) => ty(&f.ty),
                    t if !f.required => json!(["null", ty(t)]),
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
    serde_json::to_string_pretty(&record("Message", fields)).expect("a JSON value prints")
}

/// The column type of a value inside a container (where presence is not a question).
fn column_type(t: &JType) -> AvroType {
    match t {
        JType::Integer => AvroType::Long,
        JType::Number => AvroType::Double,
        JType::Boolean => AvroType::Boolean,
        JType::String => AvroType::String,
        JType::DateTime => AvroType::TimestampMicros,
        JType::Date => AvroType::Date,
        JType::Uuid => AvroType::Uuid,
        JType::Enum { name, symbols } => AvroType::Enum { name: name.clone(), symbols: symbols.clone() },
        JType::Array(t) => AvroType::Array(Box::new(column_type(t))),
        JType::Map(t) => AvroType::Map(Box::new(column_type(t))),
        JType::Object { name, fields } => {
            AvroType::Record(RecordType { name: name.clone(), fields: columns(fields, false) })
        }
        JType::Nullable(t) => AvroType::Nullable { inner: Box::new(column_type(t)), null_index: 0 },
    }
}

/// A column name for a key: characters outside `[A-Za-z0-9_]` become `_`.
pub(crate) fn column_name(key: &str) -> String {
    let mut name: String = key.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

/// Keywords that change a value's shape in ways no column can hold, with the fix for each.
const UNSUPPORTED_KEYWORDS: &[(&str, &str)] = &[
    ("allOf", "merge the schemas into one object"),
    ("not", "remove `not`: it constrains values without giving them a shape"),
    ("if", "remove the conditional: a column has one type whatever the document"),
    ("then", "remove the conditional: a column has one type whatever the document"),
    ("else", "remove the conditional: a column has one type whatever the document"),
    ("patternProperties", "list the properties under `properties`, or use an `additionalProperties` schema for a map"),
    ("dependentSchemas", "list every property under one `properties`"),
    ("dependencies", "list every property under one `properties`"),
    ("prefixItems", "a tuple has no column mapping; use `items` with one schema"),
    ("unevaluatedProperties", "list the properties under `properties`"),
];

struct Walker<'a> {
    root: &'a IndexMap<String, J>,
    /// `$ref`s being resolved, to refuse recursion.
    resolving: Vec<String>,
    errors: Vec<Unsupported>,
    /// Record and enum names handed out, so each is unique.
    names: HashSet<String>,
}

impl<'a> Walker<'a> {
    fn unsupported(&mut self, path: &str, what: impl Into<String>, fix: &str) {
        let path = if path.is_empty() { "(top level)".to_owned() } else { path.to_owned() };
        self.errors.push(Unsupported { path, what: what.into(), fix: fix.to_owned() });
    }

    /// A unique CamelCase name for a record or an enum at `path`.
    fn name(&mut self, hint: &str) -> String {
        let base: String = hint
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|p| !p.is_empty())
            .map(|p| {
                let mut cs = p.chars();
                cs.next().map(|c| c.to_ascii_uppercase().to_string() + cs.as_str()).unwrap_or_default()
            })
            .collect();
        let base =
            if base.is_empty() || base.starts_with(|c: char| c.is_ascii_digit()) { format!("T{base}") } else { base };
        let mut name = base.clone();
        let mut n = 2;
        while !self.names.insert(name.clone()) {
            name = format!("{base}{n}");
            n += 1;
        }
        name
    }

    /// The shape of the schema `s` at `path`; `hint` names the records and enums it defines.
    fn shape(&mut self, s: &'a J, path: &str, hint: &str) -> Option<JType> {
        let map = match s {
            J::Obj(map) => map,
            J::Bool(true) => {
                self.unsupported(path, "`true` (any value) has no column type", "give the property a `type`");
                return None;
            }
            _ => {
                self.unsupported(path, "a schema must be an object", "write the schema as `{\"type\": ...}`");
                return None;
            }
        };
        for (keyword, fix) in UNSUPPORTED_KEYWORDS {
            if map.contains_key(*keyword) {
                self.unsupported(path, format!("`{keyword}` is not supported"), fix);
                return None;
            }
        }
        if let Some(reference) = map.get("$ref") {
            return self.reference(reference, path);
        }
        for keyword in ["oneOf", "anyOf"] {
            if let Some(alternatives) = map.get(keyword) {
                return self.alternatives(keyword, alternatives, path, hint);
            }
        }

        // `type`: one name, or a list of one name and "null".
        let (mut types, mut nullable) = (Vec::new(), false);
        match map.get("type") {
            None => {}
            Some(J::Str(t)) => types.push(t.as_str()),
            Some(J::Arr(list)) => {
                for t in list {
                    match t {
                        J::Str(t) if t == "null" => nullable = true,
                        J::Str(t) => types.push(t.as_str()),
                        _ => {
                            self.unsupported(path, "`type` lists something that is not a type name", "list type names");
                            return None;
                        }
                    }
                }
            }
            Some(_) => {
                self.unsupported(path, "`type` is neither a name nor a list of names", "write `\"type\": \"string\"`");
                return None;
            }
        }
        if matches!(map.get("type"), Some(J::Str(t)) if t == "null") {
            self.unsupported(path, "`null` alone carries no data", "use `[\"T\", \"null\"]` for an optional value");
            return None;
        }
        let ty = match types.as_slice() {
            [one] => *one,
            [] if map.contains_key("properties") || map.contains_key("additionalProperties") => "object",
            [] if map.contains_key("items") => "array",
            [] if map.contains_key("enum") => "string",
            [] => {
                self.unsupported(
                    path,
                    "the schema has no `type`",
                    "add a `type` (integer, number, boolean, string, array or object)",
                );
                return None;
            }
            several => {
                self.unsupported(
                    path,
                    format!("a value of several types ({}) is not supported", several.join(", ")),
                    "a column has one type: pick one, or split the property",
                );
                return None;
            }
        };
        let inner = match ty {
            "integer" => JType::Integer,
            "number" => JType::Number,
            "boolean" => JType::Boolean,
            "string" => self.string(map, path, hint, &mut nullable)?,
            "array" => match map.get("items") {
                Some(items @ J::Obj(_)) => {
                    let item = self.shape(items, &format!("{path}[]"), hint)?;
                    self.check_element(&item, &format!("{path}[]"))?;
                    JType::Array(Box::new(item))
                }
                Some(J::Arr(_)) => {
                    self.unsupported(path, "`items` as a list (a tuple) is not supported", "give `items` one schema");
                    return None;
                }
                _ => {
                    self.unsupported(path, "an array without an `items` schema", "add `\"items\": {\"type\": ...}`");
                    return None;
                }
            },
            "object" => self.object(map, path, hint)?,
            "null" => unreachable!("null is taken out of `types`"),
            other => {
                self.unsupported(
                    path,
                    format!("unknown type `{other}`"),
                    "use integer, number, boolean, string, array or object",
                );
                return None;
            }
        };
        Some(if nullable { JType::Nullable(Box::new(inner)) } else { inner })
    }

    /// A string: plain, one of the supported formats, or an enum.
    fn string(&mut self, map: &'a IndexMap<String, J>, path: &str, hint: &str, nullable: &mut bool) -> Option<JType> {
        if let Some(values) = map.get("enum") {
            let J::Arr(values) = values else {
                self.unsupported(path, "`enum` is not a list", "list the symbols");
                return None;
            };
            let mut symbols = Vec::new();
            for v in values {
                match v {
                    J::Str(s) if !symbols.contains(s) => symbols.push(s.clone()),
                    J::Str(_) => {}
                    J::Null => *nullable = true,
                    _ => {
                        self.unsupported(
                            path,
                            "an `enum` of values other than strings is not supported",
                            "use string symbols, or a plain `integer`",
                        );
                        return None;
                    }
                }
            }
            if symbols.is_empty() {
                self.unsupported(path, "an `enum` without symbols", "list at least one string");
                return None;
            }
            return Some(JType::Enum { name: self.name(hint), symbols });
        }
        Some(match map.get("format") {
            Some(J::Str(f)) if f == "date-time" => JType::DateTime,
            Some(J::Str(f)) if f == "date" => JType::Date,
            Some(J::Str(f)) if f == "uuid" => JType::Uuid,
            // Other formats (email, uri, ...) constrain the text, which stays a String.
            _ => JType::String,
        })
    }

    fn object(&mut self, map: &'a IndexMap<String, J>, path: &str, hint: &str) -> Option<JType> {
        let required: BTreeSet<&str> = match map.get("required") {
            Some(J::Arr(names)) => {
                names.iter().filter_map(|n| if let J::Str(s) = n { Some(s.as_str()) } else { None }).collect()
            }
            _ => BTreeSet::new(),
        };
        match (map.get("properties"), map.get("additionalProperties")) {
            (Some(J::Obj(properties)), _) if !properties.is_empty() => {
                let name = self.name(hint);
                let mut fields = Vec::with_capacity(properties.len());
                let mut taken: Vec<(String, String)> = Vec::new();
                let mut ok = true;
                for (key, schema) in properties {
                    let field_path = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                    let column = column_name(key);
                    if let Some((other, _)) = taken.iter().find(|(_, c)| *c == column) {
                        self.unsupported(
                            &field_path,
                            format!("the keys `{other}` and `{key}` both become the column `{column}`"),
                            "rename one of the keys (characters outside [A-Za-z0-9_] become `_`)",
                        );
                        ok = false;
                        continue;
                    }
                    taken.push((key.clone(), column.clone()));
                    let child_hint = if hint == "Message" { key.clone() } else { format!("{hint}_{key}") };
                    match self.shape(schema, &field_path, &child_hint) {
                        Some(ty) => fields.push(JField {
                            key: key.clone(),
                            name: column,
                            ty,
                            required: required.contains(key.as_str()),
                        }),
                        None => ok = false,
                    }
                }
                ok.then_some(JType::Object { name, fields })
            }
            (_, Some(values @ J::Obj(_))) => {
                let value = self.shape(values, &format!("{path}{{}}"), hint)?;
                self.check_element(&value, &format!("{path}{{}}"))?;
                Some(JType::Map(Box::new(value)))
            }
            _ => {
                self.unsupported(
                    path,
                    "an object with neither `properties` nor an `additionalProperties` schema has no columns",
                    "list its `properties`, or give `additionalProperties` a schema to read it as a map",
                );
                None
            }
        }
    }

    /// What may not stand inside an array or a map: a nullable container or record (ClickHouse
    /// has no Nullable(Array), Nullable(Map) or Nullable(Tuple)).
    fn check_element(&mut self, t: &JType, path: &str) -> Option<()> {
        if let JType::Nullable(inner) = t
            && matches!(**inner, JType::Array(_) | JType::Map(_) | JType::Object { .. })
        {
            self.unsupported(
                path,
                "a nullable array, map or object inside an array or map",
                "remove `null` from the element's type",
            );
            return None;
        }
        Some(())
    }

    fn reference(&mut self, reference: &'a J, path: &str) -> Option<JType> {
        let J::Str(target) = reference else {
            self.unsupported(path, "`$ref` is not a string", "write `\"$ref\": \"#/$defs/Name\"`");
            return None;
        };
        let local = target
            .strip_prefix("#/$defs/")
            .map(|n| ("$defs", n))
            .or_else(|| target.strip_prefix("#/definitions/").map(|n| ("definitions", n)));
        let Some((section, name)) = local else {
            self.unsupported(
                path,
                format!(
                    "`$ref: {target}` is not supported (only `#/$defs/...` and `#/definitions/...` in the same file)"
                ),
                "copy the referenced schema into this file's `$defs`",
            );
            return None;
        };
        if self.resolving.iter().any(|r| r == target) {
            self.unsupported(
                path,
                format!("a recursive reference to `{target}`"),
                "recursive types have no column mapping; cut the recursion",
            );
            return None;
        }
        let Some(J::Obj(defs)) = self.root.get(section) else {
            self.unsupported(
                path,
                format!("`$ref: {target}`, but the file has no `{section}`"),
                "define the schema under `$defs`",
            );
            return None;
        };
        let Some(schema) = defs.get(name) else {
            let known: Vec<&str> = defs.keys().map(String::as_str).collect();
            self.unsupported(
                path,
                format!("`$ref: {target}` names no definition (defined: {})", known.join(", ")),
                "fix the name",
            );
            return None;
        };
        self.resolving.push(target.clone());
        // The definition's name names what it defines (a record `Item`), wherever it is used.
        let shape = self.shape(schema, path, name);
        self.resolving.pop();
        shape
    }

    fn alternatives(&mut self, keyword: &str, alternatives: &'a J, path: &str, hint: &str) -> Option<JType> {
        let is_null =
            |j: &J| matches!(j, J::Obj(m) if m.len() == 1 && matches!(m.get("type"), Some(J::Str(t)) if t == "null"));
        if let J::Arr(list) = alternatives
            && list.len() == 2
            && let Some(null_at) = list.iter().position(is_null)
        {
            let other = &list[1 - null_at];
            let inner = self.shape(other, path, hint)?;
            return Some(match inner {
                JType::Nullable(_) => inner,
                t => JType::Nullable(Box::new(t)),
            });
        }
        self.unsupported(
            path,
            format!("`{keyword}` is supported only for one schema and `{{\"type\": \"null\"}}` (nullability)"),
            "a column has one type: pick one schema, or split the property",
        );
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Vec<JField> {
        parse(text).unwrap().unwrap()
    }

    fn errors(text: &str) -> Vec<Unsupported> {
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
        let rec = record("Message", &fields);
        let (columns, _) = crate::ir::input_row(&rec);
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
        let (columns, _) = crate::ir::input_row(&record("Message", &fields));
        assert_eq!(columns[0].ty.clickhouse(), "Nullable(Float64)");
    }

    #[test]
    fn objects_in_arrays_are_tuples_and_refs_resolve() {
        let fields = ok(r##"{"type": "object", "required": ["items"], "properties": {
            "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}}},
            "$defs": {"Item": {"type": "object", "required": ["sku"], "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}}}}"##);
        let (columns, _) = crate::ir::input_row(&record("Message", &fields));
        assert_eq!(columns[0].ty.clickhouse(), "Array(Tuple(sku String, qty Nullable(Int64)))");
    }

    #[test]
    fn lists_every_unsupported_construct_with_its_path() {
        let errs = errors(
            r##"{"type": "object", "properties": {
            "a": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            "b": {"type": "object", "patternProperties": {"^x": {"type": "string"}}},
            "c": {"$ref": "https://example.com/s.json"},
            "d": {"type": "array", "items": {"type": "object", "properties": {"e": {"type": ["string", "integer"]}}}},
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
}
