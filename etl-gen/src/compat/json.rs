//! `gen --check --registry` for `format.json`: each registered JSON Schema version judged by
//! etl-schema's rules (`etl_schema::json::compat`, which says what is checked), the rules the
//! binary applies to the writer schemas it fetches.

use super::{Incompatible, WriterVersion};
use crate::readers::json::JField;

/// Checks each version against the reader's properties; the result lists the versions (and in
/// them each property) the reader cannot read.
pub(crate) fn check(reader: &[JField], versions: &[WriterVersion]) -> Vec<Incompatible> {
    versions.iter().flat_map(|v| super::findings(v, etl_schema::json::compat::check(reader, &v.schema))).collect()
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
        crate::readers::json::parse(READER).unwrap().unwrap()
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
            "writer version 3 (id 203): property `id`: it is a number in the writer and an integer in the reader"
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
