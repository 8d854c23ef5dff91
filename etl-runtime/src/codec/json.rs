//! NDJSON values as `sink.file` writes them (docs/configuration.md, `sink.file`): timestamps as RFC 3339 UTC, dates
//! as `YYYY-MM-DD`, decimals and UUIDs as strings, non-finite floats as the strings `nan`, `inf`, `-inf`.

use std::io::Write as _;

/// A JSON string, escaped.
#[inline]
pub fn string(buf: &mut Vec<u8>, s: &str) {
    buf.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            0..=0x1f => None,
            _ => continue,
        };
        buf.extend_from_slice(&bytes[start..i]);
        match escape {
            Some(e) => buf.extend_from_slice(e),
            None => {
                let _ = write!(buf, "\\u{b:04x}");
            }
        }
        start = i + 1;
    }
    buf.extend_from_slice(&bytes[start..]);
    buf.push(b'"');
}

/// Bytes as a JSON string; invalid UTF-8 is replaced by U+FFFD.
#[inline]
pub fn bytes(buf: &mut Vec<u8>, b: &[u8]) {
    string(buf, &String::from_utf8_lossy(b));
}

/// An integer.
#[inline]
pub fn int(buf: &mut Vec<u8>, v: i64) {
    buf.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// An unsigned integer (`UInt32`, `UInt64`).
#[inline]
pub fn uint(buf: &mut Vec<u8>, v: u64) {
    buf.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// A float. NaN and the infinities have no JSON number form; they are written as the strings
/// `"nan"`, `"inf"` and `"-inf"`, as ClickHouse writes them with
/// `output_format_json_quote_denormals` (and reads them back in `JSONEachRow`), so a row
/// keeps them apart from NULL.
#[inline]
pub fn float(buf: &mut Vec<u8>, v: f64) {
    if v.is_finite() {
        let _ = write!(buf, "{v}");
    } else if v.is_nan() {
        buf.extend_from_slice(b"\"nan\"");
    } else if v > 0.0 {
        buf.extend_from_slice(b"\"inf\"");
    } else {
        buf.extend_from_slice(b"\"-inf\"");
    }
}

/// `true` / `false`.
#[inline]
pub fn boolean(buf: &mut Vec<u8>, v: bool) {
    buf.extend_from_slice(if v { b"true" } else { b"false" });
}

/// `null`.
#[inline]
pub fn null(buf: &mut Vec<u8>) {
    buf.extend_from_slice(b"null");
}

/// A timestamp of `ticks` units of `10^-digits` seconds as an RFC 3339 UTC string.
#[inline]
pub fn timestamp(buf: &mut Vec<u8>, ticks: i64, digits: u32) {
    let per_second = 10i64.pow(digits);
    let seconds = ticks.div_euclid(per_second);
    let fraction = ticks.rem_euclid(per_second);
    let (y, m, d) = super::civil_from_days(seconds.div_euclid(86_400));
    let s = seconds.rem_euclid(86_400);
    let _ = write!(
        buf,
        "\"{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{fraction:0width$}Z\"",
        s / 3600,
        s / 60 % 60,
        s % 60,
        width = digits as usize
    );
}

/// A date (days since 1970-01-01) as `"YYYY-MM-DD"`.
#[inline]
pub fn date(buf: &mut Vec<u8>, days: i32) {
    let (y, m, d) = super::civil_from_days(i64::from(days));
    let _ = write!(buf, "\"{y:04}-{m:02}-{d:02}\"");
}

/// A decimal as a string with `scale` fractional digits.
#[inline]
pub fn decimal(buf: &mut Vec<u8>, v: i128, scale: u32) {
    let sign = if v < 0 { "-" } else { "" };
    let abs = v.unsigned_abs();
    if scale == 0 {
        let _ = write!(buf, "\"{sign}{abs}\"");
    } else {
        let div = 10u128.pow(scale);
        let _ = write!(buf, "\"{sign}{}.{:0width$}\"", abs / div, abs % div, width = scale as usize);
    }
}

/// A UUID as its canonical string.
#[inline]
pub fn uuid(buf: &mut Vec<u8>, v: u128) {
    let h = format!("{v:032x}");
    let _ = write!(buf, "\"{}-{}-{}-{}-{}\"", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..]);
}

/// A time of day of `ticks` units of `10^-digits` seconds since midnight as `"HH:MM:SS.fff"`
/// (hours past 23 and a sign as ClickHouse's `Time64` prints them).
#[inline]
pub fn time(buf: &mut Vec<u8>, ticks: i64, digits: u32) {
    let per_second = 10u64.pow(digits);
    let sign = if ticks < 0 { "-" } else { "" };
    let abs = ticks.unsigned_abs();
    let (s, fraction) = (abs / per_second, abs % per_second);
    let _ = write!(
        buf,
        "\"{sign}{:02}:{:02}:{:02}.{fraction:0width$}\"",
        s / 3600,
        s / 60 % 60,
        s % 60,
        width = digits as usize
    );
}

/// An IPv4 address (`1.2.3.4` is `0x01020304`) in dotted form.
#[inline]
pub fn ipv4(buf: &mut Vec<u8>, v: u32) {
    let _ = write!(buf, "\"{}\"", std::net::Ipv4Addr::from(v));
}

/// An IPv6 address (its bytes as a big-endian `u128`) in RFC 5952 form.
#[inline]
pub fn ipv6(buf: &mut Vec<u8>, v: u128) {
    let _ = write!(buf, "\"{}\"", std::net::Ipv6Addr::from(v));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut buf = Vec::new();
        f(&mut buf);
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn values() {
        assert_eq!(with(|b| string(b, "a\"b\\c\nd\u{1}")), r#""a\"b\\c\nd\u0001""#);
        assert_eq!(with(|b| timestamp(b, 1_700_000_000_123, 3)), "\"2023-11-14T22:13:20.123Z\"");
        assert_eq!(with(|b| timestamp(b, -1, 6)), "\"1969-12-31T23:59:59.999999Z\"");
        assert_eq!(with(|b| date(b, 19_782)), "\"2024-02-29\"");
        assert_eq!(with(|b| time(b, 45_296_789, 3)), "\"12:34:56.789\"");
        assert_eq!(with(|b| time(b, -1, 6)), "\"-00:00:00.000001\"");
        assert_eq!(with(|b| ipv4(b, 0x0102_0304)), "\"1.2.3.4\"");
        assert_eq!(with(|b| ipv6(b, 1)), "\"::1\"");
        assert_eq!(with(|b| decimal(b, -12345, 2)), "\"-123.45\"");
        assert_eq!(with(|b| decimal(b, 5, 3)), "\"0.005\"");
        assert_eq!(with(|b| float(b, f64::NAN)), "\"nan\"");
        assert_eq!(with(|b| float(b, f64::NEG_INFINITY)), "\"-inf\"");
        assert_eq!(with(|b| float(b, 2.5)), "2.5");
        assert_eq!(
            with(|b| uuid(b, 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef)),
            "\"01234567-89ab-cdef-0123-456789abcdef\""
        );
    }
}
