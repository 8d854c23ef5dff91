//! JSON Schema as etl-rs reads it: the subset that maps to ClickHouse columns, walked from the
//! schema's text into [`JField`]s (what the generated decoder goes by, and what the registry
//! check compares).
//!
//! The subset: `type` (one type, or one type and `"null"`), `properties`, `required`,
//! `additionalProperties` (a schema: a map), `items` (one schema), string `enum`, the string
//! `format`s `date-time`, `date` and `uuid`, local `$ref`s into `definitions` or `$defs`, and
//! `oneOf`/`anyOf` of one schema and `{"type": "null"}`. Validation keywords that do not change
//! a value's shape (`minimum`, `pattern`, `maxLength`, ...) and annotations are accepted and not
//! enforced. Everything else that changes the shape is reported with its path.

pub mod compat;

use std::collections::{BTreeSet, HashSet};

use indexmap::IndexMap;
use serde::Deserialize;

use crate::Unsupported;

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
pub enum JType {
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
    /// `string` with `format: ipv4` → IPv4
    Ipv4,
    /// An object with no declared `properties` and no `additionalProperties` schema, or any
    /// schema marked `"x-clickhouse-type": "JSON"` → JSON: the object as it arrived.
    Json,
    /// `string` with `format: ipv6` → IPv6
    Ipv6,
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
    /// Several scalar types (`type: [string, integer]`, a `oneOf` of scalars) → Variant. At
    /// most one member of each kind of JSON value (a string, a number, a boolean; integer and
    /// number may be both), so that the value picks its member.
    Variant(Vec<JType>),
}

impl JType {
    /// Whether it is a scalar (a Variant's member may be one).
    pub fn is_scalar(&self) -> bool {
        matches!(
            self,
            JType::Integer
                | JType::Number
                | JType::Boolean
                | JType::String
                | JType::DateTime
                | JType::Date
                | JType::Uuid
                | JType::Ipv4
                | JType::Ipv6
        )
    }

    /// The type without `Nullable`.
    pub fn non_null(&self) -> &JType {
        match self {
            JType::Nullable(t) => t,
            t => t,
        }
    }
}

/// One property of an object.
#[derive(Clone, Debug, PartialEq)]
pub struct JField {
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
pub struct Invalid(pub String);

/// Reads a JSON Schema: every unsupported construct is listed, not just the first.
pub fn parse(text: &str) -> Result<Result<Vec<JField>, Vec<Unsupported>>, Invalid> {
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

/// A column name for a key: characters outside `[A-Za-z0-9_]` become `_`.
pub fn column_name(key: &str) -> String {
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
        // Marked for ClickHouse's JSON type: whatever the schema says of its content, the value
        // is kept whole (an object; `null` too when `type` lists it).
        if let Some(marked) = map.get("x-clickhouse-type") {
            if !matches!(marked, J::Str(t) if t == "JSON") {
                self.unsupported(
                    path,
                    "`x-clickhouse-type` names a type other than `JSON`",
                    "write `\"x-clickhouse-type\": \"JSON\"`, or remove it",
                );
                return None;
            }
            let nullable = matches!(map.get("type"), Some(J::Arr(list)) if list.iter().any(|t| matches!(t, J::Str(t) if t == "null")));
            return Some(if nullable { JType::Nullable(Box::new(JType::Json)) } else { JType::Json });
        }
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
                let mut members = Vec::new();
                for t in several {
                    members.push(match *t {
                        "integer" => JType::Integer,
                        "number" => JType::Number,
                        "boolean" => JType::Boolean,
                        "string" => JType::String,
                        _ => {
                            self.unsupported(
                                path,
                                format!("a value of several types ({}) that are not all scalars", several.join(", ")),
                                "a Variant's members are integer, number, boolean and string: pick one type for an array or object",
                            );
                            return None;
                        }
                    });
                }
                let variant = self.variant(members, path)?;
                return Some(if nullable { JType::Nullable(Box::new(variant)) } else { variant });
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
            Some(J::Str(f)) if f == "ipv4" => JType::Ipv4,
            Some(J::Str(f)) if f == "ipv6" => JType::Ipv6,
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
            // Free-form: kept whole in a JSON column.
            (None | Some(J::Obj(_)), None | Some(J::Bool(true))) => Some(JType::Json),
            _ => {
                self.unsupported(
                    path,
                    "an object with no `properties` and `additionalProperties: false` holds nothing",
                    "list its `properties`, give `additionalProperties` a schema, or leave both out for a JSON column",
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
        // Several scalar schemas (and maybe null): a Variant.
        if let J::Arr(list) = alternatives {
            let nullable = list.iter().any(is_null);
            let mut members = Vec::new();
            for (i, alternative) in list.iter().filter(|a| !is_null(a)).enumerate() {
                let member = self.shape(alternative, &format!("{path}.{keyword}[{i}]"), hint)?;
                if !member.is_scalar() {
                    self.unsupported(
                        path,
                        format!("`{keyword}` of schemas that are not all scalars"),
                        "a Variant's members are scalars (integer, number, boolean, string and its formats)",
                    );
                    return None;
                }
                members.push(member);
            }
            if members.len() >= 2 {
                let variant = self.variant(members, path)?;
                return Some(if nullable { JType::Nullable(Box::new(variant)) } else { variant });
            }
        }
        self.unsupported(
            path,
            format!("`{keyword}` is supported for several scalar schemas (a Variant) or one schema and `{{\"type\": \"null\"}}`"),
            "a column has one type: pick one schema, or split the property",
        );
        None
    }

    /// A Variant of `members`, unless two would take the same JSON values.
    fn variant(&mut self, members: Vec<JType>, path: &str) -> Option<JType> {
        let kind = |t: &JType| match t {
            JType::Integer => 1,
            JType::Number => 2,
            JType::Boolean => 3,
            _ => 4,
        };
        for (i, m) in members.iter().enumerate() {
            if members[..i].iter().any(|n| kind(n) == kind(m)) {
                self.unsupported(
                    path,
                    "two members of a Variant take the same JSON values (two strings, or a type twice)",
                    "keep one member per kind of value: one string type, one boolean, integer and/or number",
                );
                return None;
            }
        }
        Some(JType::Variant(members))
    }
}
