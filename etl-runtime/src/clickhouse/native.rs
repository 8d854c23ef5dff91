//! `sink.clickhouse.format: native`: the generated encoders' RowBinary rows turned, column by
//! column, into ClickHouse Native blocks as the insert body is streamed.
//!
//! Why transpose rather than encode Native in the generated code: chunks are row-major by
//! construction (lanes append whole rows to per-shard buffers and seal them by size), refused
//! rows are isolated at row boundaries, and exactly-once replays are re-cut at recorded spans.
//! All of that stays in RowBinary. Only the bytes on the wire are columnar, and ClickHouse then
//! copies each column instead of parsing every value of every row (docs/BENCHMARKS.md measures
//! what that saves on the server and what the transposition costs here).
//!
//! A Native block is: the column count and the row count (LEB128), then per column its name, its
//! type name (both length-prefixed) and its data. A column's data is its values back to back,
//! except for the composite types:
//! - `Nullable(T)`: one byte per row (1 = null), then a `T` column holding a default for each null;
//! - `Array(T)`: the cumulative element count after each row (UInt64), then one `T` column of
//!   every element;
//! - `Map(K, V)`: as `Array(Tuple(K, V))`: the offsets, then the key column, then the value column;
//! - `Tuple(...)`: each element's column in turn;
//! - `Variant(...)`: a prefix (the discriminators mode, UInt64 0), which Native writes before
//!   the data of the whole column, then one discriminator per row (the member's number, 255 for
//!   NULL), then each member's column of the rows that hold it.
//!
//! Every other mapped type (strings included) has the same bytes per value in both formats.
//! `LowCardinality(T)` columns are sent as `T`: ClickHouse converts a Native column whose type
//! differs from the table's, and the dictionary encoding is its job, as it is for RowBinary.

use super::table_columns::{NULL_DISCRIMINATOR, Ty, varint};
use crate::codec::rowbinary;

/// Where a block is cut: once its columns hold this many bytes (plus the row that crossed it).
/// The size of the frames a RowBinary body is streamed in: large enough that a block's header
/// (names and types) and ClickHouse's per-block work are noise (ClickHouse squashes the blocks
/// of one insert into its own), small enough that an insert in flight holds little: the columns,
/// the block in the insert's buffer, its compressed frame (`gen --memory`'s insert term).
pub const NATIVE_BLOCK_BYTES: usize = 256 << 10;

/// How often [`NativeEncoder::take_rows`] checks whether the block is full, in rows.
const FULL_CHECK_ROWS: u64 = 16;

/// One column being filled.
#[derive(Debug, Clone)]
enum Column {
    Fixed {
        width: usize,
        data: Vec<u8>,
    },
    /// Each value as RowBinary has it: a LEB128 length and the bytes.
    String {
        data: Vec<u8>,
    },
    Nullable {
        nulls: Vec<u8>,
        inner: Box<Column>,
    },
    Array {
        offsets: Vec<u8>,
        total: u64,
        inner: Box<Column>,
    },
    Map {
        offsets: Vec<u8>,
        total: u64,
        keys: Box<Column>,
        values: Box<Column>,
    },
    Tuple(Vec<Column>),
    /// One discriminator per row (255: NULL), then each member's values, in member order.
    Variant {
        discriminators: Vec<u8>,
        members: Vec<Column>,
    },
}

impl Column {
    fn new(ty: &Ty) -> Column {
        match ty {
            Ty::Fixed(width) => Column::Fixed { width: *width, data: Vec::new() },
            Ty::String => Column::String { data: Vec::new() },
            Ty::Nullable(inner) => Column::Nullable { nulls: Vec::new(), inner: Box::new(Column::new(inner)) },
            Ty::Array(inner) => Column::Array { offsets: Vec::new(), total: 0, inner: Box::new(Column::new(inner)) },
            Ty::Map(key, value) => Column::Map {
                offsets: Vec::new(),
                total: 0,
                keys: Box::new(Column::new(key)),
                values: Box::new(Column::new(value)),
            },
            Ty::Tuple(items) => Column::Tuple(items.iter().map(Column::new).collect()),
            Ty::Variant(members) => {
                Column::Variant { discriminators: Vec::new(), members: members.iter().map(Column::new).collect() }
            }
        }
    }

    /// Moves one RowBinary value from the start of `bytes` into the column; returns the bytes it
    /// took, `None` if `bytes` does not start with a whole value of this type.
    fn take(&mut self, bytes: &[u8]) -> Option<usize> {
        match self {
            // The common widths as arrays, so the copy is a load and a store rather than a call.
            Column::Fixed { width: 8, data } => {
                let value: &[u8; 8] = bytes.first_chunk()?;
                data.extend_from_slice(value);
                Some(8)
            }
            Column::Fixed { width: 4, data } => {
                let value: &[u8; 4] = bytes.first_chunk()?;
                data.extend_from_slice(value);
                Some(4)
            }
            Column::Fixed { width, data } => {
                data.extend_from_slice(bytes.get(..*width)?);
                Some(*width)
            }
            // Most strings are shorter than 128 bytes: a one-byte length.
            Column::String { data } if bytes.first().is_some_and(|&len| len < 0x80) => {
                let end = 1 + usize::from(bytes[0]);
                data.extend_from_slice(bytes.get(..end)?);
                Some(end)
            }
            Column::String { data } => {
                let (len, head) = varint(bytes)?;
                let end = head.checked_add(usize::try_from(len).ok()?)?;
                data.extend_from_slice(bytes.get(..end)?);
                Some(end)
            }
            Column::Nullable { nulls, inner } => match *bytes.first()? {
                1 => {
                    nulls.push(1);
                    inner.default();
                    Some(1)
                }
                0 => {
                    let taken = inner.take(&bytes[1..])?;
                    nulls.push(0);
                    Some(1 + taken)
                }
                _ => None,
            },
            Column::Array { offsets, total, inner } => {
                let (count, mut at) = varint(bytes)?;
                for _ in 0..count {
                    at += inner.take(&bytes[at..])?;
                }
                *total += count;
                offsets.extend_from_slice(&total.to_le_bytes());
                Some(at)
            }
            Column::Map { offsets, total, keys, values } => {
                let (count, mut at) = varint(bytes)?;
                for _ in 0..count {
                    at += keys.take(&bytes[at..])?;
                    at += values.take(&bytes[at..])?;
                }
                *total += count;
                offsets.extend_from_slice(&total.to_le_bytes());
                Some(at)
            }
            Column::Tuple(items) => {
                let mut at = 0;
                for item in items {
                    at += item.take(&bytes[at..])?;
                }
                Some(at)
            }
            Column::Variant { discriminators, members } => match *bytes.first()? {
                NULL_DISCRIMINATOR => {
                    discriminators.push(NULL_DISCRIMINATOR);
                    Some(1)
                }
                d => {
                    let taken = members.get_mut(usize::from(d))?.take(&bytes[1..])?;
                    discriminators.push(d);
                    Some(1 + taken)
                }
            },
        }
    }

    /// Appends the value a null stands on: zeros, an empty string, empty containers.
    fn default(&mut self) {
        match self {
            Column::Fixed { width, data } => data.resize(data.len() + *width, 0),
            Column::String { data } => data.push(0),
            Column::Nullable { nulls, inner } => {
                nulls.push(1);
                inner.default();
            }
            Column::Array { offsets, total, .. } | Column::Map { offsets, total, .. } => {
                offsets.extend_from_slice(&total.to_le_bytes());
            }
            Column::Tuple(items) => items.iter_mut().for_each(Column::default),
            Column::Variant { discriminators, .. } => discriminators.push(NULL_DISCRIMINATOR),
        }
    }

    /// The bytes [`Column::write`] will write.
    fn len(&self) -> usize {
        match self {
            Column::Fixed { data, .. } | Column::String { data } => data.len(),
            Column::Nullable { nulls, inner } => nulls.len() + inner.len(),
            Column::Array { offsets, inner, .. } => offsets.len() + inner.len(),
            Column::Map { offsets, keys, values, .. } => offsets.len() + keys.len() + values.len(),
            Column::Tuple(items) => items.iter().map(Column::len).sum(),
            Column::Variant { discriminators, members } => {
                discriminators.len() + members.iter().map(Column::len).sum::<usize>()
            }
        }
    }

    /// The column's serialization prefix, which Native puts before the data of the whole
    /// column (a Variant's inside an Array comes before the Array's offsets): a Variant's
    /// discriminators mode, 0 (basic: one discriminator per row).
    fn prefixes(&self, out: &mut impl FnMut(&[u8])) {
        match self {
            Column::Fixed { .. } | Column::String { .. } => {}
            Column::Nullable { inner, .. } | Column::Array { inner, .. } => inner.prefixes(out),
            Column::Map { keys, values, .. } => {
                keys.prefixes(out);
                values.prefixes(out);
            }
            Column::Tuple(items) => items.iter().for_each(|item| item.prefixes(out)),
            Column::Variant { members, .. } => {
                out(&0u64.to_le_bytes());
                members.iter().for_each(|m| m.prefixes(out));
            }
        }
    }

    /// Hands the column's Native data to `out` and empties it, keeping its buffers for the next
    /// block.
    fn write(&mut self, out: &mut impl FnMut(&[u8])) {
        match self {
            Column::Fixed { data, .. } | Column::String { data } => {
                out(data);
                data.clear();
            }
            Column::Nullable { nulls, inner } => {
                out(nulls);
                nulls.clear();
                inner.write(out);
            }
            Column::Array { offsets, total, inner } => {
                out(offsets);
                offsets.clear();
                *total = 0;
                inner.write(out);
            }
            Column::Map { offsets, total, keys, values } => {
                out(offsets);
                offsets.clear();
                *total = 0;
                keys.write(out);
                values.write(out);
            }
            Column::Tuple(items) => items.iter_mut().for_each(|item| item.write(out)),
            Column::Variant { discriminators, members } => {
                out(discriminators);
                discriminators.clear();
                members.iter_mut().for_each(|m| m.write(out));
            }
        }
    }
}

/// Turns RowBinary rows of the pipeline's columns into Native blocks.
#[derive(Debug, Clone)]
pub struct NativeEncoder {
    /// Each column's name and Native type name, length-prefixed, as a block's column header.
    headers: Vec<Vec<u8>>,
    columns: Vec<Column>,
    rows: u64,
    /// Where blocks are cut: [`NATIVE_BLOCK_BYTES`] (tests cut smaller ones).
    limit: usize,
}

impl NativeEncoder {
    /// An encoder for `columns` (name, ClickHouse type); `None` if a type's encoding is unknown.
    pub fn new(columns: &[(String, String)]) -> Option<NativeEncoder> {
        let mut headers = Vec::with_capacity(columns.len());
        let mut built = Vec::with_capacity(columns.len());
        for (name, ty) in columns {
            built.push(Column::new(&Ty::parse(ty)?));
            let mut header = Vec::new();
            rowbinary::string(&mut header, name.as_bytes());
            rowbinary::string(&mut header, wire_type(ty).as_bytes());
            headers.push(header);
        }
        Some(NativeEncoder { headers, columns: built, rows: 0, limit: NATIVE_BLOCK_BYTES })
    }

    /// Moves whole rows from the start of `bytes` into the block until the block holds
    /// [`NATIVE_BLOCK_BYTES`] or `bytes` ends; returns how many bytes it took. `None` if the bytes
    /// do not decode as rows of the columns' types; the block is then inconsistent and the insert
    /// must be abandoned.
    pub fn take_rows(&mut self, bytes: &[u8]) -> Option<usize> {
        let mut at = 0;
        if self.is_full() {
            return Some(0);
        }
        while at < bytes.len() {
            for column in &mut self.columns {
                at += column.take(&bytes[at..])?;
            }
            self.rows += 1;
            // Summing the columns' sizes costs as much as taking a row, so it is done every
            // `FULL_CHECK_ROWS` rows: a block overshoots by at most that many rows.
            if self.rows.is_multiple_of(FULL_CHECK_ROWS) && self.is_full() {
                break;
            }
        }
        Some(at)
    }

    /// Whether the block reached [`NATIVE_BLOCK_BYTES`] and should be written.
    pub fn is_full(&self) -> bool {
        self.columns.iter().map(Column::len).sum::<usize>() >= self.limit
    }

    /// The rows in the block being filled.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// All of `bytes` (whole rows) as Native blocks handed to `out`, the last one finished too;
    /// `None` if the bytes are not rows of the columns' types. For callers that hold a body
    /// whole (the sink streams, flushing between blocks, and runs the same loop itself).
    pub fn encode(&mut self, bytes: &[u8], mut out: impl FnMut(&[u8])) -> Option<()> {
        let mut rest = bytes;
        while !rest.is_empty() {
            rest = &rest[self.take_rows(rest)?..];
            if self.is_full() {
                self.finish(&mut out);
            }
        }
        if self.rows > 0 {
            self.finish(out);
        }
        Some(())
    }

    /// Hands the block to `out`, piece by piece (so it is copied once, into the insert's
    /// buffer), and starts the next one.
    pub fn finish(&mut self, mut out: impl FnMut(&[u8])) {
        let mut counts = Vec::with_capacity(20);
        rowbinary::varint(&mut counts, self.columns.len() as u64);
        rowbinary::varint(&mut counts, self.rows);
        out(&counts);
        for (header, column) in self.headers.iter().zip(&mut self.columns) {
            out(header);
            column.prefixes(&mut out);
            column.write(&mut out);
        }
        self.rows = 0;
    }
}

/// The type a column is sent as: `ty` with every `LowCardinality(T)` replaced by `T` and every
/// `JSON(...)` by `String` (the objects' text, which the server parses into the table's `JSON`),
/// quoted text (enum names, time zones) kept.
fn wire_type(ty: &str) -> String {
    const WRAPPER: &str = "LowCardinality(";
    let mut out = String::with_capacity(ty.len());
    // Parentheses opened so far; `true` for one that a removed wrapper opened.
    let mut open: Vec<bool> = Vec::new();
    let mut quoted = false;
    let mut chars = ty.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if quoted {
            out.push(c);
            match c {
                '\\' => out.extend(chars.next().map(|(_, c)| c)),
                '\'' => quoted = false,
                _ => {}
            }
            continue;
        }
        let starts_word = !out.ends_with(|p: char| p.is_ascii_alphanumeric() || p == '_');
        if starts_word && ty[i..].starts_with(WRAPPER) {
            open.push(true);
            for _ in 1..WRAPPER.len() {
                chars.next();
            }
            continue;
        }
        let json_word =
            ty[i..].starts_with("JSON") && !ty[i + 4..].starts_with(|n: char| n.is_ascii_alphanumeric() || n == '_');
        if starts_word && json_word {
            out.push_str("String");
            for _ in 1.."JSON".len() {
                chars.next();
            }
            // Its arguments (`max_dynamic_paths = 8`, typed paths) go with it.
            if chars.peek().is_some_and(|(_, n)| *n == '(') {
                let (mut depth, mut in_quote) = (0, false);
                for (_, n) in chars.by_ref() {
                    match n {
                        '\'' => in_quote = !in_quote,
                        '(' if !in_quote => depth += 1,
                        ')' if !in_quote => depth -= 1,
                        _ => {}
                    }
                    if depth == 0 {
                        break;
                    }
                }
            }
            continue;
        }
        match c {
            '\'' => quoted = true,
            '(' => open.push(false),
            ')' if open.pop() == Some(true) => continue,
            _ => {}
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::rowbinary as rb;
    use proptest::prelude::*;

    fn cols(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(n, t)| ((*n).to_owned(), (*t).to_owned())).collect()
    }

    #[test]
    fn low_cardinality_is_unwrapped_and_quotes_are_kept() {
        assert_eq!(wire_type("LowCardinality(String)"), "String");
        assert_eq!(
            wire_type("Map(LowCardinality(String), Array(LowCardinality(Nullable(String))))"),
            "Map(String, Array(Nullable(String)))"
        );
        assert_eq!(
            wire_type("Enum8('LowCardinality(x)' = 1, 'it\\'s)' = 2)"),
            "Enum8('LowCardinality(x)' = 1, 'it\\'s)' = 2)"
        );
        assert_eq!(wire_type("DateTime64(3, 'UTC')"), "DateTime64(3, 'UTC')");
        assert_eq!(wire_type("MyLowCardinality(String)"), "MyLowCardinality(String)");
        assert_eq!(wire_type("Nullable(JSON)"), "Nullable(String)");
        assert_eq!(wire_type("Array(JSON(max_dynamic_paths = 8, a.b UInt32))"), "Array(String)");
        assert_eq!(wire_type("Enum8('JSON' = 0)"), "Enum8('JSON' = 0)");
    }

    // The Native bytes of two rows of every composite shape, written out by hand from the format's
    // description (and accepted by ClickHouse in `tests/clickhouse.rs`).
    #[test]
    fn composite_columns_are_laid_out_as_native_expects() {
        let columns = cols(&[
            ("id", "Int32"),
            ("n", "Nullable(Int16)"),
            ("a", "Array(Nullable(String))"),
            ("m", "Map(LowCardinality(String), UInt8)"),
            ("t", "Tuple(Int8, String)"),
        ]);
        let mut encoder = NativeEncoder::new(&columns).unwrap();
        let mut rows = Vec::new();
        // id 1, n null, a ["x", null], m {"k": 7}, t (-1, "")
        rb::i32(&mut rows, 1);
        rb::null_marker(&mut rows, true);
        rb::varint(&mut rows, 2);
        rb::null_marker(&mut rows, false);
        rb::string(&mut rows, b"x");
        rb::null_marker(&mut rows, true);
        rb::varint(&mut rows, 1);
        rb::string(&mut rows, b"k");
        rows.push(7);
        rows.push(0xff);
        rb::string(&mut rows, b"");
        // id 2, n 5, a [], m {}, t (2, "yz")
        rb::i32(&mut rows, 2);
        rb::null_marker(&mut rows, false);
        rows.extend_from_slice(&5i16.to_le_bytes());
        rb::varint(&mut rows, 0);
        rb::varint(&mut rows, 0);
        rows.push(2);
        rb::string(&mut rows, b"yz");

        assert_eq!(encoder.take_rows(&rows), Some(rows.len()));
        assert_eq!(encoder.rows(), 2);
        let mut block = Vec::new();
        encoder.finish(|b| block.extend_from_slice(b));

        let mut expected = vec![5, 2];
        let header = |out: &mut Vec<u8>, name: &str, ty: &str| {
            rb::string(out, name.as_bytes());
            rb::string(out, ty.as_bytes());
        };
        header(&mut expected, "id", "Int32");
        expected.extend_from_slice(&[1, 0, 0, 0, 2, 0, 0, 0]);
        header(&mut expected, "n", "Nullable(Int16)");
        expected.extend_from_slice(&[1, 0, 0, 0, 5, 0]);
        header(&mut expected, "a", "Array(Nullable(String))");
        expected.extend_from_slice(&2u64.to_le_bytes());
        expected.extend_from_slice(&2u64.to_le_bytes());
        expected.extend_from_slice(&[0, 1, 1, b'x', 0]);
        header(&mut expected, "m", "Map(String, UInt8)");
        expected.extend_from_slice(&1u64.to_le_bytes());
        expected.extend_from_slice(&1u64.to_le_bytes());
        expected.extend_from_slice(&[1, b'k', 7]);
        header(&mut expected, "t", "Tuple(Int8, String)");
        expected.extend_from_slice(&[0xff, 2, 0, 2, b'y', b'z']);
        assert_eq!(block, expected);

        // The encoder starts the next block empty.
        let mut next = Vec::new();
        encoder.finish(|b| next.extend_from_slice(b));
        assert_eq!(next[..2], [5, 0]);
    }

    #[test]
    fn bytes_that_are_not_rows_are_refused() {
        let mut encoder = NativeEncoder::new(&cols(&[("id", "Int64"), ("s", "String")])).unwrap();
        let mut rows = Vec::new();
        rb::i64(&mut rows, 1);
        rb::string(&mut rows, b"abc");
        assert_eq!(encoder.take_rows(&rows[..rows.len() - 1]), None, "truncated");
        let mut encoder = NativeEncoder::new(&cols(&[("n", "Nullable(Int8)")])).unwrap();
        assert_eq!(encoder.take_rows(&[2, 0]), None, "a null marker that is neither 0 nor 1");
        assert!(NativeEncoder::new(&cols(&[("v", "Dynamic")])).is_none());
    }

    /// A generated value of a generated type, its RowBinary bytes appended to `out`.
    #[derive(Debug, Clone)]
    enum Value {
        Fixed(Vec<u8>),
        String(Vec<u8>),
        Null,
        Some(Box<Value>),
        Array(Vec<Value>),
        Map(Vec<(Value, Value)>),
        Tuple(Vec<Value>),
        /// A member's number and its value; `None`: NULL.
        Variant(Option<(u8, Box<Value>)>),
    }

    impl Value {
        fn rowbinary(&self, out: &mut Vec<u8>) {
            match self {
                Value::Fixed(bytes) => out.extend_from_slice(bytes),
                Value::String(bytes) => rb::string(out, bytes),
                Value::Null => out.push(1),
                Value::Some(inner) => {
                    out.push(0);
                    inner.rowbinary(out);
                }
                Value::Array(items) | Value::Tuple(items) => {
                    if let Value::Array(_) = self {
                        rb::varint(out, items.len() as u64);
                    }
                    items.iter().for_each(|i| i.rowbinary(out));
                }
                Value::Map(pairs) => {
                    rb::varint(out, pairs.len() as u64);
                    for (k, v) in pairs {
                        k.rowbinary(out);
                        v.rowbinary(out);
                    }
                }
                Value::Variant(None) => out.push(NULL_DISCRIMINATOR),
                Value::Variant(Some((d, v))) => {
                    out.push(*d);
                    v.rowbinary(out);
                }
            }
        }
    }

    fn arb_ty() -> impl Strategy<Value = Ty> {
        let leaf = prop_oneof![(1usize..=32).prop_map(Ty::Fixed), Just(Ty::String)];
        leaf.prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                prop_oneof![(1usize..=32).prop_map(Ty::Fixed), Just(Ty::String)]
                    .prop_map(|t| Ty::Nullable(Box::new(t))),
                inner.clone().prop_map(|t| Ty::Array(Box::new(t))),
                (inner.clone(), inner.clone()).prop_map(|(k, v)| Ty::Map(Box::new(k), Box::new(v))),
                prop::collection::vec(inner.clone(), 1..3).prop_map(Ty::Tuple),
                prop::collection::vec(inner, 2..4).prop_map(Ty::Variant),
            ]
        })
    }

    fn arb_value(ty: &Ty) -> BoxedStrategy<Value> {
        match ty {
            Ty::Fixed(n) => prop::collection::vec(any::<u8>(), *n).prop_map(Value::Fixed).boxed(),
            Ty::String => prop::collection::vec(any::<u8>(), 0..200).prop_map(Value::String).boxed(),
            Ty::Nullable(inner) => {
                prop_oneof![Just(Value::Null), arb_value(inner).prop_map(|v| Value::Some(Box::new(v)))].boxed()
            }
            Ty::Array(inner) => prop::collection::vec(arb_value(inner), 0..4).prop_map(Value::Array).boxed(),
            Ty::Map(k, v) => prop::collection::vec((arb_value(k), arb_value(v)), 0..4).prop_map(Value::Map).boxed(),
            Ty::Tuple(items) => items.iter().map(arb_value).collect::<Vec<_>>().prop_map(Value::Tuple).boxed(),
            Ty::Variant(members) => {
                let held = members
                    .iter()
                    .enumerate()
                    .map(|(d, m)| arb_value(m).prop_map(move |v| Value::Variant(Some((d as u8, Box::new(v))))).boxed());
                prop::strategy::Union::new(held.chain([Just(Value::Variant(None)).boxed()])).boxed()
            }
        }
    }

    /// Skips a column's serialization prefixes (a Variant's mode, which must be 0: basic).
    fn skip_prefixes(ty: &Ty, bytes: &[u8], at: &mut usize) {
        match ty {
            Ty::Fixed(_) | Ty::String => {}
            Ty::Nullable(inner) | Ty::Array(inner) => skip_prefixes(inner, bytes, at),
            Ty::Map(k, v) => {
                skip_prefixes(k, bytes, at);
                skip_prefixes(v, bytes, at);
            }
            Ty::Tuple(items) => items.iter().for_each(|t| skip_prefixes(t, bytes, at)),
            Ty::Variant(members) => {
                assert_eq!(bytes[*at..*at + 8], 0u64.to_le_bytes(), "a Variant's discriminators mode");
                *at += 8;
                members.iter().for_each(|t| skip_prefixes(t, bytes, at));
            }
        }
    }

    /// A Native reader for the tests: reads one column of `rows` values of `ty` and gives each
    /// value back in RowBinary, so blocks can be compared with the rows they came from.
    fn read_column(ty: &Ty, bytes: &[u8], at: &mut usize, rows: usize) -> Vec<Vec<u8>> {
        let fixed = |at: &mut usize, n: usize| {
            let v = bytes[*at..*at + n].to_vec();
            *at += n;
            v
        };
        let offsets = |at: &mut usize| -> Vec<u64> {
            (0..rows).map(|_| u64::from_le_bytes(fixed(at, 8).try_into().unwrap())).collect()
        };
        let split = |offsets: &[u64], flat: Vec<Vec<u8>>| -> Vec<Vec<u8>> {
            let mut start = 0;
            offsets
                .iter()
                .map(|&end| {
                    let mut row = Vec::new();
                    rb::varint(&mut row, end - start);
                    flat[start as usize..end as usize].iter().for_each(|v| row.extend_from_slice(v));
                    start = end;
                    row
                })
                .collect()
        };
        match ty {
            Ty::Fixed(n) => (0..rows).map(|_| fixed(at, *n)).collect(),
            Ty::String => (0..rows)
                .map(|_| {
                    let (len, head) = varint(&bytes[*at..]).unwrap();
                    fixed(at, head + len as usize)
                })
                .collect(),
            Ty::Nullable(inner) => {
                let nulls = fixed(at, rows);
                let values = read_column(inner, bytes, at, rows);
                nulls
                    .iter()
                    .zip(values)
                    .map(|(&null, value)| if null == 1 { vec![1] } else { [vec![0], value].concat() })
                    .collect()
            }
            Ty::Array(inner) => {
                let offsets = offsets(at);
                let flat = read_column(inner, bytes, at, offsets.last().copied().unwrap_or(0) as usize);
                split(&offsets, flat)
            }
            Ty::Map(k, v) => {
                let offsets = offsets(at);
                let total = offsets.last().copied().unwrap_or(0) as usize;
                let keys = read_column(k, bytes, at, total);
                let values = read_column(v, bytes, at, total);
                split(&offsets, keys.into_iter().zip(values).map(|(k, v)| [k, v].concat()).collect())
            }
            Ty::Tuple(items) => {
                let columns: Vec<Vec<Vec<u8>>> = items.iter().map(|t| read_column(t, bytes, at, rows)).collect();
                (0..rows).map(|r| columns.iter().flat_map(|c| c[r].clone()).collect()).collect()
            }
            Ty::Variant(members) => {
                let discriminators = fixed(at, rows);
                // Each member's column holds the rows of that member, in row order.
                let mut held: Vec<std::vec::IntoIter<Vec<u8>>> = members
                    .iter()
                    .enumerate()
                    .map(|(d, m)| {
                        let count = discriminators.iter().filter(|&&x| usize::from(x) == d).count();
                        read_column(m, bytes, at, count).into_iter()
                    })
                    .collect();
                discriminators
                    .iter()
                    .map(|&d| match d {
                        NULL_DISCRIMINATOR => vec![d],
                        d => [vec![d], held[usize::from(d)].next().unwrap()].concat(),
                    })
                    .collect()
            }
        }
    }

    /// Every block of `blocks` read back into RowBinary rows.
    fn read_blocks(types: &[Ty], blocks: &[u8]) -> Vec<u8> {
        let mut rows_out = Vec::new();
        let mut at = 0;
        while at < blocks.len() {
            let (count, head) = varint(&blocks[at..]).unwrap();
            at += head;
            assert_eq!(count as usize, types.len());
            let (rows, head) = varint(&blocks[at..]).unwrap();
            at += head;
            let mut columns = Vec::new();
            for ty in types {
                for _ in 0..2 {
                    let (len, head) = varint(&blocks[at..]).unwrap();
                    at += head + len as usize;
                }
                skip_prefixes(ty, blocks, &mut at);
                columns.push(read_column(ty, blocks, &mut at, rows as usize));
            }
            for r in 0..rows as usize {
                columns.iter().for_each(|c| rows_out.extend_from_slice(&c[r]));
            }
        }
        rows_out
    }

    fn arb_rows() -> impl Strategy<Value = (Vec<Ty>, Vec<Vec<Value>>)> {
        prop::collection::vec(arb_ty(), 1..5).prop_flat_map(|types| {
            let row = types.iter().map(arb_value).collect::<Vec<_>>();
            (Just(types), prop::collection::vec(row, 1..60))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        // The transposition loses, adds and reorders nothing: the Native blocks made from any
        // rows of any column types read back as exactly those rows, in order, however the rows
        // are split into parts and the parts into blocks.
        #[test]
        fn native_blocks_read_back_as_the_rows(
            (types, rows) in arb_rows(),
            cut in 0usize..100,
            limit in 1usize..4000,
        ) {
            let mut encoder = NativeEncoder {
                headers: types.iter().map(|_| vec![1, b'c', 1, b't']).collect(),
                columns: types.iter().map(Column::new).collect(),
                rows: 0,
                limit,
            };
            let mut bytes = Vec::new();
            let mut row_ends = Vec::new();
            for row in &rows {
                row.iter().for_each(|v| v.rowbinary(&mut bytes));
                row_ends.push(bytes.len());
            }
            // Two parts, cut at a row boundary, as a batch's chunks are.
            let boundary = row_ends[cut * (rows.len() - 1) / 100];
            let mut blocks = Vec::new();
            for part in [&bytes[..boundary], &bytes[boundary..]] {
                let mut rest = part;
                while !rest.is_empty() {
                    let taken = encoder.take_rows(rest).unwrap();
                    rest = &rest[taken..];
                    if encoder.is_full() {
                        encoder.finish(|b| blocks.extend_from_slice(b));
                    }
                }
            }
            if encoder.rows() > 0 {
                encoder.finish(|b| blocks.extend_from_slice(b));
            }
            prop_assert_eq!(read_blocks(&types, &blocks), bytes);
        }
    }
}
