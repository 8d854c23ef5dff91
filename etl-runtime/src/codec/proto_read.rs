//! Reading Protobuf messages field by field, for the decoders `gen` writes for
//! `format.protobuf`.
//!
//! The generated decoder loops over a message's tags and dispatches on the field number; for a
//! number it knows it asks the [`Reader`] for the value its schema declares, and the reader
//! checks the wire type before reading. Unknown numbers, and fields the chain never reads, are
//! skipped by their wire type without looking inside. Strings and bytes are borrowed from the
//! message.

use std::borrow::Cow;

use super::field_error::{FieldError, Input};
pub use super::last_key_wins;
use crate::engine::errors::RecordError;

/// Wire type 0: a varint.
pub const VARINT: u8 = 0;
/// Wire type 1: eight bytes.
pub const I64: u8 = 1;
/// Wire type 2: a length, then that many bytes.
pub const LEN: u8 = 2;
/// Wire type 3: the start of a (deprecated, proto2) group, which ends at wire type 4.
pub const START_GROUP: u8 = 3;
/// Wire type 4: the end of a group.
pub const END_GROUP: u8 = 4;
/// Wire type 5: four bytes.
pub const I32: u8 = 5;
/// How deep groups may nest before a message is refused (Google's default recursion limit).
const MAX_GROUP_DEPTH: u32 = 100;

/// What the Protobuf reader reads, as its errors name it.
pub enum ProtobufMessage {}

impl Input for ProtobufMessage {
    const NAME: &'static str = "Protobuf message";
}

/// Why a message did not decode: what was wrong, in which field, at which byte. Converts into a
/// [`RecordError`] with `?`.
pub type ProtoError = FieldError<ProtobufMessage>;

/// Checks that a Confluent-framed message was written with the reader schema when no registry
/// is set (`format.protobuf.registry`): any other id is a record error.
#[inline]
pub fn reader_schema_id(id: u32, reader_ids: &[u32]) -> Result<(), RecordError> {
    super::reader_schema_id(
        id,
        reader_ids,
        "format.protobuf.schema_id",
        "add the id to format.protobuf.schema_id if that schema's messages are readable with the reader schema",
    )
}

/// A cursor over one message (or a nested message's bytes).
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Where `buf` starts in the whole payload, for error positions.
    base: usize,
    /// The number of the last tag read, so that [`Reader::skip`] knows which end-group tag
    /// closes a group.
    number: u32,
}

impl<'a> Reader<'a> {
    /// A reader of the message `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0, base: 0, number: 0 }
    }

    #[cold]
    fn error(&self, what: &'static str, field: &'static str) -> ProtoError {
        ProtoError::new(what, field, self.base + self.pos)
    }

    /// Whether the whole message has been read.
    #[inline]
    pub fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    #[inline(always)]
    fn varint(&mut self, field: &'static str) -> Result<u64, ProtoError> {
        // One byte is the common case (small numbers, tags, short lengths).
        if let Some(&b) = self.buf.get(self.pos)
            && b < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(b));
        }
        self.varint_long(field)
    }

    /// A varint of two bytes or more: one pass over a slice of at most ten bytes, the position
    /// moved once.
    #[inline]
    fn varint_long(&mut self, field: &'static str) -> Result<u64, ProtoError> {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        let mut value = 0u64;
        for (i, &b) in rest.iter().take(10).enumerate() {
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                if i == 9 && b > 1 {
                    break;
                }
                self.pos += i + 1;
                return Ok(value);
            }
        }
        Err(if rest.len() < 10 && rest.iter().all(|b| *b >= 0x80) {
            self.error("the message ends inside a varint", field)
        } else {
            self.error("a varint longer than 64 bits", field)
        })
    }

    #[inline]
    fn fixed<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], ProtoError> {
        match self.buf.get(self.pos..self.pos + N) {
            Some(b) => {
                self.pos += N;
                Ok(b.try_into().expect("N bytes"))
            }
            None => Err(self.error("the message ends inside a fixed-size value", field)),
        }
    }

    #[inline]
    fn delimited(&mut self, field: &'static str) -> Result<&'a [u8], ProtoError> {
        let len = self.varint(field)?;
        let end = usize::try_from(len).ok().and_then(|len| self.pos.checked_add(len));
        match end.and_then(|end| self.buf.get(self.pos..end).map(|b| (b, end))) {
            Some((bytes, end)) => {
                self.pos = end;
                Ok(bytes)
            }
            None => Err(self.error("a length beyond the end of the message", field)),
        }
    }

    #[inline]
    fn expect(&self, wire: u8, expected: u8, field: &'static str) -> Result<(), ProtoError> {
        if wire == expected { Ok(()) } else { Err(self.wrong_wire(field)) }
    }

    #[cold]
    fn wrong_wire(&self, field: &'static str) -> ProtoError {
        self.error("the wire type does not match the field's type in the schema", field)
    }

    /// The next field's number and wire type; `None` at the end of the message.
    #[inline]
    pub fn tag(&mut self) -> Result<Option<(u32, u8)>, ProtoError> {
        if self.at_end() {
            return Ok(None);
        }
        let tag = self.varint("")?;
        let number = tag >> 3;
        if number == 0 || number > u64::from(u32::MAX >> 3) {
            return Err(self.error("a field number outside 1..2^29", ""));
        }
        self.number = number as u32;
        Ok(Some((self.number, (tag & 7) as u8)))
    }

    /// Reads past one value of wire type `wire` (a field the decoder does not want), the one
    /// whose tag [`Reader::tag`] returned last.
    ///
    /// Every wire type is skipped, the deprecated groups (3 and 4) included: an unknown field
    /// is valid Protobuf whatever its wire type, and Google's parsers keep or skip it. An end
    /// group (4) with no group open is malformed, as is a group that never ends or whose end
    /// tag names another field.
    pub fn skip(&mut self, wire: u8) -> Result<(), ProtoError> {
        match wire {
            VARINT => self.varint("").map(drop),
            I64 => self.fixed::<8>("").map(drop),
            LEN => self.delimited("").map(drop),
            I32 => self.fixed::<4>("").map(drop),
            START_GROUP => self.skip_group(self.number, 0),
            END_GROUP => Err(self.error("an end-group tag with no group open", "")),
            _ => Err(self.error("an invalid wire type", "")),
        }
    }

    /// Reads past the fields of group `number` up to and including its end-group tag.
    /// Groups nest; the depth is bounded as Google's parsers bound it (100), so that a hostile
    /// message cannot exhaust the stack.
    #[cold]
    fn skip_group(&mut self, number: u32, depth: u32) -> Result<(), ProtoError> {
        if depth >= MAX_GROUP_DEPTH {
            return Err(self.error("groups nested more than 100 deep", ""));
        }
        loop {
            let Some((inner, wire)) = self.tag()? else {
                return Err(self.error("the message ends inside a group", ""));
            };
            match wire {
                END_GROUP if inner == number => return Ok(()),
                END_GROUP => return Err(self.error("an end-group tag that closes another field's group", "")),
                START_GROUP => self.skip_group(inner, depth + 1)?,
                _ => self.skip(wire)?,
            }
        }
    }

    /// `int32`: a varint holding the value sign-extended to 64 bits, truncated as protoc does.
    #[inline]
    pub fn int32(&mut self, wire: u8, field: &'static str) -> Result<i32, ProtoError> {
        self.expect(wire, VARINT, field)?;
        Ok(self.varint(field)? as i32)
    }

    /// `int64`.
    #[inline]
    pub fn int64(&mut self, wire: u8, field: &'static str) -> Result<i64, ProtoError> {
        self.expect(wire, VARINT, field)?;
        Ok(self.varint(field)? as i64)
    }

    /// `uint32` (truncated to 32 bits, as protoc does).
    #[inline]
    pub fn uint32(&mut self, wire: u8, field: &'static str) -> Result<u32, ProtoError> {
        self.expect(wire, VARINT, field)?;
        Ok(self.varint(field)? as u32)
    }

    /// `uint64`.
    #[inline]
    pub fn uint64(&mut self, wire: u8, field: &'static str) -> Result<u64, ProtoError> {
        self.expect(wire, VARINT, field)?;
        self.varint(field)
    }

    /// `sint32`: zig-zag.
    #[inline]
    pub fn sint32(&mut self, wire: u8, field: &'static str) -> Result<i32, ProtoError> {
        self.expect(wire, VARINT, field)?;
        let n = self.varint(field)? as u32;
        Ok((n >> 1) as i32 ^ -((n & 1) as i32))
    }

    /// `sint64`: zig-zag.
    #[inline]
    pub fn sint64(&mut self, wire: u8, field: &'static str) -> Result<i64, ProtoError> {
        self.expect(wire, VARINT, field)?;
        let n = self.varint(field)?;
        Ok((n >> 1) as i64 ^ -((n & 1) as i64))
    }

    /// `bool`: any non-zero varint is true.
    #[inline]
    pub fn bool(&mut self, wire: u8, field: &'static str) -> Result<bool, ProtoError> {
        self.expect(wire, VARINT, field)?;
        Ok(self.varint(field)? != 0)
    }

    /// `fixed32`.
    #[inline]
    pub fn fixed32(&mut self, wire: u8, field: &'static str) -> Result<u32, ProtoError> {
        self.expect(wire, I32, field)?;
        Ok(u32::from_le_bytes(self.fixed(field)?))
    }

    /// `fixed64`.
    #[inline]
    pub fn fixed64(&mut self, wire: u8, field: &'static str) -> Result<u64, ProtoError> {
        self.expect(wire, I64, field)?;
        Ok(u64::from_le_bytes(self.fixed(field)?))
    }

    /// `sfixed32`.
    #[inline]
    pub fn sfixed32(&mut self, wire: u8, field: &'static str) -> Result<i32, ProtoError> {
        self.expect(wire, I32, field)?;
        Ok(i32::from_le_bytes(self.fixed(field)?))
    }

    /// `sfixed64`.
    #[inline]
    pub fn sfixed64(&mut self, wire: u8, field: &'static str) -> Result<i64, ProtoError> {
        self.expect(wire, I64, field)?;
        Ok(i64::from_le_bytes(self.fixed(field)?))
    }

    /// `float`.
    #[inline]
    pub fn float(&mut self, wire: u8, field: &'static str) -> Result<f32, ProtoError> {
        self.expect(wire, I32, field)?;
        Ok(f32::from_le_bytes(self.fixed(field)?))
    }

    /// `double`.
    #[inline]
    pub fn double(&mut self, wire: u8, field: &'static str) -> Result<f64, ProtoError> {
        self.expect(wire, I64, field)?;
        Ok(f64::from_le_bytes(self.fixed(field)?))
    }

    /// `string`, borrowed; it must be UTF-8 (proto3 requires it of writers).
    #[inline]
    pub fn string(&mut self, wire: u8, field: &'static str) -> Result<Cow<'a, str>, ProtoError> {
        self.expect(wire, LEN, field)?;
        let bytes = self.delimited(field)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(Cow::Borrowed(s)),
            Err(_) => Err(self.error("a string that is not UTF-8", field)),
        }
    }

    /// `bytes`, borrowed.
    #[inline]
    pub fn bytes(&mut self, wire: u8, field: &'static str) -> Result<Cow<'a, [u8]>, ProtoError> {
        self.expect(wire, LEN, field)?;
        Ok(Cow::Borrowed(self.delimited(field)?))
    }

    /// A nested message: a reader of its bytes.
    #[inline]
    pub fn message(&mut self, wire: u8, field: &'static str) -> Result<Reader<'a>, ProtoError> {
        self.expect(wire, LEN, field)?;
        let bytes = self.delimited(field)?;
        Ok(Reader { buf: bytes, pos: 0, base: self.base + self.pos - bytes.len(), number: 0 })
    }

    /// An enum: its number, mapped to a symbol index by `symbol` (the generated match). A
    /// number the schema does not define is a record error.
    #[inline]
    pub fn enumeration(
        &mut self,
        wire: u8,
        field: &'static str,
        symbol: fn(i32) -> Option<u32>,
    ) -> Result<u32, ProtoError> {
        let n = self.int32(wire, field)?;
        symbol(n).ok_or_else(|| self.error("an enum number the schema does not define", field))
    }

    /// `google.protobuf.Timestamp`, as nanoseconds since the epoch, merged into `so_far` (the
    /// field's value from an earlier occurrence in the message, or 0): a field this occurrence
    /// does not carry keeps its earlier value, as Protobuf merges a message that comes twice.
    #[inline]
    pub fn timestamp_nanos(&mut self, wire: u8, field: &'static str, so_far: i64) -> Result<i64, ProtoError> {
        let mut m = self.message(wire, field)?;
        let (mut seconds, mut nanos) = (so_far.div_euclid(1_000_000_000), so_far.rem_euclid(1_000_000_000) as i32);
        // What writers send: seconds (tag 0x08) then nanos (tag 0x10), read without the loop;
        // anything else (another order, a repeat, unknown fields) goes on in the loop, where a
        // later value still wins.
        if m.buf.first() == Some(&0x08) {
            m.pos = 1;
            seconds = m.varint(field)? as i64;
        }
        if m.buf.get(m.pos) == Some(&0x10) {
            m.pos += 1;
            nanos = m.varint(field)? as i32;
        }
        while let Some((number, wire)) = m.tag()? {
            match number {
                1 if wire == VARINT => seconds = m.int64(wire, field)?,
                2 if wire == VARINT => nanos = m.int32(wire, field)?,
                _ => m.skip(wire)?,
            }
        }
        if !(0..1_000_000_000).contains(&nanos) {
            return Err(self.error("a Timestamp whose nanos are outside 0..10^9", field));
        }
        seconds
            .checked_mul(1_000_000_000)
            .and_then(|s| s.checked_add(i64::from(nanos)))
            .ok_or_else(|| self.error("a Timestamp outside DateTime64(9)'s range (1677..2262)", field))
    }

    /// `google.protobuf.Struct` as the text of a JSON object (for a `JSON` column), merged into
    /// `so_far` (an earlier occurrence's text, or empty): Protobuf merges a message that comes
    /// twice, and a Struct's map keeps the last entry of a key.
    pub fn json_struct(
        &mut self,
        wire: u8,
        field: &'static str,
        so_far: Cow<'a, str>,
    ) -> Result<Cow<'a, str>, ProtoError> {
        let mut m = self.message(wire, field)?;
        let mut object = earlier_object(&so_far);
        m.struct_fields(field, &mut object, 0)?;
        Ok(Cow::Owned(serde_json::Value::Object(object).to_string()))
    }

    /// `google.protobuf.Value` for a `Nullable(JSON)` column: a `struct_value` as its object's
    /// text, `null_value` (or no kind) as NULL; a number, string, bool or list is a record
    /// error (a `JSON` column holds objects). Merged into `so_far` as [`Reader::json_struct`].
    pub fn json_value(
        &mut self,
        wire: u8,
        field: &'static str,
        so_far: Option<Cow<'a, str>>,
    ) -> Result<Option<Cow<'a, str>>, ProtoError> {
        let mut m = self.message(wire, field)?;
        let earlier = so_far.map(|t| serde_json::Value::Object(earlier_object(&t)));
        match m.value(field, earlier, 0)? {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(object @ serde_json::Value::Object(_)) => Ok(Some(Cow::Owned(object.to_string()))),
            Some(_) => Err(self.error(
                "a google.protobuf.Value that is neither a struct nor null (a JSON column holds objects)",
                field,
            )),
        }
    }

    /// The entries of a Struct (field 1: `map<string, Value>`) into `object`.
    fn struct_fields(
        &mut self,
        field: &'static str,
        object: &mut serde_json::Map<String, serde_json::Value>,
        depth: u32,
    ) -> Result<(), ProtoError> {
        if depth >= MAX_GROUP_DEPTH {
            return Err(self.error("a Struct nested more than 100 deep", field));
        }
        while let Some((number, wire)) = self.tag()? {
            if number != 1 || wire != LEN {
                self.skip(wire)?;
                continue;
            }
            let mut entry = self.message(wire, field)?;
            let (mut key, mut value) = (String::new(), None);
            while let Some((number, wire)) = entry.tag()? {
                match number {
                    1 if wire == LEN => key = entry.string(wire, field)?.into_owned(),
                    // A map value that comes twice in one entry is replaced, not merged.
                    2 if wire == LEN => value = entry.message(wire, field)?.value(field, None, depth + 1)?,
                    _ => entry.skip(wire)?,
                }
            }
            // An entry without a value holds a Value of no kind: null in JSON.
            object.insert(key, value.unwrap_or(serde_json::Value::Null));
        }
        Ok(())
    }

    /// A Value message's kind as JSON, merged into `earlier` (`None`: no kind so far); `None`
    /// when neither sets one.
    fn value(
        &mut self,
        field: &'static str,
        earlier: Option<serde_json::Value>,
        depth: u32,
    ) -> Result<Option<serde_json::Value>, ProtoError> {
        use serde_json::Value as J;
        if depth >= MAX_GROUP_DEPTH {
            return Err(self.error("a Value nested more than 100 deep", field));
        }
        let mut kind = earlier;
        while let Some((number, wire)) = self.tag()? {
            kind = Some(match (number, wire) {
                (1, VARINT) => {
                    self.varint(field)?;
                    J::Null
                }
                (2, I64) => {
                    let n = self.double(wire, field)?;
                    J::Number(serde_json::Number::from_f64(n).ok_or_else(|| {
                        self.error("a Value's number_value that is NaN or infinite (JSON has neither)", field)
                    })?)
                }
                (3, LEN) => J::String(self.string(wire, field)?.into_owned()),
                (4, VARINT) => J::Bool(self.bool(wire, field)?),
                // A oneof member that is a message merges into the same member, else replaces.
                (5, LEN) => {
                    let mut object = match kind.take() {
                        Some(J::Object(object)) => object,
                        _ => serde_json::Map::new(),
                    };
                    self.message(wire, field)?.struct_fields(field, &mut object, depth + 1)?;
                    J::Object(object)
                }
                (6, LEN) => {
                    let mut items = match kind.take() {
                        Some(J::Array(items)) => items,
                        _ => Vec::new(),
                    };
                    let mut list = self.message(wire, field)?;
                    while let Some((number, wire)) = list.tag()? {
                        if number == 1 && wire == LEN {
                            let item = list.message(wire, field)?.value(field, None, depth + 1)?;
                            items.push(item.unwrap_or(J::Null));
                        } else {
                            list.skip(wire)?;
                        }
                    }
                    J::Array(items)
                }
                _ => {
                    self.skip(wire)?;
                    continue;
                }
            });
        }
        Ok(kind)
    }

    /// A wrapper (`google.protobuf.Int64Value`, ...): its field 1 (wire type `element`), read
    /// by `read`, merged into `so_far` (an earlier occurrence's value, or the default): absent,
    /// it keeps that value.
    pub fn wrapper<T>(
        &mut self,
        wire: u8,
        field: &'static str,
        so_far: T,
        element: u8,
        read: impl Fn(&mut Reader<'a>, u8, &'static str) -> Result<T, ProtoError>,
    ) -> Result<T, ProtoError> {
        let mut m = self.message(wire, field)?;
        let mut value = so_far;
        while let Some((number, wire)) = m.tag()? {
            match number {
                1 if wire == element => value = read(&mut m, wire, field)?,
                _ => m.skip(wire)?,
            }
        }
        Ok(value)
    }

    /// One occurrence of a repeated scalar field: packed (wire type 2, many values) or not (the
    /// element's own wire type `element`, one value). Writers may use either; both are accepted,
    /// and any other wire type is an unknown field, skipped.
    #[inline]
    pub fn repeated<T>(
        &mut self,
        wire: u8,
        element: u8,
        field: &'static str,
        out: &mut Vec<T>,
        read: impl Fn(&mut Reader<'a>, u8, &'static str) -> Result<T, ProtoError>,
    ) -> Result<(), ProtoError> {
        if wire == LEN && element != LEN {
            let mut packed = self.message(wire, field)?;
            while !packed.at_end() {
                out.push(read(&mut packed, element, field)?);
            }
            Ok(())
        } else if wire == element {
            out.push(read(self, wire, field)?);
            Ok(())
        } else {
            // Another wire type: an unknown field, as Google's parsers read it.
            self.skip(wire)
        }
    }

    /// Confluent's message-index path (after the magic byte and schema id): a zig-zag count,
    /// then that many zig-zag indexes; a single 0 byte stands for `[0]`. It must name the
    /// configured message, `expected`.
    #[inline]
    pub fn message_indexes(&mut self, expected: &[i32]) -> Result<(), ProtoError> {
        // The first message of the file: the single byte 0, nearly always.
        if expected == [0] && self.buf.get(self.pos) == Some(&0) {
            self.pos += 1;
            return Ok(());
        }
        self.message_path(expected)
    }

    fn message_path(&mut self, expected: &[i32]) -> Result<(), ProtoError> {
        let zigzag = |n: u64| ((n >> 1) as i64 ^ -((n & 1) as i64)) as i32;
        let count = zigzag(self.varint("")?);
        let matches = if count == 0 {
            expected == [0]
        } else {
            let mut ok = usize::try_from(count).ok() == Some(expected.len());
            for i in 0..count.max(0) as usize {
                let index = zigzag(self.varint("")?);
                ok &= expected.get(i) == Some(&index);
            }
            ok
        };
        if matches {
            Ok(())
        } else {
            Err(self.error(
                "the Confluent message-index path names another message of the schema than format.protobuf.message",
                "",
            ))
        }
    }
}

/// The object an earlier occurrence of a Struct field left (text this reader wrote), or an
/// empty one.
fn earlier_object(text: &str) -> serde_json::Map<String, serde_json::Value> {
    match serde_json::from_str(text) {
        Ok(serde_json::Value::Object(object)) => object,
        _ => serde_json::Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    proptest! {
        // Every value survives the writer's encoding (as protobuf defines it) and the reader.
        #[test]
        fn scalars_read_what_was_written(a in any::<i32>(), b in any::<i64>(), c in any::<u64>(), d in any::<i64>(), e in any::<f64>()) {
            let mut buf = Vec::new();
            varint(1 << 3, &mut buf);
            varint(a as i64 as u64, &mut buf);
            varint(2 << 3, &mut buf);
            varint(((b << 1) ^ (b >> 63)) as u64, &mut buf);
            varint(3 << 3, &mut buf);
            varint(c, &mut buf);
            varint((4 << 3) | 1, &mut buf);
            buf.extend_from_slice(&d.to_le_bytes());
            varint((5 << 3) | 1, &mut buf);
            buf.extend_from_slice(&e.to_le_bytes());
            let mut r = Reader::new(&buf);
            let (n, w) = r.tag().unwrap().unwrap();
            prop_assert_eq!((n, r.int32(w, "a").unwrap()), (1, a));
            let (n, w) = r.tag().unwrap().unwrap();
            prop_assert_eq!((n, r.sint64(w, "b").unwrap()), (2, b));
            let (n, w) = r.tag().unwrap().unwrap();
            prop_assert_eq!((n, r.uint64(w, "c").unwrap()), (3, c));
            let (n, w) = r.tag().unwrap().unwrap();
            prop_assert_eq!((n, r.sfixed64(w, "d").unwrap()), (4, d));
            let (n, w) = r.tag().unwrap().unwrap();
            prop_assert_eq!((n, r.double(w, "e").unwrap().to_bits()), (5, e.to_bits()));
            prop_assert!(r.tag().unwrap().is_none());
        }

        // Any bytes at all: an error or a value, never a panic, and skipping always advances.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut r = Reader::new(&bytes);
            while let Ok(Some((_, wire))) = r.tag() {
                if r.skip(wire).is_err() {
                    break;
                }
            }
        }
    }

    proptest! {
        // The last entry of each key is kept, in arrival order, whatever the map's size (both
        // the pairwise and the set path), against a map built by hand.
        #[test]
        fn the_last_entry_of_a_key_wins(keys in proptest::collection::vec(0u8..24, 0..40)) {
            let mut entries: Vec<(Cow<'_, str>, usize)> =
                keys.iter().enumerate().map(|(i, k)| (Cow::Owned(k.to_string()), i)).collect();
            last_key_wins(&mut entries);
            let expected: Vec<(String, usize)> = keys
                .iter()
                .enumerate()
                .filter(|(i, k)| !keys[i + 1..].contains(k))
                .map(|(i, k)| (k.to_string(), i))
                .collect();
            let got: Vec<(String, usize)> = entries.into_iter().map(|(k, v)| (k.into_owned(), v)).collect();
            prop_assert_eq!(got, expected);
        }
    }

    #[test]
    fn packed_and_unpacked_repeated_fields_both_read() {
        // Field 1 packed [1, 300], then one unpacked 7.
        let buf = [0x0a, 0x03, 0x01, 0xac, 0x02, 0x08, 0x07];
        let mut r = Reader::new(&buf);
        let mut out = Vec::new();
        while let Some((_, wire)) = r.tag().unwrap() {
            r.repeated(wire, VARINT, "xs", &mut out, Reader::int64).unwrap();
        }
        assert_eq!(out, vec![1, 300, 7]);
    }

    #[test]
    fn a_wrong_wire_type_names_the_field() {
        // Field 1 as fixed64 where the schema says string.
        let buf = [0x09, 0, 0, 0, 0, 0, 0, 0, 0];
        let mut r = Reader::new(&buf);
        let (_, wire) = r.tag().unwrap().unwrap();
        let e = r.string(wire, "name").unwrap_err();
        assert_eq!(e.field(), "name");
        assert!(e.to_string().contains("wire type"), "{e}");
    }

    #[test]
    fn truncated_messages_are_errors() {
        // A string of length 5 with 2 bytes.
        let mut r = Reader::new(&[0x0a, 0x05, b'a', b'b']);
        let (_, wire) = r.tag().unwrap().unwrap();
        assert!(r.string(wire, "s").unwrap_err().to_string().contains("beyond the end"));
        let mut r = Reader::new(&[0x08, 0xff]);
        let (_, wire) = r.tag().unwrap().unwrap();
        assert!(r.int64(wire, "n").is_err());
        assert!(Reader::new(&[0x00]).tag().is_err(), "field number 0");
    }

    #[test]
    fn timestamps_and_message_indexes() {
        // seconds = 1, nanos = 5
        let buf = [0x0a, 0x04, 0x08, 0x01, 0x10, 0x05];
        let mut r = Reader::new(&buf);
        let (_, wire) = r.tag().unwrap().unwrap();
        assert_eq!(r.timestamp_nanos(wire, "at", 0).unwrap(), 1_000_000_005);
        // nanos first, then seconds twice (the last wins), an unknown field between.
        let buf = [0x0a, 0x0a, 0x10, 0x05, 0x08, 0x07, 0x18, 0x01, 0x08, 0x02, 0x10, 0x06];
        let mut r = Reader::new(&buf);
        let (_, wire) = r.tag().unwrap().unwrap();
        assert_eq!(r.timestamp_nanos(wire, "at", 0).unwrap(), 2_000_000_006);
        // A second occurrence with only nanos keeps the seconds of the first.
        let mut r = Reader::new(&[0x0a, 0x02, 0x10, 0x07]);
        let (_, wire) = r.tag().unwrap().unwrap();
        assert_eq!(r.timestamp_nanos(wire, "at", 5_000_000_001).unwrap(), 5_000_000_007);
        assert!(Reader::new(&[0]).message_indexes(&[0]).is_ok());
        // [1, 0]: count 2 (zig-zag 4), 1 (2), 0 (0)
        assert!(Reader::new(&[4, 2, 0]).message_indexes(&[1, 0]).is_ok());
        assert!(Reader::new(&[4, 2, 0]).message_indexes(&[1]).is_err());
        assert!(Reader::new(&[0]).message_indexes(&[2]).is_err());
    }
}
