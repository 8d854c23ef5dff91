//! The three readers: each turns one format's schema file into the IR's column view
//! ([`crate::ir::RecordTy`]) and keeps what its decoder needs besides (Avro's [`avro::AvroType`],
//! JSON's [`json::JField`]s, Protobuf's [`protobuf::Message`]).
//!
//! A reader owns its format's mapping: one function from its types to [`crate::ir::Ty`], and a
//! `MAPPING` table that documents it in docs/configuration.md. What else a fourth format needs
//! (its configuration section, a decoder emitter, an arm in each function of `emit/format.rs`)
//! is listed in docs/ARCHITECTURE.md.

pub(crate) mod avro;
pub(crate) mod json;
pub(crate) mod protobuf;

/// A type a reader does not support, found at `path` inside the schema.
pub(crate) use etl_schema::Unsupported;

/// Whether a cell of a reader's documented `MAPPING` names `clickhouse`, its `T` (or `V`)
/// standing for `inner`: the readers' `mapping_matches_*` tests compare it with what they make.
#[cfg(test)]
pub(crate) fn documents(cell: &str, clickhouse: &str, inner: Option<&str>) -> bool {
    let cell = match inner {
        Some(t) => cell
            .replace("(T)", &format!("({t})"))
            .replace(", T)", &format!(", {t})"))
            .replace(", V)", &format!(", {t})")),
        None => cell.to_owned(),
    };
    cell.contains(&format!("`{clickhouse}`"))
}
