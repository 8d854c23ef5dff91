//! `gen --check --registry`: whether every writer schema registered for the topic's subject can
//! be read by the pipeline's reader schema, each failure said as the version, the field and the
//! rule it breaks. Avro here (Avro's schema resolution); JSON Schema and Protobuf, whose decoders
//! go by key and by field number, in `json` and `protobuf`.

pub(crate) mod json;
pub(crate) mod protobuf;

use std::collections::BTreeMap;

use apache_avro::Schema;
use apache_avro::error::CompatibilityError;
use apache_avro::schema_compatibility::SchemaCompatibility;

/// One registered version of the subject.
#[derive(Debug, Clone)]
pub(crate) struct WriterVersion {
    /// The subject's version number.
    pub(crate) version: u32,
    /// The registry's schema id of that version.
    pub(crate) id: u32,
    /// The schema's text (JSON for Avro and JSON Schema, `.proto` source for Protobuf).
    pub(crate) schema: String,
    /// The schemas it references (a `.proto`'s imports), by the name it imports them under,
    /// fetched from the registry with theirs.
    pub(crate) imports: BTreeMap<String, String>,
}

/// A writer version the reader schema cannot read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Incompatible {
    pub(crate) version: u32,
    pub(crate) id: u32,
    /// The field path (`a.b`), when the rule is about a field.
    pub(crate) field: Option<String>,
    /// What is wrong, in a sentence.
    pub(crate) message: String,
    /// What the user can change.
    pub(crate) help: String,
}

/// Etl-schema's findings about version `v`, as the versions the reader cannot read.
fn findings(v: &WriterVersion, found: Vec<etl_schema::Finding>) -> Vec<Incompatible> {
    found
        .into_iter()
        .map(|f| Incompatible {
            version: v.version,
            id: v.id,
            message: format!("writer version {} (id {}): {}", v.version, v.id, f.what),
            field: f.path,
            help: f.help,
        })
        .collect()
}

/// Checks each version against `reader`; the result lists the versions it cannot read.
pub(crate) fn check(reader: &Schema, versions: &[WriterVersion]) -> Vec<Incompatible> {
    let mut out = Vec::new();
    for v in versions {
        let writer = match Schema::parse_str(&v.schema) {
            Ok(writer) => writer,
            Err(e) => {
                out.push(Incompatible {
                    version: v.version,
                    id: v.id,
                    field: None,
                    message: format!("writer version {} (id {}) is not a valid Avro schema: {e}", v.version, v.id),
                    help: "the registry holds a schema apache-avro cannot parse; ask its owner".into(),
                });
                continue;
            }
        };
        if let Err(error) = SchemaCompatibility::can_read(&writer, reader) {
            out.push(explain(v, &error));
        }
    }
    out
}

/// The version, field path and rule of `error`.
fn explain(v: &WriterVersion, error: &CompatibilityError) -> Incompatible {
    // FieldTypeMismatch nests: `a` mismatches because its field `b` does, and so on.
    let mut path = Vec::new();
    let mut innermost = error;
    while let CompatibilityError::FieldTypeMismatch(field, inner) = innermost {
        path.push(field.clone());
        innermost = inner;
    }
    let at = |field: &str| {
        let mut full = path.clone();
        full.push(field.to_owned());
        full.join(".")
    };
    let which = format!("writer version {} (id {})", v.version, v.id);
    let (field, message, help) = match innermost {
        CompatibilityError::MissingDefaultValue(field) => (
            Some(at(field)),
            format!("field `{}` of the reader schema has no default, and {which} does not write it", at(field)),
            format!("give `{}` a default in the reader schema, or keep it in the writer", at(field)),
        ),
        CompatibilityError::MissingSymbols => (
            (!path.is_empty()).then(|| path.join(".")),
            format!(
                "{which} has enum symbols the reader's enum{} lacks, and the reader's enum has no default",
                if path.is_empty() { String::new() } else { format!(" (field `{}`)", path.join(".")) }
            ),
            "add the writer's symbols to the reader's enum, or give the reader's enum a `default` symbol".into(),
        ),
        other => {
            let field = (!path.is_empty()).then(|| path.join("."));
            let message = match &field {
                Some(f) => format!("field `{f}` of {which} cannot be read as the reader's: {other}"),
                None => format!("{which} cannot be read by the reader schema: {other}"),
            };
            (
                field,
                message,
                "make the reader's type one the writer's promotes to (int → long → float → double, string ↔ bytes), \
                 or a union that holds it"
                    .into(),
            )
        }
    };
    Incompatible { version: v.version, id: v.id, field, message, help }
}

#[cfg(test)]
mod tests {
    use super::*;

    const READER: &str = r#"{"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "long"},
        {"name": "coupon", "type": "string"},
        {"name": "note", "type": ["null", "string"], "default": null},
        {"name": "address", "type": {"type": "record", "name": "Address", "fields": [
            {"name": "city", "type": "string"},
            {"name": "zip", "type": "long"}]}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}}
    ]}"#;

    fn version(version: u32, fields: &str) -> WriterVersion {
        let schema = format!(r#"{{"type": "record", "name": "Order", "fields": [{fields}]}}"#);
        WriterVersion { version, id: 100 + version, schema, imports: BTreeMap::new() }
    }

    const ADDRESS: &str = r#"{"name": "address", "type": {"type": "record", "name": "Address", "fields": [
        {"name": "city", "type": "string"}, {"name": "zip", "type": "long"}]}}"#;
    const STATUS: &str =
        r#"{"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}}"#;

    // Readable versions pass: the same fields, an int promoted to the reader's long, an extra
    // writer field, a missing field the reader has a default for.
    #[test]
    fn readable_versions_pass() {
        let reader = Schema::parse_str(READER).unwrap();
        let versions = [
            version(
                1,
                &format!(
                    r#"{{"name": "id", "type": "int"}}, {{"name": "coupon", "type": "string"}}, {ADDRESS}, {STATUS}"#
                ),
            ),
            version(
                2,
                &format!(
                    r#"{{"name": "id", "type": "long"}}, {{"name": "coupon", "type": "string"}}, {{"name": "extra", "type": "double"}}, {ADDRESS}, {STATUS}"#
                ),
            ),
        ];
        assert_eq!(check(&reader, &versions), []);
    }

    // Each broken rule names the version, the field (nested ones by path) and the rule.
    #[test]
    fn unreadable_versions_are_named_with_their_field() {
        let reader = Schema::parse_str(READER).unwrap();
        let no_coupon = version(3, &format!(r#"{{"name": "id", "type": "long"}}, {ADDRESS}, {STATUS}"#));
        let zip_string = version(
            4,
            &format!(
                r#"{{"name": "id", "type": "long"}}, {{"name": "coupon", "type": "string"}}, {{"name": "address", "type": {{"type": "record", "name": "Address", "fields": [
                    {{"name": "city", "type": "string"}}, {{"name": "zip", "type": "string"}}]}}}}, {STATUS}"#
            ),
        );
        let more_symbols = version(
            5,
            &format!(
                r#"{{"name": "id", "type": "long"}}, {{"name": "coupon", "type": "string"}}, {ADDRESS}, {{"name": "status", "type": {{"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "REFUNDED"]}}}}"#
            ),
        );
        let found = check(&reader, &[no_coupon, zip_string, more_symbols]);
        let fields: Vec<(u32, Option<&str>)> = found.iter().map(|i| (i.version, i.field.as_deref())).collect();
        assert_eq!(fields, [(3, Some("coupon")), (4, Some("address.zip")), (5, Some("status"))], "{found:#?}");
        assert_eq!(
            found[0].message,
            "field `coupon` of the reader schema has no default, and writer version 3 (id 103) does not write it"
        );
        assert!(
            found[1].message.starts_with("field `address.zip` of writer version 4 (id 104)"),
            "{}",
            found[1].message
        );
        assert!(found[2].message.contains("enum symbols"), "{}", found[2].message);
    }
}
