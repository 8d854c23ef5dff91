//! The decoder of `format.protobuf` pipelines: one loop over the message's tags, dispatching
//! each field number the chain reads to the read its type calls for.
//!
//! Each input field the chain reads is a local that starts at the field's default (proto3's
//! zero, `None` for a field with presence, an empty array or map) and is overwritten as its
//! field arrives, so the last occurrence wins and a nested message that comes twice is merged,
//! as Protobuf specifies. Numbers the schema does not know, and fields the chain never reads,
//! fall to `skip`, which reads past them by their wire type.

use std::collections::BTreeSet;

use proc_macro2::{Ident, Literal, TokenStream};
use quote::{format_ident, quote};

use super::expr::Scope;
use super::rust_types::{enum_table, field_ident, local_ty};
use crate::ir::Column;
use crate::readers::protobuf::{self as reader, PField, PType, Scalar, record_name};

/// The statements that decode the message in `buf` into one local per live input field
/// (registered in `scope`). With the Confluent framing, `indexes` is the message-index path the
/// frame must carry.
pub(super) fn decode(
    fields: &[PField],
    indexes: Option<&[i32]>,
    input: &[Column],
    live: &BTreeSet<String>,
    scope: &mut Scope,
    fresh: &mut impl FnMut(&str) -> Ident,
    enums: &mut Vec<Vec<String>>,
) -> Vec<TokenStream> {
    let reader = format_ident!("pb");
    let mut message = Message::default();
    let mut cx = Cx { live: &|column| live.contains(column), fresh, enums };
    message.members(fields, "", "", false, &reader, 0, &mut cx);
    let mut out = vec![quote!(let mut #reader = rt::proto_read::Reader::new(buf);)];
    if let Some(indexes) = indexes {
        let indexes = indexes.iter().map(|i| Literal::i32_unsuffixed(*i));
        out.push(quote!(#reader.message_indexes(&[#(#indexes),*])?;));
    }
    for slot in &message.slots {
        let column = input.iter().find(|c| c.name == slot.column).expect("a slot per input column");
        let (id, ty, default) = (&slot.id, local_ty(&column.ty), &slot.default);
        out.push(quote!(let mut #id: #ty = #default;));
    }
    out.push(tag_loop(&message.arms, &reader));
    out.extend(message.finish);
    for slot in message.slots {
        scope.insert(slot.column, slot.id);
    }
    out
}

/// What `members` needs from its caller, bundled.
struct Cx<'c, F> {
    live: &'c dyn Fn(&str) -> bool,
    fresh: &'c mut F,
    enums: &'c mut Vec<Vec<String>>,
}

/// The loop over a message's tags: each known number's action, anything else skipped.
///
/// A known number that arrives with a wire type its field cannot have is an unknown field, as
/// Google's parsers treat it: skipped, the field left as it was (and a oneof's other members
/// untouched). Hence each arm's guard on `wire`.
fn tag_loop(arms: &[(u32, TokenStream)], reader: &Ident) -> TokenStream {
    if arms.is_empty() {
        // Nothing is wanted; the tags are still walked, so a malformed message is an error.
        return quote!(while let Some((_, wire)) = #reader.tag()? {
            #reader.skip(wire)?;
        });
    }
    let cases = arms.iter().map(|(n, action)| {
        let n = Literal::u32_unsuffixed(*n);
        quote!(#n #action,)
    });
    quote!(while let Some((number, wire)) = #reader.tag()? {
        match number {
            #(#cases)*
            _ => #reader.skip(wire)?,
        }
    })
}

/// The locals a field writes, each with its default.
type Resets = Vec<(Ident, TokenStream)>;

/// One local of the message being decoded.
struct Slot {
    column: String,
    id: Ident,
    default: TokenStream,
}

/// The slots and tag arms of one message, its nested messages flattened into it.
#[derive(Default)]
struct Message {
    /// `(field number, what to do with its value)`, in schema order; each action a match arm's
    /// guard and body (`if wire == ... => ...`).
    arms: Vec<(u32, TokenStream)>,
    slots: Vec<Slot>,
    /// What runs when this message arrives, if it sits below a field with presence: each field
    /// without presence of its own goes from `None` (message absent) to its default.
    arrival: Vec<TokenStream>,
    /// What runs after the tag loop: each map keeps the last entry of a repeated key.
    finish: Vec<TokenStream>,
}

impl Message {
    /// Adds `fields` (their columns prefixed with `prefix`, their paths with `path`), read from
    /// `reader`; `optional` says a message above has presence, which makes every field nullable.
    #[allow(clippy::too_many_arguments)]
    fn members<F: FnMut(&str) -> Ident>(
        &mut self,
        fields: &[PField],
        prefix: &str,
        path: &str,
        optional: bool,
        reader: &Ident,
        depth: usize,
        cx: &mut Cx<'_, F>,
    ) {
        // Per field: its number, its oneof, its action, and the slots it writes with their
        // defaults (to which the other members of its oneof reset them).
        let mut built: Vec<(u32, Option<usize>, TokenStream, Resets)> = Vec::new();
        for f in fields {
            let column = if prefix.is_empty() { f.name.clone() } else { format!("{prefix}_{}", f.name) };
            let field_path = if path.is_empty() { f.name.clone() } else { format!("{path}.{}", f.name) };
            let nullable = optional || f.presence;
            match &f.ty {
                PType::Message { fields: children, .. } if !f.repeated => {
                    let mut inner = Message::default();
                    let sub = format_ident!("m{}", depth + 1);
                    inner.members(children, &column, &field_path, nullable, &sub, depth + 1, cx);
                    if inner.slots.is_empty() {
                        if f.oneof.is_some() {
                            // Not read, but its arrival still unsets the other members.
                            built.push((f.number, f.oneof, quote!(#reader.skip(wire)?), Vec::new()));
                        }
                        continue;
                    }
                    let body = tag_loop(&inner.arms, &sub);
                    let arrival = &inner.arrival;
                    let action = quote!({
                        #(#arrival)*
                        let mut #sub = #reader.message(wire, #field_path)?;
                        #body
                    });
                    let ids = inner.slots.iter().map(|s| (s.id.clone(), s.default.clone())).collect();
                    self.finish.extend(inner.finish);
                    if optional && !f.presence {
                        // A message without presence below one that has it: its fields take their
                        // defaults when the message above arrives, as its own do.
                        self.arrival.extend(inner.arrival.iter().cloned());
                    }
                    self.slots.extend(inner.slots);
                    built.push((f.number, f.oneof, action, ids));
                }
                t if (cx.live)(&column) => {
                    let id = (cx.fresh)(&format!("field_{column}"));
                    let (default, action) = if f.repeated {
                        (quote!(::std::vec::Vec::new()), repeated(t, &id, reader, &field_path, depth, cx))
                    } else if let PType::Map { key, value } = t {
                        self.finish.push(quote!(rt::proto_read::last_key_wins(&mut #id);));
                        (quote!(::std::vec::Vec::new()), map_entry(*key, value, &id, reader, &field_path, depth, cx))
                    } else {
                        let wrapper = matches!(t, PType::Wrapper(_) | PType::JsonValue);
                        let nullable = wrapper || f.presence || optional;
                        // A Timestamp or wrapper that comes twice is merged, as a message is: it
                        // starts from the value so far.
                        let so_far = if nullable { quote!(#id.take().unwrap_or_default()) } else { quote!(#id) };
                        let read = match t {
                            PType::Timestamp => quote!(#reader.timestamp_nanos(wire, #field_path, #so_far)?),
                            PType::Struct => quote!(#reader.json_struct(wire, #field_path, #so_far)?),
                            // Already an Option: NULL for null_value.
                            PType::JsonValue => {
                                let read = quote!(#reader.json_value(wire, #field_path, #id.take())?);
                                self.slots.push(Slot { column: column.clone(), id: id.clone(), default: quote!(None) });
                                built.push((f.number, f.oneof, quote!(#id = #read), vec![(id, quote!(None))]));
                                continue;
                            }
                            PType::Wrapper(s) => {
                                let method = format_ident!("{}", s.name());
                                let element = element_wire(*s);
                                quote!(#reader.wrapper(wire, #field_path, #so_far, #element, rt::proto_read::Reader::#method)?)
                            }
                            t => value(t, reader, &field_path, depth, cx),
                        };
                        if wrapper || f.presence {
                            (quote!(None), quote!(#id = Some(#read)))
                        } else if optional {
                            let default = default(t, cx);
                            self.arrival.push(quote!(if #id.is_none() { #id = Some(#default); }));
                            (quote!(None), quote!(#id = Some(#read)))
                        } else {
                            (default(t, cx), quote!(#id = #read))
                        }
                    };
                    self.slots.push(Slot { column, id: id.clone(), default: default.clone() });
                    built.push((f.number, f.oneof, action, vec![(id, default)]));
                }
                // Not read, but its arrival still unsets the other members.
                _ if f.oneof.is_some() => built.push((f.number, f.oneof, quote!(#reader.skip(wire)?), Vec::new())),
                _ => {}
            }
        }
        for (number, oneof, action, _) in &built {
            // The last member of a oneof to arrive is the one set.
            let clears: Vec<TokenStream> = built
                .iter()
                .filter(|(n, o, _, _)| oneof.is_some() && o == oneof && n != number)
                .flat_map(|(_, _, _, ids)| ids)
                .map(|(id, default)| quote!(#id = #default;))
                .collect();
            let action = if clears.is_empty() { action.clone() } else { quote!({ #(#clears)* #action }) };
            let field = fields.iter().find(|f| f.number == *number).expect("an arm per field");
            let guard = wire_guard(field);
            self.arms.push((*number, quote!(#guard => #action)));
        }
    }
}

/// The guard of a field's arm: the wire types it may arrive with. A repeated packable field
/// takes both its element's and the packed form's, which `Reader::repeated` tells apart (and
/// skips anything else).
fn wire_guard(f: &PField) -> TokenStream {
    match &f.ty {
        PType::Scalar(s) if f.repeated && s.packable() => quote!(),
        PType::Enum { .. } if f.repeated => quote!(),
        t => {
            let wire = value_wire(t);
            quote!(if wire == #wire)
        }
    }
}

/// The wire type a single value of `t` arrives with.
fn value_wire(t: &PType) -> TokenStream {
    match t {
        PType::Scalar(s) => element_wire(*s),
        PType::Enum { .. } => quote!(rt::proto_read::VARINT),
        PType::Timestamp
        | PType::Struct
        | PType::JsonValue
        | PType::Wrapper(_)
        | PType::Message { .. }
        | PType::Map { .. } => quote!(rt::proto_read::LEN),
    }
}

/// The default of a value of `t` without presence: proto3's zero.
fn default<F: FnMut(&str) -> Ident>(t: &PType, cx: &mut Cx<'_, F>) -> TokenStream {
    match t {
        PType::Scalar(s) => scalar_default(*s),
        PType::Enum { numbers, .. } => {
            let i = Literal::u32_suffixed(PType::enum_default(numbers));
            quote!(#i)
        }
        PType::Timestamp => quote!(0i64),
        // The Struct read from no bytes: no fields.
        PType::Struct => quote!(::std::borrow::Cow::Borrowed("{}")),
        PType::Wrapper(_) | PType::JsonValue => quote!(None),
        PType::Map { .. } => quote!(::std::vec::Vec::new()),
        PType::Message { fields, .. } => {
            // The message read from no bytes: every field at its default.
            let empty = format_ident!("empty");
            let block = message_value(t, fields, &empty, "", 0, cx);
            quote!({
                let mut #empty = rt::proto_read::Reader::new(&[]);
                #block
            })
        }
    }
}

fn scalar_default(s: Scalar) -> TokenStream {
    match s {
        Scalar::Int32 | Scalar::Sint32 | Scalar::Sfixed32 => quote!(0i32),
        Scalar::Int64 | Scalar::Sint64 | Scalar::Sfixed64 => quote!(0i64),
        Scalar::Uint32 | Scalar::Fixed32 => quote!(0u32),
        Scalar::Uint64 | Scalar::Fixed64 => quote!(0u64),
        Scalar::Bool => quote!(false),
        Scalar::Float => quote!(0f32),
        Scalar::Double => quote!(0f64),
        Scalar::String => quote!(::std::borrow::Cow::Borrowed("")),
        Scalar::Bytes => quote!(::std::borrow::Cow::Borrowed(&[][..])),
    }
}

/// The element wire type of a packable scalar.
fn element_wire(s: Scalar) -> TokenStream {
    match s {
        Scalar::Sfixed32 | Scalar::Fixed32 | Scalar::Float => quote!(rt::proto_read::I32),
        Scalar::Sfixed64 | Scalar::Fixed64 | Scalar::Double => quote!(rt::proto_read::I64),
        Scalar::String | Scalar::Bytes => quote!(rt::proto_read::LEN),
        _ => quote!(rt::proto_read::VARINT),
    }
}

/// The action of one occurrence of a repeated field: packed or not for scalars and enums, one
/// element for the length-delimited types.
fn repeated<F: FnMut(&str) -> Ident>(
    t: &PType,
    id: &Ident,
    reader: &Ident,
    path: &str,
    depth: usize,
    cx: &mut Cx<'_, F>,
) -> TokenStream {
    match t {
        PType::Scalar(s) if s.packable() => {
            let method = format_ident!("{}", s.name());
            let element = element_wire(*s);
            quote!(#reader.repeated(wire, #element, #path, &mut #id, rt::proto_read::Reader::#method)?)
        }
        PType::Enum { symbols, numbers, .. } => {
            enum_table(symbols, cx.enums);
            let lookup = enum_lookup(numbers);
            quote!(#reader.repeated(wire, rt::proto_read::VARINT, #path, &mut #id, |r, w, f| r.enumeration(w, f, #lookup))?)
        }
        t => {
            let read = value(t, reader, &format!("{path}[]"), depth, cx);
            quote!(#id.push(#read))
        }
    }
}

/// The action of one map entry: its key (field 1) as text and its value (field 2), either
/// absent reading as its default.
#[allow(clippy::too_many_arguments)]
fn map_entry<F: FnMut(&str) -> Ident>(
    key: Scalar,
    value_ty: &PType,
    id: &Ident,
    reader: &Ident,
    path: &str,
    depth: usize,
    cx: &mut Cx<'_, F>,
) -> TokenStream {
    let entry = format_ident!("m{}", depth + 1);
    let key_method = format_ident!("{}", key.name());
    let key_default = scalar_default(key);
    let value_path = format!("{path}{{}}");
    let read = value(value_ty, &entry, &value_path, depth + 1, cx);
    let (key_wire, value_wire) = (element_wire(key), value_wire(value_ty));
    let (value_default, store, finish) = match value_ty {
        // A message value is built when it comes, or from no bytes when it does not.
        PType::Message { .. } => {
            let default = default(value_ty, cx);
            (quote!(None), quote!(Some(#read)), quote!(match value { Some(v) => v, None => #default }))
        }
        _ => (default(value_ty, cx), read, quote!(value)),
    };
    quote!({
        let mut #entry = #reader.message(wire, #path)?;
        let mut key = #key_default;
        let mut value = #value_default;
        while let Some((number, wire)) = #entry.tag()? {
            match number {
                1 if wire == #key_wire => key = #entry.#key_method(wire, #path)?,
                2 if wire == #value_wire => value = #store,
                _ => #entry.skip(wire)?,
            }
        }
        #id.push((key, #finish));
    })
}

/// `|n| match n { 0 => Some(0), 5 => Some(1), _ => None }`: an enum's number to its symbol index.
fn enum_lookup(numbers: &[i32]) -> TokenStream {
    let mut seen = BTreeSet::new();
    // An alias (`allow_alias`) maps to its first symbol.
    let cases = numbers.iter().enumerate().filter(|(_, n)| seen.insert(**n)).map(|(i, n)| {
        let (n, i) = (Literal::i32_unsuffixed(*n), Literal::u32_unsuffixed(i as u32));
        quote!(#n => Some(#i),)
    });
    quote!(|n| match n { #(#cases)* _ => None })
}

/// An expression that reads one value of `t` from `reader` (whose current field has wire type
/// `wire`): a present field's value, or a container's element.
fn value<F: FnMut(&str) -> Ident>(
    t: &PType,
    reader: &Ident,
    path: &str,
    depth: usize,
    cx: &mut Cx<'_, F>,
) -> TokenStream {
    match t {
        PType::Scalar(s) => {
            let method = format_ident!("{}", s.name());
            quote!(#reader.#method(wire, #path)?)
        }
        PType::Enum { symbols, numbers, .. } => {
            // Registered for the encoders, which write symbols from the same table.
            enum_table(symbols, cx.enums);
            let lookup = enum_lookup(numbers);
            quote!(#reader.enumeration(wire, #path, #lookup)?)
        }
        PType::Timestamp => quote!(#reader.timestamp_nanos(wire, #path, 0)?),
        PType::Struct => quote!(#reader.json_struct(wire, #path, ::std::borrow::Cow::Borrowed(""))?),
        PType::JsonValue => quote!(#reader.json_value(wire, #path, None)?),
        PType::Wrapper(s) => {
            let method = format_ident!("{}", s.name());
            let element = element_wire(*s);
            quote!(Some(#reader.wrapper(wire, #path, Default::default(), #element, rt::proto_read::Reader::#method)?))
        }
        PType::Message { fields, .. } => {
            let sub = format_ident!("m{}", depth + 1);
            let block = message_value(t, fields, &sub, path, depth + 1, cx);
            quote!({
                let mut #sub = #reader.message(wire, #path)?;
                #block
            })
        }
        PType::Map { .. } => unreachable!("a map is a field, never a value"),
    }
}

/// The statements that read the message in `reader` into its struct (every field built: a
/// struct has them all), ending with the struct.
fn message_value<F: FnMut(&str) -> Ident>(
    t: &PType,
    fields: &[PField],
    reader: &Ident,
    path: &str,
    depth: usize,
    cx: &mut Cx<'_, F>,
) -> TokenStream {
    let PType::Message { name, .. } = t else { unreachable!("a message") };
    let mut message = Message::default();
    let live = |_: &str| true;
    let mut inner = Cx { live: &live, fresh: &mut *cx.fresh, enums: &mut *cx.enums };
    message.members(fields, "", path, false, reader, depth, &mut inner);
    let decls = message.slots.iter().map(|s| {
        let (id, default) = (&s.id, &s.default);
        quote!(let mut #id = #default;)
    });
    let body = tag_loop(&message.arms, reader);
    let finish = &message.finish;
    let ident = format_ident!("{}", record_name(name));
    let inits = message.slots.iter().map(|s| {
        let (member, id) = (field_ident(&s.column), &s.id);
        quote!(#member: #id)
    });
    quote!(
        #(#decls)*
        #body
        #(#finish)*
        #ident { #(#inits,)* }
    )
}

/// The registry client of a Protobuf pipeline: it judges each writer `.proto` the registry has
/// against the reader's, compiled by gen with its imports (a FileDescriptorSet).
pub(super) fn registry_client(message: &reader::Message, timeout: &TokenStream) -> (TokenStream, TokenStream) {
    let bytes = Literal::byte_string(&message.descriptor_set);
    let name = &message.name;
    (
        quote!(
            /// The reader `.proto` and its imports, compiled by gen (a FileDescriptorSet),
            /// for judging the writer schemas the registry has.
            const READER_DESCRIPTOR_SET: &[u8] = #bytes;
        ),
        quote!(rt::Registry::protobuf(url, READER_DESCRIPTOR_SET, #name, SCHEMA_IDS, #timeout)),
    )
}
