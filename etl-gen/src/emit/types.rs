//! Per-type code: Rust value types, Avro decoding, RowBinary and NDJSON encoding.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};

use crate::ir::{RecordTy, Ty};
use crate::schema::AvroType;

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
        Ty::Int64 | Ty::TimestampMillis | Ty::TimestampMicros | Ty::TimestampNanos => quote!(i64),
        Ty::UInt32 => quote!(u32),
        Ty::UInt64 => quote!(u64),
        Ty::Float32 => quote!(f32),
        Ty::Float64 => quote!(f64),
        Ty::String => quote!(::std::borrow::Cow<#lt, str>),
        Ty::Bytes => quote!(::std::borrow::Cow<#lt, [u8]>),
        Ty::Enum { .. } => quote!(u32),
        Ty::Array(t) => {
            let t = rust_ty(t);
            quote!(::std::vec::Vec<#t>)
        }
        Ty::Map(t) => {
            let t = rust_ty(t);
            quote!(::std::vec::Vec<(::std::borrow::Cow<#lt, str>, #t)>)
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
        Ty::Uuid => quote!(u128),
    }
}

/// Whether values of `ty` borrow from the message (strings, bytes, map keys): a record struct
/// has a lifetime parameter only then (an unused one does not compile).
pub(super) fn borrows(ty: &Ty) -> bool {
    match ty {
        Ty::String | Ty::Bytes | Ty::Map(_) => true,
        Ty::Array(t) | Ty::Nullable(t) => borrows(t),
        Ty::Record(r) => r.fields.iter().any(|c| borrows(&c.ty)),
        _ => false,
    }
}

/// The struct name of a record nested in an array or map.
pub(super) fn record_ident(r: &RecordTy) -> proc_macro2::Ident {
    let short = r.name.rsplit('.').next().unwrap_or(&r.name);
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
        Ty::Array(t) | Ty::Map(t) | Ty::Nullable(t) => nested_records(t, out),
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

/// An expression that reads one value of `avro` from `buf` (a `&mut &[u8]` named `buf`).
pub(super) fn decode(avro: &AvroType) -> TokenStream {
    match avro {
        AvroType::Boolean => quote!(rt::avro::boolean(&mut buf)?),
        AvroType::Int | AvroType::Date => quote!(rt::avro::int(&mut buf)?),
        AvroType::Long | AvroType::TimestampMillis | AvroType::TimestampMicros => quote!(rt::avro::long(&mut buf)?),
        AvroType::Float => quote!(rt::avro::float(&mut buf)?),
        AvroType::Double => quote!(rt::avro::double(&mut buf)?),
        AvroType::String => quote!(::std::borrow::Cow::Borrowed(rt::avro::string(&mut buf)?)),
        AvroType::Bytes => quote!(::std::borrow::Cow::Borrowed(rt::avro::bytes(&mut buf)?)),
        AvroType::Uuid => quote!(rt::avro::uuid(rt::avro::string(&mut buf)?)?),
        AvroType::UInt32 | AvroType::UInt64 | AvroType::TimestampNanos => {
            unreachable!("Protobuf's types never come from an Avro schema")
        }
        AvroType::Enum { symbols, .. } => {
            let n = Literal::u32_unsuffixed(symbols.len() as u32);
            quote!(rt::avro::enum_index(&mut buf, #n)?)
        }
        AvroType::Decimal { fixed_size: None, .. } => quote!(rt::avro::decimal(rt::avro::bytes(&mut buf)?)?),
        AvroType::Decimal { fixed_size: Some(n), .. } => {
            let n = Literal::usize_unsuffixed(*n);
            quote!(rt::avro::decimal(rt::avro::fixed(&mut buf, #n)?)?)
        }
        AvroType::Nullable { inner, null_index } => {
            let null_index = Literal::u32_unsuffixed(u32::from(*null_index));
            if matches!(**inner, AvroType::Array(_) | AvroType::Map(_)) {
                // Its column is a plain Array or Map (ClickHouse has no Nullable(Array)): null
                // reads as empty.
                let inner = decode(inner);
                return quote!(if rt::avro::union_index(&mut buf, 2)? == #null_index { ::std::vec::Vec::new() } else { #inner });
            }
            let inner = decode(inner);
            quote!(if rt::avro::union_index(&mut buf, 2)? == #null_index { None } else { Some(#inner) })
        }
        AvroType::Array(item) => {
            let min_bytes = item.min_encoded_bytes();
            let min = Literal::u64_unsuffixed(min_bytes);
            let (total, count) = zero_size_guard(min_bytes);
            let item = decode(item);
            quote!({
                let mut items = ::std::vec::Vec::new();
                #total
                loop {
                    let n = rt::avro::block_count(&mut buf, #min)?;
                    #count
                    if n == 0 {
                        break items;
                    }
                    items.reserve(n);
                    for _ in 0..n {
                        items.push(#item);
                    }
                }
            })
        }
        AvroType::Map(value) => {
            // A key takes at least its length byte.
            let min = Literal::u64_unsuffixed(1 + value.min_encoded_bytes());
            let value = decode(value);
            quote!({
                let mut entries = ::std::vec::Vec::new();
                loop {
                    let n = rt::avro::block_count(&mut buf, #min)?;
                    if n == 0 {
                        // A key written twice keeps its last value, as Avro's readers do.
                        rt::avro::last_key_wins(&mut entries);
                        break entries;
                    }
                    entries.reserve(n);
                    for _ in 0..n {
                        let key = ::std::borrow::Cow::Borrowed(rt::avro::string(&mut buf)?);
                        entries.push((key, #value));
                    }
                }
            })
        }
        AvroType::Record(r) => {
            let ty = crate::ir::ty_of(avro);
            let Ty::Record(rt_ty) = ty else { unreachable!("a record converts to a record") };
            let name = record_ident(&rt_ty);
            let mut fields = Vec::new();
            record_fields(&r.fields, "", &mut fields);
            let inits = fields.iter().map(|(n, a)| {
                let id = field_ident(n);
                let d = decode(a);
                quote!(#id: #d)
            });
            // Struct literal fields are evaluated in the order written: the schema's order.
            quote!(#name { #(#inits,)* })
        }
    }
}

/// A statement that reads past one value of `avro` in `buf` without building it: the framing
/// (lengths, union and enum indexes, varints) is still checked, strings are not checked for
/// UTF-8 and nothing is allocated. For fields the chain never reads.
pub(super) fn skip(avro: &AvroType) -> TokenStream {
    match avro {
        AvroType::Boolean => quote!(rt::avro::boolean(&mut buf)?;),
        AvroType::Int | AvroType::Date => quote!(rt::avro::int(&mut buf)?;),
        AvroType::Long | AvroType::TimestampMillis | AvroType::TimestampMicros => quote!(rt::avro::long(&mut buf)?;),
        AvroType::UInt32 | AvroType::UInt64 | AvroType::TimestampNanos => {
            unreachable!("Protobuf's types never come from an Avro schema")
        }
        AvroType::Float => quote!(rt::avro::fixed(&mut buf, 4)?;),
        AvroType::Double => quote!(rt::avro::fixed(&mut buf, 8)?;),
        AvroType::String | AvroType::Bytes | AvroType::Uuid | AvroType::Decimal { fixed_size: None, .. } => {
            quote!(rt::avro::bytes(&mut buf)?;)
        }
        AvroType::Decimal { fixed_size: Some(n), .. } => {
            let n = Literal::usize_unsuffixed(*n);
            quote!(rt::avro::fixed(&mut buf, #n)?;)
        }
        AvroType::Enum { symbols, .. } => {
            let n = Literal::u32_unsuffixed(symbols.len() as u32);
            quote!(rt::avro::enum_index(&mut buf, #n)?;)
        }
        AvroType::Nullable { inner, null_index } => {
            let inner = skip(inner);
            let null_index = Literal::u32_unsuffixed(u32::from(*null_index));
            quote!(if rt::avro::union_index(&mut buf, 2)? != #null_index { #inner })
        }
        AvroType::Array(item) => skip_blocks(skip(item), item.min_encoded_bytes()),
        AvroType::Map(value) => {
            let min = 1 + value.min_encoded_bytes();
            let value = skip(value);
            skip_blocks(quote!(rt::avro::bytes(&mut buf)?; #value), min)
        }
        AvroType::Record(r) => {
            let fields = r.fields.iter().map(|f| skip(&f.ty));
            quote!(#(#fields)*)
        }
    }
}

/// For an array whose items take no bytes (empty records): a running total of its items and the
/// check that keeps it within the runtime's limit. Nothing for any other array.
fn zero_size_guard(min_item_bytes: u64) -> (TokenStream, TokenStream) {
    if min_item_bytes == 0 {
        (quote!(let mut total = 0u64;), quote!(rt::avro::zero_size_items(&mut total, n)?;))
    } else {
        (TokenStream::new(), TokenStream::new())
    }
}

/// Reads past the blocks of an array or map, `item` once per element (each of at least
/// `min_item_bytes`).
fn skip_blocks(item: TokenStream, min_item_bytes: u64) -> TokenStream {
    let min = Literal::u64_unsuffixed(min_item_bytes);
    let (total, count) = zero_size_guard(min_item_bytes);
    quote!(#total loop {
        let n = rt::avro::block_count(&mut buf, #min)?;
        #count
        if n == 0 {
            break;
        }
        for _ in 0..n {
            #item
        }
    })
}

/// The flattened fields of a record, in schema order, with their Avro types.
fn record_fields(fields: &[crate::schema::Field], prefix: &str, out: &mut Vec<(String, AvroType)>) {
    for f in fields {
        let name = if prefix.is_empty() { f.name.clone() } else { format!("{prefix}_{}", f.name) };
        match &f.ty {
            AvroType::Record(r) => record_fields(&r.fields, &name, out),
            other => out.push((name, other.clone())),
        }
    }
}

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
        Ty::Int64 | Ty::TimestampMillis | Ty::TimestampMicros | Ty::TimestampNanos => {
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
        Ty::String => {
            let r = v.receiver();
            quote!(rt::rowbinary::string(buf, #r.as_bytes());)
        }
        Ty::Bytes => {
            let r = v.receiver();
            quote!(rt::rowbinary::string(buf, &#r[..]);)
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
        Ty::Map(inner) => {
            let inner = rowbinary(inner, &x, enums);
            let r = v.receiver();
            quote!({
                rt::rowbinary::varint(buf, #r.len() as u64);
                for (k, x) in #r.iter() {
                    rt::rowbinary::string(buf, k.as_bytes());
                    #inner
                }
            })
        }
        Ty::Record(r) => {
            let parts = r.fields.iter().map(|c| rowbinary(&c.ty, &v.field(&field_ident(&c.name)), enums));
            quote!({ #(#parts)* })
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
        Ty::TimestampMillis => quote!(rt::json::timestamp(buf, #c, 3);),
        Ty::TimestampMicros => quote!(rt::json::timestamp(buf, #c, 6);),
        Ty::TimestampNanos => quote!(rt::json::timestamp(buf, #c, 9);),
        Ty::Date => quote!(rt::json::date(buf, #c);),
        Ty::Decimal { scale, .. } => {
            let s = Literal::u32_unsuffixed(*scale);
            quote!(rt::json::decimal(buf, #c, #s);)
        }
        Ty::Uuid => quote!(rt::json::uuid(buf, #c);),
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
        Ty::Map(inner) => {
            let inner = json(inner, &x, enums);
            let r = v.receiver();
            quote!({
                buf.push(b'{');
                for (i, (k, x)) in #r.iter().enumerate() {
                    if i > 0 {
                        buf.push(b',');
                    }
                    rt::json::string(buf, k);
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

/// How `rust_ty` reads in documentation: `Cow<'a, str>`, `Vec<i64>`, `Option<u32>`.
pub(super) fn rust_ty_doc(ty: &Ty) -> String {
    match ty {
        Ty::Bool => "bool".into(),
        Ty::Int32 | Ty::Date => "i32".into(),
        Ty::Int64 | Ty::TimestampMillis | Ty::TimestampMicros | Ty::TimestampNanos => "i64".into(),
        Ty::UInt32 => "u32".into(),
        Ty::UInt64 => "u64".into(),
        Ty::Float32 => "f32".into(),
        Ty::Float64 => "f64".into(),
        Ty::String => "Cow<'a, str>".into(),
        Ty::Bytes => "Cow<'a, [u8]>".into(),
        Ty::Enum { .. } => "u32 (symbol index)".into(),
        Ty::Array(t) => format!("Vec<{}>", rust_ty_doc(t)),
        Ty::Map(t) => format!("Vec<(Cow<'a, str>, {})>", rust_ty_doc(t)),
        Ty::Nullable(t) => format!("Option<{}>", rust_ty_doc(t)),
        Ty::Record(r) if borrows(ty) => format!("{}<'a>", record_ident(r)),
        Ty::Record(r) => record_ident(r).to_string(),
        Ty::Decimal { .. } => "i128 (unscaled)".into(),
        Ty::Uuid => "u128".into(),
    }
}
