//! `benches/chain.rs` of a generated crate (with `GenOptions::bench`): the generated
//! decoder against the usual generic path on the same bytes (apache-avro's `from_avro_datum` +
//! `from_value` for Avro; serde_json's `from_slice` into a `#[derive(Deserialize)]` struct with
//! borrowed strings for JSON), and the whole chain per record (decode, operators, encode).

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::types::field_ident;
use crate::ir::Ty;
use crate::json_schema::{JField, JType};
use crate::load::{Input, Validated};
use crate::model::Wire;

/// The benchmark file, formatted.
pub(super) fn emit(v: &Validated) -> Result<String, String> {
    let header = match v.model.format.get().wire {
        Wire::Confluent => quote!(5),
        Wire::Raw => quote!(0),
    };
    let wire = super::chain::datagen_wire(&v.model);
    let encoding = super::chain::datagen_encoding(&v.model);
    let (generic_items, generic_name, generic_body) = match &v.input {
        Input::Avro => {
            // The generic path deserializes into a serde struct of owned values, as an
            // application using apache-avro's `from_value` would; types without a plain serde
            // form are skipped with IgnoredAny (they are still decoded by `from_avro_datum`).
            let generic_fields: Vec<TokenStream> = v
                .schema
                .fields
                .iter()
                .map(|f| {
                    let id = field_ident(&f.name);
                    let ty = owned_ty(&crate::ir::ty_of(&f.ty));
                    quote!(#[allow(dead_code)] #id: #ty)
                })
                .collect();
            (
                quote!(
                    /// The record as an application of apache-avro's generic path would read it.
                    #[derive(serde::Deserialize)]
                    struct Generic {
                        #(#generic_fields,)*
                    }
                ),
                "apache-avro generic (from_avro_datum + from_value)",
                quote!(
                    let mut datum = &p[#header..];
                    let value = rt::apache_avro::from_avro_datum(&schema, &mut datum, None).unwrap();
                    let record: Generic = rt::apache_avro::from_value(&value).unwrap();
                    std::hint::black_box(record);
                ),
            )
        }
        Input::Json(fields) => {
            let mut structs = Vec::new();
            let top = serde_struct("Generic", fields, &mut structs);
            (
                quote!(#(#structs)*),
                "serde_json::from_slice into a derived struct (borrowed strings)",
                quote!(
                    let record: #top<'_> = serde_json::from_slice(&p[#header..]).unwrap();
                    std::hint::black_box(record);
                ),
            )
        }
    };
    let shards = v.model.sink.shard_count() as usize;
    let tokens = quote! {
        use criterion::{Criterion, Throughput, criterion_group, criterion_main};
        use etl_runtime::__private as rt;

        #[allow(dead_code, unused_imports)]
        #[path = "../src/main.rs"]
        mod pipeline;

        #generic_items

        fn chain(c: &mut Criterion) {
            let schema = rt::apache_avro::Schema::parse_str(pipeline::SCHEMA).unwrap();
            let payloads = rt::sample_payloads(&schema, #encoding, #wire, 7, 10_000);
            let mut group = c.benchmark_group("per record");
            group.throughput(Throughput::Elements(payloads.len() as u64));
            group.bench_function("generated decoder", |b| {
                b.iter(|| {
                    for p in &payloads {
                        pipeline::bench_decode(p).unwrap();
                    }
                })
            });
            group.bench_function(#generic_name, |b| {
                b.iter(|| {
                    for p in &payloads {
                        #generic_body
                    }
                })
            });
            let mut chain = pipeline::Chain::default();
            let mut harness = rt::ChainHarness::new(#shards);
            group.bench_function("generated chain (decode, operators, encode)", |b| {
                b.iter(|| {
                    for (offset, p) in payloads.iter().enumerate() {
                        let record = rt::Record {
                            payload: Some(p),
                            key: None,
                            partition: 0,
                            offset: offset as i64,
                            timestamp_ms: Some(0),
                        };
                        std::hint::black_box(harness.process(&mut chain, &record).unwrap());
                    }
                })
            });
            group.finish();
        }

        criterion_group!(benches, chain);
        criterion_main!(benches);
    };
    let file =
        syn::parse2::<syn::File>(tokens).map_err(|e| format!("internal error: the benchmark does not parse: {e}"))?;
    Ok(format!(
        "//! Generated by `cargo xtask bench-chain`; do not edit. The generated decoder against\n//! the generic path on the same bytes, and the whole chain per record.\n\n{}",
        prettyplease::unparse(&file)
    ))
}

/// The `#[derive(Deserialize)]` struct an application would read these JSON documents into,
/// strings borrowed; pushes it (and the structs of nested objects) to `out` and returns its name.
fn serde_struct(name: &str, fields: &[JField], out: &mut Vec<TokenStream>) -> proc_macro2::Ident {
    let ident = format_ident!("{}", name);
    let members: Vec<TokenStream> = fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let (ty, borrows) = serde_ty(&f.ty, &format!("{name}{i}"), out);
            let (ty, borrows) = if f.required { (ty, borrows) } else { (quote!(Option<#ty>), borrows) };
            let id = field_ident(&f.name);
            let key = &f.key;
            let borrow = if borrows { quote!(#[serde(borrow)]) } else { TokenStream::new() };
            let default = if f.required { TokenStream::new() } else { quote!(#[serde(default)]) };
            quote!(#[allow(dead_code)] #[serde(rename = #key)] #borrow #default #id: #ty)
        })
        .collect();
    out.push(quote!(
        #[derive(serde::Deserialize)]
        struct #ident<'a> {
            #(#members,)*
            #[serde(skip)]
            _borrowed: std::marker::PhantomData<&'a ()>,
        }
    ));
    ident
}

/// The serde type of a JSON value, and whether it borrows from the document.
fn serde_ty(t: &JType, hint: &str, out: &mut Vec<TokenStream>) -> (TokenStream, bool) {
    match t {
        JType::Integer => (quote!(i64), false),
        JType::Number => (quote!(f64), false),
        JType::Boolean => (quote!(bool), false),
        JType::String | JType::DateTime | JType::Date | JType::Uuid | JType::Enum { .. } => {
            (quote!(std::borrow::Cow<'a, str>), true)
        }
        JType::Array(item) => {
            let (item, borrows) = serde_ty(item, hint, out);
            (quote!(Vec<#item>), borrows)
        }
        JType::Map(value) => {
            let (value, _) = serde_ty(value, hint, out);
            (quote!(std::collections::HashMap<std::borrow::Cow<'a, str>, #value>), true)
        }
        JType::Object { fields, .. } => {
            let nested = serde_struct(&format!("{hint}Object"), fields, out);
            (quote!(#nested<'a>), true)
        }
        JType::Nullable(inner) => {
            let (inner, borrows) = serde_ty(inner, hint, out);
            (quote!(Option<#inner>), borrows)
        }
    }
}

/// An owned serde type for the generic path.
fn owned_ty(ty: &Ty) -> TokenStream {
    match ty {
        Ty::Bool => quote!(bool),
        Ty::Int32 | Ty::Date => quote!(i32),
        Ty::Int64 | Ty::TimestampMillis | Ty::TimestampMicros => quote!(i64),
        Ty::Float32 => quote!(f32),
        Ty::Float64 => quote!(f64),
        Ty::String | Ty::Enum { .. } => quote!(String),
        Ty::Array(t) => {
            let t = owned_ty(t);
            quote!(Vec<#t>)
        }
        Ty::Map(t) => {
            let t = owned_ty(t);
            quote!(std::collections::HashMap<String, #t>)
        }
        Ty::Nullable(t) => {
            let t = owned_ty(t);
            quote!(Option<#t>)
        }
        _ => quote!(serde::de::IgnoredAny),
    }
}
