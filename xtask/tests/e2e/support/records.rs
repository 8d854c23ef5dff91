//! The orders the scenarios produce: their Avro datums in the Confluent wire format, JSON
//! documents (schemas/order.schema.json) or Protobuf messages (schemas/order.proto), built by
//! hand and deterministic per id, so that ClickHouse's content can be checked per key.

/// The Confluent wire header: magic byte 0 and schema id 1 (no registry: the reader schema is
/// compiled in, the id is not looked up).
const CONFLUENT_HEADER: [u8; 5] = [0, 0, 0, 0, 1];

fn zigzag(buf: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        buf.push((z as u8) | 0x80);
        z >>= 7;
    }
    buf.push(z as u8);
}

/// The fields of order `id` (deterministic, so ClickHouse's content can be checked per key).
pub fn customer_id(id: i64) -> i64 {
    (id * 7919) % 10007
}

pub fn total_cents(id: i64) -> i64 {
    100 + id % 9000
}

/// The Avro datum (schemas/order.avsc) of order `id`, without framing. `coupon_len` > 0 adds a
/// coupon of that many pseudo-random alphanumerics (LZ4 hardly compresses them, so the sink's
/// bytes on the wire are about the rows' bytes).
pub fn order_datum(id: i64, coupon_len: usize) -> Vec<u8> {
    let mut buf = Vec::with_capacity(40 + coupon_len);
    zigzag(&mut buf, id);
    zigzag(&mut buf, customer_id(id));
    zigzag(&mut buf, id % 3); // region: EMEA, AMER, APAC
    zigzag(&mut buf, total_cents(id));
    if coupon_len == 0 {
        zigzag(&mut buf, 0); // union branch null
    } else {
        zigzag(&mut buf, 1);
        zigzag(&mut buf, coupon_len as i64);
        let mut x = (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        for _ in 0..coupon_len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf.push(ALPHABET[(x % ALPHABET.len() as u64) as usize]);
        }
    }
    zigzag(&mut buf, 1_700_000_000_000 + id); // created_at, timestamp-millis
    buf
}

/// Order `id` in the Confluent wire format.
pub fn order(id: i64, coupon_len: usize) -> Vec<u8> {
    let mut payload = CONFLUENT_HEADER.to_vec();
    payload.extend(order_datum(id, coupon_len));
    payload
}

/// Order `id` as a JSON document (schemas/order.schema.json), its keys in one of two orders (the
/// decoder takes any), with a coupon of `coupon_len` characters as [`order_datum`] makes it.
pub fn order_json(id: i64, coupon_len: usize) -> Vec<u8> {
    let region = ["EMEA", "AMER", "APAC"][(id % 3) as usize];
    let coupon = if coupon_len == 0 {
        "null".to_owned()
    } else {
        // The same characters as the Avro datum's coupon: its last `coupon_len` bytes but the
        // timestamp's varint.
        let datum = order_datum(id, coupon_len);
        let mut ts = Vec::new();
        zigzag(&mut ts, 1_700_000_000_000 + id);
        let end = datum.len() - ts.len();
        format!("\"{}\"", String::from_utf8_lossy(&datum[end - coupon_len..end]))
    };
    // RFC 3339 with milliseconds, quoted, as the runtime's NDJSON encoder writes timestamps.
    let mut created_at = Vec::new();
    etl_runtime::__private::json::timestamp(&mut created_at, 1_700_000_000_000 + id, 3);
    let created_at = String::from_utf8(created_at).expect("ASCII");
    let (customer, total) = (customer_id(id), total_cents(id));
    let text = if id % 2 == 0 {
        format!(
            r#"{{"order_id":{id},"customer_id":{customer},"region":"{region}","total_cents":{total},"coupon":{coupon},"created_at":{created_at}}}"#
        )
    } else {
        format!(
            r#"{{"created_at":{created_at}, "coupon":{coupon}, "total_cents":{total}, "region":"{region}", "source":"web", "customer_id":{customer}, "order_id":{id}}}"#
        )
    };
    text.into_bytes()
}

/// Order `id` as a Protobuf message (schemas/order.proto), Confluent-framed with schema id 1 and
/// the message-index path `[0]` (the single byte 0). Odd ids have their fields in reverse order,
/// the timestamp's fields swapped and an unknown field 15 (the decoder takes any order and skips
/// what it does not know); the coupon is [`order_datum`]'s.
pub fn order_proto(id: i64, coupon_len: usize) -> Vec<u8> {
    let mut payload = vec![0, 0, 0, 0, 1, 0];
    payload.extend(order_message(id, coupon_len));
    payload
}

/// [`order_json`] framed with writer schema `schema_id` (for pipelines with `wire: confluent`).
pub fn order_json_framed(id: i64, schema_id: u32) -> Vec<u8> {
    let mut payload = vec![0];
    payload.extend(schema_id.to_be_bytes());
    payload.extend(order_json(id, 0));
    payload
}

/// [`order_proto`] framed with writer schema `schema_id` (message-index path: the first message).
pub fn order_proto_framed(id: i64, schema_id: u32) -> Vec<u8> {
    let mut payload = vec![0];
    payload.extend(schema_id.to_be_bytes());
    payload.push(0);
    payload.extend(order_message(id, 0));
    payload
}

/// The Protobuf message of order `id`, without framing.
pub fn order_message(id: i64, coupon_len: usize) -> Vec<u8> {
    fn varint(buf: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        buf.push(v as u8);
    }
    fn delimited(number: u64, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        varint(&mut out, (number << 3) | 2);
        varint(&mut out, body.len() as u64);
        out.extend_from_slice(body);
        out
    }
    let int = |number: u64, v: i64| {
        let mut out = Vec::new();
        varint(&mut out, number << 3);
        varint(&mut out, v as u64);
        out
    };
    let millis = 1_700_000_000_000 + id;
    let (seconds, nanos) = (int(1, millis / 1000), int(2, (millis % 1000) * 1_000_000));
    let timestamp = if id % 2 == 0 { [seconds, nanos].concat() } else { [nanos, seconds].concat() };
    let mut fields = vec![int(1, id), int(2, customer_id(id))];
    // Region 0 (EMEA) is proto3's default: a writer leaves it out.
    if id % 3 != 0 {
        fields.push(int(3, id % 3));
    }
    fields.push(int(4, total_cents(id)));
    if coupon_len > 0 {
        let datum = order_datum(id, coupon_len);
        let mut ts = Vec::new();
        zigzag(&mut ts, millis);
        let end = datum.len() - ts.len();
        fields.push(delimited(5, &datum[end - coupon_len..end]));
    }
    fields.push(delimited(6, &timestamp));
    if id % 2 == 1 {
        fields.reverse();
        fields.push(delimited(15, b"web"));
    }
    fields.concat()
}

/// Order `id` in the Confluent wire format, framed with writer schema `schema_id` (which a
/// pipeline with a registry must look up unless it is the reader's own id, 1).
pub fn order_framed(id: i64, schema_id: u32) -> Vec<u8> {
    let mut payload = vec![0];
    payload.extend(schema_id.to_be_bytes());
    payload.extend(order_datum(id, 0));
    payload
}

/// The bytes [`Producer::send_orders`] puts in the topic for orders `ids`: keys and payloads.
pub fn orders_bytes(ids: std::ops::Range<i64>, coupon_len: usize) -> u64 {
    ids.map(|id| (id.to_string().len() + CONFLUENT_HEADER.len() + order_datum(id, coupon_len).len()) as u64).sum()
}

/// The bytes [`order_json`] documents of `ids` put in a topic with their keys.
pub fn orders_json_bytes(ids: std::ops::Range<i64>, coupon_len: usize) -> u64 {
    ids.map(|id| (id.to_string().len() + order_json(id, coupon_len).len()) as u64).sum()
}

/// The per-key checksum of a set of distinct order ids, as `ChStats::checksum` computes it in
/// ClickHouse from the stored columns.
pub fn checksum(ids: impl IntoIterator<Item = i64>) -> i64 {
    ids.into_iter().map(|id| id * 3 + customer_id(id) * 7 + total_cents(id)).sum()
}

/// Shop event `id` (examples/route_to_tables/schemas/event.schema.json) as a JSON document: an
/// order when `id % 4` is 0 or 1, with [`order_lines`] lines; a refund (of order `id - 2`) when it
/// is 2; a page view, which no output takes, when it is 3. The coupon length is not used.
pub fn shop_event(id: i64, _coupon_len: usize) -> Vec<u8> {
    let mut at = Vec::new();
    etl_runtime::__private::json::timestamp(&mut at, 1_700_000_000_000 + id, 3);
    let at = String::from_utf8(at).expect("ASCII");
    let customer = customer_id(id);
    let text = match id % 4 {
        0 | 1 => {
            let lines: Vec<String> =
                (0..order_lines(id)).map(|l| format!(r#"{{"sku":"sku-{id}-{l}","qty":{}}}"#, l + 1)).collect();
            format!(
                r#"{{"event_id":{id},"kind":"order","customer_id":{customer},"at":{at},"amount_cents":{},"items":[{}]}}"#,
                total_cents(id),
                lines.join(",")
            )
        }
        2 => format!(
            r#"{{"kind":"refund","event_id":{id},"order_id":{},"customer_id":{customer},"at":{at},"amount_cents":{},"reason":"damaged","items":[]}}"#,
            id - 2,
            total_cents(id - 2)
        ),
        _ => format!(
            r#"{{"event_id":{id},"kind":"view","customer_id":{customer},"at":{at},"url":"/p/{id}","items":[]}}"#
        ),
    };
    text.into_bytes()
}

/// The lines of order `id` in [`shop_event`]: 1 to 3.
pub fn order_lines(id: i64) -> i64 {
    id % 3 + 1
}

/// What [`shop_event`]s `ids` put in each table: (orders, order lines, refunds).
pub fn shop_event_rows(ids: std::ops::Range<i64>) -> (i64, i64, i64) {
    ids.fold((0, 0, 0), |(orders, lines, refunds), id| match id % 4 {
        0 | 1 => (orders + 1, lines + order_lines(id), refunds),
        2 => (orders, lines, refunds + 1),
        _ => (orders, lines, refunds),
    })
}

/// Kafka headers in the order they are sent: a name may repeat, a value may be null.
pub type KafkaHeaders = Vec<(&'static str, Option<Vec<u8>>)>;

/// Product event `id` of examples/events_with_json (schemas/event.schema.json) as a JSON document,
/// its Kafka headers, and the row the example's table holds for it, as ClickHouse's JSONEachRow
/// renders it (64-bit integers unquoted). Events vary by `id`: a user without a country, labels
/// absent or empty, props absent, empty or nested, a value that is an integer, a string or null,
/// headers absent, repeated (the last one counts) or null.
pub fn product_event(id: i64) -> (Vec<u8>, KafkaHeaders, serde_json::Value) {
    use serde_json::{Value, json};
    let (day, hour, minute, second, micros) = (1 + id % 28, id % 24, id % 60, (id * 7) % 60, (id * 13) % 1_000_000);
    let at = format!("2024-05-{day:02}T{hour:02}:{minute:02}:{second:02}.{micros:06}Z");
    let kind = ["view", "click", "purchase"][(id % 3) as usize];
    let country = (id % 4 != 0).then(|| ["NO", "SE", "DK"][(id % 3) as usize]);
    let mut doc = json!({"event_id": id, "at": at, "kind": kind, "user": {"id": id % 97}});
    if let Some(c) = country {
        doc["user"]["country"] = json!(c);
    }
    let labels = match id % 5 {
        0 => None,
        1 => Some(json!({})),
        _ => Some(json!({"env": if id % 2 == 0 { "prod" } else { "dev" }, "n": id.to_string()})),
    };
    if let Some(l) = &labels {
        doc["labels"] = l.clone();
    }
    let props = match id % 6 {
        0 => None,
        1 => Some(json!({})),
        _ => Some(json!({"cart": {"items": id % 10, "skus": ["a", format!("s{id}")]}, "note": format!("é{id}")})),
    };
    if let Some(p) = &props {
        doc["props"] = p.clone();
    }
    let value = match id % 3 {
        0 => json!(id * 10),
        1 => json!(format!("v{id}")),
        _ => Value::Null,
    };
    doc["value"] = value.clone();
    let trace = vec![1, b'a' + (id % 26) as u8];
    let headers: KafkaHeaders = match id % 7 {
        0 => Vec::new(),
        1 => vec![("source", Some(b"web".to_vec())), ("trace-id", None)],
        2 => vec![
            ("source", Some(b"web".to_vec())),
            ("trace-id", Some(trace.clone())),
            ("source", Some(b"app".to_vec())),
        ],
        _ => vec![("trace-id", Some(trace.clone()))],
    };
    let last = |name: &str| headers.iter().rev().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
    let text = |v: Option<Option<Vec<u8>>>| match v.flatten() {
        Some(bytes) => json!(String::from_utf8(bytes).expect("UTF-8 headers")),
        None => Value::Null,
    };
    let header_map: serde_json::Map<String, Value> = headers
        .iter()
        .map(|(n, _)| ((*n).to_owned(), json!(String::from_utf8(last(n).flatten().unwrap_or_default()).unwrap())))
        .collect();
    let env = labels.as_ref().and_then(|l| l.get("env")).cloned().unwrap_or(Value::Null);
    let row = json!({
        "event_id": id,
        "at": format!("2024-05-{day:02} {hour:02}:{minute:02}:{second:02}.{micros:06}"),
        "kind": kind,
        "user": {"id": id % 97, "country": country},
        "country": country,
        "labels": labels.unwrap_or_else(|| json!({})),
        "env": env,
        "props": props.unwrap_or(Value::Null),
        "value": value,
        "amount": if id % 3 == 0 { json!(id * 10) } else { Value::Null },
        "source": text(last("source")),
        "trace": text(last("trace-id")),
        "headers": header_map,
    });
    (doc.to_string().into_bytes(), headers, row)
}

#[cfg(test)]
mod tests {
    #[test]
    fn json_orders_carry_the_avro_orders_values() {
        let doc = String::from_utf8(super::order_json(7, 12)).unwrap();
        assert!(doc.contains(r#""order_id":7}"#), "{doc}");
        assert!(doc.contains(&format!(r#""customer_id":{},"#, super::customer_id(7))), "{doc}");
        assert!(doc.contains(r#""region":"AMER""#), "{doc}");
        let coupon = doc.split(r#""coupon":""#).nth(1).and_then(|rest| rest.split('"').next()).unwrap();
        assert_eq!(coupon.len(), 12, "{doc}");
        assert!(doc.contains(r#""created_at":"2023-11-14T22:13:20.007Z""#), "{doc}");
    }
}
