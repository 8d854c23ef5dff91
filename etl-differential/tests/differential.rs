//! Differential tests of the generated decoders: random schemas (drawn by build.rs from the
//! day's seed) for Avro, JSON Schema and Protobuf, random values of them (datagen, edge values
//! included), rewritten the ways other writers write them; each payload is decoded by the
//! generated chain and by the reference implementation (apache-avro, serde_json into a `Value`,
//! prost-reflect), and the row must be what the reference read, under the mapping
//! docs/configuration.md states, column by column.
//!
//! Properties (each broken once on purpose; see docs/INVARIANTS.md, Invariant 10):
//! - a valid payload, as written or rewritten, gives the reference's row exactly (floats by
//!   their bits, NaN and the infinities as the sink's words);
//! - a corrupted payload both decoders accept gives the same row; a JSON text serde_json refuses
//!   is a record error.

use etl_runtime::__private as rt;
use serde_json::{Map, Value, json};

#[path = "shared/rows.rs"]
mod rows;
use rows::{f32_value, f64_value, formatted, same};

/// One generated pipeline.
pub struct Case {
    name: &'static str,
    format: &'static str,
    schema_file: &'static str,
    /// The schema as Avro, which datagen draws values from.
    schema: &'static str,
    decode: fn(&[u8]) -> Result<Vec<u8>, String>,
}

include!(concat!(env!("OUT_DIR"), "/cases.rs"));

/// Runs `chain` on one payload: the row's NDJSON text, or the record error's text.
fn run_chain(chain: &mut impl rt::Chain, payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut harness = rt::ChainHarness::new(1);
    let record = rt::Record {
        payload: Some(payload),
        key: None,
        topic: "orders",
        partition: 0,
        offset: 0,
        timestamp_ms: Some(0),
        headers: rt::Headers::NONE,
    };
    let rows = harness.process(chain, &record).map_err(|e| e.to_string())?;
    assert_eq!(rows, 1, "a record without operators is one row");
    Ok(harness.take_output())
}

/// How many payloads each schema gets in each property.
fn payloads_per_schema() -> usize {
    std::env::var("ETL_DIFFERENTIAL_PAYLOADS").map_or(300, |s| s.parse().expect("a count"))
}

/// SplitMix64, for the rewrites.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

/// What went wrong, kept to report all cases at once.
#[derive(Default)]
struct Findings {
    failures: Vec<String>,
    compared: usize,
    both_refused: usize,
    refused_by_us: usize,
    wire_type_mismatches: usize,
}

impl Findings {
    fn fail(&mut self, case: &Case, what: &str, payload: &[u8], detail: String) {
        if self.failures.len() < 12 {
            let hex: String = payload
                .iter()
                .take(if std::env::var_os("ETL_DIFFERENTIAL_FULL").is_some() { usize::MAX } else { 400 })
                .map(|b| format!("{b:02x}"))
                .collect();
            self.failures.push(format!(
                "[{} ({}), seed {}] {what}\n  payload: {hex}\n  {detail}",
                case.name, case.schema_file, SEED
            ));
        } else {
            self.failures.push(String::new());
        }
    }

    fn finish(self, label: &str) {
        eprintln!(
            "{label}: {} rows compared, {} payloads refused by both (and {} Avro ones by ours, not asked of \
             apache-avro, and {} Protobuf ones with a known field of another wire type, not asked of \
             prost-reflect), seed {SEED} (ETL_DIFFERENTIAL_SEED), {} schemas",
            self.compared,
            self.both_refused,
            self.refused_by_us,
            self.wire_type_mismatches,
            CASES.len()
        );
        let shown: Vec<&String> = self.failures.iter().filter(|f| !f.is_empty()).collect();
        assert!(
            self.failures.is_empty(),
            "{label}: {} disagreements with the reference; the first:\n{}",
            self.failures.len(),
            shown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
        );
    }
}

/// The columns two rows disagree on.
fn differences(row: &Value, expected: &Value) -> String {
    let (Value::Object(r), Value::Object(e)) = (row, expected) else {
        return format!("ours: {row}\n  reference: {expected}");
    };
    let mut out = String::new();
    for key in r.keys().chain(e.keys().filter(|k| !r.contains_key(*k))) {
        let (a, b) = (r.get(key).unwrap_or(&Value::Null), e.get(key).unwrap_or(&Value::Null));
        if !(r.contains_key(key) && e.contains_key(key) && same(a, b)) {
            out.push_str(&format!("\n  column {key}: ours {a} reference {b}"));
        }
    }
    out
}

fn encoding(case: &Case) -> rt::Encoding {
    match case.format {
        "avro" => rt::Encoding::Avro,
        "json" => rt::Encoding::Json,
        _ => rt::Encoding::Protobuf,
    }
}

/// The reference's row for a payload, or why the reference (or the mapping) refuses it.
trait Reference {
    fn row(&self, payload: &[u8]) -> Result<Value, String>;
    /// Another payload the reference reads as the same kind of message, written another way.
    fn rewrite(&self, payload: &[u8], other: &[u8], rng: &mut Rng) -> Vec<u8>;
}

fn reference(case: &Case) -> Box<dyn Reference> {
    let text = std::fs::read_to_string(case.schema_file).unwrap();
    match case.format {
        "avro" => Box::new(avro::Avro(rt::apache_avro::Schema::parse_str(&text).unwrap())),
        "json" => Box::new(json_ref::Json(serde_json::from_str(&text).unwrap())),
        _ => Box::new(protobuf::Protobuf::new(case.schema_file)),
    }
}

/// Decodes with the generated chain: the row, or the record error.
fn ours(case: &Case, payload: &[u8]) -> Result<Value, String> {
    let text = (case.decode)(payload)?;
    // Read strictly: a key twice in the row (a map entry kept twice) would otherwise collapse
    // into its last value here and hide.
    let Strict(row) = serde_json::from_slice(&text).unwrap_or_else(|e| {
        panic!("{}: the row is not JSON with unique keys ({e}): {}", case.name, String::from_utf8_lossy(&text))
    });
    Ok(row)
}

/// A JSON value whose objects must not repeat a key.
struct Strict(Value);

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Strict;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Strict, E> {
                Ok(Strict(json!(v)))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Strict, E> {
                Ok(Strict(json!(v)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Strict, E> {
                Ok(Strict(json!(v)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Strict, E> {
                Ok(Strict(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Strict, E> {
                Ok(Strict(json!(v)))
            }
            fn visit_unit<E>(self) -> Result<Strict, E> {
                Ok(Strict(Value::Null))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Strict, A::Error> {
                let mut items = Vec::new();
                while let Some(Strict(v)) = seq.next_element()? {
                    items.push(v);
                }
                Ok(Strict(Value::Array(items)))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Strict, A::Error> {
                let mut out = Map::new();
                while let Some((k, Strict(v))) = map.next_entry::<String, Strict>()? {
                    if out.insert(k.clone(), v).is_some() {
                        return Err(serde::de::Error::custom(format!("the key {k:?} twice")));
                    }
                }
                Ok(Strict(Value::Object(out)))
            }
        }
        d.deserialize_any(Visit)
    }
}

// Every value datagen writes, and the same value rewritten (blocks, escapes, key order,
// repeated and unknown keys and fields, merged messages), decodes to the reference's row.
#[test]
fn valid_payloads_decode_as_the_reference_reads_them() {
    let mut findings = Findings::default();
    for case in CASES {
        let reference = reference(case);
        let schema = rt::apache_avro::Schema::parse_str(case.schema).unwrap();
        let n = payloads_per_schema();
        let payloads = rt::sample_payloads(&schema, encoding(case), rt::Wire::Raw, SEED, n);
        let mut rng = Rng(SEED ^ 0x5eed);
        for (i, payload) in payloads.iter().enumerate() {
            let other = &payloads[(i + 1) % payloads.len()];
            let rewritten = reference.rewrite(payload, other, &mut rng);
            for (what, payload) in [("as datagen wrote it", payload), ("rewritten", &rewritten)] {
                let expected = reference.row(payload);
                let got = ours(case, payload);
                match (got, expected) {
                    (Ok(row), Ok(expected)) if same(&row, &expected) => findings.compared += 1,
                    (Err(_), Err(_)) if what == "rewritten" => findings.both_refused += 1,
                    (got, expected) => {
                        findings.fail(case, what, payload, format!("ours: {got:?}\n  reference: {expected:?}"))
                    }
                }
            }
        }
    }
    findings.finish("valid payloads");
}

// Corrupted payloads (bytes flipped, inserted, cut): what both accept reads the same; a JSON
// text serde_json refuses is a record error.
#[test]
fn corrupted_payloads_agree_where_both_accept() {
    let mut findings = Findings::default();
    for case in CASES {
        let reference = reference(case);
        let schema = rt::apache_avro::Schema::parse_str(case.schema).unwrap();
        let payloads = rt::sample_payloads(&schema, encoding(case), rt::Wire::Raw, SEED ^ 1, payloads_per_schema());
        let mut rng = Rng(SEED ^ 0xc0ffee);
        for payload in &payloads {
            let mut bad = payload.clone();
            for _ in 0..1 + rng.below(3) {
                let at = rng.below(bad.len() as u64 + 1) as usize;
                match rng.below(4) {
                    0 if at < bad.len() => bad[at] ^= 1 << rng.below(8),
                    1 if at < bad.len() => bad[at] = rng.next() as u8,
                    2 => bad.insert(at, [b'\t', 0xff, b'"', b'{', 0x80, 0][rng.below(6) as usize]),
                    _ => bad.truncate(at),
                }
            }
            let got = ours(case, &bad);
            // apache-avro 0.21 reserves whatever a corrupted map count asks for (tens of GB, an
            // abort): ask it only about what our decoder accepted, whose counts fit the bytes.
            if case.format == "avro" && got.is_err() {
                findings.refused_by_us += 1;
                continue;
            }
            // prost-reflect reads a known field whatever its wire type (a map entry after a
            // varint tag, for one), where Google's parsers, and ours, skip it as unknown: no
            // reference for those.
            if case.format == "protobuf"
                && !protobuf::wire_types_match(&protobuf::descriptor(case.schema_file), &bad, 0)
            {
                findings.wire_type_mismatches += 1;
                continue;
            }
            let expected = reference.row(&bad);
            match (got, expected) {
                (Ok(row), Ok(expected)) if same(&row, &expected) => findings.compared += 1,
                (Ok(row), Ok(expected)) => {
                    findings.fail(case, "corrupted, both accept", &bad, differences(&row, &expected))
                }
                (Ok(row), Err(e)) if case.format == "json" && e.starts_with("serde_json") => {
                    findings.fail(case, "corrupted, serde_json refuses", &bad, format!("ours: {row}\n  reference: {e}"))
                }
                (Err(_), Err(_)) => findings.both_refused += 1,
                _ => {}
            }
        }
    }
    findings.finish("corrupted payloads");
}

/// Avro against apache-avro: `from_avro_datum` with the reader schema.
mod avro {
    use super::*;
    use rt::apache_avro::Schema;
    use rt::apache_avro::types::Value as A;

    pub(crate) struct Avro(pub(crate) Schema);

    impl Reference for Avro {
        fn row(&self, payload: &[u8]) -> Result<Value, String> {
            let mut reader = payload;
            let value = rt::apache_avro::from_avro_datum(&self.0, &mut reader, None).map_err(|e| e.to_string())?;
            if !reader.is_empty() {
                return Err(format!("{} bytes after the datum", reader.len()));
            }
            let mut out = Map::new();
            flatten(&self.0, &value, "", &mut out);
            Ok(Value::Object(out))
        }

        /// The same datum, its arrays and maps in several blocks (some with negative counts and
        /// their byte sizes), map keys written twice (the last wins).
        fn rewrite(&self, payload: &[u8], _other: &[u8], rng: &mut Rng) -> Vec<u8> {
            let value = rt::apache_avro::from_avro_datum(&self.0, &mut &payload[..], None).unwrap();
            let mut out = Vec::new();
            encode(&self.0, &value, rng, &mut out);
            out
        }
    }

    fn flatten(schema: &Schema, value: &A, prefix: &str, out: &mut Map<String, Value>) {
        let (Schema::Record(r), A::Record(fields)) = (schema, value) else { panic!("a record: {value:?}") };
        for (field, (_, v)) in r.fields.iter().zip(fields) {
            let column = format!("{prefix}{}", field.name);
            match (&field.schema, v) {
                (Schema::Record(_), _) => flatten(&field.schema, v, &format!("{column}_"), out),
                (Schema::Union(u), A::Union(i, inner)) => {
                    // The branch written (a union of several types is a Variant: its member).
                    let variant = &u.variants()[*i as usize];
                    let variant = if matches!(variant, Schema::Null) {
                        u.variants().iter().find(|s| !matches!(s, Schema::Null)).unwrap()
                    } else {
                        variant
                    };
                    match (variant, inner.as_ref()) {
                        (Schema::Record(_), A::Null) => nulls(variant, &format!("{column}_"), out),
                        (Schema::Record(_), inner) => flatten(variant, inner, &format!("{column}_"), out),
                        (Schema::Array(_), A::Null) => drop(out.insert(column, json!([]))),
                        (Schema::Map(_), A::Null) => drop(out.insert(column, json!({}))),
                        (_, A::Null) => drop(out.insert(column, Value::Null)),
                        (variant, inner) => drop(out.insert(column, leaf(variant, inner))),
                    }
                }
                (schema, v) => drop(out.insert(column, leaf(schema, v))),
            }
        }
    }

    /// The columns of a null record: NULL, arrays and maps empty.
    fn nulls(schema: &Schema, prefix: &str, out: &mut Map<String, Value>) {
        let Schema::Record(r) = schema else { unreachable!() };
        for field in &r.fields {
            let column = format!("{prefix}{}", field.name);
            let inner = match &field.schema {
                Schema::Union(u) => u.variants().iter().find(|s| !matches!(s, Schema::Null)).unwrap(),
                s => s,
            };
            match inner {
                Schema::Record(_) => nulls(inner, &format!("{column}_"), out),
                Schema::Array(_) => drop(out.insert(column, json!([]))),
                Schema::Map(_) => drop(out.insert(column, json!({}))),
                _ => drop(out.insert(column, Value::Null)),
            }
        }
    }

    fn leaf(schema: &Schema, value: &A) -> Value {
        match (schema, value) {
            (Schema::Union(u), A::Union(i, inner)) => match inner.as_ref() {
                A::Null => Value::Null,
                inner => leaf(&u.variants()[*i as usize], inner),
            },
            (Schema::Array(a), A::Array(items)) => Value::Array(items.iter().map(|v| leaf(&a.items, v)).collect()),
            (Schema::Map(m), A::Map(entries)) => {
                Value::Object(entries.iter().map(|(k, v)| (k.clone(), leaf(&m.types, v))).collect())
            }
            (Schema::Record(_), _) => {
                let mut out = Map::new();
                flatten(schema, value, "", &mut out);
                Value::Object(out)
            }
            (_, A::Boolean(b)) => json!(b),
            (_, A::Int(i)) => json!(i),
            (_, A::Long(i)) => json!(i),
            (_, A::Float(f)) => f32_value(*f),
            (_, A::Double(f)) => f64_value(*f),
            (_, A::String(s)) => json!(s),
            (_, A::Bytes(b)) => json!(String::from_utf8_lossy(b)),
            (_, A::Enum(_, symbol)) => json!(symbol),
            (_, A::TimestampMillis(t)) => formatted(|b| rt::json::timestamp(b, *t, 3)),
            (_, A::TimestampMicros(t)) => formatted(|b| rt::json::timestamp(b, *t, 6)),
            (_, A::Date(d)) => formatted(|b| rt::json::date(b, *d)),
            (_, A::Uuid(u)) => json!(u.as_hyphenated().to_string()),
            // A local timestamp keeps its wall-clock ticks in a UTC column; a time of day is
            // Time64's `HH:MM:SS.fff`.
            (_, A::LocalTimestampMillis(t)) => formatted(|b| rt::json::timestamp(b, *t, 3)),
            (_, A::LocalTimestampMicros(t)) => formatted(|b| rt::json::timestamp(b, *t, 6)),
            (_, A::TimeMillis(t)) => formatted(|b| rt::json::time(b, i64::from(*t), 3)),
            (_, A::TimeMicros(t)) => formatted(|b| rt::json::time(b, *t, 6)),
            (Schema::Decimal(d), A::Decimal(v)) => {
                formatted(|b| rt::json::decimal(b, signed(&decimal_bytes(v)), d.scale as u32))
            }
            (schema, value) => panic!("no mapping for {value:?} of {schema:?}"),
        }
    }

    /// A decimal's two's-complement bytes. apache-avro cannot give them back for a datum of no
    /// bytes (it refuses to write a number in zero bytes), which is 0.
    fn decimal_bytes(v: &rt::apache_avro::Decimal) -> Vec<u8> {
        Vec::<u8>::try_from(v).unwrap_or_default()
    }

    /// A big-endian two's-complement integer.
    fn signed(bytes: &[u8]) -> i128 {
        let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
        bytes.iter().fold(if negative { -1i128 } else { 0 }, |acc, &b| (acc << 8) | i128::from(b))
    }

    fn varint(out: &mut Vec<u8>, v: i64) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        while z >= 0x80 {
            out.push(z as u8 | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
    }

    fn encode(schema: &Schema, value: &A, rng: &mut Rng, out: &mut Vec<u8>) {
        match (schema, value) {
            (Schema::Record(r), A::Record(fields)) => {
                for (f, (_, v)) in r.fields.iter().zip(fields) {
                    encode(&f.schema, v, rng, out);
                }
            }
            (Schema::Union(u), A::Union(i, v)) => {
                varint(out, i64::from(*i));
                encode(&u.variants()[*i as usize], v, rng, out);
            }
            (Schema::Array(a), A::Array(items)) => {
                let encoded: Vec<Vec<u8>> = items
                    .iter()
                    .map(|v| {
                        let mut item = Vec::new();
                        encode(&a.items, v, rng, &mut item);
                        item
                    })
                    .collect();
                blocks(encoded, rng, out);
            }
            (Schema::Map(m), A::Map(entries)) => {
                let mut encoded: Vec<Vec<u8>> = Vec::new();
                let entries: Vec<(&String, &A)> = entries.iter().collect();
                for (i, (k, v)) in entries.iter().enumerate() {
                    // Sometimes first the key with another entry's value: the later one wins.
                    if rng.one_in(4) {
                        let mut entry = Vec::new();
                        encode(&Schema::String, &A::String((*k).clone()), rng, &mut entry);
                        encode(&m.types, entries[(i + 1) % entries.len()].1, rng, &mut entry);
                        encoded.push(entry);
                    }
                    let mut entry = Vec::new();
                    encode(&Schema::String, &A::String((*k).clone()), rng, &mut entry);
                    encode(&m.types, v, rng, &mut entry);
                    encoded.push(entry);
                }
                blocks(encoded, rng, out);
            }
            (Schema::Decimal(d), A::Decimal(v)) => {
                let bytes = decimal_bytes(v);
                match d.inner.as_ref() {
                    Schema::Fixed(f) => {
                        let fill = if bytes.first().is_some_and(|b| b & 0x80 != 0) { 0xff } else { 0 };
                        out.extend(std::iter::repeat_n(fill, f.size - bytes.len()));
                        out.extend(bytes);
                    }
                    _ => {
                        varint(out, bytes.len() as i64);
                        out.extend(bytes);
                    }
                }
            }
            (_, A::Null) => {}
            (_, A::Boolean(b)) => out.push(u8::from(*b)),
            (_, A::Int(i) | A::Date(i) | A::TimeMillis(i)) => varint(out, i64::from(*i)),
            (
                _,
                A::Long(i)
                | A::TimestampMillis(i)
                | A::TimestampMicros(i)
                | A::LocalTimestampMillis(i)
                | A::LocalTimestampMicros(i)
                | A::TimeMicros(i),
            ) => varint(out, *i),
            (_, A::Float(f)) => out.extend(f.to_le_bytes()),
            (_, A::Double(f)) => out.extend(f.to_le_bytes()),
            (_, A::String(s)) => {
                varint(out, s.len() as i64);
                out.extend(s.as_bytes());
            }
            (_, A::Bytes(b)) => {
                varint(out, b.len() as i64);
                out.extend(b);
            }
            (_, A::Uuid(u)) => {
                let s = u.as_hyphenated().to_string();
                varint(out, s.len() as i64);
                out.extend(s.as_bytes());
            }
            (_, A::Enum(i, _)) => varint(out, i64::from(*i)),
            (schema, value) => panic!("no encoding for {value:?} of {schema:?}"),
        }
    }

    /// Items in blocks of random sizes, some with a negative count and the block's byte size.
    fn blocks(items: Vec<Vec<u8>>, rng: &mut Rng, out: &mut Vec<u8>) {
        let mut rest = &items[..];
        while !rest.is_empty() {
            let n = 1 + rng.below(rest.len() as u64) as usize;
            let (block, tail) = rest.split_at(n);
            if rng.one_in(2) {
                varint(out, -(n as i64));
                varint(out, block.iter().map(Vec::len).sum::<usize>() as i64);
            } else {
                varint(out, n as i64);
            }
            block.iter().for_each(|item| out.extend(item));
            rest = tail;
        }
        out.push(0);
    }
}

/// JSON against serde_json: the text read into a `Value`, then mapped to columns by the JSON
/// Schema (the mapping and its checks: required properties, types, enums, formats).
mod json_ref {
    use super::*;

    pub(crate) struct Json(pub(crate) Value);

    impl Reference for Json {
        fn row(&self, payload: &[u8]) -> Result<Value, String> {
            let doc: Value = serde_json::from_slice(payload).map_err(|e| format!("serde_json: {e}"))?;
            let mut out = Map::new();
            object(&self.0, &doc, "", &mut out)?;
            Ok(Value::Object(out))
        }

        /// The same document written another way: keys in another order, whitespace, `\u`
        /// escapes, unknown keys, a key written twice (first with the other document's value),
        /// integers as `n.0`, sometimes a key dropped.
        fn rewrite(&self, payload: &[u8], other: &[u8], rng: &mut Rng) -> Vec<u8> {
            let doc: Value = serde_json::from_slice(payload).unwrap();
            let other: Value = serde_json::from_slice(other).unwrap();
            let mut text = String::new();
            write_object(&doc, &self.0, Some(&other), rng, &mut text, true);
            text.into_bytes()
        }
    }

    fn types(schema: &Value) -> (String, bool) {
        match &schema["type"] {
            Value::String(t) => (t.clone(), false),
            Value::Array(ts) => (ts.iter().find(|t| *t != "null").unwrap().as_str().unwrap().to_owned(), true),
            other => panic!("a type: {other}"),
        }
    }

    fn is_record(schema: &Value) -> bool {
        types(schema).0 == "object" && schema.get("properties").is_some()
    }

    fn object(schema: &Value, doc: &Value, prefix: &str, out: &mut Map<String, Value>) -> Result<(), String> {
        let Value::Object(fields) = doc else { return Err(format!("{prefix}: not an object")) };
        let required: Vec<&str> = schema["required"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
        for (name, property) in schema["properties"].as_object().unwrap() {
            let column = format!("{prefix}{name}");
            let value = fields.get(name);
            let (ty, nullable) = types(property);
            let optional = nullable || !required.contains(&name.as_str());
            match value {
                None if required.contains(&name.as_str()) => return Err(format!("{column}: missing")),
                Some(Value::Null) if !optional => return Err(format!("{column}: null")),
                None | Some(Value::Null) if is_record(property) => nulls(property, &format!("{column}_"), out),
                None | Some(Value::Null) => drop(out.insert(column, empty(&ty, property))),
                Some(v) if is_record(property) => object(property, v, &format!("{column}_"), out)?,
                Some(v) => drop(out.insert(column.clone(), leaf(property, v, &column)?)),
            }
        }
        Ok(())
    }

    fn empty(ty: &str, schema: &Value) -> Value {
        match ty {
            "array" => json!([]),
            "object" if schema.get("additionalProperties").is_some() => json!({}),
            _ => Value::Null,
        }
    }

    fn nulls(schema: &Value, prefix: &str, out: &mut Map<String, Value>) {
        for (name, property) in schema["properties"].as_object().unwrap() {
            let column = format!("{prefix}{name}");
            if is_record(property) {
                nulls(property, &format!("{column}_"), out);
            } else {
                out.insert(column, empty(&types(property).0, property));
            }
        }
    }

    fn leaf(schema: &Value, v: &Value, column: &str) -> Result<Value, String> {
        // Several types: a Variant, whose member the value's kind picks.
        if let Value::Array(ts) = &schema["type"] {
            let members: Vec<&str> = ts.iter().filter_map(Value::as_str).filter(|t| *t != "null").collect();
            if members.len() >= 2 {
                let has = |t: &str| members.contains(&t);
                return Ok(match v {
                    Value::Null if ts.contains(&json!("null")) => Value::Null,
                    Value::String(s) if has("string") => json!(s),
                    Value::Bool(_) if has("boolean") => v.clone(),
                    Value::Number(n) if has("integer") && (n.is_i64() || !has("number")) => match n.as_i64() {
                        Some(i) => json!(i),
                        None => match n.as_f64() {
                            Some(f) if f.fract() == 0.0 && f.abs() < 9.2e18 => json!(f as i64),
                            _ => return Err(format!("{column}: not an integer: {v}")),
                        },
                    },
                    Value::Number(n) if has("number") => f64_value(n.as_f64().unwrap()),
                    _ => return Err(format!("{column}: no member takes {v}")),
                });
            }
        }
        let (ty, nullable) = types(schema);
        if v.is_null() {
            return if nullable { Ok(empty(&ty, schema)) } else { Err(format!("{column}: null")) };
        }
        let wrong = || Err(format!("{column}: not a {ty}: {v}"));
        Ok(match ty.as_str() {
            "integer" => match v.as_number() {
                Some(n) if n.is_i64() => json!(n.as_i64()),
                Some(n) if n.is_f64() && n.as_f64().unwrap().fract() == 0.0 && n.as_f64().unwrap().abs() < 9.2e18 => {
                    json!(n.as_f64().unwrap() as i64)
                }
                _ => return wrong(),
            },
            "number" => match v.as_f64() {
                Some(f) => f64_value(f),
                None => return wrong(),
            },
            "boolean" => match v {
                Value::Bool(_) => v.clone(),
                _ => return wrong(),
            },
            "string" => {
                let Value::String(s) = v else { return wrong() };
                match schema.get("format").and_then(Value::as_str) {
                    Some("date-time") => {
                        let micros = rfc3339_micros(s).ok_or_else(|| format!("{column}: not a date-time"))?;
                        formatted(|b| rt::json::timestamp(b, micros, 6))
                    }
                    Some("date") => json!(s),
                    Some("uuid") => json!(s.to_lowercase()),
                    // What `ipv4`/`ipv6` mean (RFC 2673 and 4291 text; an IPv4 address is an
                    // IPv6 one mapped), shown in RFC 5952 form as ClickHouse shows them.
                    Some("ipv4") => {
                        let ip: std::net::Ipv4Addr = s.parse().map_err(|_| format!("{column}: not an ipv4"))?;
                        json!(ip.to_string())
                    }
                    Some("ipv6") => {
                        let ip = s
                            .parse::<std::net::Ipv6Addr>()
                            .or_else(|_| s.parse::<std::net::Ipv4Addr>().map(|v4| v4.to_ipv6_mapped()))
                            .map_err(|_| format!("{column}: not an ipv6"))?;
                        json!(ip.to_string())
                    }
                    _ => match schema.get("enum") {
                        Some(Value::Array(symbols)) if !symbols.contains(v) => {
                            return Err(format!("{column}: not a symbol"));
                        }
                        _ => json!(s),
                    },
                }
            }
            "array" => {
                let Value::Array(items) = v else { return wrong() };
                let item = &schema["items"];
                Value::Array(items.iter().map(|v| element(item, v, column)).collect::<Result<_, _>>()?)
            }
            // A free-form object is a JSON column: the object as it came.
            "object" if schema.get("properties").is_none() && schema.get("additionalProperties").is_none() => {
                if !v.is_object() {
                    return wrong();
                }
                v.clone()
            }
            "object" if schema.get("additionalProperties").is_some() => {
                let Value::Object(entries) = v else { return wrong() };
                let item = &schema["additionalProperties"];
                Value::Object(
                    entries
                        .iter()
                        .map(|(k, v)| Ok((k.clone(), element(item, v, column)?)))
                        .collect::<Result<_, String>>()?,
                )
            }
            other => panic!("no mapping for {other}"),
        })
    }

    /// An array element or map value: a record is an object of its flattened columns.
    fn element(schema: &Value, v: &Value, column: &str) -> Result<Value, String> {
        if is_record(schema) {
            let mut out = Map::new();
            if v.is_null() && types(schema).1 {
                nulls(schema, "", &mut out);
            } else {
                object(schema, v, "", &mut out)?;
            }
            Ok(Value::Object(out))
        } else {
            leaf(schema, v, column)
        }
    }

    /// RFC 3339 `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` as microseconds since the epoch
    /// (digits beyond microseconds truncated), the mapping's own reading of a date-time.
    fn rfc3339_micros(s: &str) -> Option<i64> {
        let b = s.as_bytes();
        let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
        let (y, mo, d, h, mi, se) = (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
        let mut i = 19;
        let mut micros = 0;
        if b.get(i) == Some(&b'.') {
            i += 1;
            let start = i;
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            let digits = &s[start..i];
            let kept: String = digits.chars().chain(std::iter::repeat('0')).take(6).collect();
            micros = kept.parse().ok()?;
        }
        let offset = match b.get(i)? {
            b'Z' | b'z' => 0,
            sign @ (b'+' | b'-') => {
                let minutes = num(i + 1..i + 3)? * 60 + num(i + 4..i + 6)?;
                if *sign == b'+' { minutes } else { -minutes }
            }
            _ => return None,
        };
        // Days from the civil date (Howard Hinnant's algorithm).
        let y = if mo <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let doy = (153 * ((mo + 9) % 12) + 2) / 5 + d - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        Some(((days * 86_400 + h * 3600 + mi * 60 + se) - offset * 60) * 1_000_000 + micros)
    }

    fn space(rng: &mut Rng, out: &mut String) {
        if rng.one_in(3) {
            out.push_str([" ", "\n", "\t", "\r\n  "][rng.below(4) as usize]);
        }
    }

    /// An object; `schema` (`Null` for an unknown key's value) says whether it is a record,
    /// which may get unknown keys, or a map, whose keys are all entries.
    fn write_object(doc: &Value, schema: &Value, other: Option<&Value>, rng: &mut Rng, out: &mut String, top: bool) {
        let record = schema.get("properties").is_some();
        let child = |key: &str| -> Value {
            if record {
                schema["properties"].get(key).cloned().unwrap_or(Value::Null)
            } else {
                schema.get("additionalProperties").cloned().unwrap_or(Value::Null)
            }
        };
        let mut keys: Vec<&String> = doc.as_object().unwrap().keys().collect();
        // Another order than serde_json's sorted one.
        for i in (1..keys.len()).rev() {
            keys.swap(i, rng.below(i as u64 + 1) as usize);
        }
        if top && record && rng.one_in(8) && !keys.is_empty() {
            keys.remove(rng.below(keys.len() as u64) as usize);
        }
        out.push('{');
        let mut first = true;
        let mut comma = |out: &mut String, rng: &mut Rng| {
            if !std::mem::take(&mut first) {
                out.push(',');
            }
            space(rng, out);
        };
        for key in keys {
            if record && rng.one_in(6) {
                comma(out, rng);
                write_string(&format!("zz{}\u{e9}\\\"", rng.below(100)), rng, out);
                out.push(':');
                write_value(
                    &json!({"a": [1, {"b": null}], "c": "\\\"\u{1F600}", "d": -1.5e300}),
                    &Value::Null,
                    None,
                    rng,
                    out,
                );
            }
            if let Some(earlier) = other.and_then(|o| o.get(key)).filter(|_| rng.one_in(4)) {
                comma(out, rng);
                write_string(key, rng, out);
                out.push(':');
                write_value(earlier, &child(key), None, rng, out);
            }
            comma(out, rng);
            write_string(key, rng, out);
            space(rng, out);
            out.push(':');
            space(rng, out);
            write_value(&doc[key.as_str()], &child(key), None, rng, out);
        }
        space(rng, out);
        out.push('}');
    }

    fn write_value(v: &Value, schema: &Value, other: Option<&Value>, rng: &mut Rng, out: &mut String) {
        match v {
            Value::Object(_) => write_object(v, schema, other, rng, out, false),
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    space(rng, out);
                    write_value(item, schema.get("items").unwrap_or(&Value::Null), None, rng, out);
                }
                out.push(']');
            }
            Value::String(s) => write_string(s, rng, out),
            Value::Number(n) if n.is_i64() && n.as_i64().unwrap().unsigned_abs() < 1 << 31 && rng.one_in(5) => {
                out.push_str(&format!("{n}.0"));
            }
            other => out.push_str(&other.to_string()),
        }
    }

    /// A JSON string, some characters as `\u` escapes (surrogate pairs beyond the BMP).
    fn write_string(s: &str, rng: &mut Rng, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '/' if rng.one_in(2) => out.push_str("\\/"),
                c if (c as u32) < 0x20 || rng.one_in(8) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{:04X}", unit));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// Protobuf against prost-reflect: `DynamicMessage::decode` with the file's descriptor.
mod protobuf {
    use super::*;
    use prost_reflect::{DescriptorPool, DynamicMessage, Kind, MessageDescriptor};

    pub(crate) struct Protobuf(MessageDescriptor);

    impl Protobuf {
        pub(crate) fn new(schema_file: &str) -> Protobuf {
            Protobuf(descriptor(schema_file))
        }
    }

    pub(crate) fn descriptor(schema_file: &str) -> MessageDescriptor {
        let path = std::path::Path::new(schema_file);
        let mut compiler = protox::Compiler::new([path.parent().unwrap()]).unwrap();
        compiler.open_file(path.file_name().unwrap().to_str().unwrap()).unwrap();
        let pool: DescriptorPool = compiler.descriptor_pool();
        pool.get_message_by_name("diff.M0").unwrap()
    }

    /// Whether every known field of the message in `b` (and of the messages inside it) comes
    /// with a wire type its type allows; true also for what does not parse (the decoders judge
    /// that).
    pub(crate) fn wire_types_match(message: &MessageDescriptor, mut b: &[u8], depth: u32) -> bool {
        while !b.is_empty() {
            let Some((tag, n)) = read_varint(b) else { return true };
            b = &b[n..];
            let (number, wire) = ((tag >> 3) as u32, tag & 7);
            let body: &[u8] = match wire {
                0 => match read_varint(b) {
                    Some((_, n)) => &b[..n],
                    None => return true,
                },
                1 | 5 => {
                    let n = if wire == 1 { 8 } else { 4 };
                    if b.len() < n {
                        return true;
                    }
                    &b[..n]
                }
                2 => match read_varint(b) {
                    Some((len, n)) if (len as usize) <= b.len() - n => &b[n..n + len as usize],
                    _ => return true,
                },
                // Groups and invalid wire types: the decoders judge them.
                _ => return true,
            };
            let consumed = match wire {
                2 => read_varint(b).unwrap().1 + body.len(),
                _ => body.len(),
            };
            if let Some(field) = message.get_field(number) {
                let allowed = match field.kind() {
                    Kind::Message(_) | Kind::String | Kind::Bytes => wire == 2,
                    Kind::Double | Kind::Fixed64 | Kind::Sfixed64 => wire == 1 || (wire == 2 && field.is_list()),
                    Kind::Float | Kind::Fixed32 | Kind::Sfixed32 => wire == 5 || (wire == 2 && field.is_list()),
                    _ => wire == 0 || (wire == 2 && field.is_list()),
                };
                if !allowed {
                    return false;
                }
                if let (Kind::Message(inner), 2) = (field.kind(), wire)
                    && depth < 100
                    && !wire_types_match(&inner, body, depth + 1)
                {
                    return false;
                }
            }
            b = &b[consumed..];
        }
        true
    }

    impl Reference for Protobuf {
        fn row(&self, payload: &[u8]) -> Result<Value, String> {
            let message = DynamicMessage::decode(self.0.clone(), payload).map_err(|e| e.to_string())?;
            Ok(rows::protobuf_row(&message))
        }

        /// Unknown fields of every wire type (groups too) between the fields, and sometimes
        /// another message first, which this one is merged into.
        fn rewrite(&self, payload: &[u8], other: &[u8], rng: &mut Rng) -> Vec<u8> {
            let unknown = self.0.fields().map(|f| f.number()).max().unwrap_or(0) + 1 + rng.below(50) as u32;
            let mut out = Vec::new();
            if rng.one_in(3) {
                out.extend(other);
            }
            let mut rest = payload;
            loop {
                if rng.one_in(3) {
                    junk(unknown, rng, &mut out, 0);
                }
                let Some(len) = field_len(rest) else { break };
                out.extend(&rest[..len]);
                rest = &rest[len..];
            }
            out
        }
    }

    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn read_varint(b: &[u8]) -> Option<(u64, usize)> {
        let mut v = 0u64;
        for (i, byte) in b.iter().enumerate().take(10) {
            v |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Some((v, i + 1));
            }
        }
        None
    }

    /// The length of the first field of a valid message (datagen writes no groups).
    fn field_len(b: &[u8]) -> Option<usize> {
        let (tag, n) = read_varint(b)?;
        Some(
            n + match tag & 7 {
                0 => read_varint(&b[n..])?.1,
                1 => 8,
                2 => {
                    let (len, m) = read_varint(&b[n..])?;
                    m + len as usize
                }
                5 => 4,
                wire => panic!("datagen wrote wire type {wire}"),
            },
        )
    }

    /// One unknown field of a random wire type; a group holds more of them.
    fn junk(number: u32, rng: &mut Rng, out: &mut Vec<u8>, depth: u32) {
        let wire = rng.below(if depth < 3 { 5 } else { 4 });
        let wire = [0u64, 1, 2, 5, 3][wire as usize];
        varint(out, (u64::from(number) << 3) | wire);
        match wire {
            0 => varint(out, rng.next() >> rng.below(64)),
            1 => out.extend(rng.next().to_le_bytes()),
            2 => {
                let len = rng.below(6);
                varint(out, len);
                out.extend((0..len).map(|_| rng.next() as u8));
            }
            5 => out.extend((rng.next() as u32).to_le_bytes()),
            _ => {
                for _ in 0..rng.below(3) {
                    junk(number + 1 + rng.below(5) as u32, rng, out, depth + 1);
                }
                varint(out, (u64::from(number) << 3) | 4);
            }
        }
    }
}
