//! Reading JSON documents value by value, for the decoders `gen` writes for `format.json`.
//!
//! The generated decoder knows the schema, so it asks for what it expects next (a key, an
//! integer, a string) and the [`Reader`] checks and returns exactly that. Nothing is built that
//! the decoder does not ask for: values it does not want are skipped with their structure
//! checked but without allocation (the document's UTF-8 is checked once, at its end, unless a
//! string read checked it before), and strings are borrowed from the message unless they contain
//! escapes.

use std::borrow::Cow;

use super::field_error::{FieldError, Input, NOWHERE};
pub use super::last_key_wins;
use crate::engine::errors::RecordError;

/// Nesting deeper than this is a record error (serde_json's default limit too): skipping is
/// recursive, and a hostile message must not exhaust the stack.
const MAX_DEPTH: u32 = 128;

/// What the JSON reader reads, as its errors name it.
pub enum JsonDocument {}

impl Input for JsonDocument {
    const NAME: &'static str = "JSON document";
}

/// Why a document did not decode: what was wrong, in which field, at which byte (none for a
/// missing property). Converts into a [`RecordError`] with `?`.
pub type JsonError = FieldError<JsonDocument>;

/// The error for a required property the document does not have.
#[cold]
pub fn missing(field: &'static str) -> JsonError {
    JsonError::new("a required property is missing", field, NOWHERE)
}

/// Checks that a Confluent-framed document was written with the reader schema when no registry
/// is set (`format.json.registry`): any other id is a record error.
#[inline]
pub fn reader_schema_id(id: u32, reader_ids: &[u32]) -> Result<(), RecordError> {
    super::reader_schema_id(
        id,
        reader_ids,
        "format.json.schema_id",
        "add the id to format.json.schema_id if that schema's documents are readable with the reader schema",
    )
}

/// A key the decoder knows, packed at compile time as the bytes a compact document writes for it
/// (`"key":`, when that fits in sixteen bytes) into two words, so that checking a guessed key is
/// two loads and two comparisons (a slice comparison of unknown length calls `memcmp`).
#[derive(Debug, Clone, Copy)]
pub struct Key {
    bytes: &'static [u8],
    /// `"`, `bytes`, `"` and `:`, little-endian, zero-padded; all zero when they do not fit.
    words: [u64; 2],
    /// Which bits of `words` to compare.
    masks: [u64; 2],
}

impl Key {
    /// A key (without quotes; no `"`, `\\` or control characters: see [`Reader::next_known_key`]).
    pub const fn new(bytes: &'static [u8]) -> Key {
        let mut words = [0u64; 2];
        let mut masks = [0u64; 2];
        let n = bytes.len();
        if n + 3 <= 16 {
            let mut i = 0;
            while i < n + 3 {
                let b = if i == 0 || i == n + 1 {
                    b'"'
                } else if i == n + 2 {
                    b':'
                } else {
                    bytes[i - 1]
                };
                words[i / 8] |= (b as u64) << (8 * (i % 8));
                masks[i / 8] |= 0xff << (8 * (i % 8));
                i += 1;
            }
        }
        Key { bytes, words, masks }
    }

    /// Whether `buf[at..]` is `"key":` exactly (no white space), by the packed words.
    #[inline(always)]
    fn compact_at(&self, buf: &[u8], at: usize) -> bool {
        match buf.get(at..at + 16) {
            Some(chunk) if self.masks[0] != 0 => {
                let lo = u64::from_le_bytes(chunk[..8].try_into().expect("eight bytes"));
                let hi = u64::from_le_bytes(chunk[8..].try_into().expect("eight bytes"));
                (lo & self.masks[0]) == self.words[0] && (hi & self.masks[1]) == self.words[1]
            }
            _ => false,
        }
    }
}

/// The state of one object or array being read: whether an element was read yet, so that a
/// separator is required before the next one.
#[derive(Debug)]
pub struct Seq {
    first: bool,
}

/// A JSON document being read from the front.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    /// The whole document as text when it is valid UTF-8, checked once when the decoder first
    /// reads a string (cheaper than checking each string, and not paid by documents whose read
    /// fields hold no text); `Some(None)`: not UTF-8 as a whole, each string is checked alone.
    text: Option<Option<&'a str>>,
    /// Whether a string was checked for UTF-8 alone (see [`Reader::string`]).
    one_string_checked: bool,
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    #[inline]
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, text: None, one_string_checked: false, pos: 0 }
    }

    /// The document as text, if it is valid UTF-8 (checked on the first call).
    #[inline]
    fn text(&mut self) -> Option<&'a str> {
        *self.text.get_or_insert_with(|| std::str::from_utf8(self.buf).ok())
    }

    #[cold]
    fn error(&self, what: &'static str, field: &'static str) -> JsonError {
        JsonError::new(what, field, self.pos)
    }

    /// Skips white space and returns the next byte without consuming it.
    #[inline(always)]
    fn peek(&mut self) -> Option<u8> {
        while let Some(&b) = self.buf.get(self.pos) {
            if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                return Some(b);
            }
            self.pos += 1;
        }
        None
    }

    /// Consumes `{`: an object starts.
    #[inline]
    pub fn begin_object(&mut self, field: &'static str) -> Result<Seq, JsonError> {
        self.open(b'{', "expected an object", field)
    }

    /// Consumes `open` (`{` or `[`), or fails with `expected` (saying so when the value is null).
    #[inline]
    fn open(&mut self, open: u8, expected: &'static str, field: &'static str) -> Result<Seq, JsonError> {
        match self.peek() {
            Some(b) if b == open => {
                self.pos += 1;
                Ok(Seq { first: true })
            }
            Some(b'n') if self.buf[self.pos..].starts_with(b"null") => Err(self.mismatch(expected, field)),
            _ => Err(self.error(expected, field)),
        }
    }

    /// The next key of an object, with its `:` consumed; `None` after the closing `}`. The key
    /// is returned as bytes (escapes resolved): matching it against the schema's names needs no
    /// UTF-8 check.
    #[inline]
    pub fn next_key(&mut self, seq: &mut Seq, field: &'static str) -> Result<Option<Cow<'a, [u8]>>, JsonError> {
        if !self.member(seq, field)? {
            return Ok(None);
        }
        let key = self.raw_string(field)?;
        match self.peek() {
            Some(b':') => {
                self.pos += 1;
                Ok(Some(key))
            }
            _ => Err(self.error("expected `:` after a key", field)),
        }
    }

    /// The next key of an object whose keys the decoder knows: its index in `keys`, `keys.len()`
    /// for a key not among them; `None` after the closing `}` (the `:` after a key is consumed).
    ///
    /// Producers mostly write an object's keys in the same order every time, and without white
    /// space, so the key after `keys[i]` is first guessed to be `keys[i + 1]` (`hint` carries the
    /// guess from one call to the next), written compactly: a right guess costs two word
    /// comparisons instead of a scan and a search. `keys` must hold no `"`, `\\` or control
    /// characters (the generator keeps objects with such keys on [`Reader::next_key`]).
    #[inline(always)]
    pub fn next_known_key(
        &mut self,
        seq: &mut Seq,
        field: &'static str,
        keys: &[Key],
        hint: &mut usize,
    ) -> Result<Option<usize>, JsonError> {
        if let Some(guess) = keys.get(*hint) {
            let at = self.pos + usize::from(!seq.first);
            if (seq.first || self.buf.get(self.pos) == Some(&b',')) && guess.compact_at(self.buf, at) {
                seq.first = false;
                self.pos = at + guess.bytes.len() + 3;
                let index = *hint;
                *hint += 1;
                return Ok(Some(index));
            }
        }
        self.next_known_key_scanned(seq, field, keys, hint)
    }

    /// [`Reader::next_known_key`] when the guess was wrong (or the document not compact).
    #[inline(never)]
    fn next_known_key_scanned(
        &mut self,
        seq: &mut Seq,
        field: &'static str,
        keys: &[Key],
        hint: &mut usize,
    ) -> Result<Option<usize>, JsonError> {
        let Some(key) = self.next_key(seq, field)? else { return Ok(None) };
        let index = keys.iter().position(|k| k.bytes == &*key).unwrap_or(keys.len());
        if index < keys.len() {
            *hint = index + 1;
        }
        Ok(Some(index))
    }

    /// The next key of an object read as a map (`additionalProperties`): as
    /// [`Reader::next_key`], as text.
    #[inline]
    pub fn next_map_key(&mut self, seq: &mut Seq, field: &'static str) -> Result<Option<Cow<'a, str>>, JsonError> {
        let start = self.pos;
        match self.next_key(seq, field)? {
            None => Ok(None),
            Some(Cow::Borrowed(b)) => {
                // A slice of the document's text where it is known to be UTF-8 (see `string`).
                let offset = b.as_ptr() as usize - self.buf.as_ptr() as usize;
                if let Some(s) = self.text().and_then(|t| t.get(offset..offset + b.len())) {
                    return Ok(Some(Cow::Borrowed(s)));
                }
                match std::str::from_utf8(b) {
                    Ok(s) => Ok(Some(Cow::Borrowed(s))),
                    Err(_) => {
                        self.pos = start;
                        Err(self.error("a key is not valid UTF-8", field))
                    }
                }
            }
            Some(Cow::Owned(b)) => match String::from_utf8(b) {
                Ok(s) => Ok(Some(Cow::Owned(s))),
                Err(_) => {
                    self.pos = start;
                    Err(self.error("a key is not valid UTF-8", field))
                }
            },
        }
    }

    /// Consumes `[`: an array starts.
    #[inline]
    pub fn begin_array(&mut self, field: &'static str) -> Result<Seq, JsonError> {
        self.open(b'[', "expected an array", field)
    }

    /// Whether another element of the array follows (its separator consumed); `false` after the
    /// closing `]`.
    #[inline]
    pub fn next_item(&mut self, seq: &mut Seq, field: &'static str) -> Result<bool, JsonError> {
        match self.peek() {
            Some(b']') => {
                self.pos += 1;
                Ok(false)
            }
            Some(b',') if !seq.first => {
                self.pos += 1;
                Ok(true)
            }
            Some(_) if seq.first => {
                seq.first = false;
                Ok(true)
            }
            _ => Err(self.error("expected `,` or `]` after an element of an array", field)),
        }
    }

    /// Consumes a `null` if one comes next; `false` (nothing consumed) for any other value.
    #[inline]
    pub fn null(&mut self) -> bool {
        if self.peek() == Some(b'n') && self.buf[self.pos..].starts_with(b"null") {
            self.pos += 4;
            true
        } else {
            false
        }
    }

    /// `true` or `false`.
    #[inline]
    pub fn boolean(&mut self, field: &'static str) -> Result<bool, JsonError> {
        match self.peek() {
            Some(b't') if self.buf[self.pos..].starts_with(b"true") => {
                self.pos += 4;
                Ok(true)
            }
            Some(b'f') if self.buf[self.pos..].starts_with(b"false") => {
                self.pos += 5;
                Ok(false)
            }
            _ => Err(self.mismatch("expected a boolean", field)),
        }
    }

    /// An integer. A number written with a fraction or an exponent is accepted when its value is
    /// a whole number that a double holds exactly (JSON Schema counts `1.0` as an integer).
    #[inline(always)]
    pub fn i64(&mut self, field: &'static str) -> Result<i64, JsonError> {
        let start = match self.peek() {
            Some(b'-' | b'0'..=b'9') => self.pos,
            _ => return Err(self.mismatch("expected an integer", field)),
        };
        let negative = self.buf[start] == b'-';
        let mut i = start + usize::from(negative);
        let digits_start = i;
        // Nineteen digits always fit in a u64, so the loop needs no overflow check (which would
        // make each digit a multiplication and a branch); a longer run is out of range anyway,
        // as JSON has no leading zeros.
        let mut magnitude: u64 = 0;
        // A word (eight bytes) at a time: the digits it starts with are counted and combined
        // without a branch per digit, so the ten-digit ids and cents of most messages take two
        // words instead of ten dependent multiply-adds. Near the end of the buffer, where no
        // word is left, one digit at a time.
        while let Some((value, n)) = digit_word(self.buf, i) {
            if n == 8 {
                // A constant step, so that the next word's load waits on the branch prediction
                // only, not on this word's digit count.
                magnitude = magnitude.wrapping_mul(100_000_000).wrapping_add(value);
                i += 8;
                continue;
            }
            magnitude = magnitude.wrapping_mul(POWERS_OF_TEN[n]).wrapping_add(value);
            i += n;
            break;
        }
        while let Some(&b) = self.buf.get(i) {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            magnitude = magnitude.wrapping_mul(10).wrapping_add(u64::from(d));
            i += 1;
        }
        let digits = i - digits_start;
        // One test for the common case (1 to 19 digits, no leading zero, no fraction, in range);
        // the rest (errors, and whole numbers written with a fraction or an exponent) is out of
        // line, so the hot path stays small enough to keep its values in registers.
        let limit = i64::MAX as u64 + u64::from(negative);
        if digits == 0
            || digits > 19
            || (digits > 1 && self.buf[digits_start] == b'0')
            || matches!(self.buf.get(i), Some(b'.' | b'e' | b'E'))
            || magnitude > limit
        {
            return self.i64_unusual(start, digits_start, i, field);
        }
        self.pos = i;
        Ok(if negative { (magnitude as i64).wrapping_neg() } else { magnitude as i64 })
    }

    /// [`Reader::i64`] for what is not a plain integer in range: the error that says why, or the
    /// value of a whole number written with a fraction or an exponent (`digits_start..end` are
    /// the digits read, `start` where the number begins).
    #[cold]
    #[inline(never)]
    fn i64_unusual(
        &mut self,
        start: usize,
        digits_start: usize,
        end: usize,
        field: &'static str,
    ) -> Result<i64, JsonError> {
        self.pos = start;
        let digits = end - digits_start;
        if digits > 19 {
            return Err(self.error("integer out of the range of Int64", field));
        }
        if digits == 0 || (digits > 1 && self.buf[digits_start] == b'0') {
            return Err(self.error("malformed number", field));
        }
        if matches!(self.buf.get(end), Some(b'.' | b'e' | b'E')) {
            let f = self.f64(field)?;
            const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
            if f.fract() == 0.0 && f.abs() <= EXACT {
                return Ok(f as i64);
            }
            self.pos = start;
            return Err(self.error("expected an integer, found a number with a fraction", field));
        }
        Err(self.error("integer out of the range of Int64", field))
    }

    /// Any number, as a double.
    #[inline]
    pub fn f64(&mut self, field: &'static str) -> Result<f64, JsonError> {
        let start = match self.peek() {
            Some(b'-' | b'0'..=b'9') => self.pos,
            _ => return Err(self.mismatch("expected a number", field)),
        };
        let Some((end, simple)) = number_extent(self.buf, start) else {
            return Err(self.error("malformed number", field));
        };
        let text = &self.buf[start..end];
        // Clinger's fast path: a mantissa of at most 2^53 and a power of ten of at most 22 are both
        // exact in a double, so one multiplication or division rounds correctly. Most numbers in
        // messages take it; the rest go to std's parser (also correctly rounded).
        if let Some(v) = fast_float(text, simple) {
            self.pos = end;
            return Ok(v);
        }
        // The extent is ASCII by construction.
        match std::str::from_utf8(text).ok().and_then(|t| t.parse::<f64>().ok()) {
            Some(v) if v.is_finite() => {
                self.pos = end;
                Ok(v)
            }
            _ => Err(self.error("number out of the range of Float64", field)),
        }
    }

    /// A string, borrowed from the message unless it contains escapes.
    #[inline]
    pub fn string(&mut self, field: &'static str) -> Result<Cow<'a, str>, JsonError> {
        if self.peek() != Some(b'"') {
            return Err(self.mismatch("expected a string", field));
        }
        let start = self.pos;
        let body = start + 1;
        // The common case, no escapes: a slice of the document's text. The first short string
        // read is checked alone, so that a document with one text field pays for that field's
        // bytes rather than its own; from the second on, the document is checked once and the
        // strings sliced from its text.
        if let Some(end) = special(self.buf, body)
            && self.buf[end] == b'"'
        {
            let text = if self.text.is_none() && !self.one_string_checked && end - body <= 32 {
                self.one_string_checked = true;
                std::str::from_utf8(&self.buf[body..end]).ok()
            } else {
                self.text().and_then(|t| t.get(body..end))
            };
            if let Some(s) = text {
                self.pos = end + 1;
                return Ok(Cow::Borrowed(s));
            }
        }
        match self.raw_string(field)? {
            Cow::Borrowed(b) => match std::str::from_utf8(b) {
                Ok(s) => Ok(Cow::Borrowed(s)),
                Err(_) => {
                    self.pos = start;
                    Err(self.error("a string is not valid UTF-8", field))
                }
            },
            Cow::Owned(b) => match String::from_utf8(b) {
                Ok(s) => Ok(Cow::Owned(s)),
                Err(_) => {
                    self.pos = start;
                    Err(self.error("a string is not valid UTF-8", field))
                }
            },
        }
    }

    /// An enum's symbol, as the index `find` gives its bytes (the generator writes `find` as a
    /// `match` over the symbols, which compiles to a few word comparisons).
    #[inline]
    pub fn symbol_by(
        &mut self,
        field: &'static str,
        find: impl FnOnce(&[u8]) -> Option<u32>,
    ) -> Result<u32, JsonError> {
        self.parsed(field, find, "not one of the enum's symbols")
    }

    /// A `date-time` string (RFC 3339, with an offset or `Z`) as microseconds since the epoch,
    /// UTC. Fractions beyond microseconds are truncated.
    #[inline]
    pub fn timestamp_micros(&mut self, field: &'static str) -> Result<i64, JsonError> {
        // Read in place: the date-time's grammar says where it ends, so the string need not be
        // scanned for its closing quote first. Anything else (escapes, errors) takes the
        // general path, which also words the error.
        if self.peek() == Some(b'"')
            && let Some((micros, n)) = rfc3339_prefix(&self.buf[self.pos + 1..])
            && self.buf.get(self.pos + 1 + n) == Some(&b'"')
        {
            self.pos += n + 2;
            return Ok(micros);
        }
        self.parsed(field, parse_rfc3339_micros, "expected an RFC 3339 date-time such as 2024-05-01T12:00:00Z")
    }

    /// A `date` string (`YYYY-MM-DD`) as days since 1970-01-01.
    #[inline]
    pub fn date(&mut self, field: &'static str) -> Result<i32, JsonError> {
        self.parsed(field, |s| parse_date(s).and_then(|d| i32::try_from(d).ok()), "expected a date such as 2024-05-01")
    }

    /// A `uuid` string in its canonical form.
    #[inline]
    pub fn uuid(&mut self, field: &'static str) -> Result<u128, JsonError> {
        self.parsed(field, parse_uuid, "expected a UUID such as 123e4567-e89b-12d3-a456-426614174000")
    }

    /// An `ipv4` string (`192.0.2.1`) as its `u32`.
    #[inline]
    pub fn ipv4(&mut self, field: &'static str) -> Result<u32, JsonError> {
        self.parsed(
            field,
            |s| parse_ip::<std::net::Ipv4Addr>(s).map(u32::from),
            "expected an IPv4 address such as 192.0.2.1",
        )
    }

    /// An `ipv6` string (`2001:db8::1`; an IPv4 address reads as its mapped form `::ffff:a.b.c.d`)
    /// as its 16 bytes, big-endian.
    #[inline]
    pub fn ipv6(&mut self, field: &'static str) -> Result<u128, JsonError> {
        self.parsed(
            field,
            |s| {
                parse_ip::<std::net::Ipv6Addr>(s)
                    .or_else(|| parse_ip::<std::net::Ipv4Addr>(s).map(|v4| v4.to_ipv6_mapped()))
                    .map(u128::from)
            },
            "expected an IPv6 address such as 2001:db8::1",
        )
    }

    /// What kind of value comes next: how a Variant's decoder picks its member.
    #[inline]
    pub fn kind(&mut self) -> Kind {
        match self.peek() {
            Some(b'n') => Kind::Null,
            Some(b't' | b'f') => Kind::Bool,
            Some(b'-' | b'0'..=b'9') => Kind::Number,
            Some(b'"') => Kind::String,
            _ => Kind::Other,
        }
    }

    /// Whether the number that comes next is written as a plain integer (no fraction, no
    /// exponent, not `-0`) that fits an Int64: a Variant with an integer and a number member reads it as
    /// the integer, and anything else (`1.0`, `1e3`, `1e400`'s digits written out) as the number.
    #[inline]
    pub fn integral(&mut self) -> bool {
        self.peek();
        match number_extent(self.buf, self.pos) {
            Some((end, true)) => {
                let digits = &self.buf[self.pos..end];
                // `-0` is a negative zero, which no integer holds (serde_json reads it as a
                // float too); 18 digits always fit; longer ones are parsed to know.
                digits != b"-0"
                    && (digits.len() <= 18 || std::str::from_utf8(digits).is_ok_and(|d| d.parse::<i64>().is_ok()))
            }
            _ => false,
        }
    }

    /// The error for a value that no member of a Variant takes (`expected` names them).
    #[cold]
    pub fn not_a_member(&mut self, field: &'static str, expected: &'static str) -> JsonError {
        self.peek();
        self.mismatch(expected, field)
    }

    /// An object as the text it arrived in, for a ClickHouse `JSON` column: its structure is
    /// checked (as a skipped value's is) and it is borrowed, not rebuilt.
    #[inline]
    pub fn json_object(&mut self, field: &'static str) -> Result<Cow<'a, str>, JsonError> {
        if self.peek() != Some(b'{') {
            return Err(self.mismatch("expected an object", field));
        }
        let start = self.pos;
        self.skip_value(0).map_err(|e| e.in_field(field))?;
        match std::str::from_utf8(&self.buf[start..self.pos]) {
            Ok(text) => Ok(Cow::Borrowed(text)),
            Err(e) => Err(JsonError::new("the object is not valid UTF-8", field, start + e.valid_up_to())),
        }
    }

    /// A string whose text `parse` turns into a value (escapes resolved; no UTF-8 check, since
    /// these parsers accept ASCII only); `expected` is the error when it does not.
    #[inline]
    fn parsed<T>(
        &mut self,
        field: &'static str,
        parse: impl FnOnce(&[u8]) -> Option<T>,
        expected: &'static str,
    ) -> Result<T, JsonError> {
        if self.peek() != Some(b'"') {
            return Err(self.mismatch("expected a string", field));
        }
        let start = self.pos;
        let text = self.raw_string(field)?;
        parse(&text).ok_or_else(|| {
            self.pos = start;
            self.error(expected, field)
        })
    }

    /// Reads past one value of any kind, checking its structure but building nothing.
    #[inline]
    pub fn skip(&mut self) -> Result<(), JsonError> {
        self.skip_value(0)
    }

    /// Only white space may follow the document.
    #[inline]
    pub fn end(&mut self) -> Result<(), JsonError> {
        if self.peek().is_some() {
            return Err(self.error("unexpected data after the document", ""));
        }
        // A JSON text is UTF-8 (RFC 8259, 8.1) everywhere, in the strings skipped unread too.
        // Usually already checked once, when a second string was read.
        if self.text().is_none() {
            let at = std::str::from_utf8(self.buf).err().map_or(0, |e| e.valid_up_to());
            return Err(JsonError::new("the document is not valid UTF-8", "", at));
        }
        Ok(())
    }

    /// The error for a value of the wrong kind, naming what was found.
    #[cold]
    fn mismatch(&self, expected: &'static str, field: &'static str) -> JsonError {
        let what = match self.buf.get(self.pos) {
            None => "the document ends where a value was expected",
            Some(b'n') => match expected {
                "expected a string" => "expected a string, found null",
                "expected an integer" => "expected an integer, found null",
                "expected a number" => "expected a number, found null",
                "expected a boolean" => "expected a boolean, found null",
                "expected an object" => "expected an object, found null",
                "expected an array" => "expected an array, found null",
                _ => expected,
            },
            Some(b'"') => match expected {
                "expected an integer" => "expected an integer, found a string",
                "expected a number" => "expected a number, found a string",
                "expected a boolean" => "expected a boolean, found a string",
                _ => expected,
            },
            Some(b'{' | b'[') => match expected {
                "expected a string" => "expected a string, found an object or array",
                "expected an integer" => "expected an integer, found an object or array",
                "expected a number" => "expected a number, found an object or array",
                "expected a boolean" => "expected a boolean, found an object or array",
                _ => expected,
            },
            _ => expected,
        };
        JsonError::new(what, field, self.pos)
    }

    /// A string's content at `pos` (which holds its opening quote), escapes resolved.
    #[inline]
    fn raw_string(&mut self, field: &'static str) -> Result<Cow<'a, [u8]>, JsonError> {
        let body = self.pos + 1;
        match special(self.buf, body) {
            Some(i) if self.buf[i] == b'"' => {
                self.pos = i + 1;
                Ok(Cow::Borrowed(&self.buf[body..i]))
            }
            Some(i) if self.buf[i] == b'\\' => self.escaped_string(body, i, field).map(Cow::Owned),
            Some(i) => Err(self.control_character(i, field)),
            None => Err(self.error("unterminated string", field)),
        }
    }

    /// The error for a raw control character inside a string (RFC 8259, 7: U+0000 to U+001F must
    /// be escaped).
    #[cold]
    fn control_character(&mut self, at: usize, field: &'static str) -> JsonError {
        self.pos = at;
        self.error("a control character (U+0000 to U+001F) must be escaped in a string", field)
    }

    /// The slow path of [`Reader::raw_string`]: `escape` is the first backslash.
    #[cold]
    fn escaped_string(&mut self, body: usize, mut escape: usize, field: &'static str) -> Result<Vec<u8>, JsonError> {
        let mut out = Vec::with_capacity(escape - body + 16);
        out.extend_from_slice(&self.buf[body..escape]);
        loop {
            let (c, next) = self.escape(escape, field)?;
            out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
            match special(self.buf, next) {
                Some(i) if self.buf[i] == b'"' => {
                    out.extend_from_slice(&self.buf[next..i]);
                    self.pos = i + 1;
                    return Ok(out);
                }
                Some(i) if self.buf[i] == b'\\' => {
                    out.extend_from_slice(&self.buf[next..i]);
                    escape = i;
                }
                Some(i) => return Err(self.control_character(i, field)),
                None => {
                    self.pos = next;
                    return Err(self.error("unterminated string", field));
                }
            }
        }
    }

    /// The character the escape at `at` (a backslash) stands for, and where the string goes on:
    /// one of `\\" \\\\ \\/ \\b \\f \\n \\r \\t`, or `\\uXXXX` (a surrogate pair as two of them).
    fn escape(&mut self, at: usize, field: &'static str) -> Result<(char, usize), JsonError> {
        self.pos = at;
        let Some(&kind) = self.buf.get(at + 1) else {
            return Err(self.error("unterminated string", field));
        };
        let c = match kind {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hi = self.hex4(at + 2, field)?;
                let mut next = at + 6;
                let c = if (0xD800..0xDC00).contains(&hi) {
                    // A high surrogate must be followed by an escaped low one.
                    if self.buf.get(next..next + 2) != Some(b"\\u") {
                        return Err(self.error("a lone surrogate in a \\u escape", field));
                    }
                    let lo = self.hex4(next + 2, field)?;
                    if !(0xDC00..0xE000).contains(&lo) {
                        return Err(self.error("a lone surrogate in a \\u escape", field));
                    }
                    next += 6;
                    char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))
                } else {
                    char::from_u32(hi)
                };
                return match c {
                    Some(c) => Ok((c, next)),
                    None => Err(self.error("a lone surrogate in a \\u escape", field)),
                };
            }
            _ => return Err(self.error("an invalid escape in a string", field)),
        };
        Ok((c, at + 2))
    }

    fn hex4(&self, at: usize, field: &'static str) -> Result<u32, JsonError> {
        let digits = self.buf.get(at..at + 4).ok_or_else(|| self.error("unterminated string", field))?;
        digits.iter().try_fold(0u32, |acc, &b| {
            let d = (b as char).to_digit(16).ok_or_else(|| self.error("an invalid \\u escape", field))?;
            Ok(acc * 16 + d)
        })
    }

    fn skip_value(&mut self, depth: u32) -> Result<(), JsonError> {
        if depth >= MAX_DEPTH {
            return Err(self.error("nested more than 128 levels deep", ""));
        }
        match self.peek() {
            Some(b'{') => {
                let mut seq = self.begin_object("")?;
                while self.skip_key(&mut seq)? {
                    self.skip_value(depth + 1)?;
                }
                Ok(())
            }
            Some(b'[') => {
                let mut seq = self.begin_array("")?;
                while self.next_item(&mut seq, "")? {
                    self.skip_value(depth + 1)?;
                }
                Ok(())
            }
            Some(b'"') => self.skip_string(),
            Some(b't') if self.buf[self.pos..].starts_with(b"true") => {
                self.pos += 4;
                Ok(())
            }
            Some(b'f') if self.buf[self.pos..].starts_with(b"false") => {
                self.pos += 5;
                Ok(())
            }
            Some(b'n') if self.buf[self.pos..].starts_with(b"null") => {
                self.pos += 4;
                Ok(())
            }
            Some(b'-' | b'0'..=b'9') => match number_extent(self.buf, self.pos) {
                // A number beyond Float64's range is refused, as reading it would be; only one
                // with a fraction, an exponent or over 300 digits can be.
                Some((end, simple))
                    if (!simple || end - self.pos > 300)
                        && !std::str::from_utf8(&self.buf[self.pos..end])
                            .ok()
                            .and_then(|t| t.parse::<f64>().ok())
                            .is_some_and(f64::is_finite) =>
                {
                    Err(self.error("number out of the range of Float64", ""))
                }
                Some((end, _)) => {
                    self.pos = end;
                    Ok(())
                }
                None => Err(self.error("malformed number", "")),
            },
            None => Err(self.error("the document ends where a value was expected", "")),
            Some(_) => Err(self.error("expected a value", "")),
        }
    }

    /// Steps to the next member of an object: `true` at its key's opening quote, `false` past the
    /// closing `}`.
    #[inline]
    fn member(&mut self, seq: &mut Seq, field: &'static str) -> Result<bool, JsonError> {
        match self.peek() {
            Some(b'}') => {
                self.pos += 1;
                return Ok(false);
            }
            Some(b',') if !seq.first => {
                self.pos += 1;
                self.peek();
            }
            _ if seq.first => {}
            _ => return Err(self.error("expected `,` or `}` after a member of an object", field)),
        }
        seq.first = false;
        if self.buf.get(self.pos) != Some(&b'"') {
            return Err(self.error("expected a string key", field));
        }
        Ok(true)
    }

    /// [`Reader::next_key`] without building the key.
    fn skip_key(&mut self, seq: &mut Seq) -> Result<bool, JsonError> {
        if !self.member(seq, "")? {
            return Ok(false);
        }
        self.skip_string()?;
        match self.peek() {
            Some(b':') => {
                self.pos += 1;
                Ok(true)
            }
            _ => Err(self.error("expected `:` after a key", "")),
        }
    }

    /// Reads past a string: finds its closing quote, stepping over escapes.
    fn skip_string(&mut self) -> Result<(), JsonError> {
        let mut i = self.pos + 1;
        loop {
            match special(self.buf, i) {
                Some(j) if self.buf[j] == b'"' => {
                    self.pos = j + 1;
                    return Ok(());
                }
                // Checked as reading would check it: a string skipped is as valid as one read.
                Some(j) if self.buf[j] == b'\\' => i = self.escape(j, "")?.1,
                Some(j) => return Err(self.control_character(j, "")),
                None => return Err(self.error("unterminated string", "")),
            }
            if i > self.buf.len() {
                return Err(self.error("unterminated string", ""));
            }
        }
    }
}

/// A number's value by Clinger's fast path, when it applies (see [`Reader::f64`]).
#[inline]
fn fast_float(text: &[u8], simple: bool) -> Option<f64> {
    const POW10: [f64; 23] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19,
        1e20, 1e21, 1e22,
    ];
    let (negative, text) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let (mut mantissa, mut digits, mut exponent) = (0u64, 0u32, 0i32);
    let mut i = 0;
    while let Some(&b) = text.get(i).filter(|b| b.is_ascii_digit()) {
        mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(b - b'0'));
        digits += u32::from(mantissa != 0);
        i += 1;
    }
    if !simple {
        if text.get(i) == Some(&b'.') {
            i += 1;
            while let Some(&b) = text.get(i).filter(|b| b.is_ascii_digit()) {
                mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(b - b'0'));
                digits += u32::from(mantissa != 0);
                exponent -= 1;
                i += 1;
            }
        }
        if matches!(text.get(i), Some(b'e' | b'E')) {
            i += 1;
            let sign = match text.get(i) {
                Some(b'-') => {
                    i += 1;
                    -1
                }
                Some(b'+') => {
                    i += 1;
                    1
                }
                _ => 1,
            };
            let mut e = 0i32;
            while let Some(&b) = text.get(i).filter(|b| b.is_ascii_digit()) {
                e = e.saturating_mul(10).saturating_add(i32::from(b - b'0'));
                i += 1;
            }
            exponent = exponent.saturating_add(sign * e);
        }
    }
    // More than 19 significant digits may have wrapped; 2^53 is the exact limit.
    if digits > 19 || mantissa > 1 << 53 {
        return None;
    }
    let m = mantissa as f64;
    let v = match exponent {
        0 => m,
        1..=22 => m * POW10[exponent as usize],
        -22..=-1 => m / POW10[(-exponent) as usize],
        _ => return None,
    };
    Some(if negative { -v } else { v })
}

/// The index of the first byte at or after `from` that ends a string's plain run: a `"`, a `\\`,
/// or a control character (below 0x20, which JSON does not allow unescaped), if any.
///
/// Eight bytes at a time in a `u64`: a byte equals `c` where `x ^ c*0x01..01` has a zero byte,
/// and is below 0x20 where `x - 0x20*0x01..01` borrows into its high bit while `x`'s is clear;
/// in both tests a borrow can only mark bytes above a true one, so the lowest mark is exact.
/// The bytes after the last whole word are looked at one by one.
#[inline(always)]
fn special(buf: &[u8], from: usize) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    const QUOTE: u64 = LO * b'"' as u64;
    const BACKSLASH: u64 = LO * b'\\' as u64;
    const SPACE: u64 = LO * 0x20;
    let mut i = from;
    while let Some(chunk) = buf.get(i..i + 8) {
        let w = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let (q, b) = (w ^ QUOTE, w ^ BACKSLASH);
        let found = (q.wrapping_sub(LO) & !q | b.wrapping_sub(LO) & !b | w.wrapping_sub(SPACE) & !w) & HI;
        if found != 0 {
            return Some(i + (found.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    buf.get(i..)?.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20).map(|j| i + j)
}

/// 10^n for the digit counts of [`digit_word`].
const POWERS_OF_TEN: [u64; 9] = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000];

/// The bytes of `w` that are not ASCII digits: each such byte is nonzero in the result, each
/// digit byte zero. A byte is a digit when its high nibble is 3 and stays 3 after adding 6; a
/// carry from adding 6 only leaves a byte of at least 0xFA, itself not a digit, so every byte
/// below the first non-digit is judged exactly.
#[inline(always)]
fn non_digits(w: u64) -> u64 {
    const NIBBLES: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    ((w & NIBBLES) | ((w.wrapping_add(0x0606_0606_0606_0606) & NIBBLES) >> 4)) ^ 0x3333_3333_3333_3333
}

/// The ASCII digits that `buf[at..at + 8]` starts with: their value and how many there are (0 to
/// 8); `None` when fewer than eight bytes are left. One word, no branch per digit: the first
/// byte [`non_digits`] marks gives the count, the digits are shifted to the top of the word (the
/// zero bytes below them read as leading zeros) and combined into pairs, quads and the eight by
/// three multiply-adds; each lane's sum stays below the next lane (99, 9999, 99999999).
#[inline(always)]
fn digit_word(buf: &[u8], at: usize) -> Option<(u64, usize)> {
    let chunk = buf.get(at..at + 8)?;
    let w = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
    // Little-endian: the first byte is the lowest, and the first digit the most significant.
    let n = (non_digits(w).trailing_zeros() / 8) as usize;
    if n == 0 {
        return Some((0, 0));
    }
    let d = w.wrapping_sub(0x3030_3030_3030_3030) << (8 * (8 - n));
    let d = (d * 10 + (d >> 8)) & 0x00FF_00FF_00FF_00FF;
    let d = (d * 100 + (d >> 16)) & 0x0000_FFFF_0000_FFFF;
    Some(((d * 10_000 + (d >> 32)) & 0xFFFF_FFFF, n))
}

/// The end of the number starting at `start` by JSON's grammar, and whether it is a plain
/// integer (no fraction, no exponent); `None` when it breaks the grammar.
#[inline]
fn number_extent(buf: &[u8], start: usize) -> Option<(usize, bool)> {
    let digit = |i: usize| buf.get(i).is_some_and(u8::is_ascii_digit);
    let mut i = start;
    if buf.get(i) == Some(&b'-') {
        i += 1;
    }
    match buf.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            while digit(i) {
                i += 1;
            }
        }
        _ => return None,
    }
    let mut simple = true;
    if buf.get(i) == Some(&b'.') {
        simple = false;
        i += 1;
        if !digit(i) {
            return None;
        }
        while digit(i) {
            i += 1;
        }
    }
    if matches!(buf.get(i), Some(b'e' | b'E')) {
        simple = false;
        i += 1;
        if matches!(buf.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digit(i) {
            return None;
        }
        while digit(i) {
            i += 1;
        }
    }
    Some((i, simple))
}

/// A UUID in its canonical `8-4-4-4-12` hex form.
fn parse_uuid(s: &[u8]) -> Option<u128> {
    if s.len() != 36 || [8, 13, 18, 23].iter().any(|&i| s[i] != b'-') {
        return None;
    }
    s.iter().filter(|&&b| b != b'-').try_fold(0u128, |acc, &b| Some(acc << 4 | u128::from((b as char).to_digit(16)?)))
}

/// The kind of a JSON value, as [`Reader::kind`] sees its first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `null`
    Null,
    /// `true` or `false`
    Bool,
    /// A number.
    Number,
    /// A string.
    String,
    /// An object, an array, or not JSON.
    Other,
}

/// An address in its text form (ASCII; std's parsers refuse leading zeros and zone ids).
fn parse_ip<T: std::str::FromStr>(s: &[u8]) -> Option<T> {
    std::str::from_utf8(s).ok()?.parse().ok()
}

fn digits(s: &[u8], at: usize, n: usize) -> Option<i64> {
    let part = s.get(at..at + n)?;
    part.iter().try_fold(0i64, |acc, &b| b.is_ascii_digit().then(|| acc * 10 + i64::from(b - b'0')))
}

/// `YYYY-MM-DD` as days since 1970-01-01, the date checked against its month.
fn parse_date(s: &[u8]) -> Option<i64> {
    if s.len() != 10 {
        return None;
    }
    let (y, m, d) = (digits(s, 0, 4)?, digits(s, 5, 2)?, digits(s, 8, 2)?);
    if s[4] != b'-' || s[7] != b'-' {
        return None;
    }
    civil_days(y as u32, m as u32, d as u32)
}

/// Days since 1970-01-01 of a date with a four-digit year, checked against its month.
#[inline(always)]
fn civil_days(y: u32, m: u32, d: u32) -> Option<i64> {
    let leap = (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400);
    let days_in_month = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if d < 1 || d > days_in_month {
        return None;
    }
    // Howard Hinnant's `days_from_civil` (the inverse of `super::civil_from_days`) with the year
    // moved up by one 400-year era, so that it is never negative and the divisions are unsigned
    // ones, which compile to a multiplication and a shift without the sign fix-ups of
    // `div_euclid`.
    let y = u64::from(y) + 400 - u64::from(m <= 2);
    let (era, yoe) = (y / 400, y % 400);
    let m = u64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + u64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some((era * 146_097 + doe) as i64 - 719_468 - 146_097)
}

/// Whether the bytes of `w` that `mask` selects are all ASCII digits (a carry out of an
/// unselected byte only comes from a byte of at least 0xFA, which the callers reject as a
/// separator anyway).
#[inline(always)]
fn all_digits(w: u64, mask: u64) -> bool {
    non_digits(w) & mask == 0
}

/// Byte `k` of `w`, less `'0'`.
#[inline(always)]
fn digit_of(w: u64, k: u32) -> u32 {
    ((w >> (8 * k)) as u32 & 0xFF).wrapping_sub(u32::from(b'0'))
}

/// An RFC 3339 date-time (`T`, `t` or a space between date and time; `Z`, `z` or `±HH:MM`) as
/// microseconds since the epoch, UTC.
fn parse_rfc3339_micros(s: &[u8]) -> Option<i64> {
    rfc3339_prefix(s).and_then(|(micros, n)| (n == s.len()).then_some(micros))
}

/// The RFC 3339 date-time that `s` starts with (see [`parse_rfc3339_micros`]): its value and its
/// length.
///
/// The fixed head `YYYY-MM-DDTHH:MM` is read as two words: its twelve digits checked in two
/// word tests and its separators in two masked comparisons, rather than a branch per byte.
#[inline]
fn rfc3339_prefix(s: &[u8]) -> Option<(i64, usize)> {
    let word = |at: usize| s.get(at..at + 8).map(|c| u64::from_le_bytes(c.try_into().expect("eight bytes")));
    // `YYYY-MM-` and `DDTHH:MM` (the `T` is checked below, as it has three spellings).
    let (w0, w1) = (word(0)?, word(8)?);
    const DATE_DIGITS: u64 = 0x00FF_FF00_FFFF_FFFF;
    const TIME_DIGITS: u64 = 0xFFFF_00FF_FF00_FFFF;
    const DATE_DASHES: u64 = 0xFF00_00FF_0000_0000;
    const TIME_COLON: u64 = 0x0000_FF00_0000_0000;
    if !all_digits(w0, DATE_DIGITS)
        || !all_digits(w1, TIME_DIGITS)
        || w0 & DATE_DASHES != 0x2D00_002D_0000_0000
        || w1 & TIME_COLON != 0x0000_3A00_0000_0000
        || !matches!(s[10], b'T' | b't' | b' ')
        || s.get(16) != Some(&b':')
    {
        return None;
    }
    let y = digit_of(w0, 0) * 1000 + digit_of(w0, 1) * 100 + digit_of(w0, 2) * 10 + digit_of(w0, 3);
    let (m, d) = (digit_of(w0, 5) * 10 + digit_of(w0, 6), digit_of(w1, 0) * 10 + digit_of(w1, 1));
    let (h, mi) = (digit_of(w1, 3) * 10 + digit_of(w1, 4), digit_of(w1, 6) * 10 + digit_of(w1, 7));
    let sec = digits(s, 17, 2)?;
    if h > 23 || mi > 59 || sec > 59 {
        return None;
    }
    let days = civil_days(y, m, d)?;
    let (h, mi) = (i64::from(h), i64::from(mi));
    let mut i = 19;
    let mut micros = 0i64;
    if s.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while s.get(i).is_some_and(u8::is_ascii_digit) {
            if i - start < 6 {
                micros = micros * 10 + i64::from(s[i] - b'0');
            }
            i += 1;
        }
        if i == start {
            return None;
        }
        for _ in (i - start)..6 {
            micros *= 10;
        }
    }
    let (offset_seconds, end) = match s.get(i) {
        Some(b'Z' | b'z') => (0, i + 1),
        Some(sign @ (b'+' | b'-')) if s.get(i + 3) == Some(&b':') => {
            let (oh, om) = (digits(s, i + 1, 2)?, digits(s, i + 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let offset = oh * 3600 + om * 60;
            (if *sign == b'+' { offset } else { -offset }, i + 6)
        }
        _ => return None,
    };
    let seconds = days * 86_400 + h * 3600 + mi * 60 + sec - offset_seconds;
    Some((seconds.checked_mul(1_000_000)?.checked_add(micros)?, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(s: &str) -> Reader<'_> {
        Reader::new(s.as_bytes())
    }

    #[test]
    fn reads_an_object_in_any_key_order_and_skips_the_rest() {
        let doc = r#" { "b" : [1, {"x": "y"}, null, true, -2.5e3] , "a":"x\"y", "c": 42 } "#;
        let mut r = reader(doc);
        let mut seq = r.begin_object("").unwrap();
        let (mut a, mut c) = (None, None);
        while let Some(key) = r.next_key(&mut seq, "").unwrap() {
            match &*key {
                b"a" => a = Some(r.string("a").unwrap()),
                b"c" => c = Some(r.i64("c").unwrap()),
                _ => r.skip().unwrap(),
            }
        }
        r.end().unwrap();
        assert_eq!(a.as_deref(), Some("x\"y"));
        assert!(matches!(a, Some(Cow::Owned(_))), "an escaped string is unescaped into a copy");
        assert_eq!(c, Some(42));
    }

    #[test]
    fn known_keys_are_found_in_any_order_guessed_or_not() {
        const KEYS: [Key; 3] = [Key::new(b"a"), Key::new(b"bb"), Key::new(b"c")];
        // In order, out of order, escaped, unknown, and a key that only starts like a known one.
        let doc = r#"{"a":1,"bb":2,"c":3,"c":4,"a":5,"bb":6,"zz":7,"bbb":8}"#;
        let mut r = reader(doc);
        let mut seq = r.begin_object("").unwrap();
        let mut hint = 0;
        let mut seen = Vec::new();
        while let Some(k) = r.next_known_key(&mut seq, "", &KEYS, &mut hint).unwrap() {
            seen.push((k, r.i64("v").unwrap()));
        }
        r.end().unwrap();
        assert_eq!(seen, [(0, 1), (1, 2), (2, 3), (2, 4), (0, 5), (1, 6), (3, 7), (3, 8)]);
        let mut r = reader(r#"{"a" 1}"#);
        let mut seq = r.begin_object("").unwrap();
        assert!(r.next_known_key(&mut seq, "", &KEYS, &mut 0).is_err());
    }

    proptest::proptest! {
        // The packed comparison says yes exactly to `"key":` (when it fits in 16 bytes and 16
        // bytes are there to load), for keys of every length.
        #[test]
        fn packed_keys_compare_as_bytes(key in "[a-z_]{1,16}", text in "[a-z_\":]{0,24}", pad in 0usize..20) {
            let key: &'static [u8] = Box::leak(key.into_bytes().into_boxed_slice());
            let mut buf = text.into_bytes();
            buf.extend(std::iter::repeat_n(b' ', pad));
            let k = Key::new(key);
            let pattern = [&b"\""[..], key, b"\":"].concat();
            let fits = pattern.len() <= 16 && buf.len() >= 16;
            proptest::prop_assert_eq!(k.compact_at(&buf, 0), fits && buf.starts_with(&pattern));
            let mut with_key = pattern.clone();
            with_key.extend(&buf);
            with_key.extend([b' '; 16]);
            proptest::prop_assert_eq!(k.compact_at(&with_key, 0), pattern.len() <= 16);
        }
    }

    #[test]
    fn utf8_is_checked_where_strings_are_read() {
        // Valid UTF-8 throughout: strings are slices of the checked text.
        let mut r = Reader::new("{\"k\":\"grüße\"}".as_bytes());
        let mut seq = r.begin_object("").unwrap();
        assert_eq!(r.next_map_key(&mut seq, "").unwrap().as_deref(), Some("k"));
        assert!(matches!(r.string("s").unwrap(), Cow::Borrowed("grüße")));
        // Invalid UTF-8 in a value the decoder skips is no error; in one it reads, it is.
        let doc = b"{\"skip\":\"\xff\",\"read\":\"ok\",\"bad\":\"\xfe\"}";
        let mut r = Reader::new(doc);
        let mut seq = r.begin_object("").unwrap();
        let mut errors = Vec::new();
        while let Some(key) = r.next_key(&mut seq, "").unwrap() {
            match &*key {
                b"skip" => r.skip().unwrap(),
                _ => match r.string("v") {
                    Ok(s) => assert_eq!(s, "ok"),
                    Err(e) => {
                        errors.push(e.what());
                        r.skip().unwrap();
                    }
                },
            }
        }
        assert_eq!(errors, ["a string is not valid UTF-8"]);
    }

    #[test]
    fn strings_without_escapes_are_borrowed() {
        let mut r = reader(r#""plain text""#);
        assert!(matches!(r.string("s").unwrap(), Cow::Borrowed("plain text")));
    }

    #[test]
    fn escapes_and_surrogate_pairs() {
        let mut r = reader(r#""a\n\t\u00e9\ud83d\ude00\/""#);
        assert_eq!(r.string("s").unwrap(), "a\n\té😀/");
        assert!(reader(r#""\ud83d""#).string("s").is_err(), "a lone high surrogate");
        assert!(reader(r#""\q""#).string("s").is_err());
        assert!(reader(r#""abc"#).string("s").is_err());
    }

    #[test]
    fn integers_at_the_edges_of_int64() {
        assert_eq!(reader("9223372036854775807").i64("n").unwrap(), i64::MAX);
        assert_eq!(reader("-9223372036854775808").i64("n").unwrap(), i64::MIN);
        assert!(reader("9223372036854775808").i64("n").is_err());
        assert!(reader("-9223372036854775809").i64("n").is_err());
        assert_eq!(reader("1.0").i64("n").unwrap(), 1);
        assert_eq!(reader("2e3").i64("n").unwrap(), 2000);
        let e = reader("1.5").i64("n").unwrap_err();
        assert_eq!(e.what(), "expected an integer, found a number with a fraction");
        assert!(reader("01").i64("n").is_err(), "leading zeros");
        assert!(reader("-").i64("n").is_err());
    }

    #[test]
    fn wrong_types_name_the_field_and_what_was_found() {
        let e = reader(r#""12""#).i64("order_id").unwrap_err();
        assert_eq!(e.field(), "order_id");
        assert_eq!(e.what(), "expected an integer, found a string");
        assert_eq!(reader("null").begin_array("tags").unwrap_err().what(), "expected an array, found null");
        assert_eq!(reader("null").begin_object("geo").unwrap_err().what(), "expected an object, found null");
        assert_eq!(reader("[").begin_object("geo").unwrap_err().what(), "expected an object");
        let e = reader("null").string("customer").unwrap_err();
        assert_eq!(e.what(), "expected a string, found null");
        let text = RecordError::from(e).to_string();
        assert!(text.contains("customer") && text.contains("found null"), "{text}");
    }

    #[test]
    fn symbols_and_missing_fields() {
        let find = |b: &[u8]| match b {
            b"a" => Some(0),
            b"b" => Some(1),
            _ => None,
        };
        assert_eq!(reader(r#""\u0062""#).symbol_by("e", find).unwrap(), 1);
        assert_eq!(reader(r#""b""#).symbol_by("e", find).unwrap(), 1);
        assert_eq!(reader(r#""c""#).symbol_by("e", find).unwrap_err().what(), "not one of the enum's symbols");
        assert!(reader("1").symbol_by("e", find).is_err());
        let e = RecordError::from(missing("customer.id")).to_string();
        assert!(e.contains("`customer.id`") && e.contains("missing"), "{e}");
        assert!(reader_schema_id(7, &[7]).is_ok());
        assert!(reader_schema_id(8, &[7]).unwrap_err().to_string().contains("format.json.schema_id"));
    }

    #[test]
    fn numbers() {
        assert_eq!(reader("-12.5e-1").f64("x").unwrap(), -1.25);
        assert_eq!(reader("123456789012345").f64("x").unwrap(), 123_456_789_012_345.0);
        assert_eq!(reader("0.1").f64("x").unwrap(), 0.1);
        assert!(reader("1.").f64("x").is_err());
        assert!(reader(".5").f64("x").is_err());
        assert!(reader("1e400").f64("x").is_err());
    }

    #[test]
    fn dates_and_timestamps() {
        assert_eq!(reader(r#""1970-01-02""#).date("d").unwrap(), 1);
        assert_eq!(reader(r#""2024-02-29""#).date("d").unwrap(), 19_782);
        assert!(reader(r#""2023-02-29""#).date("d").is_err());
        assert_eq!(reader(r#""1970-01-01T00:00:01Z""#).timestamp_micros("t").unwrap(), 1_000_000);
        assert_eq!(reader(r#""1970-01-01T01:00:00.5+01:00""#).timestamp_micros("t").unwrap(), 500_000);
        assert_eq!(reader(r#""1969-12-31 23:59:59.9999999z""#).timestamp_micros("t").unwrap(), -1);
        assert!(reader(r#""1970-01-01T00:00:00""#).timestamp_micros("t").is_err(), "no offset");
        assert!(reader(r#""1970-01-01T24:00:00Z""#).timestamp_micros("t").is_err());
        assert!(reader(r#""1970-01-01T00:00:00Zx""#).timestamp_micros("t").is_err(), "more after the offset");
        assert!(reader(r#""1970-01-01T00:00:00+01:00:00""#).timestamp_micros("t").is_err());
    }

    #[test]
    fn malformed_documents_are_errors() {
        for doc in [
            "",
            "{",
            "{\"a\" 1}",
            "{\"a\":1,}",
            "{,\"a\":1}",
            "{\"a\":1 \"b\":2}",
            "[1 2]",
            "[1,]",
            "{\"a\":tru}",
            "{\"a\":1}x",
            "{a:1}",
            "nul",
            "\"unterminated",
        ] {
            let mut r = reader(doc);
            let ok = r.skip().and_then(|()| r.end());
            assert!(ok.is_err(), "{doc:?} should not be accepted");
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let doc = "[".repeat(100_000);
        assert!(reader(&doc).skip().is_err());
    }

    proptest::proptest! {
        // Skipping accepts exactly the documents serde_json accepts (as one value), for any
        // document serde_json prints and for mutations of it.
        #[test]
        fn skip_agrees_with_serde_json(value in arbitrary_json(), cut in 0usize..64, flip in proptest::prelude::any::<u8>()) {
            let text = serde_json::to_string(&value).unwrap();
            let mut r = reader(&text);
            proptest::prop_assert!(r.skip().and_then(|()| r.end()).is_ok(), "{text}");
            // A damaged copy: cut short, or one byte replaced.
            let mut bytes = text.clone().into_bytes();
            if cut % 2 == 0 {
                bytes.truncate(bytes.len().saturating_sub(cut / 2 + 1));
            } else {
                let i = cut % bytes.len();
                bytes[i] = flip;
            }
            let ours = { let mut r = Reader::new(&bytes); r.skip().and_then(|()| r.end()).is_ok() };
            let theirs = serde_json::from_slice::<serde_json::Value>(&bytes).is_ok();
            proptest::prop_assert_eq!(ours, theirs, "{:?}", String::from_utf8_lossy(&bytes));
        }

        // The word-at-a-time scan finds the first quote, backslash or control character wherever
        // it is.
        #[test]
        fn special_finds_the_first_quote_backslash_or_control_character(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80), from in 0usize..80) {
            let from = from.min(bytes.len());
            let expected = bytes[from..].iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20).map(|j| from + j);
            proptest::prop_assert_eq!(special(&bytes, from), expected);
        }

        // Strings read back as serde_json reads them, escapes and all.
        #[test]
        fn strings_agree_with_serde_json(s in ".*") {
            let text = serde_json::to_string(&s).unwrap();
            proptest::prop_assert_eq!(reader(&text).string("s").unwrap(), s);
        }

        // Integers of every length (the eight-digit words and the digits after them), followed
        // by what may follow a value, read back as printed and leave the reader after them.
        #[test]
        fn integers_of_every_length_agree_with_std(n in proptest::prelude::any::<i64>(), shift in 0u32..64, tail in "[,}\\] a]{0,9}") {
            let v = n >> shift;
            let text = format!("{v}{tail}");
            let mut r = reader(&text);
            proptest::prop_assert_eq!(r.i64("n").unwrap(), v);
            proptest::prop_assert_eq!(&text[r.pos..], tail.as_str());
        }

        #[test]
        fn digit_words_agree_with_std(bytes in proptest::collection::vec(proptest::prop_oneof![4 => b'/'..=b':', 1 => proptest::prelude::any::<u8>()], 0..12), at in 0usize..4) {
            let expected = bytes.get(at..at + 8).map(|w| {
                let n = w.iter().take_while(|b| b.is_ascii_digit()).count();
                (std::str::from_utf8(&w[..n]).unwrap().parse::<u64>().unwrap_or(0), n)
            });
            proptest::prop_assert_eq!(digit_word(&bytes, at), expected);
        }

        // For every date of a four-digit year, days since the epoch invert `civil_from_days`.
        #[test]
        fn civil_days_invert_civil_from_days(days in -719_528i64..=2_932_896) {
            let (y, m, d) = crate::codec::civil_from_days(days);
            proptest::prop_assert_eq!(civil_days(y as u32, m, d), Some(days));
        }

        // Timestamps read back as the encoder wrote them, at each precision and with an offset;
        // a head with any digit replaced by another byte is refused.
        #[test]
        fn timestamps_read_back_as_written(micros in -62_135_510_400_000_000i64..253_402_214_399_999_999, hours in -23i64..=23, at in 0usize..19, byte in proptest::prelude::any::<u8>()) {
            for digits in [6u32, 3] {
                let ticks = micros / 10i64.pow(6 - digits);
                let mut text = Vec::new();
                crate::codec::json::timestamp(&mut text, ticks, digits);
                let body = &text[1..text.len() - 1];
                proptest::prop_assert_eq!(parse_rfc3339_micros(body), Some(ticks * 10i64.pow(6 - digits)));
                // In a document, read in place, the reader left after its closing quote.
                let doc = format!("{},1", std::str::from_utf8(&text).unwrap());
                let mut r = reader(&doc);
                proptest::prop_assert_eq!(r.timestamp_micros("t"), Ok(ticks * 10i64.pow(6 - digits)));
                proptest::prop_assert_eq!(&doc[r.pos..], ",1");
                // With its first digit escaped (`\u0032` for `2`), through the general path.
                let escaped = format!("\"\\u00{:x}{}", doc.as_bytes()[1], &doc[2..]);
                proptest::prop_assert_eq!(reader(&escaped).timestamp_micros("t"), Ok(ticks * 10i64.pow(6 - digits)));
                // The same instant written in another zone.
                let mut local = Vec::new();
                crate::codec::json::timestamp(&mut local, ticks + hours * 3600 * 10i64.pow(digits), digits);
                let mut local = local[1..local.len() - 2].to_vec();
                local.extend_from_slice(format!("{}{:02}:00", if hours < 0 { '-' } else { '+' }, hours.abs()).as_bytes());
                proptest::prop_assert_eq!(parse_rfc3339_micros(&local), Some(ticks * 10i64.pow(6 - digits)));
                let mut broken = body.to_vec();
                if broken[at].is_ascii_digit() && !byte.is_ascii_digit() {
                    broken[at] = byte;
                    proptest::prop_assert_eq!(parse_rfc3339_micros(&broken), None);
                }
            }
        }

        // Numbers read back as they were printed.
        #[test]
        fn numbers_agree_with_serde_json(i in proptest::prelude::any::<i64>(), f in proptest::prelude::any::<f64>()) {
            proptest::prop_assert_eq!(reader(&i.to_string()).i64("n").unwrap(), i);
            // Integers read as doubles, through the short path (up to 15 digits) and the parser.
            let text = i.to_string();
            proptest::prop_assert_eq!(reader(&text).f64("x").unwrap(), text.parse::<f64>().unwrap());
            let short = (i % 1_000_000_000_000).to_string();
            proptest::prop_assert_eq!(reader(&short).f64("x").unwrap(), short.parse::<f64>().unwrap());
            // Decimals of every length and exponent, through the fast path where it applies.
            let scaled = format!("{}e{}", i % 100_000_000_000, (i % 60) - 30);
            proptest::prop_assert_eq!(reader(&scaled).f64("x").unwrap(), scaled.parse::<f64>().unwrap());
            let fraction = format!("{}.{:06}", i % 1_000_000_000, (i % 1_000_000).abs());
            proptest::prop_assert_eq!(reader(&fraction).f64("x").unwrap(), fraction.parse::<f64>().unwrap());
            if f.is_finite() {
                let text = serde_json::to_string(&f).unwrap();
                // Exactly the double that was printed (serde_json's own parser is not always
                // correctly rounded without its `float_roundtrip` feature; std's is).
                proptest::prop_assert_eq!(reader(&text).f64("x").unwrap(), f);
            }
        }
    }

    fn arbitrary_json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            any::<i64>().prop_map(|i| serde_json::json!(i)),
            (-1e6f64..1e6).prop_map(|f| serde_json::json!(f)),
            ".{0,8}".prop_map(serde_json::Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
                proptest::collection::btree_map("[a-z\\\\\"]{0,4}", inner, 0..6)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }
}
