//! Reading Avro binary encoding from a byte slice that advances as values are read.
//!
//! Strings and bytes are borrowed from the message buffer: the decoder allocates only for
//! arrays and maps.

use crate::chain::{RecordError, RecordErrorKind};

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
#[inline]
pub fn long(buf: &mut &[u8]) -> Result<i64, DecodeError> {
    let bytes = *buf;
    // Fast path: with ten bytes available no bounds check is needed inside the loop.
    if bytes.len() >= 10 {
        let mut value: u64 = 0;
        for (i, &byte) in bytes[..10].iter().enumerate() {
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                *buf = &bytes[i + 1..];
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        return Err(invalid("Avro varint longer than 10 bytes"));
    }
    let mut value: u64 = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *buf = &bytes[i + 1..];
            return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
        }
    }
    Err(truncated())
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

/// The item count of the next array or map block; 0 ends the container. A negative count
/// is followed by the block's size in bytes, which is skipped over.
#[inline]
pub fn block_count(buf: &mut &[u8]) -> Result<usize, DecodeError> {
    let n = long(buf)?;
    if n < 0 {
        long(buf)?;
    }
    let n = n.unsigned_abs();
    // Every item takes at least one byte, so a count beyond the remaining bytes is corrupt
    // (and must not reach `Vec::with_capacity`).
    if n > buf.len() as u64 + 1 {
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
    use super::*;

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
            let n = block_count(&mut buf).unwrap();
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
        assert!(block_count(&mut &[0x7eu8][..]).is_err(), "a count beyond the datum");
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
