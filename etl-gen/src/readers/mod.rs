//! The three readers: each turns one format's schema file into the IR's column view
//! ([`crate::ir::RecordTy`]) and keeps what its decoder needs besides (Avro's [`avro::AvroType`],
//! JSON's [`json::JField`]s, Protobuf's [`protobuf::Message`]).
//!
//! A reader owns its format's mapping: one function from its types to [`crate::ir::Ty`], and a
//! `MAPPING` table that documents it in docs/configuration.md. A fourth format is a fourth
//! module here, a decoder emitter beside `emit/avro.rs`, and a branch in `load::Input`.

pub(crate) mod avro;
pub(crate) mod json;
pub(crate) mod protobuf;

/// A type a reader does not support, found at `path` inside the schema.
pub(crate) use etl_schema::Unsupported;
