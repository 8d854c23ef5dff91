//! Reading Avro binary encoding from a byte slice that advances as values are read.
//!
//! Strings and bytes are borrowed from the message buffer: the decoder allocates only for
//! arrays and maps.

use crate::engine::errors::{RecordError, RecordErrorKind};

pub use super::last_key_wins;

/// Why a datum did not decode. One pointer wide, so that `Result<i64, DecodeError>` comes
/// back in registers: the decoder's hot path pays nothing for its error type. It becomes a
/// [`RecordError`] (with `?`) only when a record fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeError(&'static str);

impl From<DecodeError> for RecordError {
    #[cold]
    fn from(e: DecodeError) -> Self {
        RecordError::new(RecordErrorKind::Decode, e.0)
    }
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

#[cold]
fn truncated() -> DecodeError {
    DecodeError("truncated Avro datum")
}

#[cold]
fn invalid(what: &'static str) -> DecodeError {
    DecodeError(what)
}

/// A zigzag varint `long`.
///
/// Always inlined: a record reads several, and as a call it was a third of the chain's time.
#[inline(always)]
pub fn long(buf: &mut &[u8]) -> Result<i64, DecodeError> {
    let bytes = *buf;
    // One byte (-64..=63) is the commonest case: indexes, lengths, small numbers.
    if let Some(&first) = bytes.first()
        && first < 0x80
    {
        *buf = &bytes[1..];
        return Ok(unzigzag(u64::from(first)));
    }
    // With eight bytes readable, a value of up to eight bytes (56 bits: every millisecond
    // timestamp, every id below 2^55) is decoded without a loop: find the first byte whose
    // continuation bit is clear, keep the bytes up to it, and pack their 7-bit groups.
    if let Some(word) = bytes.first_chunk::<8>()
        && let Some((len, value)) = packed(u64::from_le_bytes(*word), u64::MAX)
    {
        *buf = &bytes[len..];
        return Ok(value);
    }
    long_slow(buf)
}

/// The varint at the start of `word` (eight little-endian bytes), if it ends within the bytes
/// `real` covers: its length and value.
#[inline(always)]
fn packed(word: u64, real: u64) -> Option<(usize, i64)> {
    let stops = !word & 0x8080_8080_8080_8080 & real;
    if stops == 0 {
        return None;
    }
    let len = (stops.trailing_zeros() as usize + 1) / 8;
    Some((len, unzigzag(pack_groups(word & (stops ^ (stops - 1))))))
}

/// Packs the 7-bit groups of up to eight little-endian varint bytes into one number.
#[inline(always)]
fn pack_groups(word: u64) -> u64 {
    let x = word & 0x7f7f_7f7f_7f7f_7f7f;
    let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
    let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
    (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4)
}

/// A varint near the end of the buffer (fewer than eight bytes left: the last field of every
/// record), or nine or ten bytes long.
#[inline(never)]
fn long_slow(buf: &mut &[u8]) -> Result<i64, DecodeError> {
    let bytes = *buf;
    if bytes.len() < 8 {
        // The same packing on a zero-padded copy; only the real bytes may hold the stop (the
        // padding's clear continuation bits would look like one).
        if bytes.is_empty() {
            return Err(truncated());
        }
        let mut padded = [0u8; 8];
        padded[..bytes.len()].copy_from_slice(bytes);
        let real = u64::MAX >> (64 - 8 * bytes.len());
        let (len, value) = packed(u64::from_le_bytes(padded), real).ok_or_else(truncated)?;
        *buf = &bytes[len..];
        return Ok(value);
    }
    // Nine or ten bytes. `i < n <= len` lets the compiler drop the bounds checks.
    let n = bytes.len().min(10);
    let mut value: u64 = 0;
    for i in 0..n {
        let byte = bytes[i];
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *buf = &bytes[i + 1..];
            return Ok(unzigzag(value));
        }
    }
    Err(if n == 10 { invalid("Avro varint longer than 10 bytes") } else { truncated() })
}

#[inline(always)]
fn unzigzag(value: u64) -> i64 {
    (value >> 1) as i64 ^ -((value & 1) as i64)
}

/// A zigzag varint `int`.
#[inline]
pub fn int(buf: &mut &[u8]) -> Result<i32, DecodeError> {
    let v = long(buf)?;
    i32::try_from(v).map_err(|_| invalid("Avro int out of range"))
}

/// A `boolean` (one byte, 0 or 1).
#[inline]
pub fn boolean(buf: &mut &[u8]) -> Result<bool, DecodeError> {
    let (&byte, rest) = buf.split_first().ok_or_else(truncated)?;
    *buf = rest;
    match byte {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(invalid("Avro boolean byte other than 0 or 1")),
    }
}

/// A `float` (4 bytes little-endian).
#[inline]
pub fn float(buf: &mut &[u8]) -> Result<f32, DecodeError> {
    Ok(f32::from_le_bytes(fixed(buf, 4)?.try_into().expect("4 bytes")))
}

/// A `double` (8 bytes little-endian).
#[inline]
pub fn double(buf: &mut &[u8]) -> Result<f64, DecodeError> {
    Ok(f64::from_le_bytes(fixed(buf, 8)?.try_into().expect("8 bytes")))
}

/// `n` raw bytes (a `fixed`).
#[inline]
pub fn fixed<'a>(buf: &mut &'a [u8], n: usize) -> Result<&'a [u8], DecodeError> {
    if buf.len() < n {
        return Err(truncated());
    }
    let (head, rest) = buf.split_at(n);
    *buf = rest;
    Ok(head)
}

/// `bytes`: a length, then the bytes.
#[inline]
pub fn bytes<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8], DecodeError> {
    let len = long(buf)?;
    let len = usize::try_from(len).map_err(|_| invalid("negative Avro length"))?;
    fixed(buf, len)
}

/// `string`: `bytes` that must be UTF-8.
#[inline]
pub fn string<'a>(buf: &mut &'a [u8]) -> Result<&'a str, DecodeError> {
    std::str::from_utf8(bytes(buf)?).map_err(|_| invalid("Avro string is not UTF-8"))
}

/// An `enum` symbol index below `symbols`.
#[inline]
pub fn enum_index(buf: &mut &[u8], symbols: u32) -> Result<u32, DecodeError> {
    let i = long(buf)?;
    u32::try_from(i).ok().filter(|i| *i < symbols).ok_or_else(|| invalid("Avro enum index out of range"))
}

/// A union branch index below `branches`.
#[inline]
pub fn union_index(buf: &mut &[u8], branches: u32) -> Result<u32, DecodeError> {
    let i = long(buf)?;
    u32::try_from(i).ok().filter(|i| *i < branches).ok_or_else(|| invalid("Avro union index out of range"))
}

/// How many items of a type that takes no bytes (an empty record) one block may hold. Such a
/// block is valid at any count, but each item still costs a loop turn (and a row, under
/// `flat_map`), so a corrupt count must not spin for 2^63 turns.
pub const MAX_ZERO_SIZE_ITEMS: u64 = 1 << 20;

/// Adds a block's count to the running total of an array whose items take no bytes, so that the
/// whole array, not only each block, stays within [`MAX_ZERO_SIZE_ITEMS`]: a few bytes per block
/// could otherwise describe 2^38 items in one message.
#[inline]
pub fn zero_size_items(total: &mut u64, n: usize) -> Result<(), DecodeError> {
    *total += n as u64;
    if *total > MAX_ZERO_SIZE_ITEMS {
        return Err(invalid("more items of a zero-byte type than one Avro datum may hold"));
    }
    Ok(())
}

/// The item count of the next array or map block; 0 ends the container. A negative count
/// is followed by the block's size in bytes, which is skipped over.
///
/// `min_item_bytes` is the fewest bytes one item can take (the generator knows it from the
/// schema): a count that cannot fit in the bytes left is corrupt and must not reach
/// `Vec::reserve`. Items that take no bytes are valid at any count up to
/// [`MAX_ZERO_SIZE_ITEMS`].
#[inline]
pub fn block_count(buf: &mut &[u8], min_item_bytes: u64) -> Result<usize, DecodeError> {
    let n = long(buf)?;
    if n < 0 {
        long(buf)?;
    }
    let n = n.unsigned_abs();
    let limit = match min_item_bytes {
        0 => MAX_ZERO_SIZE_ITEMS,
        min => buf.len() as u64 / min,
    };
    if n > limit {
        return Err(invalid("Avro block count exceeds the datum"));
    }
    Ok(n as usize)
}

/// A `decimal` stored as big-endian two's complement bytes.
#[inline]
pub fn decimal(bytes: &[u8]) -> Result<i128, DecodeError> {
    if bytes.len() > 16 {
        return Err(invalid("Avro decimal wider than 16 bytes"));
    }
    let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
    let mut wide = if negative { [0xffu8; 16] } else { [0u8; 16] };
    wide[16 - bytes.len()..].copy_from_slice(bytes);
    Ok(i128::from_be_bytes(wide))
}

/// A string of `"logicalType": "json"` for a `JSON` column: it must be a JSON object (checked,
/// kept as written).
#[inline]
pub fn json_object(text: &str) -> Result<std::borrow::Cow<'_, str>, DecodeError> {
    let mut doc = super::json_read::Reader::new(text.as_bytes());
    match doc.json_object("").and_then(|object| doc.end().map(|()| object)) {
        Ok(object) => Ok(object),
        Err(_) => Err(invalid("Avro string of logicalType json is not a JSON object")),
    }
}

/// A `uuid` string (`8-4-4-4-12` hex digits) as a number.
#[inline]
pub fn uuid(text: &str) -> Result<u128, DecodeError> {
    let bytes = text.as_bytes();
    if bytes.len() != 36 || [8, 13, 18, 23].iter().any(|&i| bytes[i] != b'-') {
        return Err(invalid("Avro uuid is not a UUID string"));
    }
    let mut value: u128 = 0;
    for &b in bytes.iter().filter(|b| **b != b'-') {
        let digit = (b as char).to_digit(16).ok_or_else(|| invalid("Avro uuid is not a UUID string"))?;
        value = value << 4 | u128::from(digit);
    }
    Ok(value)
}

/// Checks that a Confluent-framed message was written with the reader schema, when no registry
/// can resolve other writer schemas: any other id is a record error, never decoded as if the
/// reader schema had written it (a producer that evolved its schema would be mis-decoded).
#[inline]
pub fn reader_schema_id(id: u32, reader_ids: &[u32]) -> Result<(), RecordError> {
    super::reader_schema_id(
        id,
        reader_ids,
        "format.avro.schema_id",
        "without a registry its writer schema is unknown; set format.avro.registry to decode messages written \
         with other schemas",
    )
}

/// Splits a Confluent-framed message into its schema id and the datum.
#[inline]
pub fn confluent(payload: &[u8]) -> Result<(u32, &[u8]), DecodeError> {
    match payload {
        [0, a, b, c, d, datum @ ..] => Ok((u32::from_be_bytes([*a, *b, *c, *d]), datum)),
        [magic, ..] if *magic != 0 => Err(invalid("bad magic byte: not Confluent wire format")),
        _ => Err(invalid("message shorter than the 5-byte Confluent header")),
    }
}

/// Fails unless the whole datum was read: trailing bytes mean the writer used another
/// schema.
#[inline]
pub fn end(buf: &[u8]) -> Result<(), DecodeError> {
    if buf.is_empty() { Ok(()) } else { Err(invalid("bytes left after the datum: the writer used another schema")) }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The varint encoding of `v` (zigzag), as Avro writes it.
    fn varint(v: i64) -> Vec<u8> {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        let mut out = Vec::new();
        while z >= 0x80 {
            out.push((z as u8) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
        out
    }

    proptest! {
        // The packed fast path, the one-byte path and the loop near the end agree for every
        // value and every number of bytes after it.
        #[test]
        fn long_reads_every_value_at_any_distance_from_the_end(v in any::<i64>(), small in -64i64..64, tail in 0usize..12) {
            for v in [v, small, v >> 8, v >> 20, v >> 40] {
                let mut bytes = varint(v);
                let len = bytes.len();
                bytes.extend(std::iter::repeat_n(0xAB, tail));
                let mut buf = bytes.as_slice();
                prop_assert_eq!(long(&mut buf), Ok(v));
                prop_assert_eq!(buf.len(), tail, "consumed exactly the {} varint bytes", len);
            }
        }

        #[test]
        fn a_truncated_long_is_an_error(v in any::<i64>()) {
            let bytes = varint(v);
            let mut buf = &bytes[..bytes.len() - 1];
            prop_assert!(long(&mut buf).is_err());
        }
    }

    #[test]
    fn an_eleven_byte_varint_is_refused() {
        let bytes = [0xFFu8; 11];
        assert_eq!(long(&mut &bytes[..]), Err(DecodeError("Avro varint longer than 10 bytes")));
    }

    #[test]
    fn reads_what_apache_avro_writes() {
        use apache_avro::types::Value;
        let schema = apache_avro::Schema::parse_str(
            r#"{"type":"record","name":"R","fields":[
                {"name":"l","type":"long"},{"name":"i","type":"int"},{"name":"s","type":"string"},
                {"name":"b","type":"boolean"},{"name":"d","type":"double"},
                {"name":"a","type":{"type":"array","items":"int"}},
                {"name":"n","type":["null","string"]}]}"#,
        )
        .unwrap();
        let value = Value::Record(vec![
            ("l".into(), Value::Long(-1_234_567_890_123)),
            ("i".into(), Value::Int(-7)),
            ("s".into(), Value::String("héllo".into())),
            ("b".into(), Value::Boolean(true)),
            ("d".into(), Value::Double(2.5)),
            ("a".into(), Value::Array(vec![Value::Int(1), Value::Int(-2)])),
            ("n".into(), Value::Union(1, Box::new(Value::String("x".into())))),
        ]);
        let bytes = apache_avro::to_avro_datum(&schema, value).unwrap();
        let mut buf = bytes.as_slice();
        assert_eq!(long(&mut buf).unwrap(), -1_234_567_890_123);
        assert_eq!(int(&mut buf).unwrap(), -7);
        assert_eq!(string(&mut buf).unwrap(), "héllo");
        assert!(boolean(&mut buf).unwrap());
        assert_eq!(double(&mut buf).unwrap(), 2.5);
        let mut items = Vec::new();
        loop {
            let n = block_count(&mut buf, 1).unwrap();
            if n == 0 {
                break;
            }
            for _ in 0..n {
                items.push(int(&mut buf).unwrap());
            }
        }
        assert_eq!(items, [1, -2]);
        assert_eq!(union_index(&mut buf, 2).unwrap(), 1);
        assert_eq!(string(&mut buf).unwrap(), "x");
        end(buf).unwrap();
    }

    #[test]
    fn rejects_malformed_input() {
        assert!(long(&mut &[0x80u8][..]).is_err());
        assert!(string(&mut &[0x04u8, 0xff, 0xfe][..]).is_err());
        assert!(enum_index(&mut &[0x06u8][..], 3).is_err());
        assert!(block_count(&mut &[0x7eu8][..], 1).is_err(), "a count beyond the datum");
        // Items that take no bytes (empty records) fit any count up to the spin guard.
        assert_eq!(block_count(&mut &[0x7eu8][..], 0), Ok(63));
        assert!(block_count(&mut &[0x80u8, 0x80, 0x80, 0x02][..], 0).is_err(), "2^21 empty items");
        let mut total = 0;
        assert!(zero_size_items(&mut total, 1 << 19).is_ok() && zero_size_items(&mut total, 1 << 19).is_ok());
        assert!(zero_size_items(&mut total, 1).is_err(), "the limit holds across blocks");
        assert!(reader_schema_id(7, &[1, 7]).is_ok());
        let error = reader_schema_id(2, &[1]).unwrap_err();
        assert!(error.message.contains("schema id 2") && error.message.contains("format.avro.registry"), "{error}");
        assert!(confluent(&[1, 0, 0, 0, 1]).is_err());
        assert!(confluent(&[0, 0, 0]).is_err());
        assert_eq!(confluent(&[0, 0, 0, 0, 7, 42]).unwrap(), (7, &[42u8][..]));
        assert!(end(&[1]).is_err());
    }

    #[test]
    fn decimals_and_uuids() {
        assert_eq!(decimal(&[0x00, 0xff]).unwrap(), 255);
        assert_eq!(decimal(&[0xff, 0x01]).unwrap(), -255);
        assert_eq!(decimal(&[]).unwrap(), 0);
        assert_eq!(uuid("00000000-0000-0000-0000-0000000000ff").unwrap(), 255);
        assert!(uuid("not-a-uuid").is_err());
    }
}
