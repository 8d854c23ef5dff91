//! The target table's columns as the sink sees them: the ClickHouse column types it understands
//! (parsing type names), comparing the live table with the columns the pipeline writes, finding
//! row boundaries in RowBinary bytes, and the INSERT statement naming the columns.
//!
//! Row boundaries are what make row-level isolation of refused rows possible: chunks carry their
//! rows back to back with no index, but the sink knows every column's type, so it can walk the
//! encoding. The walk is only needed on the error path.

use std::fmt::Write as _;

use crate::clickhouse::InsertFormat;

/// A column type, as far as its RowBinary encoding is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ty {
    /// A value of a fixed number of bytes (integers, floats, dates, decimals, UUID, ...).
    Fixed(usize),
    /// A LEB128 length and that many bytes (`String`).
    String,
    /// A null marker byte, then the value unless the marker is 1.
    Nullable(Box<Ty>),
    /// A LEB128 length and that many values.
    Array(Box<Ty>),
    /// A LEB128 length and that many key/value pairs.
    Map(Box<Ty>, Box<Ty>),
    /// The elements one after another.
    Tuple(Vec<Ty>),
    /// A member's number (255: NULL), then that member's value.
    Variant(Vec<Ty>),
}

impl Ty {
    /// Parses a ClickHouse type name such as `Map(String, Nullable(Decimal(18, 4)))`; `None` for a
    /// type whose encoding this module does not know.
    pub(crate) fn parse(name: &str) -> Option<Ty> {
        let mut parser = Parser { s: name.as_bytes(), at: 0 };
        let ty = parser.ty()?;
        parser.skip_ws();
        (parser.at == parser.s.len()).then_some(ty)
    }

    /// Skips one value at the start of `bytes`; returns its length, `None` when `bytes` ends early.
    fn skip(&self, bytes: &[u8]) -> Option<usize> {
        match self {
            Ty::Fixed(n) => (bytes.len() >= *n).then_some(*n),
            Ty::String => {
                let (len, head) = varint(bytes)?;
                let end = head.checked_add(usize::try_from(len).ok()?)?;
                (bytes.len() >= end).then_some(end)
            }
            Ty::Nullable(inner) => match bytes.first()? {
                1 => Some(1),
                0 => Some(1 + inner.skip(&bytes[1..])?),
                _ => None,
            },
            Ty::Array(inner) => {
                let (count, mut at) = varint(bytes)?;
                for _ in 0..count {
                    at += inner.skip(&bytes[at..])?;
                }
                Some(at)
            }
            Ty::Map(key, value) => {
                let (count, mut at) = varint(bytes)?;
                for _ in 0..count {
                    at += key.skip(&bytes[at..])?;
                    at += value.skip(&bytes[at..])?;
                }
                Some(at)
            }
            Ty::Tuple(items) => {
                let mut at = 0;
                for item in items {
                    at += item.skip(&bytes[at..])?;
                }
                Some(at)
            }
            Ty::Variant(members) => match *bytes.first()? {
                NULL_DISCRIMINATOR => Some(1),
                d => Some(1 + members.get(usize::from(d))?.skip(&bytes[1..])?),
            },
        }
    }
}

/// The discriminator of a NULL `Variant` value.
pub(crate) const NULL_DISCRIMINATOR: u8 = 255;

/// The row layout of the columns the pipeline writes, in order.
#[derive(Debug, Clone)]
pub(crate) struct RowLayout(Vec<Ty>);

impl RowLayout {
    /// The layout of `columns`; `None` if any type is unknown to [`Ty::parse`].
    pub(crate) fn new(columns: &[(String, String)]) -> Option<RowLayout> {
        columns.iter().map(|(_, ty)| Ty::parse(ty)).collect::<Option<Vec<_>>>().map(RowLayout)
    }

    /// The end offset of every row in `bytes`, which must hold exactly `rows` whole rows; `None` if
    /// the bytes do not decode as such (an encoder and the declared types disagree).
    pub(crate) fn row_ends(&self, bytes: &[u8], rows: usize) -> Option<Vec<usize>> {
        let mut ends = Vec::with_capacity(rows);
        let mut at = 0;
        for _ in 0..rows {
            for ty in &self.0 {
                at += ty.skip(&bytes[at..])?;
            }
            ends.push(at);
        }
        (at == bytes.len()).then_some(ends)
    }
}

/// An unsigned LEB128 number and the number of bytes it took.
pub(crate) fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, &byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

struct Parser<'a> {
    s: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self.s.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.skip_ws();
        if self.s.get(self.at) == Some(&c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn ident(&mut self) -> Option<&str> {
        self.skip_ws();
        let start = self.at;
        while self.s.get(self.at).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') {
            self.at += 1;
        }
        (self.at > start).then(|| std::str::from_utf8(&self.s[start..self.at]).ok()).flatten()
    }

    fn number(&mut self) -> Option<u32> {
        self.ident()?.parse().ok()
    }

    /// Skips the remaining arguments up to and including the closing parenthesis (`'UTC'` of
    /// `DateTime64(3, 'UTC')`, the values of an `Enum8(...)`), honouring quotes and nesting.
    fn skip_args(&mut self) -> Option<()> {
        let mut depth = 1;
        while depth > 0 {
            match *self.s.get(self.at)? {
                b'\'' => {
                    self.at += 1;
                    loop {
                        match *self.s.get(self.at)? {
                            b'\\' => self.at += 2,
                            b'\'' => break,
                            _ => self.at += 1,
                        }
                    }
                }
                b'(' => depth += 1,
                b')' => depth -= 1,
                _ => {}
            }
            self.at += 1;
        }
        Some(())
    }

    fn ty(&mut self) -> Option<Ty> {
        let name = self.ident()?.to_owned();
        let fixed = |n| Some(Ty::Fixed(n));
        let ty = match name.as_str() {
            "Int8" | "UInt8" | "Bool" | "Enum8" => {
                if self.eat(b'(') {
                    self.skip_args()?;
                }
                return fixed(1);
            }
            "Int16" | "UInt16" | "Date" | "Enum16" => {
                if self.eat(b'(') {
                    self.skip_args()?;
                }
                return fixed(2);
            }
            "Int32" | "UInt32" | "Float32" | "Date32" | "IPv4" | "Decimal32" | "Time" => 4,
            "Int64" | "UInt64" | "Float64" | "DateTime64" | "Decimal64" | "Time64" => 8,
            "Int128" | "UInt128" | "UUID" | "IPv6" | "Decimal128" => 16,
            "Int256" | "UInt256" | "Decimal256" => 32,
            "DateTime" => 4,
            // Written as its text (Native sends the column as `String`; RowBinary inserts read it
            // so with `input_format_binary_read_json_as_string`).
            "String" => return Some(Ty::String),
            "JSON" => {
                if self.eat(b'(') {
                    self.skip_args()?;
                }
                return Some(Ty::String);
            }
            "FixedString" => {
                if !self.eat(b'(') {
                    return None;
                }
                let n = self.number()?;
                return self.eat(b')').then_some(Ty::Fixed(n as usize));
            }
            "Decimal" => {
                if !self.eat(b'(') {
                    return None;
                }
                let precision = self.number()?;
                self.skip_args()?;
                return fixed(match precision {
                    0..=9 => 4,
                    10..=18 => 8,
                    19..=38 => 16,
                    _ => 32,
                });
            }
            "LowCardinality" => return self.wrapped(|inner| inner),
            "Nullable" => return self.wrapped(|inner| Ty::Nullable(Box::new(inner))),
            "Array" => return self.wrapped(|inner| Ty::Array(Box::new(inner))),
            "Map" => {
                if !self.eat(b'(') {
                    return None;
                }
                let key = self.ty()?;
                if !self.eat(b',') {
                    return None;
                }
                let value = self.ty()?;
                return self.eat(b')').then(|| Ty::Map(Box::new(key), Box::new(value)));
            }
            "Variant" => {
                if !self.eat(b'(') {
                    return None;
                }
                let mut members = Vec::new();
                loop {
                    members.push(self.ty()?);
                    if self.eat(b')') {
                        return Some(Ty::Variant(members));
                    }
                    if !self.eat(b',') {
                        return None;
                    }
                }
            }
            "Tuple" => {
                if !self.eat(b'(') {
                    return None;
                }
                let mut items = Vec::new();
                loop {
                    items.push(self.tuple_element()?);
                    if self.eat(b')') {
                        return Some(Ty::Tuple(items));
                    }
                    if !self.eat(b',') {
                        return None;
                    }
                }
            }
            _ => return None,
        };
        // Fixed-width types that may carry arguments: DateTime('tz'), DateTime64(3, 'UTC'),
        // Decimal64(4).
        if self.eat(b'(') {
            self.skip_args()?;
        }
        fixed(ty)
    }

    /// One element of a tuple: `T` or `name T`.
    fn tuple_element(&mut self) -> Option<Ty> {
        let save = self.at;
        if let Some(ty) = self.ty() {
            return Some(ty);
        }
        self.at = save;
        self.ident()?;
        self.ty()
    }

    fn wrapped(&mut self, wrap: impl FnOnce(Ty) -> Ty) -> Option<Ty> {
        if !self.eat(b'(') {
            return None;
        }
        let inner = self.ty()?;
        self.eat(b')').then(|| wrap(inner))
    }
}

/// The live table's columns and their comparison with the pipeline's, shared with `gen --migrate`.
pub(crate) use crate::contract::columns::{LiveColumn, compare};

/// `name` quoted as a ClickHouse identifier.
/// Whether a column type holds ClickHouse's `JSON` type anywhere (`Nullable(JSON)`,
/// `Array(JSON(max_dynamic_paths = 8))`).
pub(crate) fn mentions_json(ty: &str) -> bool {
    ty.match_indices("JSON").any(|(i, _)| {
        let before = ty[..i].chars().next_back();
        let after = ty[i + 4..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '\'')
            && !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

pub(crate) fn quote_ident(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('`');
    for c in name.chars() {
        if c == '`' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('`');
    out
}

/// The INSERT statement for `columns` of `database.table`, its body in `format`.
pub(crate) fn insert_sql(database: &str, table: &str, columns: &[(String, String)], format: InsertFormat) -> String {
    let mut sql = format!("INSERT INTO {}.{} (", quote_ident(database), quote_ident(table));
    for (i, (name, _)) in columns.iter().enumerate() {
        let _ = write!(sql, "{}{}", if i == 0 { "" } else { ", " }, quote_ident(name));
    }
    sql.push_str(match format {
        InsertFormat::RowBinary => ") FORMAT RowBinary",
        InsertFormat::Native => ") FORMAT Native",
    });
    sql
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::rowbinary as rb;

    fn cols(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(n, t)| ((*n).to_owned(), (*t).to_owned())).collect()
    }

    fn live(name: &str, ty: &str, default_kind: &str) -> LiveColumn {
        LiveColumn { name: name.into(), ty: ty.into(), default_kind: default_kind.into() }
    }

    // Every type of the mapping in docs/configuration.md parses, and unknown ones do not.
    #[test]
    fn parses_the_mapped_types() {
        assert_eq!(Ty::parse("Int32"), Some(Ty::Fixed(4)));
        assert_eq!(Ty::parse("DateTime64(3, 'UTC')"), Some(Ty::Fixed(8)));
        assert_eq!(Ty::parse("Decimal(9, 2)"), Some(Ty::Fixed(4)));
        assert_eq!(Ty::parse("Decimal(18,4)"), Some(Ty::Fixed(8)));
        assert_eq!(Ty::parse("Decimal(38, 10)"), Some(Ty::Fixed(16)));
        assert_eq!(Ty::parse("LowCardinality(String)"), Some(Ty::String));
        assert_eq!(
            Ty::parse("Map(String, Array(Nullable(UUID)))"),
            Some(Ty::Map(Box::new(Ty::String), Box::new(Ty::Array(Box::new(Ty::Nullable(Box::new(Ty::Fixed(16))))))))
        );
        assert_eq!(Ty::parse("Tuple(a Int32, b String)"), Some(Ty::Tuple(vec![Ty::Fixed(4), Ty::String])));
        assert_eq!(Ty::parse("Enum8('a' = 1, 'b)' = 2)"), Some(Ty::Fixed(1)));
        assert_eq!(Ty::parse("Enum16('a' = 0)"), Some(Ty::Fixed(2)));
        assert_eq!(Ty::parse("Nullable(Enum8('it\\'s' = 0))"), Some(Ty::Nullable(Box::new(Ty::Fixed(1)))));
        assert_eq!(Ty::parse("Time64(3)"), Some(Ty::Fixed(8)));
        assert_eq!(Ty::parse("IPv4"), Some(Ty::Fixed(4)));
        assert_eq!(Ty::parse("IPv6"), Some(Ty::Fixed(16)));
        assert_eq!(Ty::parse("JSON"), Some(Ty::String));
        assert_eq!(Ty::parse("Nullable(JSON(max_dynamic_paths = 8))"), Some(Ty::Nullable(Box::new(Ty::String))));
        assert!(mentions_json("Array(Nullable(JSON))"));
        assert!(!mentions_json("Enum8('JSON' = 0)"));
        assert!(!mentions_json("MyJSONish"));
        assert_eq!(Ty::parse("Variant(Int64, String)"), Some(Ty::Variant(vec![Ty::Fixed(8), Ty::String])));
        assert_eq!(Ty::parse("Int32 extra"), None);
    }

    // Row boundaries come out of concatenated rows of every shape, and bytes that do not decode
    // as the declared rows give none.
    #[test]
    fn finds_row_ends() {
        let layout = RowLayout::new(&cols(&[
            ("id", "Int64"),
            ("name", "Nullable(String)"),
            ("tags", "Map(String, Array(Int32))"),
        ]))
        .unwrap();
        let mut bytes = Vec::new();
        let mut ends = Vec::new();
        for i in 0..3i64 {
            rb::i64(&mut bytes, i);
            rb::null_marker(&mut bytes, i == 1);
            if i != 1 {
                rb::string(&mut bytes, "x".repeat(200 * i as usize).as_bytes());
            }
            rb::varint(&mut bytes, i as u64);
            for k in 0..i {
                rb::string(&mut bytes, format!("k{k}").as_bytes());
                rb::varint(&mut bytes, 2);
                rb::i32(&mut bytes, 1);
                rb::i32(&mut bytes, 2);
            }
            ends.push(bytes.len());
        }
        assert_eq!(layout.row_ends(&bytes, 3), Some(ends));
        assert_eq!(layout.row_ends(&bytes, 2), None, "trailing bytes");
        assert_eq!(layout.row_ends(&bytes[..bytes.len() - 1], 3), None, "truncated");
    }

    // The comparison names each column that is missing, extra or of another type, and accepts
    // spacing differences, any column order and extra columns with defaults.
    #[test]
    fn compares_column_by_column() {
        let expected = cols(&[("id", "Int64"), ("at", "DateTime64(3,'UTC')"), ("region", "LowCardinality(String)")]);
        let same = vec![
            live("region", "LowCardinality(String)", ""),
            live("id", "Int64", ""),
            live("at", "DateTime64(3, 'UTC')", ""),
            live("inserted", "DateTime", "DEFAULT"),
        ];
        assert!(compare(&expected, &same).is_empty());

        let other = vec![
            live("id", "Int32", ""),
            live("region", "LowCardinality(String)", "MATERIALIZED"),
            live("extra", "String", ""),
        ];
        let differences = compare(&expected, &other);
        assert_eq!(
            differences,
            [
                "column `id` has type Int32 in the table, the pipeline writes Int64",
                "column `at` is missing (the pipeline writes it as DateTime64(3,'UTC'))",
                "column `region` is MATERIALIZED in the table and cannot be inserted into",
                "column `extra` (String) is in the table but the pipeline does not write it",
            ]
        );
    }

    #[test]
    fn insert_statement_quotes_identifiers() {
        assert_eq!(
            insert_sql("db", "we`ird", &cols(&[("a", "Int32"), ("b c", "String")]), InsertFormat::RowBinary),
            "INSERT INTO `db`.`we\\`ird` (`a`, `b c`) FORMAT RowBinary"
        );
        assert_eq!(
            insert_sql("db", "t", &cols(&[("a", "Int32")]), InsertFormat::Native),
            "INSERT INTO `db`.`t` (`a`) FORMAT Native"
        );
    }
}
