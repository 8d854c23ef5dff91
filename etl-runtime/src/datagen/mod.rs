//! `source.datagen`: records synthesized from an Avro schema (the reader schema, or for other
//! formats one of the same shape) and encoded in the pipeline's format, for runs without a Kafka
//! broker.

mod protobuf;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use apache_avro::Schema;
use apache_avro::schema::Name;
use apache_avro::types::Value;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::engine::errors::SourceError;
use crate::engine::handle::PipelineHandle;
use crate::engine::lane::{Lane, Record};
use crate::engine::source::Source;

/// `source.datagen`.
#[derive(Debug, Clone)]
pub struct DatagenConfig {
    /// Records per second over all partitions; 0 = as fast as the pipeline takes them.
    pub rate: u64,
    /// Records in total over all partitions; 0 = unbounded.
    pub count: u64,
    /// The seed of the generator: the same seed gives the same records.
    pub seed: u64,
    /// The number of partitions (lanes); offsets run from 0 in each.
    pub partitions: u32,
    /// How each datum is framed.
    pub wire: Wire,
    /// How each datum is encoded.
    pub encoding: Encoding,
}

/// How a synthesized value is encoded (`format.avro`, `format.json` or `format.protobuf`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Encoding {
    /// Avro's binary encoding.
    #[default]
    Avro,
    /// One JSON document: records as objects, enums as their symbols, timestamps as RFC 3339
    /// strings, dates as `YYYY-MM-DD`, UUIDs in their canonical form.
    Json,
    /// Protobuf: the schema's fields carry `proto` attributes (numbers and wire types) and its
    /// record `proto_indexes` (see `etl-gen`'s `proto_schema::datagen_schema`).
    Protobuf,
}

/// How a datagen payload is framed (`format.avro.wire`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// The bare Avro datum.
    Raw,
    /// The Confluent framing: magic byte 0, the 4-byte big-endian schema id, then the datum.
    Confluent {
        /// The schema id written in the frame.
        schema_id: u32,
    },
}

impl Default for DatagenConfig {
    fn default() -> Self {
        DatagenConfig { rate: 0, count: 0, seed: 0, partitions: 1, wire: Wire::Raw, encoding: Encoding::Avro }
    }
}

/// The datagen source: one lane per partition, each generating its share of `count` records.
///
/// The offsets its lanes store are kept in memory ([`DatagenSource::stored_offsets`]), so tests and
/// local runs can see what a Kafka source would have committed.
#[derive(Debug)]
pub struct DatagenSource {
    schema: Arc<Schema>,
    names: Arc<HashMap<Name, Schema>>,
    config: DatagenConfig,
    stored: Arc<Mutex<BTreeMap<i32, i64>>>,
}

/// The schema cannot be used for data generation.
#[derive(Debug, thiserror::Error)]
#[error("datagen: {0}")]
pub struct DatagenError(String);

impl DatagenSource {
    /// A datagen source for `schema`.
    pub fn new(schema: Schema, config: DatagenConfig) -> Result<Self, DatagenError> {
        let names = names_of(&schema).map_err(|e| DatagenError(e.to_string()))?;
        if config.partitions == 0 {
            return Err(DatagenError("partitions must be at least 1".into()));
        }
        Ok(DatagenSource { schema: Arc::new(schema), names: Arc::new(names), config, stored: Arc::default() })
    }

    /// The last `next_offset` each partition stored.
    pub fn stored_offsets(&self) -> Arc<Mutex<BTreeMap<i32, i64>>> {
        self.stored.clone()
    }
}

impl Source for DatagenSource {
    fn start(&mut self, pipeline: PipelineHandle) -> Result<(), SourceError> {
        let partitions = u64::from(self.config.partitions);
        for partition in 0..self.config.partitions {
            let p = u64::from(partition);
            let limit = (self.config.count > 0)
                .then(|| self.config.count / partitions + u64::from(p < self.config.count % partitions));
            let rate = (self.config.rate > 0).then(|| self.config.rate as f64 / partitions as f64);
            pipeline.add_lane(Box::new(DatagenLane {
                partition: partition as i32,
                schema: self.schema.clone(),
                names: self.names.clone(),
                rng: StdRng::seed_from_u64(self.config.seed.wrapping_add(p.wrapping_mul(0x9E37_79B9_7F4A_7C15))),
                next_offset: 0,
                limit,
                rate,
                started: Instant::now(),
                wire: self.config.wire,
                encoding: self.config.encoding,
                buffer: Vec::new(),
                paused: false,
                stored: self.stored.clone(),
            }));
        }
        pipeline.set_source_ready(true);
        Ok(())
    }

    fn is_finite(&self) -> bool {
        self.config.count > 0
    }
}

/// The topic a datagen lane reports (`_topic` in expressions, the `topic` label of metrics): a
/// synthetic source reads no topic.
pub(crate) const TOPIC: &str = "datagen";

struct DatagenLane {
    partition: i32,
    schema: Arc<Schema>,
    names: Arc<HashMap<Name, Schema>>,
    rng: StdRng,
    next_offset: i64,
    limit: Option<u64>,
    rate: Option<f64>,
    started: Instant,
    wire: Wire,
    encoding: Encoding,
    buffer: Vec<u8>,
    paused: bool,
    stored: Arc<Mutex<BTreeMap<i32, i64>>>,
}

impl Lane for DatagenLane {
    fn topic(&self) -> &str {
        TOPIC
    }

    fn partition(&self) -> i32 {
        self.partition
    }

    fn next(&mut self) -> Option<Result<Record<'_>, SourceError>> {
        if self.paused || self.is_finished() {
            return None;
        }
        if let Some(rate) = self.rate {
            let allowed = self.started.elapsed().as_secs_f64() * rate;
            if self.next_offset as f64 >= allowed {
                return None;
            }
        }
        let value = random_value(&self.schema, &self.names, &mut self.rng, 0, Policy::of(self.encoding));
        self.buffer.clear();
        if let Err(error) = encode(&self.schema, &self.names, value, self.encoding, self.wire, &mut self.buffer) {
            return Some(Err(SourceError::fatal(format!("datagen could not encode a datum: {error}"))));
        }
        let offset = self.next_offset;
        self.next_offset += 1;
        let timestamp_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        Some(Ok(Record {
            payload: Some(&self.buffer),
            key: None,
            topic: TOPIC,
            partition: self.partition,
            offset,
            timestamp_ms: Some(timestamp_ms),
            headers: crate::engine::headers::Headers::NONE,
        }))
    }

    fn is_finished(&self) -> bool {
        self.limit.is_some_and(|limit| self.next_offset as u64 >= limit)
    }

    fn pause(&mut self) {
        self.paused = true;
    }

    fn resume(&mut self) {
        self.paused = false;
    }

    fn store_offset(&mut self, next_offset: i64) -> Result<(), SourceError> {
        self.stored
            .lock()
            .map_err(|_| SourceError::fatal("offset store poisoned"))?
            .insert(self.partition, next_offset);
        Ok(())
    }
}

/// The named types of `schema`, by name: what references resolve to.
pub(crate) fn names_of(schema: &Schema) -> Result<HashMap<Name, Schema>, apache_avro::Error> {
    let resolved = apache_avro::schema::ResolvedSchema::try_from(schema)?;
    Ok(resolved.get_names().iter().map(|(name, schema)| (name.clone(), (*schema).clone())).collect())
}

/// Appends `value` (of `schema`, whose named types are `names`), framed as `wire` says and
/// encoded as `encoding` says, to `out`.
pub(crate) fn encode(
    schema: &Schema,
    names: &HashMap<Name, Schema>,
    value: Value,
    encoding: Encoding,
    wire: Wire,
    out: &mut Vec<u8>,
) -> Result<(), apache_avro::Error> {
    if let Wire::Confluent { schema_id } = wire {
        out.push(0);
        out.extend_from_slice(&schema_id.to_be_bytes());
        if encoding == Encoding::Protobuf {
            protobuf::message_indexes(schema, out);
        }
    }
    match encoding {
        Encoding::Avro => out.extend_from_slice(&apache_avro::to_avro_datum(schema, value)?),
        Encoding::Json => json_value(Some(schema), &value, out),
        Encoding::Protobuf => protobuf::message(schema, names, &value, out),
    }
    Ok(())
}

/// `value` as JSON, as `format.json` reads it back. A record field whose schema carries a
/// `json_key` attribute (a JSON key that is no Avro name, `user-agent`) is written under that key,
/// an enum with `json_symbols` (strings that are no Avro names) as those strings, a fixed with
/// `json_format` (an IPv4 or IPv6 address) as the address's text;
/// `schema` follows the value where it can (`None` below a reference: names as they are).
fn json_value(schema: Option<&Schema>, value: &Value, out: &mut Vec<u8>) {
    use crate::codec::json;
    let schema = match schema {
        Some(Schema::Ref { .. }) | None => None,
        s => s,
    };
    match value {
        Value::Null => json::null(out),
        Value::Boolean(b) => json::boolean(out, *b),
        Value::Int(i) => json::int(out, i64::from(*i)),
        Value::Date(days) => json::date(out, *days),
        Value::Long(i) => json::int(out, *i),
        Value::Float(f) => json::float(out, f64::from(*f)),
        Value::Double(f) => json::float(out, *f),
        Value::String(s) => json::string(out, s),
        // An address field of a JSON Schema (`format: ipv4|ipv6`) is a fixed of its bytes.
        Value::Fixed(_, b) if matches!(schema, Some(Schema::Fixed(f)) if f.attributes.contains_key("json_format")) => {
            match <[u8; 4]>::try_from(&b[..]) {
                Ok(v4) => json::ipv4(out, u32::from_be_bytes(v4)),
                Err(_) => json::ipv6(out, b.iter().fold(0u128, |acc, &byte| acc << 8 | u128::from(byte))),
            }
        }
        Value::Bytes(b) | Value::Fixed(_, b) => json::bytes(out, b),
        // A JSON enum whose strings are no Avro names carries them in `json_symbols`.
        Value::Enum(index, symbol) => {
            let text = match schema {
                Some(Schema::Enum(e)) => e
                    .attributes
                    .get("json_symbols")
                    .and_then(|s| s.get(*index as usize))
                    .and_then(serde_json::Value::as_str),
                _ => None,
            };
            json::string(out, text.unwrap_or(symbol))
        }
        Value::Union(index, inner) => {
            let branch = match schema {
                Some(Schema::Union(u)) => u.variants().get(*index as usize),
                _ => None,
            };
            json_value(branch, inner, out)
        }
        Value::Array(items) => {
            let item_schema = match schema {
                Some(Schema::Array(a)) => Some(&*a.items),
                _ => None,
            };
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                json_value(item_schema, item, out);
            }
            out.push(b']');
        }
        Value::Map(entries) => {
            let value_schema = match schema {
                Some(Schema::Map(m)) => Some(&*m.types),
                _ => None,
            };
            out.push(b'{');
            for (i, (key, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                json::string(out, key);
                out.push(b':');
                json_value(value_schema, item, out);
            }
            out.push(b'}');
        }
        Value::Record(fields) => {
            let record = match schema {
                Some(Schema::Record(r)) => Some(r),
                _ => None,
            };
            out.push(b'{');
            for (i, (name, item)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let field = record.and_then(|r| r.fields.get(i)).filter(|f| &f.name == name);
                let key = field
                    .and_then(|f| f.custom_attributes.get("json_key"))
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or(name);
                json::string(out, key);
                out.push(b':');
                json_value(field.map(|f| &f.schema), item, out);
            }
            out.push(b'}');
        }
        Value::TimestampMillis(ms) => json::timestamp(out, *ms, 3),
        Value::TimestampMicros(us) => json::timestamp(out, *us, 6),
        Value::Uuid(u) => json::uuid(out, u.as_u128()),
        // Types `format.json` has no mapping for: their text, so a document still parses.
        other => json::string(out, &format!("{other:?}")),
    }
}

/// Nesting beyond this depth picks the shortest value (empty arrays and maps, the null branch), so
/// recursive schemas terminate.
const MAX_DEPTH: usize = 8;

/// One value in this many is an edge value (an integer width's minimum or maximum, an empty,
/// long or non-ASCII string, a non-finite float, a far timestamp); the rest look like ordinary
/// data, so that the bench and the soak measure realistic rows.
const EDGE_ONE_IN: u32 = 8;

/// The earliest and latest instants every timestamp mapping holds (`DateTime64(3|6|9)` and
/// `Date32`: 1900-01-01 to 2261-12-31), in seconds since the epoch.
const EARLIEST_SECOND: i64 = -2_208_988_800;
const LATEST_SECOND: i64 = 9_183_110_399;

/// What random values may be, by the encoding they are written in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    /// Whether floats may be NaN or infinite: not in JSON, which has no such numbers.
    pub(crate) non_finite: bool,
}

impl Policy {
    /// The policy of `encoding`: its mapping's NaN and infinity rules.
    pub(crate) fn of(encoding: Encoding) -> Self {
        Policy { non_finite: encoding != Encoding::Json }
    }
}

fn edge(rng: &mut StdRng) -> bool {
    rng.random_ratio(1, EDGE_ONE_IN)
}

/// Characters that stress readers and writers: quotes and backslashes (escaped in JSON), control
/// characters, the separators JavaScript treats as line ends, a byte-order mark, two- three- and
/// four-byte UTF-8 (the last a surrogate pair in JSON's `\u` form).
const AWKWARD: &[char] = &[
    '"',
    '\\',
    '/',
    '\u{0}',
    '\u{1}',
    '\t',
    '\n',
    '\r',
    '\u{1f}',
    '\u{7f}',
    '\u{80}',
    'é',
    'ß',
    '\u{2028}',
    '\u{2029}',
    '\u{feff}',
    '€',
    '中',
    '\u{fffd}',
    '\u{ffff}',
    '😀',
    '\u{10ffff}',
];

fn random_string(rng: &mut StdRng, max: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    if edge(rng) {
        return match rng.random_range(0..4) {
            0 => String::new(),
            // Long: past every small-string and one-byte-length fast path.
            1 => (0..rng.random_range(128..2_048))
                .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
                .collect(),
            // Awkward characters only.
            2 => (0..rng.random_range(1..=max)).map(|_| AWKWARD[rng.random_range(0..AWKWARD.len())]).collect(),
            // Any scalar value, ASCII mixed in.
            _ => (0..rng.random_range(1..=max))
                .map(|_| {
                    if rng.random_bool(0.3) {
                        ALPHABET[rng.random_range(0..ALPHABET.len())] as char
                    } else {
                        rng.random::<char>()
                    }
                })
                .collect(),
        };
    }
    let len = rng.random_range(1..=max);
    (0..len).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// An instant in milliseconds: within the last day mostly, sometimes anywhere in
/// 1900-01-01..2261-12-31 (its ends included).
fn random_ms(rng: &mut StdRng) -> i64 {
    if !edge(rng) {
        return now_ms() - rng.random_range(0..86_400_000);
    }
    match rng.random_range(0..4) {
        0 => EARLIEST_SECOND * 1_000,
        1 => LATEST_SECOND * 1_000 + 999,
        2 => rng.random_range(-1_000..1_000),
        _ => rng.random_range(EARLIEST_SECOND * 1_000..=LATEST_SECOND * 1_000 + 999),
    }
}

/// An integer of `bits` bits (32 or 64): small mostly, sometimes the width's minimum, maximum,
/// 0, -1, or anything in it.
fn random_int(rng: &mut StdRng, bits: u32, usual: std::ops::RangeInclusive<i64>) -> i64 {
    if !edge(rng) {
        return rng.random_range(usual);
    }
    let (min, max) = if bits == 32 { (i64::from(i32::MIN), i64::from(i32::MAX)) } else { (i64::MIN, i64::MAX) };
    match rng.random_range(0..6) {
        0 => min,
        1 => max,
        2 => 0,
        3 => -1,
        4 => min + 1,
        _ => rng.random_range(min..=max),
    }
}

/// A float: ordinary mostly, sometimes an edge (±0, the smallest subnormal, the largest finite
/// value, and where `policy` allows NaN and the infinities).
fn random_float(rng: &mut StdRng, policy: Policy, min_positive: f64, max: f64) -> f64 {
    if !edge(rng) {
        return rng.random_range(-1_000.0..1_000.0);
    }
    let finite = [0.0, -0.0, min_positive, -min_positive, max, -max, 1e-7, 123_456_789.125];
    let all = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
    let i = rng.random_range(0..finite.len() + if policy.non_finite { all.len() } else { 0 });
    finite.get(i).copied().unwrap_or_else(|| all[i - finite.len()])
}

/// How many elements an array or map gets: a few mostly, sometimes none or many.
fn random_len(rng: &mut StdRng, deep: bool) -> usize {
    if deep {
        0
    } else if edge(rng) {
        [0, 1, rng.random_range(16..64)][rng.random_range(0..3)]
    } else {
        rng.random_range(0..4)
    }
}

/// `value` with every string in it replaced by a JSON object holding that string.
fn json_objects(value: Value) -> Value {
    match value {
        Value::String(s) => Value::String(serde_json::json!({ "s": s }).to_string()),
        Value::Union(i, inner) => Value::Union(i, Box::new(json_objects(*inner))),
        Value::Array(items) => Value::Array(items.into_iter().map(json_objects).collect()),
        Value::Map(entries) => Value::Map(entries.into_iter().map(|(k, v)| (k, json_objects(v))).collect()),
        other => other,
    }
}

/// A random value of `schema`; `names` resolves references to named types, `policy` says what
/// the encoding can carry.
pub(crate) fn random_value(
    schema: &Schema,
    names: &HashMap<Name, Schema>,
    rng: &mut StdRng,
    depth: usize,
    policy: Policy,
) -> Value {
    let deep = depth >= MAX_DEPTH;
    let inner = |schema: &Schema, rng: &mut StdRng| random_value(schema, names, rng, depth + 1, policy);
    match schema {
        Schema::Null => Value::Null,
        Schema::Boolean => Value::Boolean(rng.random_bool(0.5)),
        Schema::Int => Value::Int(random_int(rng, 32, -1_000..=1_000_000) as i32),
        Schema::Long => Value::Long(random_int(rng, 64, -1_000..=1_000_000_000)),
        Schema::Float => {
            Value::Float(random_float(rng, policy, f64::from(f32::from_bits(1)), f64::from(f32::MAX)) as f32)
        }
        Schema::Double => Value::Double(random_float(rng, policy, f64::from_bits(1), f64::MAX)),
        Schema::Bytes => Value::Bytes((0..random_len(rng, false) * 4).map(|_| rng.random()).collect()),
        Schema::String => Value::String(random_string(rng, 12)),
        Schema::Array(array) => {
            let len = random_len(rng, deep);
            Value::Array((0..len).map(|_| inner(&array.items, rng)).collect())
        }
        Schema::Map(map) => {
            let len = random_len(rng, deep);
            Value::Map((0..len).map(|_| (random_string(rng, 8), inner(&map.types, rng))).collect())
        }
        Schema::Union(union) => {
            let variants = union.variants();
            let null = variants.iter().position(|v| matches!(v, Schema::Null));
            let index = match null {
                Some(null) if deep => null,
                _ => rng.random_range(0..variants.len()),
            };
            Value::Union(index as u32, Box::new(inner(&variants[index], rng)))
        }
        Schema::Record(record) => Value::Record(
            record
                .fields
                .iter()
                .map(|f| {
                    let value = inner(&f.schema, rng);
                    // A string of logicalType json (`etl-gen` marks its field): a JSON object.
                    let value = if f.custom_attributes.contains_key("etl_json") { json_objects(value) } else { value };
                    (f.name.clone(), value)
                })
                .collect(),
        ),
        Schema::Enum(e) => {
            let index = rng.random_range(0..e.symbols.len());
            Value::Enum(index as u32, e.symbols[index].clone())
        }
        Schema::Fixed(fixed) => Value::Fixed(fixed.size, (0..fixed.size).map(|_| rng.random()).collect()),
        Schema::Decimal(decimal) => {
            // Up to the precision's every digit (38 at most, an i128), the size of a fixed
            // permitting.
            let fits = match &*decimal.inner {
                Schema::Fixed(fixed) => ((fixed.size * 8 - 1) as f64 * std::f64::consts::LOG10_2) as usize,
                _ => 38,
            };
            let digits = decimal.precision.clamp(1, 38).min(fits) as u32;
            let bound = 10i128.pow(digits) - 1;
            let unscaled: i128 = if edge(rng) {
                [bound, -bound, 0, 1, -1][rng.random_range(0..5)]
            } else {
                rng.random_range(-bound.min(999_999_999)..=bound.min(999_999_999))
            };
            let be = unscaled.to_be_bytes();
            let bytes = match &*decimal.inner {
                Schema::Fixed(fixed) => {
                    let fill = if unscaled < 0 { 0xFF } else { 0 };
                    let mut out = vec![fill; fixed.size.saturating_sub(16)];
                    out.extend_from_slice(&be[16usize.saturating_sub(fixed.size)..]);
                    out
                }
                // The shortest two's-complement form, as writers send it.
                _ => {
                    let skip = be
                        .windows(2)
                        .take_while(|w| (w[0] == 0 && w[1] < 0x80) || (w[0] == 0xFF && w[1] >= 0x80))
                        .count();
                    be[skip..].to_vec()
                }
            };
            Value::Decimal(apache_avro::Decimal::from(bytes))
        }
        Schema::BigDecimal => {
            Value::BigDecimal(apache_avro::BigDecimal::from(rng.random_range(-1_000_000i64..1_000_000)))
        }
        Schema::Uuid => Value::Uuid(apache_avro::Uuid::from_bytes(if edge(rng) {
            [[0; 16], [0xFF; 16]][rng.random_range(0..2)]
        } else {
            rng.random()
        })),
        Schema::Date => Value::Date(if edge(rng) {
            [(EARLIEST_SECOND / 86_400) as i32, (LATEST_SECOND / 86_400) as i32, -1, 0][rng.random_range(0..4)]
        } else {
            rng.random_range(0..25_000)
        }),
        Schema::TimeMillis => Value::TimeMillis(rng.random_range(0..86_400_000)),
        Schema::TimeMicros => Value::TimeMicros(rng.random_range(0..86_400_000_000)),
        Schema::TimestampMillis => Value::TimestampMillis(random_ms(rng)),
        Schema::TimestampMicros => Value::TimestampMicros(random_ms(rng) * 1_000 + rng.random_range(0..1_000)),
        Schema::TimestampNanos => Value::TimestampNanos(random_ms(rng) * 1_000_000 + rng.random_range(0..1_000_000)),
        Schema::LocalTimestampMillis => Value::LocalTimestampMillis(random_ms(rng)),
        Schema::LocalTimestampMicros => Value::LocalTimestampMicros(random_ms(rng) * 1_000),
        Schema::LocalTimestampNanos => Value::LocalTimestampNanos(random_ms(rng) * 1_000_000),
        Schema::Duration => Value::Duration(apache_avro::Duration::new(
            apache_avro::Months::new(rng.random_range(0..24)),
            apache_avro::Days::new(rng.random_range(0..31)),
            apache_avro::Millis::new(rng.random_range(0..86_400_000)),
        )),
        Schema::Ref { name } => match names.get(name) {
            Some(schema) => random_value(schema, names, rng, depth + 1, policy),
            None => Value::Null,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = r#"{
      "type": "record", "name": "Order", "namespace": "shop",
      "fields": [
        {"name": "order_id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "region", "type": {"type": "enum", "name": "Region", "symbols": ["EU", "US", "APAC"]}},
        {"name": "total", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
        {"name": "price", "type": {"type": "fixed", "name": "Price", "size": 6, "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "coupon", "type": ["null", "string"]},
        {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "Item",
            "fields": [{"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}},
        {"name": "attrs", "type": {"type": "map", "values": "double"}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "next", "type": ["null", "Item"]},
        {"name": "ok", "type": "boolean"},
        {"name": "ratio", "type": "float"}
      ]}"#;

    // Every generated payload decodes with the schema it was generated from, for every type the
    // schema language offers, with the Confluent framing in front.
    #[test]
    fn generated_datums_decode_with_the_schema() {
        let schema = Schema::parse_str(SCHEMA).unwrap();
        let mut source = DatagenSource::new(
            schema.clone(),
            DatagenConfig {
                count: 3,
                seed: 7,
                partitions: 1,
                wire: Wire::Confluent { schema_id: 1 },
                rate: 0,
                encoding: Encoding::Avro,
            },
        )
        .unwrap();
        let mut lane = DatagenLane {
            partition: 0,
            schema: source.schema.clone(),
            names: source.names.clone(),
            rng: StdRng::seed_from_u64(7),
            next_offset: 0,
            limit: Some(200),
            rate: None,
            started: Instant::now(),
            wire: Wire::Confluent { schema_id: 1 },
            encoding: Encoding::Avro,
            buffer: Vec::new(),
            paused: false,
            stored: source.stored.clone(),
        };
        let mut decoded = 0;
        while let Some(record) = lane.next() {
            let record = record.unwrap();
            let payload = record.payload.unwrap();
            assert_eq!(&payload[..5], &[0, 0, 0, 0, 1]);
            let value = apache_avro::from_avro_datum(&schema, &mut &payload[5..], None).unwrap();
            assert!(matches!(value, Value::Record(ref fields) if fields.len() == 16));
            assert_eq!(record.offset, decoded);
            decoded += 1;
        }
        assert_eq!(decoded, 200);
        assert!(lane.is_finished());
        assert!(source.is_finite());
        source.config.count = 0;
        assert!(!source.is_finite());
    }

    // JSON documents carry every value in the form `format.json` reads: they parse, records are
    // objects with the schema's keys, enums are symbols, timestamps RFC 3339 strings.
    #[test]
    fn json_documents_parse_and_carry_the_schema_keys() {
        let schema = Schema::parse_str(SCHEMA).unwrap();
        let payloads = crate::chain_harness::sample_payloads(&schema, Encoding::Json, Wire::Raw, 3, 50);
        for p in &payloads {
            let doc: serde_json::Value = serde_json::from_slice(p).unwrap();
            let object = doc.as_object().unwrap();
            assert_eq!(object.len(), 16);
            assert!(["EU", "US", "APAC"].contains(&object["region"].as_str().unwrap()));
            let at = object["at_us"].as_str().unwrap();
            assert!(at.ends_with('Z') && at.len() == "2024-01-01T00:00:00.000000Z".len(), "{at}");
            assert_eq!(object["day"].as_str().unwrap().len(), 10);
        }
    }
}
