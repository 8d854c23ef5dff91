//! `gen --check --registry` for `format.json`: whether the generated decoder reads every document
//! a registered JSON Schema version allows.
//!
//! The decoder goes by key, so a writer may add, drop and reorder properties. For every property
//! of the reader schema (nested ones by their path of keys) it checks:
//!
//! - **Absent from the writer.** Allowed when the reader's column is Nullable (the property is
//!   not required, allows `null`, or sits under an object that is either), or is an array or a
//!   map (absent reads as empty). A property the reader requires would be missing from every
//!   document of that version: each a record error.
//! - **Presence.** Not required, or allowing `null`, in the writer but required and not null in
//!   the reader: a document without it, or with `null`, is a record error.
//! - **Type.** The same, or one whose every value the reader reads: an integer as a number; a
//!   string of any format (date-time, date, uuid) or an enum as a plain string; an enum whose
//!   symbols the reader's enum all has. Arrays and maps element by element (a nullable element
//!   the reader's element refuses is an error), objects property by property.
//!
//! Properties only the writer has are skipped by the decoder, so they are not checked.

use super::{Incompatible, WriterVersion};
use crate::json_schema::{self, JField, JType};

/// Checks each version against the reader's properties; the result lists the versions (and in
/// them each property) the reader cannot read.
pub(crate) fn check(reader: &[JField], versions: &[WriterVersion]) -> Vec<Incompatible> {
    let mut out = Vec::new();
    for v in versions {
        let which = format!("writer version {} (id {})", v.version, v.id);
        let writer = match json_schema::parse(&v.schema) {
            Ok(Ok(fields)) => fields,
            Ok(Err(unsupported)) if !unsupported.is_empty() => {
                let first = &unsupported[0];
                out.push(Incompatible {
                    version: v.version,
                    id: v.id,
                    field: (!first.path.is_empty()).then(|| first.path.clone()),
                    message: format!(
                        "{which} uses JSON Schema the check cannot judge: {} ({} construct(s); the first at `{}`)",
                        first.what,
                        unsupported.len(),
                        first.path
                    ),
                    help: format!("the generator reads the subset in docs/configuration.md; {}", first.fix),
                });
                continue;
            }
            other => {
                let why = match other {
                    Err(invalid) => invalid.0,
                    _ => "the top level is not an object with `properties`".into(),
                };
                out.push(Incompatible {
                    version: v.version,
                    id: v.id,
                    field: None,
                    message: format!("{which} is not a JSON Schema of an object: {why}"),
                    help: "the registry holds a schema the generator cannot read; ask its owner".into(),
                });
                continue;
            }
        };
        let mut found = Vec::new();
        properties(reader, &writer, "", false, &mut found);
        for Finding { path, what, help } in found {
            out.push(Incompatible {
                version: v.version,
                id: v.id,
                message: format!("property `{path}` of {which}: {what}"),
                field: Some(path),
                help,
            });
        }
    }
    out
}

/// One property the reader cannot read.
struct Finding {
    path: String,
    what: String,
    help: String,
}

/// Checks the reader's `fields` (under `prefix`, below an optional object when `optional_above`)
/// against the writer's.
fn properties(reader: &[JField], writer: &[JField], prefix: &str, optional_above: bool, out: &mut Vec<Finding>) {
    for r in reader {
        let path = format!("{prefix}{}", r.key);
        let container = matches!(r.ty.non_null(), JType::Array(_) | JType::Map(_));
        // What json_schema::record makes Nullable.
        let reader_optional = optional_above || !r.required || matches!(r.ty, JType::Nullable(_));
        let Some(w) = writer.iter().find(|w| w.key == r.key) else {
            if !reader_optional && !container {
                out.push(Finding {
                    what: "the writer does not declare it, and the reader requires it: each document of this version \
                           would be a record error"
                        .into(),
                    help: format!(
                        "drop `{}` from the reader's `required` (its column becomes Nullable), or keep it in the writer",
                        r.key
                    ),
                    path,
                });
            }
            continue;
        };
        let writer_may_omit = !w.required || matches!(w.ty, JType::Nullable(_));
        if writer_may_omit && !reader_optional && !container {
            out.push(Finding {
                what: "the writer may leave it out or send null, and the reader requires a value: such a document \
                       would be a record error"
                    .into(),
                help: format!(
                    "drop `{}` from the reader's `required`, or allow null in the reader (its column becomes Nullable)",
                    r.key
                ),
                path: path.clone(),
            });
        }
        types(r.ty.non_null(), w.ty.non_null(), &path, reader_optional, out);
    }
}

/// Checks that every value of the writer's type `w` reads as the reader's type `r`.
fn types(r: &JType, w: &JType, path: &str, optional: bool, out: &mut Vec<Finding>) {
    let same_or_narrower = match (r, w) {
        (JType::Integer, JType::Integer)
        | (JType::Number, JType::Number | JType::Integer)
        | (JType::Boolean, JType::Boolean)
        | (JType::String, JType::String | JType::DateTime | JType::Date | JType::Uuid | JType::Enum { .. })
        | (JType::DateTime, JType::DateTime)
        | (JType::Date, JType::Date)
        | (JType::Uuid, JType::Uuid) => true,
        (JType::Enum { symbols: rs, .. }, JType::Enum { symbols: ws, .. }) => {
            let missing: Vec<&str> = ws.iter().filter(|s| !rs.contains(s)).map(String::as_str).collect();
            if !missing.is_empty() {
                out.push(Finding {
                    path: path.to_owned(),
                    what: format!(
                        "the writer's enum has symbols the reader's lacks ({}): such a value is a record error",
                        missing.join(", ")
                    ),
                    help: "add the symbols to the reader's `enum`, or read the property as a plain string".into(),
                });
            }
            true
        }
        (JType::Array(ri), JType::Array(wi)) | (JType::Map(ri), JType::Map(wi)) => {
            let element = if matches!(r, JType::Array(_)) { format!("{path}[]") } else { format!("{path}{{}}") };
            if matches!(**wi, JType::Nullable(_)) && !matches!(**ri, JType::Nullable(_)) {
                out.push(Finding {
                    path: element.clone(),
                    what: "the writer's elements may be null, and the reader's may not: such a value is a record error"
                        .into(),
                    help: "allow null in the reader's element type".into(),
                });
            }
            types(ri.non_null(), wi.non_null(), &element, false, out);
            true
        }
        (JType::Object { fields: rf, .. }, JType::Object { fields: wf, .. }) => {
            properties(rf, wf, &format!("{path}."), optional, out);
            true
        }
        _ => false,
    };
    if !same_or_narrower {
        out.push(Finding {
            path: path.to_owned(),
            what: format!("it is {} in the writer and {} in the reader", describe(w), describe(r)),
            help: "make the reader's type one that reads every writer value (an integer reads as a number, any \
                   string as a plain string), or keep the writer's type"
                .into(),
        });
    }
}

/// The type in words.
fn describe(t: &JType) -> String {
    match t {
        JType::Integer => "an integer".into(),
        JType::Number => "a number".into(),
        JType::Boolean => "a boolean".into(),
        JType::String => "a string".into(),
        JType::DateTime => "a date-time string".into(),
        JType::Date => "a date string".into(),
        JType::Uuid => "a uuid string".into(),
        JType::Enum { .. } => "an enum".into(),
        JType::Array(item) => format!("an array of {}", describe(item.non_null())),
        JType::Map(value) => format!("a map of {}", describe(value.non_null())),
        JType::Object { .. } => "an object".into(),
        JType::Nullable(inner) => format!("{} or null", describe(inner)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const READER: &str = r#"{"type": "object", "required": ["id", "kind", "geo"], "properties": {
        "id": {"type": "integer"},
        "amount": {"type": "number"},
        "kind": {"type": "string", "enum": ["a", "b"]},
        "note": {"type": ["string", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "geo": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}
    }}"#;

    fn reader() -> Vec<JField> {
        json_schema::parse(READER).unwrap().unwrap()
    }

    fn version(version: u32, schema: &str) -> WriterVersion {
        WriterVersion { version, id: 200 + version, schema: schema.to_owned(), imports: BTreeMap::new() }
    }

    // A writer that adds properties, drops optional ones, narrows a number to an integer, an
    // enum to fewer symbols and a string to a format, in another order, is read.
    #[test]
    fn evolved_writers_the_decoder_reads_pass() {
        let same = version(1, READER);
        let evolved = version(
            2,
            r#"{"type": "object", "required": ["geo", "kind", "id", "extra"], "properties": {
                "geo": {"type": "object", "required": ["city"], "properties": {
                    "city": {"type": "string", "format": "uuid"}, "zip": {"type": "integer"}}},
                "extra": {"type": "boolean"},
                "kind": {"type": "string", "enum": ["b"]},
                "amount": {"type": "integer"},
                "id": {"type": "integer"}
            }}"#,
        );
        assert!(check(&reader(), &[same, evolved]).is_empty());
    }

    // Each rule names the version and the property by its path.
    #[test]
    fn unreadable_properties_are_named_by_path() {
        let broken = version(
            3,
            r#"{"type": "object", "required": ["id", "geo"], "properties": {
                "id": {"type": "number"},
                "kind": {"type": "string", "enum": ["a", "b", "c"]},
                "note": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": ["string", "null"]}},
                "geo": {"type": "object", "properties": {"city": {"type": "string"}}}
            }}"#,
        );
        let found = check(&reader(), &[broken]);
        let paths: Vec<&str> = found.iter().map(|i| i.field.as_deref().unwrap()).collect();
        assert_eq!(paths, ["id", "kind", "kind", "note", "tags[]", "geo.city"], "{found:#?}");
        assert!(found.iter().all(|i| i.version == 3 && i.id == 203));
        assert_eq!(
            found[0].message,
            "property `id` of writer version 3 (id 203): it is a number in the writer and an integer in the reader"
        );
        assert!(found[1].message.contains("may leave it out or send null"), "{}", found[1].message);
        assert!(found[2].message.contains("symbols the reader's lacks (c)"), "{}", found[2].message);
        assert!(
            found[3].message.contains("an integer in the writer and a string in the reader"),
            "{}",
            found[3].message
        );
        assert!(found[4].message.contains("elements may be null"), "{}", found[4].message);
        assert!(found[5].message.contains("may leave it out"), "{}", found[5].message);
    }

    // A property the reader requires that the writer does not declare fails; an optional one,
    // or an array, may be missing.
    #[test]
    fn missing_properties_fail_only_when_required() {
        let without_optional = version(
            4,
            r#"{"type": "object", "required": ["id", "kind", "geo"], "properties": {
            "id": {"type": "integer"}, "kind": {"type": "string", "enum": ["a"]},
            "geo": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}}"#,
        );
        assert!(check(&reader(), &[without_optional]).is_empty());
        let without_id = version(
            5,
            r#"{"type": "object", "required": ["kind", "geo"], "properties": {
            "kind": {"type": "string", "enum": ["a"]},
            "geo": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}}"#,
        );
        let found = check(&reader(), &[without_id]);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(found[0].message.contains("does not declare it, and the reader requires it"), "{}", found[0].message);
        assert!(found[0].help.contains("drop `id` from the reader's `required`"), "{}", found[0].help);
    }

    // A writer schema outside the subset, or not a schema, is reported rather than passed.
    #[test]
    fn writers_the_generator_cannot_read_are_reported() {
        let all_of = version(6, r#"{"type": "object", "properties": {"id": {"allOf": [{"type": "integer"}]}}}"#);
        let not_json = version(7, "{");
        let found = check(&reader(), &[all_of, not_json]);
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(found[0].message.contains("cannot judge"), "{}", found[0].message);
        assert!(found[1].message.contains("not a JSON Schema"), "{}", found[1].message);
    }
}
