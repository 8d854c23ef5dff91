//! `gen --check --registry` for `format.protobuf`: whether the generated decoder reads every
//! message a registered `.proto` version writes.
//!
//! The decoder dispatches on field numbers, so a writer may rename fields, add fields and drop
//! them. Each version is compiled with its references (the imports the registry names) and the
//! reader's message (by full name) read from it; then:
//!
//! - **The message.** The writer must define the reader's message, at the same message-index
//!   path: a Confluent frame names the message by that path, and the binary accepts only the
//!   reader's.
//! - **Per field number of the reader** (nested messages by their path of numbers and names):
//!   - absent from the writer: allowed (the reader reads its default, or NULL with presence);
//!   - repeated in the writer, singular in the reader: refused (the reader would keep the last
//!     element). Singular in the writer and repeated in the reader is read as one element;
//!   - presence in the reader (proto3 `optional`, a `oneof` member, a wrapper) but not in the
//!     writer, for a scalar or an enum: refused, since the writer leaves zero values out and the
//!     reader would read NULL for them;
//!   - the type: the same, or one whose every value the reader decodes to the same number or
//!     text: `int64` reads `int32` and `uint32`, `uint64` reads `uint32`, `sint64` reads
//!     `sint32`, `bytes` reads `string`; an enum reads an enum whose numbers it all defines;
//!     messages field by field; maps key and value; Timestamps and wrappers of those scalars.
//!
//! Fields only the writer has are skipped by the decoder, so they are not checked.

use super::{Incompatible, WriterVersion};
use crate::proto_schema::{self, Invalid, Message, PField, PType, Scalar};

/// The name a version's own schema is compiled under (its imports keep the registry's names).
const MAIN: &str = "registered_writer_schema.proto";

/// Checks each version against the reader's message; the result lists the versions (and in them
/// each field) the reader cannot read.
pub(crate) fn check(reader: &Message, versions: &[WriterVersion]) -> Vec<Incompatible> {
    let mut out = Vec::new();
    for v in versions {
        let which = format!("writer version {} (id {})", v.version, v.id);
        let mut sources = v.imports.clone();
        sources.insert(MAIN.to_owned(), v.schema.clone());
        let fail = |field: Option<String>, message: String, help: String| Incompatible {
            version: v.version,
            id: v.id,
            field,
            message,
            help,
        };
        let writer = match proto_schema::parse_sources(MAIN, &sources, &reader.name) {
            Ok(Ok(writer)) => writer,
            Ok(Err(unsupported)) if !unsupported.is_empty() => {
                let first = &unsupported[0];
                out.push(fail(
                    Some(first.path.clone()),
                    format!(
                        "{which} uses Protobuf the check cannot judge: {} ({} construct(s); the first at `{}`)",
                        first.what,
                        unsupported.len(),
                        first.path
                    ),
                    first.fix.clone(),
                ));
                continue;
            }
            Ok(Err(_)) => {
                out.push(fail(
                    None,
                    format!("{which} cannot be read as a Protobuf message"),
                    "ask the schema's owner".into(),
                ));
                continue;
            }
            Err(Invalid::Compile(error)) => {
                out.push(fail(
                    None,
                    format!("{which} does not compile: {error}"),
                    "the registry holds a schema protox cannot compile (are its references registered?); ask its \
                     owner"
                        .into(),
                ));
                continue;
            }
            Err(Invalid::UnknownMessage(defined)) => {
                out.push(fail(
                    None,
                    format!("{which} does not define message `{}` (it defines: {})", reader.name, defined.join(", ")),
                    "its messages are framed with another message-index path; point format.protobuf.message at the \
                     message this subject carries"
                        .into(),
                ));
                continue;
            }
        };
        if writer.indexes != reader.indexes {
            out.push(fail(
                None,
                format!(
                    "{which} defines `{}` at message-index path {:?}, the reader's file at {:?}: the binary accepts only \
                     the reader's path, and a frame of this version carries the writer's",
                    reader.name, writer.indexes, reader.indexes
                ),
                "keep the message where it is in the file (the order of its top-level and nested messages), or \
                 generate from the writer's file"
                    .into(),
            ));
        }
        let mut found = Vec::new();
        fields(&reader.fields, &writer.fields, "", &mut found);
        for (path, what, help) in found {
            out.push(fail(Some(path.clone()), format!("field `{path}` of {which}: {what}"), help));
        }
    }
    out
}

/// Checks the reader's `fields` (under `prefix`) against the writer's, by number.
fn fields(reader: &[PField], writer: &[PField], prefix: &str, out: &mut Vec<(String, String, String)>) {
    for r in reader {
        let path = format!("{prefix}{} = {}", r.name, r.number);
        let Some(w) = writer.iter().find(|w| w.number == r.number) else { continue };
        if w.repeated && !r.repeated {
            out.push((
                path.clone(),
                "it is repeated in the writer and singular in the reader, which would keep only the last element"
                    .into(),
                "make it `repeated` in the reader too".into(),
            ));
            continue;
        }
        let scalar_like = matches!(r.ty, PType::Scalar(_) | PType::Enum { .. });
        if scalar_like && r.presence && !w.presence && !r.repeated {
            out.push((
                path.clone(),
                "it has presence in the reader (NULL when absent) and not in the writer, which leaves zero values \
                 out: the reader would read them as NULL"
                    .into(),
                "drop `optional` (or the `oneof`) in the reader, or add it in the writer".into(),
            ));
        }
        types(&r.ty, &w.ty, &path, out);
    }
}

/// Checks that every value of the writer's type `w` decodes as the reader's `r`.
fn types(r: &PType, w: &PType, path: &str, out: &mut Vec<(String, String, String)>) {
    let readable = match (r, w) {
        (PType::Scalar(r), PType::Scalar(w)) | (PType::Wrapper(r), PType::Wrapper(w)) => reads(*r, *w),
        (PType::Timestamp, PType::Timestamp) => true,
        (PType::Enum { numbers: rn, .. }, PType::Enum { numbers: wn, symbols: ws, .. }) => {
            let unknown: Vec<String> =
                wn.iter().zip(ws).filter(|(n, _)| !rn.contains(*n)).map(|(n, s)| format!("{s} = {n}")).collect();
            if !unknown.is_empty() {
                out.push((
                    path.to_owned(),
                    format!(
                        "the writer's enum has numbers the reader's does not define ({}): such a value is a record error",
                        unknown.join(", ")
                    ),
                    "add the values to the reader's enum".into(),
                ));
            }
            true
        }
        (PType::Message { fields: rf, .. }, PType::Message { fields: wf, .. }) => {
            fields(rf, wf, &format!("{path}."), out);
            true
        }
        (PType::Map { key: rk, value: rv }, PType::Map { key: wk, value: wv }) => {
            if rk != wk {
                out.push((
                    path.to_owned(),
                    format!("its map key is {} in the writer and {} in the reader", wk.name(), rk.name()),
                    "keep the map's key type".into(),
                ));
            }
            types(rv, wv, &format!("{path}{{}}"), out);
            true
        }
        _ => false,
    };
    if !readable {
        out.push((
            path.to_owned(),
            format!("it is {} in the writer and {} in the reader", describe(w), describe(r)),
            "keep the field's type, or widen it only as the decoder reads (int32 or uint32 as int64, uint32 as \
             uint64, sint32 as sint64, string as bytes); a new type takes a new field number"
                .into(),
        ));
    }
}

/// Whether the reader's scalar decodes every value the writer's encodes to the same value.
fn reads(r: Scalar, w: Scalar) -> bool {
    use Scalar::*;
    r == w || matches!((r, w), (Int64, Int32) | (Int64, Uint32) | (Uint64, Uint32) | (Sint64, Sint32) | (Bytes, String))
}

/// The type in words.
fn describe(t: &PType) -> String {
    match t {
        PType::Scalar(s) => s.name().to_owned(),
        PType::Enum { name, .. } => format!("enum {name}"),
        PType::Timestamp => "google.protobuf.Timestamp".into(),
        PType::Wrapper(s) => format!("a wrapper of {}", s.name()),
        PType::Message { name, .. } => format!("message {name}"),
        PType::Map { key, value } => format!("map<{}, {}>", key.name(), describe(value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const READER: &str = r#"syntax = "proto3";
package web;
import "google/protobuf/timestamp.proto";
message Click {
  int64 id = 1;
  string url = 2;
  Kind kind = 3;
  optional int32 score = 4;
  Geo geo = 5;
  repeated string tags = 6;
  map<string, int64> counts = 7;
  google.protobuf.Timestamp at = 8;
}
enum Kind { UNKNOWN = 0; VIEW = 1; BUY = 2; }
message Geo { string city = 1; double lat = 2; }
"#;

    fn reader() -> Message {
        let sources = BTreeMap::from([("click.proto".to_owned(), READER.to_owned())]);
        proto_schema::parse_sources("click.proto", &sources, "web.Click").unwrap().unwrap()
    }

    fn version(version: u32, schema: &str) -> WriterVersion {
        WriterVersion { version, id: 300 + version, schema: schema.to_owned(), imports: BTreeMap::new() }
    }

    // Renamed fields, new fields, dropped fields, narrower integers, fewer enum values and a
    // singular writer of a repeated field are all read.
    #[test]
    fn evolved_writers_the_decoder_reads_pass() {
        let evolved = version(
            2,
            r#"syntax = "proto3";
package web;
import "google/protobuf/timestamp.proto";
message Click {
  int32 click_id = 1;
  string url = 2;
  Kind kind = 3;
  optional int32 score = 4;
  Geo geo = 5;
  string tags = 6;
  google.protobuf.Timestamp at = 8;
  bytes extra = 9;
}
enum Kind { UNKNOWN = 0; BUY = 2; }
message Geo { string town = 1; }
"#,
        );
        let found = check(&reader(), &[version(1, READER), evolved]);
        assert!(found.is_empty(), "{found:#?}");
    }

    // Each rule names the version and the field by its path of names and numbers.
    #[test]
    fn unreadable_fields_are_named_by_path() {
        let broken = version(
            3,
            r#"syntax = "proto3";
package web;
message Click {
  sint64 id = 1;
  repeated string url = 2;
  Kind kind = 3;
  int32 score = 4;
  Geo geo = 5;
  map<int32, int64> counts = 7;
}
enum Kind { UNKNOWN = 0; VIEW = 1; BUY = 2; REFUND = 3; }
message Geo { string city = 1; float lat = 2; }
"#,
        );
        let found = check(&reader(), &[broken]);
        let paths: Vec<&str> = found.iter().map(|i| i.field.as_deref().unwrap()).collect();
        assert_eq!(
            paths,
            ["id = 1", "url = 2", "kind = 3", "score = 4", "geo = 5.lat = 2", "counts = 7"],
            "{found:#?}"
        );
        assert_eq!(
            found[0].message,
            "field `id = 1` of writer version 3 (id 303): it is sint64 in the writer and int64 in the reader"
        );
        assert!(found[1].message.contains("repeated in the writer"), "{}", found[1].message);
        assert!(found[2].message.contains("(REFUND = 3)"), "{}", found[2].message);
        assert!(found[3].message.contains("presence in the reader"), "{}", found[3].message);
        assert!(found[4].message.contains("float in the writer and double in the reader"), "{}", found[4].message);
        assert!(found[5].message.contains("map key is int32"), "{}", found[5].message);
    }

    // The message must exist at the same message-index path; references resolve by name.
    #[test]
    fn the_message_and_its_index_path_are_checked() {
        let moved = version(
            4,
            r#"syntax = "proto3";
package web;
message Other { int64 x = 1; }
message Click { int64 id = 1; }
"#,
        );
        let missing = version(5, "syntax = \"proto3\";\npackage web;\nmessage View { int64 id = 1; }\n");
        let mut imported = version(
            6,
            "syntax = \"proto3\";\npackage web;\nimport \"geo.proto\";\nmessage Click { int64 id = 1; Geo geo = 5; }\n",
        );
        imported
            .imports
            .insert("geo.proto".into(), "syntax = \"proto3\";\npackage web;\nmessage Geo { int64 city = 1; }\n".into());
        let found = check(&reader(), &[moved, missing, imported]);
        assert_eq!(found.len(), 3, "{found:#?}");
        assert!(found[0].message.contains("message-index path [1]"), "{}", found[0].message);
        assert!(
            found[1].message.contains("does not define message `web.Click` (it defines: web.View)"),
            "{}",
            found[1].message
        );
        assert_eq!(found[2].field.as_deref(), Some("geo = 5.city = 1"), "{found:#?}");
    }
}
