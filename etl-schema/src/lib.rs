//! The schemas etl-rs reads besides Avro (JSON Schema, Protobuf) and the rules by which a reader
//! schema reads a writer's, shared by the generator (`gen`, `gen --check --registry`) and the
//! runtime (writer schemas fetched from a registry). One copy of the rules, so what the build-time
//! check accepts is what the binary accepts.

#[cfg(feature = "json")]
pub mod json;
#[cfg(feature = "protobuf")]
pub mod protobuf;

/// A construct of the schema that has no column mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported {
    /// Where in the schema: `items[].price`.
    pub path: String,
    /// What was found and why it is not supported.
    pub what: String,
    /// What to use instead.
    pub fix: String,
}

/// Something of a writer schema that the reader schema's decoder cannot read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The property or field path (`address.city`, `items = 4.sku = 1`), when it is about one.
    pub path: Option<String>,
    /// What is wrong, as a clause that follows the writer's name: "property `price`: it is a
    /// number in the writer and an integer in the reader".
    pub what: String,
    /// What the user can change.
    pub help: String,
}

/// A registry subject (any text) as one URL path segment: `/subjects/{segment}/versions/1`.
pub fn path_segment(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
