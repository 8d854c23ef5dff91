//! Synthesized values written as Protobuf, for `format.protobuf` pipelines: the Avro schema
//! `gen` derives from the `.proto` carries each field's number and wire type in a `proto`
//! attribute, which is all a writer needs.
//!
//! Fields are written in schema order; a union's null branch (a field with presence that is
//! absent) is not written at all; repeated scalars are packed, as proto3 writers do.

use std::collections::HashMap;

use apache_avro::Schema;
use apache_avro::schema::{Name, RecordSchema};
use apache_avro::types::Value;
use serde_json::Value as Json;

const VARINT: u64 = 0;
const I64: u64 = 1;
const LEN: u64 = 2;
const I32: u64 = 5;

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(number: u64, wire: u64, out: &mut Vec<u8>) {
    varint((number << 3) | wire, out);
}

/// Writes `body` length-delimited.
fn delimited(out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    body(&mut inner);
    varint(inner.len() as u64, out);
    out.extend_from_slice(&inner);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Confluent's message-index path of the record (its `proto_indexes` attribute): `[0]` as the
/// single byte 0, anything else as a zig-zag count and zig-zag indexes.
pub(super) fn message_indexes(schema: &Schema, out: &mut Vec<u8>) {
    let indexes: Vec<i64> = match schema {
        Schema::Record(r) => r
            .attributes
            .get("proto_indexes")
            .and_then(Json::as_array)
            .map(|a| a.iter().filter_map(Json::as_i64).collect())
            .unwrap_or_else(|| vec![0]),
        _ => vec![0],
    };
    if indexes == [0] {
        out.push(0);
    } else {
        varint(zigzag(indexes.len() as i64), out);
        for i in indexes {
            varint(zigzag(i), out);
        }
    }
}

/// Writes the record `value` of `schema` as a Protobuf message.
pub(super) fn message(schema: &Schema, names: &HashMap<Name, Schema>, value: &Value, out: &mut Vec<u8>) {
    let (Some(record), Value::Record(fields)) = (resolve(schema, names).and_then(as_record), value) else {
        return;
    };
    for (field, (_, value)) in record.fields.iter().zip(fields) {
        let Some(proto) = field.custom_attributes.get("proto") else { continue };
        let number = proto["number"].as_u64().unwrap_or(0);
        let (schema, value) = match (resolve(&field.schema, names), value) {
            // Presence: the null branch is an absent field.
            (Some(Schema::Union(u)), Value::Union(i, inner)) => match &**inner {
                Value::Null => continue,
                inner => (u.variants().get(*i as usize).unwrap_or(&Schema::Null), inner),
            },
            (Some(s), v) => (s, v),
            (None, _) => continue,
        };
        if proto["repeated"].as_bool() == Some(true) {
            let (Schema::Array(array), Value::Array(items)) = (schema, value) else { continue };
            if packable(proto) {
                if !items.is_empty() {
                    tag(number, LEN, out);
                    delimited(out, |buf| items.iter().for_each(|item| packed_scalar(proto, item, buf)));
                }
            } else {
                for item in items {
                    one(number, proto, &array.items, names, item, out);
                }
            }
        } else {
            one(number, proto, schema, names, value, out);
        }
    }
}

fn resolve<'s>(schema: &'s Schema, names: &'s HashMap<Name, Schema>) -> Option<&'s Schema> {
    match schema {
        Schema::Ref { name } => names.get(name),
        s => Some(s),
    }
}

fn as_record(schema: &Schema) -> Option<&RecordSchema> {
    match schema {
        Schema::Record(r) => Some(r),
        _ => None,
    }
}

fn packable(proto: &Json) -> bool {
    !matches!(
        proto["type"].as_str(),
        Some("string" | "bytes" | "message" | "timestamp" | "wrapper" | "map" | "struct" | "jsonvalue")
    )
}

/// A value's integer form: its number, an enum's number (from the `numbers` attribute).
fn integer(proto: &Json, value: &Value) -> i64 {
    match value {
        Value::Int(i) => i64::from(*i),
        Value::Long(i) => *i,
        Value::Boolean(b) => i64::from(*b),
        Value::Enum(index, _) => proto["numbers"].get(*index as usize).and_then(Json::as_i64).unwrap_or(0),
        _ => 0,
    }
}

/// The wire type of a scalar (or enum) type name.
fn scalar_wire(ty: &str) -> u64 {
    match ty {
        "fixed32" | "sfixed32" | "float" => I32,
        "fixed64" | "sfixed64" | "double" => I64,
        "string" | "bytes" => LEN,
        _ => VARINT,
    }
}

/// A scalar's payload, without a tag: as an element of a packed run, or after its tag.
fn packed_scalar(proto: &Json, value: &Value, out: &mut Vec<u8>) {
    let ty = proto["type"].as_str().unwrap_or("");
    match ty {
        "float" => {
            let f = match value {
                Value::Float(f) => *f,
                _ => 0.0,
            };
            out.extend_from_slice(&f.to_le_bytes());
        }
        "double" => {
            let f = match value {
                Value::Double(f) => *f,
                _ => 0.0,
            };
            out.extend_from_slice(&f.to_le_bytes());
        }
        "fixed32" => out.extend_from_slice(&(integer(proto, value) as u32).to_le_bytes()),
        "sfixed32" => out.extend_from_slice(&(integer(proto, value) as i32).to_le_bytes()),
        "fixed64" | "sfixed64" => out.extend_from_slice(&integer(proto, value).to_le_bytes()),
        "sint32" | "sint64" => varint(zigzag(integer(proto, value)), out),
        // int32 and enums sign-extend to 64 bits; uint32 keeps 32 bits.
        "uint32" => varint(u64::from(integer(proto, value) as u32), out),
        "int32" | "enum" => varint(integer(proto, value) as i32 as i64 as u64, out),
        "string" | "bytes" => {
            let bytes: &[u8] = match value {
                Value::String(s) => s.as_bytes(),
                Value::Bytes(b) => b,
                _ => &[],
            };
            varint(bytes.len() as u64, out);
            out.extend_from_slice(bytes);
        }
        _ => varint(integer(proto, value) as u64, out),
    }
}

/// A `google.protobuf.Struct`'s fields: one map entry per key, its value a `number_value`.
fn struct_body(entries: &HashMap<String, Value>, out: &mut Vec<u8>) {
    for (key, value) in entries {
        tag(1, LEN, out);
        delimited(out, |entry| {
            tag(1, LEN, entry);
            varint(key.len() as u64, entry);
            entry.extend_from_slice(key.as_bytes());
            tag(2, LEN, entry);
            delimited(entry, |v| {
                tag(2, I64, v);
                v.extend_from_slice(&(integer(&Json::Null, value) as f64).to_le_bytes());
            });
        });
    }
}

/// One value of field `number`, with its tag.
fn one(number: u64, proto: &Json, schema: &Schema, names: &HashMap<Name, Schema>, value: &Value, out: &mut Vec<u8>) {
    let ty = proto["type"].as_str().unwrap_or("");
    match ty {
        "message" => {
            tag(number, LEN, out);
            delimited(out, |buf| message(schema, names, value, buf));
        }
        "timestamp" => {
            let nanos = match value {
                Value::TimestampNanos(n) | Value::Long(n) => *n,
                _ => 0,
            };
            tag(number, LEN, out);
            delimited(out, |buf| {
                tag(1, VARINT, buf);
                varint(nanos.div_euclid(1_000_000_000) as u64, buf);
                tag(2, VARINT, buf);
                varint(nanos.rem_euclid(1_000_000_000) as u64, buf);
            });
        }
        // A Struct (or a Value holding one) of the map's entries, each a number_value.
        "struct" | "jsonvalue" => {
            let Value::Map(entries) = value else { return };
            tag(number, LEN, out);
            delimited(out, |buf| {
                if ty == "struct" {
                    struct_body(entries, buf);
                } else {
                    tag(5, LEN, buf);
                    delimited(buf, |s| struct_body(entries, s));
                }
            });
        }
        "wrapper" => {
            let of = serde_json::json!({ "type": proto["of"] });
            tag(number, LEN, out);
            delimited(out, |buf| {
                tag(1, scalar_wire(of["type"].as_str().unwrap_or("")), buf);
                packed_scalar(&of, value, buf);
            });
        }
        "map" => {
            let Value::Map(entries) = value else { return };
            let values = match schema {
                Schema::Map(m) => &*m.types,
                _ => &Schema::Null,
            };
            let key = serde_json::json!({ "type": proto["key"] });
            let value_proto = &proto["value"];
            for (k, v) in entries {
                tag(number, LEN, out);
                delimited(out, |buf| {
                    let key_type = key["type"].as_str().unwrap_or("string");
                    tag(1, scalar_wire(key_type), buf);
                    match key_type {
                        "string" => packed_scalar(&key, &Value::String(k.clone()), buf),
                        "bool" => packed_scalar(&key, &Value::Boolean(k.len() % 2 == 1), buf),
                        // An integer key from the string key's hash: distinct keys stay distinct.
                        _ => {
                            let hash =
                                k.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
                            packed_scalar(&key, &Value::Long(i64::from(hash >> 1)), buf)
                        }
                    }
                    let values = resolve(values, names).unwrap_or(&Schema::Null);
                    one(2, value_proto, values, names, v, buf);
                });
            }
        }
        _ => {
            tag(number, scalar_wire(ty), out);
            packed_scalar(proto, value, out);
        }
    }
}
