//! Whether the decoder generated for a reader JSON Schema reads every document a writer JSON Schema
//! allows: what `gen --check --registry` reports for each registered version, and what the binary
//! checks of each writer schema it fetches from the registry.
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

use super::{JField, JType};
use crate::Finding;

/// Judges the writer schema's text against the reader's properties: one finding per property the
/// reader cannot read (a writer the walker cannot read at all is one finding without a path).
/// Empty: every document the writer allows is read.
pub fn check(reader: &[JField], writer: &str) -> Vec<Finding> {
    let writer = match super::parse(writer) {
        Ok(Ok(fields)) => fields,
        Ok(Err(unsupported)) if !unsupported.is_empty() => {
            let first = &unsupported[0];
            return vec![Finding {
                path: (!first.path.is_empty()).then(|| first.path.clone()),
                what: format!(
                    "it uses JSON Schema the check cannot judge: {} ({} construct(s); the first at `{}`)",
                    first.what,
                    unsupported.len(),
                    first.path
                ),
                help: format!("the supported subset is in docs/configuration.md; {}", first.fix),
            }];
        }
        other => {
            let why = match other {
                Err(invalid) => invalid.0,
                _ => "the top level is not an object with `properties`".into(),
            };
            return vec![Finding {
                path: None,
                what: format!("it is not a JSON Schema of an object: {why}"),
                help: "the registry holds a schema etl-rs cannot read; ask its owner".into(),
            }];
        }
    };
    let mut found = Vec::new();
    properties(reader, &writer, "", false, &mut found);
    found
        .into_iter()
        .map(|Found { path, what, help }| Finding {
            what: format!("property `{path}`: {what}"),
            path: Some(path),
            help,
        })
        .collect()
}

/// One property the reader cannot read.
struct Found {
    path: String,
    what: String,
    help: String,
}

/// Checks the reader's `fields` (under `prefix`, below an optional object when `optional_above`)
/// against the writer's.
fn properties(reader: &[JField], writer: &[JField], prefix: &str, optional_above: bool, out: &mut Vec<Found>) {
    for r in reader {
        let path = format!("{prefix}{}", r.key);
        let container = matches!(r.ty.non_null(), JType::Array(_) | JType::Map(_));
        // What etl-gen's JSON reader (`readers::json::record_ty`) makes Nullable.
        let reader_optional = optional_above || !r.required || matches!(r.ty, JType::Nullable(_));
        let Some(w) = writer.iter().find(|w| w.key == r.key) else {
            if !reader_optional && !container {
                out.push(Found {
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
            out.push(Found {
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
fn types(r: &JType, w: &JType, path: &str, optional: bool, out: &mut Vec<Found>) {
    let same_or_narrower = match (r, w) {
        (JType::Integer, JType::Integer)
        | (JType::Number, JType::Number | JType::Integer)
        | (JType::Boolean, JType::Boolean)
        | (
            JType::String,
            JType::String
            | JType::DateTime
            | JType::Date
            | JType::Uuid
            | JType::Ipv4
            | JType::Ipv6
            | JType::Enum { .. },
        )
        | (JType::Ipv4, JType::Ipv4)
        | (JType::Json, JType::Json | JType::Object { .. } | JType::Map(_))
        | (JType::Ipv6, JType::Ipv6 | JType::Ipv4)
        | (JType::DateTime, JType::DateTime)
        | (JType::Date, JType::Date)
        | (JType::Uuid, JType::Uuid) => true,
        // Every member the writer may send is one the reader's Variant has.
        (JType::Variant(rs), JType::Variant(ws)) => ws.iter().all(|w| rs.contains(w)),
        (JType::Variant(rs), w) => rs.contains(w),
        (JType::Enum { symbols: rs, .. }, JType::Enum { symbols: ws, .. }) => {
            let missing: Vec<&str> = ws.iter().filter(|s| !rs.contains(s)).map(String::as_str).collect();
            if !missing.is_empty() {
                out.push(Found {
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
                out.push(Found {
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
        out.push(Found {
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
        JType::Ipv4 => "an ipv4 string".into(),
        JType::Json => "a JSON object".into(),
        JType::Variant(members) => {
            let members: Vec<String> = members.iter().map(describe).collect();
            format!("one of {}", members.join(", "))
        }
        JType::Ipv6 => "an ipv6 string".into(),
        JType::Enum { .. } => "an enum".into(),
        JType::Array(item) => format!("an array of {}", describe(item.non_null())),
        JType::Map(value) => format!("a map of {}", describe(value.non_null())),
        JType::Object { .. } => "an object".into(),
        JType::Nullable(inner) => format!("{} or null", describe(inner)),
    }
}
