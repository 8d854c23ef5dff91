//! Whether the decoder generated for a reader message reads every message a writer `.proto`
//! writes: what `gen --check --registry` reports for each registered version, and what the binary
//! checks of each writer schema it fetches from the registry.
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

use std::collections::BTreeMap;

use super::{Invalid, Message, PField, PType, Scalar};
use crate::Finding;

/// The name a writer's own schema is compiled under (its imports keep the registry's names).
const MAIN: &str = "registered_writer_schema.proto";

/// Compiles the writer's `.proto` text with its `imports` (name → text, the registry's
/// references) and judges it against the reader's message: one finding per field the reader
/// cannot read (a writer that does not compile, or lacks the message, is one finding without a
/// path). Empty: every message the writer writes is read.
pub fn check(reader: &Message, writer: &str, imports: &BTreeMap<String, String>) -> Vec<Finding> {
    let mut sources = imports.clone();
    sources.insert(MAIN.to_owned(), writer.to_owned());
    let whole = |what: String, help: &str| vec![Finding { path: None, what, help: help.to_owned() }];
    let writer = match super::parse_sources(MAIN, &sources, &reader.name) {
        Ok(Ok(writer)) => writer,
        Ok(Err(unsupported)) if !unsupported.is_empty() => {
            let first = &unsupported[0];
            return vec![Finding {
                path: Some(first.path.clone()),
                what: format!(
                    "it uses Protobuf the check cannot judge: {} ({} construct(s); the first at `{}`)",
                    first.what,
                    unsupported.len(),
                    first.path
                ),
                help: first.fix.clone(),
            }];
        }
        Ok(Err(_)) => return whole("it cannot be read as a Protobuf message".into(), "ask the schema's owner"),
        Err(Invalid::Compile(error)) => {
            return whole(
                format!("it does not compile: {error}"),
                "the registry holds a schema protox cannot compile (are its references registered?); ask its owner",
            );
        }
        Err(Invalid::UnknownMessage(defined)) => {
            return whole(
                format!("it does not define message `{}` (it defines: {})", reader.name, defined.join(", ")),
                "its messages are framed with another message-index path; point format.protobuf.message at the \
                 message this subject carries",
            );
        }
    };
    let mut out = Vec::new();
    if writer.indexes != reader.indexes {
        out.push(Finding {
            path: None,
            what: format!(
                "it defines `{}` at message-index path {:?}, the reader's file at {:?}: the binary accepts only the \
                 reader's path, and a frame of this schema carries the writer's",
                reader.name, writer.indexes, reader.indexes
            ),
            help: "keep the message where it is in the file (the order of its top-level and nested messages), or \
                   generate from the writer's file"
                .into(),
        });
    }
    let mut found = Vec::new();
    fields(&reader.fields, &writer.fields, "", &mut found);
    out.extend(found.into_iter().map(|(path, what, help)| Finding {
        what: format!("field `{path}`: {what}"),
        path: Some(path),
        help,
    }));
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
        (PType::Timestamp, PType::Timestamp)
        | (PType::Struct, PType::Struct)
        | (PType::JsonValue, PType::JsonValue) => true,
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
        PType::Struct => "google.protobuf.Struct".into(),
        PType::JsonValue => "google.protobuf.Value".into(),
        PType::Wrapper(s) => format!("a wrapper of {}", s.name()),
        PType::Message { name, .. } => format!("message {name}"),
        PType::Map { key, value } => format!("map<{}, {}>", key.name(), describe(value)),
    }
}
