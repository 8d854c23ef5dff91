//! The codecs generated code calls per field: Avro reading, RowBinary and NDJSON writing,
//! checked arithmetic, the shard hash. Small, `#[inline]` functions on plain slices and
//! `Vec<u8>`, so that the generated chain compiles into straight-line code.

pub mod avro;
pub mod json;
pub mod ops;
pub mod rowbinary;

/// The shard hash: `xxHash64` with seed 0, as ClickHouse's `xxHash64()` computes it, over
/// the value's little-endian bytes (integers) or its bytes (strings). A Distributed table
/// with sharding key `xxHash64(key)` and equal shard weights routes rows the same way.
#[inline]
pub fn shard_hash(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh64::xxh64(bytes, 0)
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
#[inline]
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Text values of the expression language as bytes, whatever carries them.
pub trait Text {
    /// The bytes of the text.
    fn text_bytes(&self) -> &[u8];
}

impl Text for std::borrow::Cow<'_, str> {
    fn text_bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Text for std::borrow::Cow<'_, [u8]> {
    fn text_bytes(&self) -> &[u8] {
        self
    }
}

impl Text for str {
    fn text_bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// The bytes of a computed text, for comparisons.
#[inline]
pub fn text_bytes<T: Text + ?Sized>(t: &T) -> &[u8] {
    t.text_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(-719_468), (0, 3, 1));
    }

    #[test]
    fn shard_hash_is_xxhash64() {
        // Reference values of ClickHouse's xxHash64('') and xxHash64('a').
        assert_eq!(shard_hash(b""), 0xEF46_DB37_51D8_E999);
        assert_eq!(shard_hash(b"a"), 0xD24E_C4F1_A98C_6E5B);
    }
}
