//! Row boundaries in ClickHouse RowBinary, for `cargo xtask bench`'s raw inserter: it cuts the
//! rows the pipeline wrote (read back as RowBinary) into batches of whole rows, sized like the
//! pipeline's batches. Only the types a pipeline's DDL uses are known; anything else is an error.

use anyhow::bail;

/// How one column is laid out in RowBinary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ty {
    /// A fixed number of bytes.
    Fixed(usize),
    /// A LEB128 length, then that many bytes.
    Bytes,
    /// One byte (1 = null, nothing follows), else the value.
    Nullable(Box<Ty>),
    /// A LEB128 count, then that many values.
    Array(Box<Ty>),
}

impl Ty {
    /// The layout of a ClickHouse type as `DESCRIBE TABLE` prints it.
    pub(crate) fn parse(ty: &str) -> anyhow::Result<Ty> {
        let ty = ty.trim();
        let inner = |prefix: &str| ty.strip_prefix(prefix).and_then(|r| r.strip_suffix(')'));
        if let Some(t) = inner("Nullable(") {
            return Ok(Ty::Nullable(Box::new(Ty::parse(t)?)));
        }
        if let Some(t) = inner("LowCardinality(") {
            // RowBinary carries the values, not the dictionary.
            return Ty::parse(t);
        }
        if let Some(t) = inner("Array(") {
            return Ok(Ty::Array(Box::new(Ty::parse(t)?)));
        }
        if let Some(n) = inner("FixedString(") {
            return Ok(Ty::Fixed(n.trim().parse()?));
        }
        if let Some(args) = inner("Decimal(") {
            let precision: u32 = args.split(',').next().unwrap_or("").trim().parse()?;
            return Ok(Ty::Fixed(match precision {
                0..=9 => 4,
                10..=18 => 8,
                19..=38 => 16,
                _ => 32,
            }));
        }
        let base = ty.split('(').next().unwrap_or(ty);
        Ok(match base {
            "String" => Ty::Bytes,
            "Int8" | "UInt8" | "Bool" | "Enum8" => Ty::Fixed(1),
            "Int16" | "UInt16" | "Date" | "Enum16" => Ty::Fixed(2),
            "Int32" | "UInt32" | "Float32" | "Date32" | "DateTime" | "Decimal32" | "IPv4" => Ty::Fixed(4),
            "Int64" | "UInt64" | "Float64" | "DateTime64" | "Decimal64" => Ty::Fixed(8),
            "Int128" | "UInt128" | "Decimal128" | "UUID" | "IPv6" => Ty::Fixed(16),
            "Int256" | "UInt256" | "Decimal256" => Ty::Fixed(32),
            _ => bail!("the bench cannot delimit RowBinary rows with a column of type {ty}"),
        })
    }

    /// The end of the value starting at `at`, or `None` if `bytes` ends inside it.
    fn skip(&self, bytes: &[u8], at: usize) -> Option<usize> {
        match self {
            Ty::Fixed(n) => at.checked_add(*n).filter(|end| *end <= bytes.len()),
            Ty::Bytes => {
                let (len, at) = leb128(bytes, at)?;
                at.checked_add(usize::try_from(len).ok()?).filter(|end| *end <= bytes.len())
            }
            Ty::Nullable(inner) => match bytes.get(at)? {
                1 => Some(at + 1),
                _ => inner.skip(bytes, at + 1),
            },
            Ty::Array(inner) => {
                let (count, mut at) = leb128(bytes, at)?;
                for _ in 0..count {
                    at = inner.skip(bytes, at)?;
                }
                Some(at)
            }
        }
    }
}

fn leb128(bytes: &[u8], mut at: usize) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(at)?;
        at += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some((value, at));
        }
    }
    None
}

/// Cuts `bytes` (whole rows of `columns`) into batches of at most `max_rows` rows and, unless a
/// single row is larger, at most `max_bytes` bytes; returns each batch's (byte range, rows).
pub(crate) fn batches(
    bytes: &[u8],
    columns: &[Ty],
    max_bytes: usize,
    max_rows: usize,
) -> anyhow::Result<Vec<(std::ops::Range<usize>, usize)>> {
    let mut out = Vec::new();
    let (mut start, mut rows, mut at) = (0usize, 0usize, 0usize);
    while at < bytes.len() {
        let mut end = at;
        for column in columns {
            let Some(next) = column.skip(bytes, end) else {
                bail!("the RowBinary data ends inside a row at byte {at} of {}", bytes.len());
            };
            end = next;
        }
        if rows > 0 && (rows == max_rows || end - start > max_bytes) {
            out.push((start..at, rows));
            (start, rows) = (at, 0);
        }
        rows += 1;
        at = end;
    }
    if rows > 0 {
        out.push((start..at, rows));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flagship's row: order_id Int64, customer_id Int64, region LowCardinality(String),
    /// total Float64, created_at DateTime64(3, 'UTC').
    fn flagship() -> Vec<Ty> {
        ["Int64", "Int64", "LowCardinality(String)", "Float64", "DateTime64(3, 'UTC')"]
            .iter()
            .map(|t| Ty::parse(t).unwrap())
            .collect()
    }

    fn row(id: i64, region: &str) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend(id.to_le_bytes());
        r.extend((id * 7).to_le_bytes());
        r.push(region.len() as u8);
        r.extend(region.as_bytes());
        r.extend((id as f64 / 100.0).to_le_bytes());
        r.extend((1_700_000_000_000 + id).to_le_bytes());
        r
    }

    #[test]
    fn parses_the_types_of_the_flagship_and_more() {
        assert_eq!(flagship(), vec![Ty::Fixed(8), Ty::Fixed(8), Ty::Bytes, Ty::Fixed(8), Ty::Fixed(8)]);
        assert_eq!(Ty::parse("Nullable(Decimal(18, 4))").unwrap(), Ty::Nullable(Box::new(Ty::Fixed(8))));
        assert_eq!(Ty::parse("Array(LowCardinality(Nullable(String)))").unwrap(), {
            Ty::Array(Box::new(Ty::Nullable(Box::new(Ty::Bytes))))
        });
        assert_eq!(Ty::parse("Enum8('a' = 1, 'b' = 2)").unwrap(), Ty::Fixed(1));
        assert!(Ty::parse("Map(String, UInt8)").is_err());
    }

    #[test]
    fn cuts_whole_rows_by_bytes_and_by_rows() {
        // 37-byte rows with a 4-byte region, 36-byte rows with a 3-byte one.
        let mut data = Vec::new();
        for id in 0..10 {
            data.extend(row(id, if id % 2 == 0 { "EMEA" } else { "EU1" }));
        }
        assert_eq!(data.len(), 5 * 37 + 5 * 36);
        // 100 bytes hold two rows (73), not three (110).
        let by_bytes = batches(&data, &flagship(), 100, 1000).unwrap();
        assert_eq!(by_bytes.len(), 5);
        assert!(by_bytes.iter().all(|(range, rows)| *rows == 2 && range.len() == 73));
        let by_rows = batches(&data, &flagship(), 1 << 20, 4).unwrap();
        let rows: Vec<usize> = by_rows.iter().map(|(_, n)| *n).collect();
        assert_eq!(rows, [4, 4, 2]);
        assert_eq!(by_rows[2].0, 4 * 37 + 4 * 36..data.len(), "the ranges tile the data");
    }

    #[test]
    fn a_cut_row_is_an_error() {
        let data = row(1, "AMER");
        assert!(batches(&data[..data.len() - 1], &flagship(), 1 << 20, 10).is_err());
        assert_eq!(batches(&[], &flagship(), 1 << 20, 10).unwrap(), vec![]);
    }
}
