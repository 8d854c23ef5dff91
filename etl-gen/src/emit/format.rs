//! What the pipeline's format decides in the generated crate, one function per question, each a
//! match over [`Input`] that hands the question to the format's decoder emitter (`avro`, `json`,
//! `protobuf`). The rest of `emit/` asks here and never looks at the format itself, except
//! `criterion.rs`, whose generic baselines are one per format. So a new format is one more
//! emitter module, one more arm in each function below, and its benchmark baseline.

use std::collections::BTreeSet;

use proc_macro2::TokenStream;
use quote::quote;

use super::expr::Scope;
use super::{GeneratedFile, avro, json, protobuf};
use crate::load::{Input, Validated};
use crate::model::Wire;

/// The decoder: one local per input field in `live` (registered in `scope`), the other fields
/// read past, ending with the check that the whole payload was read.
pub(super) fn decode(
    v: &Validated,
    live: &BTreeSet<String>,
    scope: &mut Scope,
    fresh: &mut impl FnMut(&str) -> proc_macro2::Ident,
    enums: &mut Vec<Vec<String>>,
) -> Vec<TokenStream> {
    let input = &v.plan.decoded;
    match &v.input {
        Input::Avro(record) => avro::decode_row(record, input, live, scope, fresh),
        Input::Json(fields) => json::decode(fields, input, live, scope, fresh, enums),
        Input::Protobuf(message) => {
            let indexes = (v.model.format.get().wire == Wire::Confluent).then_some(&message.indexes[..]);
            protobuf::decode(&message.fields, indexes, input, live, scope, fresh, enums)
        }
    }
}

/// The statements that take the payload's framing off and leave the datum in `buf`: for the
/// chain (the writer's schema id checked, or resolved through the registry) and for the
/// decoder's benchmark (the writer schema taken to be the reader's).
pub(super) fn framing(v: &Validated) -> (TokenStream, TokenStream) {
    let format = v.model.format.get();
    match &v.input {
        Input::Avro(_) => avro::framing(&format),
        Input::Json(_) => checked_writer_id(&format, quote!(rt::json_read::reader_schema_id)),
        Input::Protobuf(_) => checked_writer_id(&format, quote!(rt::proto_read::reader_schema_id)),
    }
}

/// The framing of a format whose decoder reads what any accepted writer wrote as it is: without a
/// registry only the reader schema's own ids are decoded; with one, another id is decoded if the
/// registry's writer schema is one the reader reads (judged once per id), and is a record error
/// otherwise. `id_rule` is the runtime's check of an id against `SCHEMA_IDS`.
fn checked_writer_id(format: &crate::model::Selected<'_>, id_rule: TokenStream) -> (TokenStream, TokenStream) {
    match format.wire {
        Wire::Confluent => {
            let check = if format.uses_registry() {
                quote!(match &self.registry {
                    Some(registry) => registry.check(schema_id)?,
                    None => #id_rule(schema_id, SCHEMA_IDS)?,
                })
            } else {
                quote!(#id_rule(schema_id, SCHEMA_IDS)?;)
            };
            (
                quote!(
                    let (schema_id, buf) = rt::avro::confluent(payload)?;
                    #check
                ),
                quote!(let (_schema_id, buf) = rt::avro::confluent(payload)?;),
            )
        }
        Wire::Raw => (quote!(let buf = payload;), quote!(let buf = payload;)),
    }
}

/// The registry client `main` makes when the format's `registry` is set: the items it needs (the
/// reader schema in the form the client compares writers with) and the expression that makes it
/// from `url`, waiting `timeout` for a failing lookup.
pub(super) fn registry_client(v: &Validated, timeout: &TokenStream) -> (TokenStream, TokenStream) {
    match &v.input {
        Input::Avro(_) => avro::registry_client(timeout),
        Input::Json(_) => json::registry_client(&v.schema_text, timeout),
        Input::Protobuf(message) => protobuf::registry_client(message, timeout),
    }
}

/// `SCHEMA`, the Avro schema datagen and the fuzz test synthesize payloads from: the reader
/// schema itself for Avro (included from `schema_include`), the records' shape derived by gen for
/// the other formats.
pub(super) fn schema_const(v: &Validated, schema_include: &str) -> TokenStream {
    match &v.input {
        // Marked for datagen (strings of logicalType json): the marked text, the file still
        // included so that an edit to it rebuilds the crate.
        Input::Avro(_) if v.datagen_schema != v.schema_text => {
            let text = &v.datagen_schema;
            quote!(
                const _: &str = include_str!(#schema_include);
                /// The reader schema, with its JSON strings marked for datagen.
                #[allow(dead_code)]
                pub(crate) const SCHEMA: &str = #text;
            )
        }
        Input::Avro(_) => quote!(
            /// The reader schema, compiled in.
            #[allow(dead_code)]
            pub(crate) const SCHEMA: &str = include_str!(#schema_include);
        ),
        Input::Json(_) | Input::Protobuf(_) => {
            let text = &v.datagen_schema;
            quote!(
                /// The records' shape as an Avro schema, derived from the format's schema by gen:
                /// what datagen and the fuzz test synthesize payloads from.
                #[allow(dead_code)]
                pub(crate) const SCHEMA: &str = #text;
            )
        }
    }
}

/// How datagen and the fuzz test encode synthesized records: in the pipeline's format.
pub(super) fn datagen_encoding(v: &Validated) -> TokenStream {
    match &v.input {
        Input::Avro(_) => quote!(rt::Encoding::Avro),
        Input::Json(_) => quote!(rt::Encoding::Json),
        Input::Protobuf(_) => quote!(rt::Encoding::Protobuf),
    }
}

/// The crate's copy of the schema file, which the build compares with the original. For Avro it
/// is `schema.avsc`, which is also the datagen schema; the others keep their own file beside it.
pub(super) fn schema_copy(v: &Validated) -> &'static str {
    match &v.input {
        Input::Avro(_) => "schema.avsc",
        Input::Json(_) => "schema.json",
        Input::Protobuf(_) => "schema.proto",
    }
}

/// The etl-runtime feature of the format's registry client.
pub(super) fn registry_feature(v: &Validated) -> &'static str {
    match &v.input {
        Input::Avro(_) => "\"registry\"",
        Input::Json(_) => "\"registry-json\"",
        Input::Protobuf(_) => "\"registry-protobuf\"",
    }
}

/// Whether the benchmark's baselines need prost (the generated Cargo.toml adds it).
pub(super) fn benchmark_needs_prost(v: &Validated) -> bool {
    matches!(v.input, Input::Protobuf(_))
}

/// The files the benchmark reads besides its source: the compiled `.proto` for prost-reflect.
pub(super) fn benchmark_files(v: &Validated) -> Vec<GeneratedFile> {
    match &v.input {
        Input::Protobuf(message) => {
            vec![GeneratedFile { path: "benches/schema.fds".into(), contents: message.descriptor_set.clone() }]
        }
        Input::Avro(_) | Input::Json(_) => Vec::new(),
    }
}
