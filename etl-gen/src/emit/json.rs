//! The decoder of `format.json` pipelines: one pass over the document's keys, in whatever order
//! they come, dispatching each known key to the read its schema calls for.
//!
//! Each input field the chain reads gets a slot (`Option` of its value); the key loop fills
//! the slots, and afterwards each slot becomes the field's local: a required property that never
//! came is a record error naming it, an optional one is `None`, an absent array or map is empty.
//! Keys the schema does not know and fields the chain never reads fall to `skip`, which checks
//! the document's structure without building anything.

use std::collections::BTreeSet;

use proc_macro2::{Literal, TokenStream};
use quote::quote;

use super::expr::Scope;
use super::rust_types::{enum_table, field_ident, local_ty, member_ident, record_ident, variant_ident};
use crate::ir::{Column, RecordTy};
use crate::readers::json::{JField, JType};

/// The statements that decode the document in `buf` into one local per live input field
/// (registered in `scope`), ending with the check that nothing follows the document.
pub(super) fn decode(
    fields: &[JField],
    input: &[Column],
    live: &BTreeSet<String>,
    scope: &mut Scope,
    fresh: &mut impl FnMut(&str) -> proc_macro2::Ident,
    enums: &mut Vec<Vec<String>>,
) -> Vec<TokenStream> {
    let mut object = Object::default();
    object.members(fields, "", "", None, &|column| live.contains(column), fresh, enums);
    let checks = object.checks();
    let Object { decls, arms, slots, .. } = object;
    let mut out = vec![quote!(let mut doc = rt::json_read::Reader::new(buf);)];
    out.extend(decls);
    out.push(key_loop(&arms, ""));
    out.push(quote!(doc.end()?;));
    out.extend(checks);
    for slot in slots {
        let column = input.iter().find(|c| c.name == slot.column).expect("a slot per input column");
        let id = fresh(&slot.column);
        let ty = local_ty(&column.ty);
        let value = slot.finish();
        out.push(quote!(let #id: #ty = #value;));
        scope.insert(slot.column, id);
    }
    out
}

/// The loop over an object's keys, each known key's action run for its value, anything else
/// skipped.
fn key_loop(arms: &[(String, TokenStream)], path: &str) -> TokenStream {
    if arms.is_empty() {
        // No key is wanted: the object is read past whole.
        return quote!({
            doc.skip()?;
        });
    }
    // Keys JSON writes without escapes (nearly all) are matched by index, the next one guessed
    // from the last (see `Reader::next_known_key`); others by their unescaped bytes.
    let plain = arms.iter().all(|(k, _)| !k.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20));
    if plain {
        let keys = arms.iter().map(|(k, _)| {
            let k = Literal::byte_string(k.as_bytes());
            quote!(rt::json_read::Key::new(#k))
        });
        let cases = arms.iter().enumerate().map(|(i, (_, action))| {
            let i = Literal::usize_unsuffixed(i);
            quote!(#i => #action,)
        });
        quote!({
            const KEYS: &[rt::json_read::Key] = &[#(#keys),*];
            let mut seq = doc.begin_object(#path)?;
            let mut hint = 0;
            while let Some(key) = doc.next_known_key(&mut seq, #path, KEYS, &mut hint)? {
                match key {
                    #(#cases)*
                    _ => doc.skip()?,
                }
            }
        })
    } else {
        let cases = arms.iter().map(|(k, action)| {
            let k = Literal::byte_string(k.as_bytes());
            quote!(#k => #action,)
        });
        quote!({
            let mut seq = doc.begin_object(#path)?;
            while let Some(key) = doc.next_key(&mut seq, #path)? {
                match &*key {
                    #(#cases)*
                    _ => doc.skip()?,
                }
            }
        })
    }
}

/// What an absent, not required slot becomes.
enum Absent {
    /// `None` (the slot holds the `Option` a nullable column carries).
    Null,
    /// An empty array or map.
    Empty,
}

/// When a field's key must come.
enum Required {
    /// Never: absent, it is [`Absent`].
    No,
    /// Always: it is required, and so is every object above it.
    Always,
    /// When the object it belongs to is present (this flag is set): the object is optional or
    /// nullable, or lies below one that is (a required property of an optional object is required
    /// when the object is present).
    WhenPresent(proc_macro2::Ident),
}

/// One field's slot.
struct Slot {
    column: String,
    id: proc_macro2::Ident,
    path: String,
    absent: Absent,
    required: Required,
}

impl Slot {
    /// The field's value once the document is read: an absent required key is a record error
    /// naming it.
    fn finish(&self) -> TokenStream {
        let (id, path) = (&self.id, &self.path);
        let fallback = match self.absent {
            Absent::Null => quote!(None),
            Absent::Empty => quote!(::std::vec::Vec::new()),
        };
        match &self.required {
            Required::Always => quote!(#id.ok_or_else(|| rt::json_read::missing(#path))?),
            Required::WhenPresent(present) => quote!(match #id {
                Some(value) => value,
                None if #present => return Err(rt::json_read::missing(#path).into()),
                None => #fallback,
            }),
            Required::No => match self.absent {
                Absent::Null => quote!(#id.flatten()),
                Absent::Empty => quote!(#id.unwrap_or_default()),
            },
        }
    }
}

/// The slots and key arms of one object, nested objects flattened into it.
#[derive(Default)]
struct Object {
    decls: Vec<TokenStream>,
    /// `(key, what to do with its value)`, in schema order.
    arms: Vec<(String, TokenStream)>,
    slots: Vec<Slot>,
    /// The presence flags of the optional objects flattened into this one, and the flags that
    /// say a required object's key came: cleared when an enclosing object's key comes again.
    flags: Vec<proc_macro2::Ident>,
    /// `(flag, path, parent)`: a required object's key must have come (when its parent, if it
    /// has a presence flag, is present).
    checks: Vec<(proc_macro2::Ident, String, Option<proc_macro2::Ident>)>,
}

impl Object {
    /// The statements that make an absent required object a record error naming it.
    fn checks(&self) -> Vec<TokenStream> {
        self.checks
            .iter()
            .map(|(seen, path, parent)| {
                let when = match parent {
                    Some(flag) => quote!(#flag && !#seen),
                    None => quote!(!#seen),
                };
                quote!(if #when {
                    return Err(rt::json_read::missing(#path).into());
                })
            })
            .collect()
    }
}

impl Object {
    /// Adds `fields` (their columns prefixed with `prefix`, their paths with `path`). `present`
    /// is the presence flag of the nearest enclosing object that may be absent or null (`None`
    /// when there is none): every field below such an object is optional, and its required ones
    /// are required when the object is present.
    #[allow(clippy::too_many_arguments)]
    fn members(
        &mut self,
        fields: &[JField],
        prefix: &str,
        path: &str,
        present: Option<&proc_macro2::Ident>,
        live: &dyn Fn(&str) -> bool,
        fresh: &mut impl FnMut(&str) -> proc_macro2::Ident,
        enums: &mut Vec<Vec<String>>,
    ) {
        for f in fields {
            let column = if prefix.is_empty() { f.name.clone() } else { format!("{prefix}_{}", f.name) };
            let field_path = if path.is_empty() { f.key.clone() } else { format!("{path}.{}", f.key) };
            let nullable = matches!(f.ty, JType::Nullable(_));
            let optional = present.is_some() || !f.required || nullable;
            let required = match (f.required, present) {
                (false, _) => Required::No,
                (true, None) => Required::Always,
                (true, Some(flag)) => Required::WhenPresent(flag.clone()),
            };
            match f.ty.non_null() {
                JType::Object { fields: children, .. } => {
                    // An object that must come whenever its parent does shares the parent's flag;
                    // one that may be absent or null has a flag of its own.
                    let own = (!f.required || nullable).then(|| fresh(&format!("present_{column}")));
                    let flag = own.as_ref().or(present);
                    let mut inner = Object::default();
                    inner.members(children, &column, &field_path, flag, live, fresh, enums);
                    if inner.slots.is_empty() {
                        continue;
                    }
                    // A required object's key must come, even as null (JSON Schema's `required`
                    // is about keys), when its parent does.
                    let seen = f.required.then(|| fresh(&format!("seen_{column}")));
                    // The flag is kept only if a required field or object below reads it.
                    let own = own.filter(|flag| {
                        inner.slots.iter().any(|s| matches!(&s.required, Required::WhenPresent(f) if f == flag))
                            || inner.checks.iter().any(|(_, _, parent)| parent.as_ref() == Some(flag))
                    });
                    let body = key_loop(&inner.arms, &field_path);
                    // A key that comes again replaces the object (the last one wins, as JSON
                    // readers read it): what an earlier one set is cleared first.
                    let clear_slots = inner.slots.iter().map(|s| &s.id);
                    let clear_flags = inner.flags.iter();
                    let arrive = match &own {
                        Some(flag) => quote!(#flag = !doc.null(); if #flag #body),
                        // A null object leaves its fields absent.
                        None => quote!(if !doc.null() #body),
                    };
                    let arrive = match &seen {
                        Some(seen) => quote!(#seen = true; #arrive),
                        None => arrive,
                    };
                    self.decls.extend(inner.decls);
                    if let Some(seen) = seen {
                        self.decls.push(quote!(let mut #seen = false;));
                        self.flags.push(seen.clone());
                        self.checks.push((seen, field_path.clone(), present.cloned()));
                    }
                    self.checks.extend(inner.checks);
                    if let Some(flag) = &own {
                        self.decls.push(quote!(let mut #flag = false;));
                        self.flags.push(flag.clone());
                    }
                    self.arms.push((
                        f.key.clone(),
                        quote!({
                            #(#clear_slots = None;)*
                            #(#clear_flags = false;)*
                            #arrive
                        }),
                    ));
                    self.slots.extend(inner.slots);
                    self.flags.extend(inner.flags);
                }
                t if live(&column) => {
                    let id = fresh(&format!("slot_{column}"));
                    let read = value(t, &field_path, fresh, enums);
                    let (absent, store) = match t {
                        // ClickHouse has no Nullable(Array): null reads as empty.
                        JType::Array(_) | JType::Map(_) => (
                            Absent::Empty,
                            quote!(#id = Some(if doc.null() { ::std::vec::Vec::new() } else { #read });),
                        ),
                        // Its value is an Option already (null: the variant's NULL).
                        JType::Variant(_) if optional => {
                            (Absent::Null, quote!(#id = Some(if doc.null() { None } else { #read });))
                        }
                        _ if optional => {
                            (Absent::Null, quote!(#id = Some(if doc.null() { None } else { Some(#read) });))
                        }
                        _ => (Absent::Null, quote!(#id = Some(#read);)),
                    };
                    self.decls.push(quote!(let mut #id = None;));
                    self.arms.push((f.key.clone(), quote!({ #store })));
                    self.slots.push(Slot { column, id, path: field_path, absent, required });
                }
                _ => {}
            }
        }
    }
}

/// A Variant's value: the member the value's kind picks (`Some(VariantX::Int64(..))`); a value no
/// member takes (`null` included: a nullable variant reads it before) is a record error.
fn variant(
    members: &[JType],
    path: &str,
    fresh: &mut impl FnMut(&str) -> proc_macro2::Ident,
    enums: &mut Vec<Vec<String>>,
) -> TokenStream {
    let ty = crate::readers::json::column_type(&JType::Variant(members.to_vec()));
    let name = variant_ident(&ty);
    let member = |m: &JType| member_ident(&crate::readers::json::column_type(m));
    let number = members.iter().find(|m| **m == JType::Number);
    let mut arms = Vec::new();
    let mut expected = Vec::new();
    for m in members {
        let (id, read) = (member(m), value(m, path, fresh, enums));
        match m {
            JType::Boolean => {
                expected.push("a boolean");
                arms.push((1, quote!(rt::json_read::Kind::Bool => Some(#name::#id(#read)),)));
            }
            JType::Integer if number.is_some() => {
                expected.push("an integer");
                // Before the number's arm, which takes the rest.
                arms.push((0, quote!(rt::json_read::Kind::Number if doc.integral() => Some(#name::#id(#read)),)));
            }
            JType::Integer | JType::Number => {
                expected.push(if *m == JType::Integer { "an integer" } else { "a number" });
                arms.push((1, quote!(rt::json_read::Kind::Number => Some(#name::#id(#read)),)));
            }
            _ => {
                expected.push("a string");
                arms.push((1, quote!(rt::json_read::Kind::String => Some(#name::#id(#read)),)));
            }
        }
    }
    arms.sort_by_key(|(order, _)| *order);
    let arms = arms.into_iter().map(|(_, arm)| arm);
    let expected = format!("expected {}", expected.join(" or "));
    quote!(match doc.kind() {
        #(#arms)*
        _ => return Err(doc.not_a_member(#path, #expected).into()),
    })
}

/// An expression that reads one value of `t` (never absent: a container's element, or a present
/// key's value).
fn value(
    t: &JType,
    path: &str,
    fresh: &mut impl FnMut(&str) -> proc_macro2::Ident,
    enums: &mut Vec<Vec<String>>,
) -> TokenStream {
    match t {
        JType::Integer => quote!(doc.i64(#path)?),
        JType::Number => quote!(doc.f64(#path)?),
        JType::Boolean => quote!(doc.boolean(#path)?),
        JType::String => quote!(doc.string(#path)?),
        JType::DateTime => quote!(doc.timestamp_micros(#path)?),
        JType::Date => quote!(doc.date(#path)?),
        JType::Uuid => quote!(doc.uuid(#path)?),
        JType::Ipv4 => quote!(doc.ipv4(#path)?),
        JType::Json => quote!(doc.json_object(#path)?),
        JType::Ipv6 => quote!(doc.ipv6(#path)?),
        JType::Enum { symbols, .. } => {
            // Registered for the encoders, which write symbols from the same table.
            enum_table(symbols, enums);
            let cases = symbols.iter().enumerate().map(|(i, s)| {
                let (s, i) = (Literal::byte_string(s.as_bytes()), Literal::u32_unsuffixed(i as u32));
                quote!(#s => Some(#i),)
            });
            quote!(doc.symbol_by(#path, |text| match text { #(#cases)* _ => None })?)
        }
        // A variant's value is already an Option: null is its own NULL.
        JType::Nullable(inner) if matches!(**inner, JType::Variant(_)) => {
            let inner = value(inner, path, fresh, enums);
            quote!(if doc.null() { None } else { #inner })
        }
        JType::Nullable(inner) => {
            let inner = value(inner, path, fresh, enums);
            quote!(if doc.null() { None } else { Some(#inner) })
        }
        JType::Variant(members) => variant(members, path, fresh, enums),
        JType::Array(item) => {
            let item_path = format!("{path}[]");
            let item = value(item, &item_path, fresh, enums);
            quote!({
                let mut items = ::std::vec::Vec::new();
                let mut seq = doc.begin_array(#path)?;
                while doc.next_item(&mut seq, #path)? {
                    items.push(#item);
                }
                items
            })
        }
        JType::Map(v) => {
            let value_path = format!("{path}{{}}");
            let v = value(v, &value_path, fresh, enums);
            // A key that repeats keeps its last value, as JSON readers read it.
            quote!({
                let mut entries = ::std::vec::Vec::new();
                let mut seq = doc.begin_object(#path)?;
                while let Some(key) = doc.next_map_key(&mut seq, #path)? {
                    let value = #v;
                    entries.push((key, value));
                }
                rt::json_read::last_key_wins(&mut entries);
                entries
            })
        }
        JType::Object { name, fields } => {
            // A record inside a container: every field is built (the struct has them all).
            let mut object = Object::default();
            object.members(fields, "", path, None, &|_| true, fresh, enums);
            let checks = object.checks();
            let Object { decls, arms, slots, .. } = object;
            let body = key_loop(&arms, path);
            let rec = RecordTy { name: name.clone(), fields: Vec::new() };
            let ident = record_ident(&rec);
            let inits = slots.iter().map(|s| {
                let member = field_ident(&s.column);
                let v = s.finish();
                quote!(#member: #v)
            });
            quote!({
                #(#decls)*
                #body
                #(#checks)*
                #ident { #(#inits,)* }
            })
        }
    }
}

/// The registry client of a JSON pipeline: it judges each writer JSON Schema the registry has
/// against `READER_SCHEMA`, the reader schema's text.
pub(super) fn registry_client(schema_text: &str, timeout: &TokenStream) -> (TokenStream, TokenStream) {
    (
        quote!(
            /// The reader JSON Schema, for judging the writer schemas the registry has.
            const READER_SCHEMA: &str = #schema_text;
        ),
        quote!(rt::Registry::json(url, READER_SCHEMA, SCHEMA_IDS, #timeout)),
    )
}
