//! The codecs generated code calls per field: Avro, JSON and Protobuf reading (the last two share
//! their error type, [`field_error`]), RowBinary and NDJSON writing, checked arithmetic, the
//! shard hash. Small, `#[inline]` functions on plain slices and `Vec<u8>`, so that the generated
//! chain compiles into straight-line code.

pub mod avro;
pub mod field_error;
pub mod json;
pub mod json_read;
pub mod ops;
pub mod proto_read;
pub mod rowbinary;

use crate::engine::errors::{RecordError, RecordErrorKind};

/// Keeps the last entry of each key of a decoded map (Protobuf's rule when a key repeats, and
/// JSON readers' such as Python's `json` and serde_json's), the
/// kept entries in the order they came. Small maps are compared pairwise; larger ones go through
/// a set, so that a hostile message cannot make this quadratic.
pub fn last_key_wins<K: Eq + std::hash::Hash, V>(entries: &mut Vec<(K, V)>) {
    let n = entries.len();
    let repeats = |i: usize| entries[i + 1..].iter().any(|(k, _)| *k == entries[i].0);
    // The usual map has no repeated key: a small one is checked without allocating.
    if n < 2 || (n <= 16 && !(0..n).any(repeats)) {
        return;
    }
    let keep: Vec<bool> = if n <= 16 {
        (0..n).map(|i| !repeats(i)).collect()
    } else {
        let mut seen = std::collections::HashSet::with_capacity(n);
        let mut keep = vec![false; n];
        for (i, (k, _)) in entries.iter().enumerate().rev() {
            keep[i] = seen.insert(k);
        }
        keep
    };
    if keep.iter().all(|k| *k) {
        return;
    }
    let mut i = 0;
    entries.retain(|_| {
        i += 1;
        keep[i - 1]
    });
}

/// The shard hash: `xxHash64` with seed 0, as ClickHouse's `xxHash64()` computes it, over
/// the value's little-endian bytes (integers) or its bytes (strings). A Distributed table
/// with sharding key `xxHash64(key)` and equal shard weights routes rows the same way.
#[inline(always)]
pub fn shard_hash(bytes: &[u8]) -> u64 {
    // Keys are mostly 64-bit integers: their 8 bytes take a short, inlined path (the length is
    // known where the generated code calls this, so the match folds away).
    match bytes.first_chunk::<8>() {
        Some(word) if bytes.len() == 8 => xxh64_of_8_bytes(u64::from_le_bytes(*word)),
        _ => xxhash_rust::xxh64::xxh64(bytes, 0),
    }
}

/// XXH64 (seed 0) of exactly eight bytes read as a little-endian `u64`: the specification's
/// path for an input shorter than 32 bytes, with one 8-byte lane and no tail.
#[inline(always)]
fn xxh64_of_8_bytes(lane: u64) -> u64 {
    const P1: u64 = 0x9E37_79B1_85EB_CA87;
    const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
    const P3: u64 = 0x1656_67B1_9E37_79F9;
    const P4: u64 = 0x85EB_CA77_C2B2_AE63;
    const P5: u64 = 0x27D4_EB2F_1656_67C5;
    let k1 = lane.wrapping_mul(P2).rotate_left(31).wrapping_mul(P1);
    let mut h = P5.wrapping_add(8) ^ k1;
    h = h.rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
    h ^= h >> 33;
    h = h.wrapping_mul(P2);
    h ^= h >> 29;
    h = h.wrapping_mul(P3);
    h ^ (h >> 32)
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

/// Checks a Confluent frame's schema id against the reader schema's ids (`key` names them in the
/// error, `fix` says what to do): any other id is a record error, never decoded as if the reader
/// schema had written it.
#[inline]
fn reader_schema_id(id: u32, reader_ids: &[u32], key: &'static str, fix: &'static str) -> Result<(), RecordError> {
    if reader_ids.contains(&id) { Ok(()) } else { Err(unknown_schema_id(id, reader_ids, key, fix)) }
}

#[cold]
fn unknown_schema_id(id: u32, reader_ids: &[u32], key: &str, fix: &str) -> RecordError {
    RecordError::new(
        RecordErrorKind::Decode,
        format!("schema id {id} is not the reader schema's ({key}: {reader_ids:?}); {fix}"),
    )
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
    proptest::proptest! {
        // The inlined 8-byte path is XXH64, bit for bit.
        #[test]
        fn the_eight_byte_shard_hash_is_xxh64(v in proptest::prelude::any::<u64>()) {
            proptest::prop_assert_eq!(super::shard_hash(&v.to_le_bytes()), xxhash_rust::xxh64::xxh64(&v.to_le_bytes(), 0));
        }
    }

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
