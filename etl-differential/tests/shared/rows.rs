//! Rows as the references read them, shared by the differential tests and the Protobuf decoder
//! test (etl-macros/tests/protobuf_decoder.rs includes it by path): how two rows are compared,
//! and prost-reflect's message mapped to the row docs/configuration.md says it makes.

use etl_runtime::__private as rt;
use prost_reflect::{
    DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, ReflectMessage as _, Value as P,
};
use serde_json::{Map, Value, json};

/// Row equality: floats by their bits (`{"$f32": bits}` / `{"$f64": bits}` in the expected row),
/// NaN and the infinities as the sink's words, objects in any key order.
pub(crate) fn same(row: &Value, expected: &Value) -> bool {
    match (row, expected) {
        (_, Value::Object(e)) if e.len() == 1 && (e.contains_key("$f32") || e.contains_key("$f64")) => {
            let got = match row {
                Value::Number(n) => n.as_f64(),
                Value::String(s) => match s.as_str() {
                    "nan" => Some(f64::NAN),
                    "inf" => Some(f64::INFINITY),
                    "-inf" => Some(f64::NEG_INFINITY),
                    _ => None,
                },
                _ => None,
            };
            let Some(got) = got else { return false };
            if let Some(bits) = e.get("$f32").and_then(Value::as_u64) {
                let want = f32::from_bits(bits as u32);
                (want.is_nan() && got.is_nan()) || (got as f32).to_bits() == want.to_bits()
            } else {
                let want = f64::from_bits(e["$f64"].as_u64().unwrap());
                (want.is_nan() && got.is_nan()) || got.to_bits() == want.to_bits()
            }
        }
        (Value::Array(r), Value::Array(e)) => r.len() == e.len() && r.iter().zip(e).all(|(r, e)| same(r, e)),
        (Value::Object(r), Value::Object(e)) => {
            r.len() == e.len() && e.iter().all(|(k, e)| r.get(k).is_some_and(|r| same(r, e)))
        }
        (Value::Number(r), Value::Number(e)) => r == e || (r.as_i128().is_some() && r.as_i128() == e.as_i128()),
        _ => row == expected,
    }
}

pub(crate) fn f32_value(f: f32) -> Value {
    json!({ "$f32": f.to_bits() })
}

pub(crate) fn f64_value(f: f64) -> Value {
    json!({ "$f64": f.to_bits() })
}

/// A value written by one of `rt::json`'s formatters, as JSON.
pub(crate) fn formatted(write: impl FnOnce(&mut Vec<u8>)) -> Value {
    let mut text = Vec::new();
    write(&mut text);
    serde_json::from_slice(&text).expect("the formatter writes JSON")
}

/// The row prost-reflect's `message` maps to.
pub(crate) fn protobuf_row(message: &DynamicMessage) -> Value {
    let mut out = Map::new();
    flatten(message, "", &mut out);
    Value::Object(out)
}

fn is_wrapper(m: &MessageDescriptor) -> bool {
    m.full_name().starts_with("google.protobuf.") && m.full_name().ends_with("Value")
}

fn is_timestamp(m: &MessageDescriptor) -> bool {
    m.full_name() == "google.protobuf.Timestamp"
}

/// A message field whose absence is NULL: a oneof member, or declared `optional`.
fn nullable_message(f: &FieldDescriptor) -> bool {
    f.containing_oneof().is_some()
}

fn flatten(message: &DynamicMessage, prefix: &str, out: &mut Map<String, Value>) {
    for f in message.descriptor().fields() {
        let column = format!("{prefix}{}", f.name());
        let present = message.has_field(&f);
        match f.kind() {
            Kind::Message(m) if !f.is_list() && !f.is_map() && !is_wrapper(&m) && !is_timestamp(&m) => {
                let child = message.get_field(&f);
                let child = child.as_message().unwrap();
                if nullable_message(&f) && !present {
                    let mut inner = Map::new();
                    flatten(child, &format!("{column}_"), &mut inner);
                    out.extend(inner.into_iter().map(|(k, v)| {
                        let unset = match v {
                            Value::Array(_) => json!([]),
                            Value::Object(o) if !o.contains_key("$f32") && !o.contains_key("$f64") => json!({}),
                            _ => Value::Null,
                        };
                        (k, unset)
                    }));
                } else {
                    flatten(child, &format!("{column}_"), out);
                }
            }
            kind => {
                let nullable = !f.is_list()
                    && !f.is_map()
                    && match &kind {
                        Kind::Message(m) => is_wrapper(m) || nullable_message(&f),
                        _ => f.supports_presence(),
                    };
                let value = if nullable && !present { Value::Null } else { json_of(&kind, &message.get_field(&f)) };
                out.insert(column, value);
            }
        }
    }
}

fn json_of(kind: &Kind, value: &P) -> Value {
    match (kind, value) {
        (_, P::List(items)) => Value::Array(items.iter().map(|v| json_of(kind, v)).collect()),
        (Kind::Message(entry), P::Map(entries)) => {
            let value_kind = entry.map_entry_value_field().kind();
            let mut out = Map::new();
            for (k, v) in entries {
                let key = match k {
                    MapKey::String(s) => s.clone(),
                    MapKey::I32(i) => i.to_string(),
                    MapKey::I64(i) => i.to_string(),
                    MapKey::U32(i) => i.to_string(),
                    MapKey::U64(i) => i.to_string(),
                    MapKey::Bool(b) => b.to_string(),
                };
                out.insert(key, json_of(&value_kind, v));
            }
            Value::Object(out)
        }
        (Kind::Enum(e), P::EnumNumber(n)) => match e.get_value(*n) {
            Some(v) => json!(v.name()),
            None => json!(format!("(undefined enum number {n})")),
        },
        (Kind::Message(m), P::Message(inner)) if is_timestamp(m) => {
            let seconds = inner.get_field_by_name("seconds").unwrap().as_i64().unwrap();
            let nanos = inner.get_field_by_name("nanos").unwrap().as_i32().unwrap();
            let ticks = i128::from(seconds) * 1_000_000_000 + i128::from(nanos);
            match i64::try_from(ticks) {
                Ok(ticks) => formatted(|b| rt::json::timestamp(b, ticks, 9)),
                Err(_) => json!(format!("(a timestamp beyond DateTime64(9): {seconds}s {nanos}ns)")),
            }
        }
        (Kind::Message(m), P::Message(inner)) if is_wrapper(m) => {
            json_of(&m.get_field(1).unwrap().kind(), &inner.get_field_by_number(1).unwrap())
        }
        (Kind::Message(_), P::Message(inner)) => {
            let mut out = Map::new();
            flatten(inner, "", &mut out);
            Value::Object(out)
        }
        (_, P::Bool(b)) => json!(b),
        (_, P::I32(i)) => json!(i),
        (_, P::I64(i)) => json!(i),
        (_, P::U32(i)) => json!(i),
        (_, P::U64(i)) => json!(i),
        (_, P::F32(f)) => f32_value(*f),
        (_, P::F64(f)) => f64_value(*f),
        (_, P::String(s)) => json!(s),
        (_, P::Bytes(b)) => json!(String::from_utf8_lossy(b)),
        other => panic!("no mapping for {other:?}"),
    }
}
