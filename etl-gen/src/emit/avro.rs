//! The Avro decoder: statements that read the pipeline's input row from an Avro datum, walking
//! the reader's [`AvroRecord`] (the binary encoding needs its union branch indexes and fixed
//! sizes, which the IR does not carry), and skip the fields the chain never reads.

use std::collections::BTreeSet;

use proc_macro2::{Literal, TokenStream};
use quote::quote;

use super::expr::Scope;
use super::rust_types::{field_ident, local_ty, member_ident, record_ident_named, variant_ident};
use crate::ir::{Column, Ty, flat_name};
use crate::model::Wire;
use crate::readers::avro::{AvroField, AvroRecord, AvroType};

/// An expression that reads one value of `avro` from `buf` (a `&mut &[u8]` named `buf`).
fn decode(avro: &AvroType) -> TokenStream {
    match avro {
        AvroType::Boolean => quote!(rt::avro::boolean(&mut buf)?),
        AvroType::Int | AvroType::Date => quote!(rt::avro::int(&mut buf)?),
        AvroType::Long | AvroType::TimestampMillis | AvroType::TimestampMicros | AvroType::TimeMicros => {
            quote!(rt::avro::long(&mut buf)?)
        }
        // Time64(3) is Int64 ticks in both insert formats.
        AvroType::TimeMillis => quote!(i64::from(rt::avro::int(&mut buf)?)),
        AvroType::Float => quote!(rt::avro::float(&mut buf)?),
        AvroType::Double => quote!(rt::avro::double(&mut buf)?),
        AvroType::String => quote!(::std::borrow::Cow::Borrowed(rt::avro::string(&mut buf)?)),
        AvroType::Bytes => quote!(::std::borrow::Cow::Borrowed(rt::avro::bytes(&mut buf)?)),
        AvroType::Uuid => quote!(rt::avro::uuid(rt::avro::string(&mut buf)?)?),
        AvroType::Json => quote!(rt::avro::json_object(rt::avro::string(&mut buf)?)?),
        AvroType::Variant { branches } => {
            let name = variant_ident(&crate::readers::avro::column_ty(avro));
            let n = Literal::u32_unsuffixed(branches.len() as u32);
            let arms = branches.iter().enumerate().map(|(i, b)| {
                let i = Literal::u32_unsuffixed(i as u32);
                match b {
                    None => quote!(#i => None,),
                    Some(t) => {
                        let id = member_ident(&crate::readers::avro::column_ty(t));
                        let read = decode(t);
                        quote!(#i => Some(#name::#id(#read)),)
                    }
                }
            });
            quote!(match rt::avro::union_index(&mut buf, #n)? { #(#arms)* _ => unreachable!("union_index checks the range") })
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
            let name = record_ident_named(&r.name);
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
fn skip(avro: &AvroType) -> TokenStream {
    match avro {
        AvroType::Boolean => quote!(rt::avro::boolean(&mut buf)?;),
        AvroType::Int | AvroType::Date | AvroType::TimeMillis => quote!(rt::avro::int(&mut buf)?;),
        AvroType::Long | AvroType::TimestampMillis | AvroType::TimestampMicros | AvroType::TimeMicros => {
            quote!(rt::avro::long(&mut buf)?;)
        }
        AvroType::Float => quote!(rt::avro::fixed(&mut buf, 4)?;),
        AvroType::Double => quote!(rt::avro::fixed(&mut buf, 8)?;),
        AvroType::String
        | AvroType::Bytes
        | AvroType::Uuid
        | AvroType::Json
        | AvroType::Decimal { fixed_size: None, .. } => {
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
        AvroType::Variant { branches } => {
            let n = Literal::u32_unsuffixed(branches.len() as u32);
            let arms = branches.iter().enumerate().filter_map(|(i, b)| {
                let i = Literal::u32_unsuffixed(i as u32);
                b.as_ref().map(|t| {
                    let skip = skip(t);
                    quote!(#i => { #skip })
                })
            });
            quote!(match rt::avro::union_index(&mut buf, #n)? { #(#arms)* _ => {} })
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
fn record_fields(fields: &[AvroField], prefix: &str, out: &mut Vec<(String, AvroType)>) {
    for f in fields {
        let name = flat_name(prefix, &f.name);
        match &f.ty {
            AvroType::Record(r) => record_fields(&r.fields, &name, out),
            other => out.push((name, other.clone())),
        }
    }
}
/// The Avro decoder of the input row: one local per field in `live` (registered in `scope`), the
/// other fields read past, then the check that the datum was read to its end.
pub(super) fn decode_row(
    record: &AvroRecord,
    input: &[Column],
    live: &BTreeSet<String>,
    scope: &mut Scope,
    fresh: &mut impl FnMut(&str) -> proc_macro2::Ident,
) -> Vec<TokenStream> {
    let mut walk = Walk { input, live, fresh };
    let mut stmts = Vec::new();
    walk.fields(&record.fields, "", false, &mut stmts, scope);
    stmts.push(quote!(rt::avro::end(buf)?;));
    stmts
}

/// What reading the fields needs besides the fields: the input row (for the locals' types), the
/// fields the chain reads, and fresh local names.
struct Walk<'a, F> {
    input: &'a [Column],
    live: &'a BTreeSet<String>,
    fresh: &'a mut F,
}

impl<F: FnMut(&str) -> proc_macro2::Ident> Walk<'_, F> {
    /// Reads `fields` in schema order, flattened under `prefix` as `ir::input_row` flattens them;
    /// `below_null` says a nullable record lies above, which wraps values in `Some`.
    fn fields(
        &mut self,
        fields: &[AvroField],
        prefix: &str,
        below_null: bool,
        out: &mut Vec<TokenStream>,
        scope: &mut Scope,
    ) {
        for f in fields {
            let column = flat_name(prefix, &f.name);
            match &f.ty {
                AvroType::Record(r) => self.fields(&r.fields, &column, below_null, out, scope),
                AvroType::Nullable { inner, null_index } if matches!(**inner, AvroType::Record(_)) => {
                    let AvroType::Record(r) = &**inner else { unreachable!("matched a record") };
                    self.nullable_record(r, &column, *null_index, out, scope);
                }
                // Not read by the chain: read past, not built (no UTF-8 check of its strings, no
                // allocation for its containers).
                leaf if !self.live.contains(&column) => out.push(skip(leaf)),
                leaf => {
                    let id = (self.fresh)(&column);
                    let ty =
                        self.input.iter().find(|c| c.name == column).map(|c| local_ty(&c.ty)).expect("input column");
                    let d = decode(leaf);
                    let d = if below_null
                        && !matches!(leaf, AvroType::Nullable { .. } | AvroType::Array(_) | AvroType::Map(_))
                    {
                        quote!(Some(#d))
                    } else {
                        d
                    };
                    out.push(quote!(let #id: #ty = #d;));
                    scope.insert(column, id);
                }
            }
        }
    }

    /// `["null", record]`: the union index is read first, and when it is null every column below
    /// is NULL (arrays and maps empty).
    fn nullable_record(
        &mut self,
        r: &AvroRecord,
        column: &str,
        null_index: u8,
        out: &mut Vec<TokenStream>,
        scope: &mut Scope,
    ) {
        let mut present = Vec::new();
        let mut inner_scope = Scope::default();
        self.fields(&r.fields, column, true, &mut present, &mut inner_scope);
        let mut outer = Vec::new();
        let mut absent = Vec::new();
        let mut inner = Vec::new();
        // In input order, so the generated code does not depend on hashing.
        for (column, id, ty) in
            self.input.iter().filter_map(|c| inner_scope.get(&c.name).map(|id| (&c.name, id, &c.ty)))
        {
            let id_outer = (self.fresh)(column);
            absent.push(match ty {
                Ty::Array(_) | Ty::Map(..) => quote!(::std::vec::Vec::new()),
                _ => quote!(None),
            });
            inner.push(id.clone());
            scope.insert(column.clone(), id_outer.clone());
            outer.push(id_outer);
        }
        let n = Literal::u32_unsuffixed(u32::from(null_index));
        if outer.is_empty() {
            // Nothing below is read: the record's fields are skipped when it is there.
            out.push(quote!(if rt::avro::union_index(&mut buf, 2)? != #n {
                #(#present)*
            }));
        } else {
            // One tuple binding, set by both branches: NULL (or empty) when the record is null,
            // read when it is there. The read branch's locals carry the types.
            out.push(quote!(let (#(#outer,)*) = if rt::avro::union_index(&mut buf, 2)? == #n {
                (#(#absent,)*)
            } else {
                #(#present)*
                (#(#inner,)*)
            };));
        }
    }
}

/// The framing of an Avro payload: the statements that leave the datum in `buf`, for the chain
/// and for the decoder's benchmark (which takes the writer schema to be the reader's). With a
/// registry (its URL may resolve to empty at run time: then none), a writer schema that differs
/// from the reader schema is resolved and the datum re-encoded first; without one only the
/// reader schema's own ids can be decoded.
pub(super) fn framing(format: &crate::model::Selected<'_>) -> (TokenStream, TokenStream) {
    match format.wire {
        Wire::Raw => (quote!(let mut buf = payload;), quote!(let mut buf = payload;)),
        Wire::Confluent => {
            let chain = if format.uses_registry() {
                quote!(
                    let (schema_id, datum) = rt::avro::confluent(payload)?;
                    let resolved;
                    let mut buf = match &self.registry {
                        Some(registry) => {
                            resolved = registry.resolve(schema_id, datum)?;
                            resolved.bytes()
                        }
                        None => {
                            rt::avro::reader_schema_id(schema_id, SCHEMA_IDS)?;
                            datum
                        }
                    };
                )
            } else {
                quote!(
                    let (schema_id, mut buf) = rt::avro::confluent(payload)?;
                    rt::avro::reader_schema_id(schema_id, SCHEMA_IDS)?;
                )
            };
            (chain, quote!(let (_schema_id, mut buf) = rt::avro::confluent(payload)?;))
        }
    }
}

/// The registry client of an Avro pipeline: it compares writers with `SCHEMA`, the reader
/// schema's text, and resolves their datums to it.
pub(super) fn registry_client(timeout: &TokenStream) -> (TokenStream, TokenStream) {
    (TokenStream::new(), quote!(rt::Registry::new(url, SCHEMA, SCHEMA_IDS, #timeout)))
}
