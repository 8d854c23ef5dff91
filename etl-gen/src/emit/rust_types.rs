//! The one map from IR types to Rust types: the types values have inside the generated chain
//! (borrowing the message), their names in documentation, and the owned serde types of the
//! benchmark's generic baseline.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use crate::ir::{RecordTy, Ty};

/// The Rust type that carries a value of `ty` inside the chain (`'a` borrows the message).
pub(super) fn rust_ty(ty: &Ty) -> TokenStream {
    rust_ty_with(ty, &quote!('a))
}

/// The same for a local variable, whose lifetime is inferred.
pub(super) fn local_ty(ty: &Ty) -> TokenStream {
    rust_ty_with(ty, &quote!('_))
}

fn rust_ty_with(ty: &Ty, lt: &TokenStream) -> TokenStream {
    let rust_ty = |t: &Ty| rust_ty_with(t, lt);
    match ty {
        Ty::Bool => quote!(bool),
        Ty::Int32 | Ty::Date => quote!(i32),
        Ty::Int64 | Ty::Timestamp(_) | Ty::Time(_) => quote!(i64),
        Ty::UInt32 | Ty::Ipv4 => quote!(u32),
        Ty::UInt64 => quote!(u64),
        Ty::Float32 => quote!(f32),
        Ty::Float64 => quote!(f64),
        Ty::String | Ty::Json => quote!(::std::borrow::Cow<#lt, str>),
        Ty::Bytes => quote!(::std::borrow::Cow<#lt, [u8]>),
        Ty::Enum { .. } => quote!(u32),
        Ty::Array(t) => {
            let t = rust_ty(t);
            quote!(::std::vec::Vec<#t>)
        }
        Ty::Map(k, v) => {
            let (k, v) = (rust_ty(k), rust_ty(v));
            quote!(::std::vec::Vec<(#k, #v)>)
        }
        Ty::Nullable(t) => {
            let t = rust_ty(t);
            quote!(::std::option::Option<#t>)
        }
        Ty::Record(r) if borrows(ty) => {
            let name = record_ident(r);
            quote!(#name<#lt>)
        }
        Ty::Record(r) => {
            let name = record_ident(r);
            quote!(#name)
        }
        Ty::Decimal { .. } => quote!(i128),
        Ty::Uuid | Ty::Ipv6 => quote!(u128),
        Ty::Variant(_) => {
            let name = variant_ident(ty);
            if borrows(ty) { quote!(::std::option::Option<#name<#lt>>) } else { quote!(::std::option::Option<#name>) }
        }
    }
}

/// The generated enum of a variant's members (`VariantInt64String`), one variant per member
/// named by [`Ty::member_name`].
pub(super) fn variant_ident(ty: &Ty) -> proc_macro2::Ident {
    let Ty::Variant(members) = ty else { unreachable!("a variant") };
    let mut name = String::from("Variant");
    for m in members {
        name.extend(m.clickhouse().chars().filter(char::is_ascii_alphanumeric));
    }
    format_ident!("{}", name)
}

/// The enum variant of `member` in its variant's enum.
pub(super) fn member_ident(member: &Ty) -> proc_macro2::Ident {
    format_ident!("{}", member.member_name())
}

/// Every variant type in `ty` (its containers and records included).
pub(super) fn nested_variants(ty: &Ty, out: &mut Vec<Ty>) {
    match ty {
        Ty::Array(t) | Ty::Map(_, t) | Ty::Nullable(t) => nested_variants(t, out),
        Ty::Record(r) => r.fields.iter().for_each(|c| nested_variants(&c.ty, out)),
        Ty::Variant(_) if !out.contains(ty) => out.push(ty.clone()),
        _ => {}
    }
}

/// Whether values of `ty` borrow from the message (strings, bytes, map keys): a record struct
/// has a lifetime parameter only then (an unused one does not compile).
pub(super) fn borrows(ty: &Ty) -> bool {
    match ty {
        Ty::String | Ty::Bytes | Ty::Json => true,
        Ty::Map(k, v) => borrows(k) || borrows(v),
        Ty::Variant(members) => members.iter().any(borrows),
        Ty::Array(t) | Ty::Nullable(t) => borrows(t),
        Ty::Record(r) => r.fields.iter().any(|c| borrows(&c.ty)),
        _ => false,
    }
}

/// The struct name of a record nested in an array or map.
pub(super) fn record_ident(r: &RecordTy) -> proc_macro2::Ident {
    record_ident_named(&r.name)
}

/// The struct name of the record named `name` (its last dotted part).
pub(super) fn record_ident_named(name: &str) -> proc_macro2::Ident {
    let short = name.rsplit('.').next().unwrap_or(name);
    format_ident!("{}", sanitize(short))
}

/// A Rust identifier for a row or record field.
pub(super) fn field_ident(name: &str) -> proc_macro2::Ident {
    format_ident!("{}", sanitize(name))
}

fn sanitize(name: &str) -> String {
    const KEYWORDS: &[&str] = &[
        "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern", "false", "fn",
        "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return", "self",
        "Self", "static", "struct", "super", "trait", "true", "type", "unsafe", "use", "where", "while", "abstract",
        "become", "box", "do", "final", "macro", "override", "priv", "try", "typeof", "unsized", "virtual", "yield",
    ];
    if KEYWORDS.contains(&name) { format!("r#{name}") } else { name.to_owned() }
}

/// Every record type nested in containers of `ty`, innermost first.
pub(super) fn nested_records(ty: &Ty, out: &mut Vec<RecordTy>) {
    match ty {
        Ty::Array(t) | Ty::Map(_, t) | Ty::Nullable(t) => nested_records(t, out),
        Ty::Record(r) => {
            for c in &r.fields {
                nested_records(&c.ty, out);
            }
            if !out.iter().any(|o| o.name == r.name) {
                out.push((**r).clone());
            }
        }
        _ => {}
    }
}

/// How `rust_ty` reads in documentation: `Cow<'a, str>`, `Vec<i64>`, `Option<u32>`.
pub(super) fn rust_ty_doc(ty: &Ty) -> String {
    match ty {
        Ty::Bool => "bool".into(),
        Ty::Int32 | Ty::Date => "i32".into(),
        Ty::Int64 | Ty::Timestamp(_) | Ty::Time(_) => "i64".into(),
        Ty::UInt32 => "u32".into(),
        Ty::Ipv4 => "u32 (1.2.3.4 is 0x01020304)".into(),
        Ty::Ipv6 => "u128 (the 16 bytes, big-endian)".into(),
        Ty::UInt64 => "u64".into(),
        Ty::Float32 => "f32".into(),
        Ty::Float64 => "f64".into(),
        Ty::String => "Cow<'a, str>".into(),
        Ty::Json => "Cow<'a, str> (the object's JSON text)".into(),
        Ty::Bytes => "Cow<'a, [u8]>".into(),
        Ty::Enum { .. } => "u32 (symbol index)".into(),
        Ty::Array(t) => format!("Vec<{}>", rust_ty_doc(t)),
        Ty::Map(k, v) => format!("Vec<({}, {})>", rust_ty_doc(k), rust_ty_doc(v)),
        Ty::Nullable(t) => format!("Option<{}>", rust_ty_doc(t)),
        Ty::Record(r) if borrows(ty) => format!("{}<'a>", record_ident(r)),
        Ty::Record(r) => record_ident(r).to_string(),
        Ty::Decimal { .. } => "i128 (unscaled)".into(),
        Ty::Uuid => "u128".into(),
        Ty::Variant(_) => format!("Option<{}> (None: NULL)", variant_ident(ty)),
    }
}

/// An owned serde type for the benchmark's generic path (serde_json into owned values): what a
/// hand-written consumer would deserialize into. Types it has no cheap twin for are ignored.
pub(super) fn serde_owned_ty(ty: &Ty) -> TokenStream {
    match ty {
        Ty::Bool => quote!(bool),
        Ty::Int32 | Ty::Date => quote!(i32),
        Ty::Int64 | Ty::Timestamp(_) => quote!(i64),
        Ty::UInt32 => quote!(u32),
        Ty::UInt64 => quote!(u64),
        Ty::Float32 => quote!(f32),
        Ty::Float64 => quote!(f64),
        Ty::String | Ty::Enum { .. } => quote!(String),
        Ty::Array(t) => {
            let t = serde_owned_ty(t);
            quote!(Vec<#t>)
        }
        Ty::Map(k, v) => {
            let (k, v) = (serde_owned_ty(k), serde_owned_ty(v));
            quote!(std::collections::HashMap<#k, #v>)
        }
        Ty::Nullable(t) => {
            let t = serde_owned_ty(t);
            quote!(Option<#t>)
        }
        _ => quote!(serde::de::IgnoredAny),
    }
}

/// The static table of an enum's symbols (`ENUM_0`, ...), registered once per symbol list.
pub(super) fn enum_table(symbols: &[String], enums: &mut Vec<Vec<String>>) -> proc_macro2::Ident {
    let index = match enums.iter().position(|e| e == symbols) {
        Some(i) => i,
        None => {
            enums.push(symbols.to_vec());
            enums.len() - 1
        }
    };
    format_ident!("ENUM_{}", index)
}
