//! `benches/chain.rs` of a generated crate (with `GenOptions::bench`): the generated
//! decoder against the usual generic path on the same bytes (apache-avro's `from_avro_datum` +
//! `from_value` for Avro; serde_json's `from_slice` into a `#[derive(Deserialize)]` struct with
//! borrowed strings for JSON; prost's derived structs and prost-reflect's `DynamicMessage` for
//! Protobuf), and the whole chain per record (decode, operators, encode).

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::Error;
use super::rust_types::{field_ident, serde_owned_ty};
use crate::load::{Input, Validated};
use crate::model::Wire;
use crate::readers::json::{JField, JType};
use crate::readers::protobuf::{PField, PType, Scalar};

/// One generic decoder the generated one is compared with.
struct Generic {
    /// Its items (the derived structs it decodes into).
    items: TokenStream,
    /// Its set-up, run once before the passes.
    setup: TokenStream,
    /// Its name in the report.
    name: &'static str,
    /// What it runs per payload `p`.
    body: TokenStream,
}

/// The benchmark file, formatted.
pub(super) fn emit(v: &Validated) -> Result<String, Error> {
    let header = match v.model.format.get().wire {
        Wire::Confluent => quote!(5),
        Wire::Raw => quote!(0),
    };
    let wire = super::chain_impl::datagen_wire(&v.model);
    let encoding = super::format::datagen_encoding(v);
    let generics = match &v.input {
        Input::Avro(_) => vec![avro_generic(v, &header)],
        Input::Json(fields) => vec![json_generic(fields, &header)],
        Input::Protobuf(message) => protobuf_generics(v, message),
    };
    let generic_items = generics.iter().map(|g| &g.items);
    let generic_setups = generics.iter().map(|g| &g.setup);
    // One closure per decoder (a pass over every payload), which criterion and the interleaved
    // comparison both run.
    let passes: Vec<proc_macro2::Ident> = (0..generics.len()).map(|i| format_ident!("generic_{}", i)).collect();
    let generic_passes = generics.iter().zip(&passes).map(|(Generic { body, .. }, pass)| {
        quote!(
            let mut #pass = || {
                for p in &payloads {
                    #body
                }
            };
        )
    });
    let generic_names: Vec<&str> = generics.iter().map(|g| g.name).collect();
    let shards = v.model.sink.shard_count() as usize;
    let tokens = quote! {
        use criterion::{Criterion, Throughput, criterion_group, criterion_main};
        use etl_runtime::__private as rt;

        #[allow(dead_code, unused_imports)]
        #[path = "../src/main.rs"]
        mod pipeline;

        #(#generic_items)*

        fn chain(c: &mut Criterion) {
            let schema = rt::apache_avro::Schema::parse_str(pipeline::SCHEMA).unwrap();
            let payloads = rt::sample_payloads(&schema, #encoding, #wire, 7, 10_000);
            let mut group = c.benchmark_group("per record");
            group.throughput(Throughput::Elements(payloads.len() as u64));
            let mut generated = || {
                for p in &payloads {
                    pipeline::bench_decode(p).unwrap();
                }
            };
            #(#generic_setups)*
            #(#generic_passes)*
            group.bench_function("generated decoder", |b| b.iter(&mut generated));
            #(group.bench_function(#generic_names, |b| b.iter(&mut #passes));)*
            let mut chain = pipeline::Chain::default();
            let mut harness = rt::ChainHarness::new(#shards);
            group.bench_function("generated chain (decode, operators, encode)", |b| {
                b.iter(|| {
                    for (offset, p) in payloads.iter().enumerate() {
                        let record = rt::Record {
                            payload: Some(p),
                            key: None,
                            topic: "bench",
                            partition: 0,
                            offset: offset as i64,
                            timestamp_ms: Some(0),
                            headers: rt::Headers::NONE,
                        };
                        std::hint::black_box(harness.process(&mut chain, &record).unwrap());
                    }
                })
            });
            group.finish();
            // The same comparison in alternating passes (see `rt::interleaved`): the ratio that
            // docs/BENCHMARKS.md reports. Not while profiling one function.
            if !std::env::args().any(|a| a == "--profile-time" || a == "--list") {
                rt::interleaved(
                    &mut [
                        ("generated decoder", &mut generated as &mut dyn FnMut()),
                        #((#generic_names, &mut #passes as &mut dyn FnMut()),)*
                    ],
                    payloads.len(),
                    std::time::Duration::from_secs(10),
                );
            }
        }

        criterion_group!(benches, chain);
        criterion_main!(benches);
    };
    let file = syn::parse2::<syn::File>(tokens).map_err(Error::BenchParse)?;
    Ok(format!(
        "//! Generated by `cargo xtask bench-chain`; do not edit. The generated decoder against\n//! the generic path on the same bytes, and the whole chain per record.\n\n{}",
        prettyplease::unparse(&file)
    ))
}

/// `benches/parts.rs` of a generated crate (with `GenOptions::bench`): the decoder alone and the
/// whole chain, on the payloads of the file `ETL_BENCH_PAYLOADS` names (a topic's own records,
/// which `cargo xtask bench-raw dump` wrote), measured by the runtime; it prints one
/// `bench-result` line for `cargo xtask bench`.
pub(super) fn parts(v: &Validated) -> Result<String, Error> {
    let shards = v.model.sink.shard_count() as usize;
    let tokens = quote! {
        use etl_runtime::__private as rt;

        #[allow(dead_code, unused_imports)]
        #[path = "../src/main.rs"]
        mod pipeline;

        fn main() {
            let path = std::env::var_os("ETL_BENCH_PAYLOADS").expect("ETL_BENCH_PAYLOADS names the file of payloads");
            let payloads = rt::read_payload_file(std::path::Path::new(&path)).expect("reading the payloads");
            #[allow(clippy::default_constructed_unit_structs)]
            let mut chain = pipeline::Chain::default();
            let m = rt::measure_parts(&payloads, &mut chain, #shards, 3, |p| pipeline::bench_decode(p).is_ok());
            println!(
                "bench-result records={} decoded={} rows={} row_bytes={} decode_cpu_seconds={} chain_cpu_seconds={}",
                m.records, m.decoded, m.rows, m.row_bytes, m.decode_cpu_seconds, m.chain_cpu_seconds
            );
        }
    };
    let file = syn::parse2::<syn::File>(tokens).map_err(Error::BenchParse)?;
    Ok(format!(
        "//! Generated by `cargo xtask bench`; do not edit. The decoder alone and the whole chain on\n//! a topic's own payloads, for the sum of the pipeline's parts.\n\n{}",
        prettyplease::unparse(&file)
    ))
}

/// apache-avro's generic path: `from_avro_datum`, then `from_value` into a serde struct of owned
/// values, as an application would; types without a plain serde form are skipped with
/// IgnoredAny (they are still decoded by `from_avro_datum`).
fn avro_generic(v: &Validated, header: &TokenStream) -> Generic {
    let generic_fields: Vec<TokenStream> = v
        .schema
        .fields
        .iter()
        .map(|f| {
            let id = field_ident(&f.name);
            let ty = serde_owned_ty(&f.ty);
            quote!(#[allow(dead_code)] #id: #ty)
        })
        .collect();
    Generic {
        items: quote!(
            /// The record as an application of apache-avro's generic path would read it.
            #[derive(serde::Deserialize)]
            struct Generic {
                #(#generic_fields,)*
            }
        ),
        setup: TokenStream::new(),
        name: "apache-avro generic (from_avro_datum + from_value)",
        body: quote!(
            let mut datum = &p[#header..];
            let value = rt::apache_avro::from_avro_datum(&schema, &mut datum, None).unwrap();
            let record: Generic = rt::apache_avro::from_value(&value).unwrap();
            std::hint::black_box(record);
        ),
    }
}

/// serde_json's `from_slice` into derived structs with borrowed strings.
fn json_generic(fields: &[JField], header: &TokenStream) -> Generic {
    let mut structs = Vec::new();
    let top = serde_struct("Generic", fields, &mut structs);
    Generic {
        items: quote!(#(#structs)*),
        setup: TokenStream::new(),
        name: "serde_json::from_slice into a derived struct (borrowed strings)",
        body: quote!(
            let record: #top<'_> = serde_json::from_slice(&p[#header..]).unwrap();
            std::hint::black_box(record);
        ),
    }
}

/// prost into derived structs, and prost-reflect's DynamicMessage.
fn protobuf_generics(v: &Validated, message: &crate::readers::protobuf::Message) -> Vec<Generic> {
    // The Confluent frame also carries the message-index path.
    let header = match v.model.format.get().wire {
        Wire::Confluent => 5 + index_bytes(&message.indexes),
        Wire::Raw => 0,
    };
    let mut structs = Vec::new();
    let top = prost_struct(&message.name, &message.fields, &mut structs);
    let name = &message.name;
    vec![
        Generic {
            items: quote!(#(#structs)*),
            setup: TokenStream::new(),
            name: "prost (derived structs, owned)",
            body: quote!(
                let record = <#top as prost::Message>::decode(&p[#header..]).unwrap();
                std::hint::black_box(record);
            ),
        },
        Generic {
            items: TokenStream::new(),
            setup: quote!(
                let pool = prost_reflect::DescriptorPool::decode(&include_bytes!("schema.fds")[..]).unwrap();
                let descriptor = pool.get_message_by_name(#name).unwrap();
            ),
            name: "prost-reflect DynamicMessage",
            body: quote!(
                let record = prost_reflect::DynamicMessage::decode(descriptor.clone(), &p[#header..]).unwrap();
                std::hint::black_box(record);
            ),
        },
    ]
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
        JType::String
        | JType::DateTime
        | JType::Date
        | JType::Uuid
        | JType::Ipv4
        | JType::Ipv6
        | JType::Enum { .. } => (quote!(std::borrow::Cow<'a, str>), true),
        JType::Array(item) => {
            let (item, borrows) = serde_ty(item, hint, out);
            (quote!(Vec<#item>), borrows)
        }
        JType::Map(value) => {
            let (value, _) = serde_ty(value, hint, out);
            (quote!(std::collections::HashMap<std::borrow::Cow<'a, str>, #value>), true)
        }
        // A hand-written consumer would keep it as `RawValue`, which needs serde_json's
        // `raw_value` feature; skipping checks the same structure.
        JType::Json | JType::Variant(_) => (quote!(serde::de::IgnoredAny), false),
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

/// The bytes Confluent's message-index path takes: one for `[0]`, else a varint count and a
/// varint per index (zig-zag, small numbers: one byte each below 64).
fn index_bytes(indexes: &[i32]) -> usize {
    let zigzag_len = |v: i64| {
        let mut n = ((v << 1) ^ (v >> 63)) as u64;
        let mut len = 1;
        while n >= 0x80 {
            n >>= 7;
            len += 1;
        }
        len
    };
    if indexes == [0] {
        1
    } else {
        zigzag_len(indexes.len() as i64) + indexes.iter().map(|i| zigzag_len(i64::from(*i))).sum::<usize>()
    }
}

/// The struct prost's code generator would write for the message (`#[derive(prost::Message)]`
/// with owned strings and bytes, `Option` for messages and presence, a `Oneof` enum per oneof);
/// pushes it and the types it uses to `out` and returns its name. Enums are read as their `i32`
/// numbers, which is what prost's `enumeration` fields hold.
fn prost_struct(full_name: &str, fields: &[PField], out: &mut Vec<TokenStream>) -> proc_macro2::Ident {
    let ident = format_ident!("Prost{}", crate::readers::protobuf::record_name(full_name));
    if out.iter().any(|t| t.to_string().contains(&format!("struct {ident} "))) {
        return ident;
    }
    let mut members = Vec::new();
    let mut oneofs: Vec<(usize, Vec<&PField>)> = Vec::new();
    for f in fields {
        if let Some(o) = f.oneof {
            match oneofs.iter_mut().find(|(i, _)| *i == o) {
                Some((_, members)) => members.push(f),
                None => oneofs.push((o, vec![f])),
            }
            continue;
        }
        let id = format_ident!("{}", f.name);
        let tag = f.number.to_string();
        let member = match &f.ty {
            PType::Map { key, value } => {
                let (value_kind, value_ty) = prost_kind(value, out);
                let map = format!("{}, {value_kind}", key.name());
                let key_ty = prost_scalar_ty(*key);
                quote!(#[prost(map = #map, tag = #tag)] #id: std::collections::HashMap<#key_ty, #value_ty>)
            }
            t => {
                let (kind, ty) = prost_kind(t, out);
                let kind = format_ident!("{}", kind);
                let message = matches!(
                    t,
                    PType::Message { .. } | PType::Timestamp | PType::Wrapper(_) | PType::Struct | PType::JsonValue
                );
                if f.repeated {
                    quote!(#[prost(#kind, repeated, tag = #tag)] #id: Vec<#ty>)
                } else if message || f.presence {
                    quote!(#[prost(#kind, optional, tag = #tag)] #id: Option<#ty>)
                } else {
                    quote!(#[prost(#kind, tag = #tag)] #id: #ty)
                }
            }
        };
        members.push(quote!(#[allow(dead_code)] #member));
    }
    for (i, fields) in &oneofs {
        let enum_ident = format_ident!("{ident}Oneof{i}");
        let member = format_ident!("oneof_{i}");
        let tags = fields.iter().map(|f| f.number.to_string()).collect::<Vec<_>>().join(", ");
        let enum_name = enum_ident.to_string();
        let variants: Vec<TokenStream> = fields
            .iter()
            .map(|f| {
                let (kind, ty) = prost_kind(&f.ty, out);
                let kind = format_ident!("{}", kind);
                let tag = f.number.to_string();
                let variant = format_ident!("V{}", f.number);
                quote!(#[prost(#kind, tag = #tag)] #variant(#ty))
            })
            .collect();
        out.push(quote!(
            #[derive(Clone, PartialEq, prost::Oneof)]
            #[allow(dead_code)]
            enum #enum_ident { #(#variants,)* }
        ));
        members
            .push(quote!(#[allow(dead_code)] #[prost(oneof = #enum_name, tags = #tags)] #member: Option<#enum_ident>));
    }
    out.push(quote!(
        #[derive(Clone, PartialEq, prost::Message)]
        struct #ident { #(#members,)* }
    ));
    ident
}

/// The prost field kind and Rust type of one value.
fn prost_kind(t: &PType, out: &mut Vec<TokenStream>) -> (String, TokenStream) {
    match t {
        PType::Scalar(s) => (s.name().to_owned(), prost_scalar_ty(*s)),
        PType::Enum { .. } => ("int32".into(), quote!(i32)),
        PType::Timestamp => {
            let ident = format_ident!("ProstTimestamp");
            if !out.iter().any(|t| t.to_string().contains("struct ProstTimestamp ")) {
                out.push(quote!(
                    #[derive(Clone, PartialEq, prost::Message)]
                    struct ProstTimestamp {
                        #[allow(dead_code)]
                        #[prost(int64, tag = "1")]
                        seconds: i64,
                        #[allow(dead_code)]
                        #[prost(int32, tag = "2")]
                        nanos: i32,
                    }
                ));
            }
            ("message".into(), quote!(#ident))
        }
        // Kept as their bytes: prost's own Struct needs prost-types, and a consumer that
        // wants JSON would convert it after.
        PType::Struct | PType::JsonValue => ("bytes".into(), quote!(::std::vec::Vec<u8>)),
        // prost implements `Message` for the scalars as their wrapper types.
        PType::Wrapper(s) => ("message".into(), prost_scalar_ty(*s)),
        PType::Message { name, fields } => {
            let ident = prost_struct(name, fields, out);
            ("message".into(), quote!(#ident))
        }
        PType::Map { .. } => unreachable!("a map is a field, never a value"),
    }
}

fn prost_scalar_ty(s: Scalar) -> TokenStream {
    match s {
        Scalar::Int32 | Scalar::Sint32 | Scalar::Sfixed32 => quote!(i32),
        Scalar::Int64 | Scalar::Sint64 | Scalar::Sfixed64 => quote!(i64),
        Scalar::Uint32 | Scalar::Fixed32 => quote!(u32),
        Scalar::Uint64 | Scalar::Fixed64 => quote!(u64),
        Scalar::Bool => quote!(bool),
        Scalar::Float => quote!(f32),
        Scalar::Double => quote!(f64),
        Scalar::String => quote!(String),
        Scalar::Bytes => quote!(Vec<u8>),
    }
}
