//! The row encoders: the statements that write one value of an IR type as RowBinary (the
//! ClickHouse sink) or as JSON (the NDJSON file sink and dead letters), whatever format it was
//! read from.

use proc_macro2::{Literal, TokenStream};
use quote::quote;

use super::rust_types::{enum_table, field_ident, member_ident, variant_ident};
use crate::ir::{EnumColumn, Ty, enum_bits};

/// A value an encoder writes: a place (a local, or a field of one), or a reference to a value (a
/// loop or `match` binding). Knowing which keeps `*(&x)` and `(&x).iter()` out of generated code.
#[derive(Clone)]
pub(super) enum Val {
    /// An expression of type `T` that can be borrowed or, for `Copy` types, copied.
    Place(TokenStream),
    /// An expression of type `&T`.
    Ref(TokenStream),
}

impl Val {
    /// The value, for `Copy` types.
    fn copied(&self) -> TokenStream {
        match self {
            Val::Place(t) => t.clone(),
            Val::Ref(t) => quote!(*#t),
        }
    }

    /// A reference to the value.
    fn reference(&self) -> TokenStream {
        match self {
            Val::Place(t) => quote!(&#t),
            Val::Ref(t) => t.clone(),
        }
    }

    /// The value as a method receiver (auto-referenced or auto-dereferenced alike).
    fn receiver(&self) -> TokenStream {
        match self {
            Val::Place(t) | Val::Ref(t) => t.clone(),
        }
    }

    /// A field of a record value.
    fn field(&self, id: &proc_macro2::Ident) -> Val {
        let r = self.receiver();
        Val::Place(quote!(#r.#id))
    }
}

/// Statements that write `v` as RowBinary to `buf`.
pub(super) fn rowbinary(ty: &Ty, v: &Val, enums: &mut Vec<Vec<String>>) -> TokenStream {
    let x = Val::Ref(quote!(x));
    match ty {
        Ty::Bool => {
            let c = v.copied();
            quote!(rt::rowbinary::boolean(buf, #c);)
        }
        Ty::Int32 | Ty::Date => {
            let c = v.copied();
            quote!(rt::rowbinary::i32(buf, #c);)
        }
        Ty::Int64 | Ty::Timestamp(_) | Ty::Time(_) => {
            let c = v.copied();
            quote!(rt::rowbinary::i64(buf, #c);)
        }
        Ty::UInt32 => {
            let c = v.copied();
            quote!(rt::rowbinary::u32(buf, #c);)
        }
        Ty::UInt64 => {
            let c = v.copied();
            quote!(rt::rowbinary::u64(buf, #c);)
        }
        Ty::Float32 => {
            let c = v.copied();
            quote!(rt::rowbinary::f32(buf, #c);)
        }
        Ty::Float64 => {
            let c = v.copied();
            quote!(rt::rowbinary::f64(buf, #c);)
        }
        Ty::String | Ty::Json => {
            let r = v.receiver();
            quote!(rt::rowbinary::string(buf, #r.as_bytes());)
        }
        Ty::Bytes => {
            let r = v.receiver();
            quote!(rt::rowbinary::string(buf, &#r[..]);)
        }
        Ty::Enum { symbols, column: EnumColumn::Enum, .. } => {
            let bits = Literal::u32_unsuffixed(enum_bits(symbols.len()));
            let c = v.copied();
            quote!(rt::rowbinary::enum_index(buf, #bits, #c);)
        }
        Ty::Enum { symbols, .. } => {
            let table = enum_table(symbols, enums);
            let c = v.copied();
            quote!(rt::rowbinary::string(buf, #table[#c as usize].as_bytes());)
        }
        Ty::Decimal { precision, .. } => {
            let p = Literal::u32_unsuffixed(*precision);
            let c = v.copied();
            quote!(rt::rowbinary::decimal(buf, #p, #c);)
        }
        Ty::Uuid => {
            let c = v.copied();
            quote!(rt::rowbinary::uuid(buf, #c);)
        }
        Ty::Ipv4 => {
            let c = v.copied();
            quote!(rt::rowbinary::ipv4(buf, #c);)
        }
        Ty::Ipv6 => {
            let c = v.copied();
            quote!(rt::rowbinary::ipv6(buf, #c);)
        }
        Ty::Nullable(inner) => {
            let inner = rowbinary(inner, &x, enums);
            let r = v.reference();
            quote!(match #r {
                None => rt::rowbinary::null_marker(buf, true),
                Some(x) => {
                    rt::rowbinary::null_marker(buf, false);
                    #inner
                }
            })
        }
        Ty::Array(inner) => {
            let inner = rowbinary(inner, &x, enums);
            let r = v.receiver();
            quote!({
                rt::rowbinary::varint(buf, #r.len() as u64);
                for x in #r.iter() {
                    #inner
                }
            })
        }
        Ty::Map(key, inner) => {
            let key = rowbinary(key, &Val::Ref(quote!(k)), enums);
            let inner = rowbinary(inner, &x, enums);
            let r = v.receiver();
            quote!({
                rt::rowbinary::varint(buf, #r.len() as u64);
                for (k, x) in #r.iter() {
                    #key
                    #inner
                }
            })
        }
        Ty::Record(r) => {
            let parts = r.fields.iter().map(|c| rowbinary(&c.ty, &v.field(&field_ident(&c.name)), enums));
            quote!({ #(#parts)* })
        }
        // The member's number in ClickHouse's order, then its value; 255 is NULL.
        Ty::Variant(members) => {
            let name = variant_ident(ty);
            let arms = members.iter().enumerate().map(|(i, m)| {
                let id = member_ident(m);
                let d = Literal::u8_unsuffixed(i as u8);
                let inner = rowbinary(m, &x, enums);
                quote!(Some(#name::#id(x)) => { buf.push(#d); #inner })
            });
            let r = v.reference();
            quote!(match #r { None => buf.push(255), #(#arms)* })
        }
    }
}

/// Statements that write `v` as JSON to `buf`.
pub(super) fn json(ty: &Ty, v: &Val, enums: &mut Vec<Vec<String>>) -> TokenStream {
    let x = Val::Ref(quote!(x));
    let c = v.copied();
    match ty {
        Ty::Bool => quote!(rt::json::boolean(buf, #c);),
        Ty::Int32 => quote!(rt::json::int(buf, i64::from(#c));),
        Ty::Int64 => quote!(rt::json::int(buf, #c);),
        Ty::UInt32 => quote!(rt::json::uint(buf, u64::from(#c));),
        Ty::UInt64 => quote!(rt::json::uint(buf, #c);),
        Ty::Float32 => quote!(rt::json::float(buf, f64::from(#c));),
        Ty::Float64 => quote!(rt::json::float(buf, #c);),
        Ty::String => {
            let r = v.reference();
            quote!(rt::json::string(buf, #r);)
        }
        Ty::Bytes => {
            let r = v.reference();
            quote!(rt::json::bytes(buf, #r);)
        }
        Ty::Enum { symbols, .. } => {
            let table = enum_table(symbols, enums);
            quote!(rt::json::string(buf, #table[#c as usize]);)
        }
        Ty::Timestamp(unit) => {
            let digits = Literal::u32_unsuffixed(unit.digits());
            quote!(rt::json::timestamp(buf, #c, #digits);)
        }
        Ty::Date => quote!(rt::json::date(buf, #c);),
        Ty::Decimal { scale, .. } => {
            let s = Literal::u32_unsuffixed(*scale);
            quote!(rt::json::decimal(buf, #c, #s);)
        }
        Ty::Uuid => quote!(rt::json::uuid(buf, #c);),
        // Already a JSON object's text.
        Ty::Json => {
            let r = v.receiver();
            quote!(buf.extend_from_slice(#r.as_bytes());)
        }
        Ty::Time(unit) => {
            let digits = Literal::u32_unsuffixed(unit.digits());
            quote!(rt::json::time(buf, #c, #digits);)
        }
        Ty::Ipv4 => quote!(rt::json::ipv4(buf, #c);),
        Ty::Ipv6 => quote!(rt::json::ipv6(buf, #c);),
        Ty::Nullable(inner) => {
            let inner = json(inner, &x, enums);
            let r = v.reference();
            quote!(match #r {
                None => rt::json::null(buf),
                Some(x) => { #inner }
            })
        }
        Ty::Array(inner) => {
            let inner = json(inner, &x, enums);
            let r = v.receiver();
            quote!({
                buf.push(b'[');
                for (i, x) in #r.iter().enumerate() {
                    if i > 0 {
                        buf.push(b',');
                    }
                    #inner
                }
                buf.push(b']');
            })
        }
        Ty::Map(key, inner) => {
            // A JSON key is a string: a number or bool key is written in quotes.
            let key = match key.as_ref() {
                Ty::String => quote!(rt::json::string(buf, k);),
                other => {
                    let k = json(other, &Val::Ref(quote!(k)), enums);
                    quote!(buf.push(b'"'); #k buf.push(b'"');)
                }
            };
            let inner = json(inner, &x, enums);
            let r = v.receiver();
            quote!({
                buf.push(b'{');
                for (i, (k, x)) in #r.iter().enumerate() {
                    if i > 0 {
                        buf.push(b',');
                    }
                    #key
                    buf.push(b':');
                    #inner
                }
                buf.push(b'}');
            })
        }
        Ty::Record(r) => {
            let parts = r.fields.iter().enumerate().map(|(i, c)| {
                let id = field_ident(&c.name);
                let key = Literal::byte_string(format!("{}\"{}\":", if i == 0 { "{" } else { "," }, c.name).as_bytes());
                let value = json(&c.ty, &v.field(&id), enums);
                quote!(buf.extend_from_slice(#key); #value)
            });
            quote!({ #(#parts)* buf.push(b'}'); })
        }
        Ty::Variant(members) => {
            let name = variant_ident(ty);
            let arms = members.iter().map(|m| {
                let id = member_ident(m);
                let inner = json(m, &x, enums);
                quote!(Some(#name::#id(x)) => { #inner })
            });
            let r = v.reference();
            quote!(match #r { None => rt::json::null(buf), #(#arms)* })
        }
    }
}
