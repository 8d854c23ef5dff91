//! Durations, byte sizes, decimal ratios and attempt counts as written in pipeline.yaml.
//!
//! Each type keeps the exact quantity the user wrote: durations in milliseconds, sizes in
//! bytes, ratios as a decimal fraction. The sizing rule is checked with integer arithmetic
//! on these, so `0.9` means nine tenths and not the nearest binary float.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde::{Serialize, Serializer};

/// A span of time written as `250ms`, `5s`, `2m` or `1h` (a bare `0` is also accepted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration {
    millis: u64,
}

impl Duration {
    /// A duration of `millis` milliseconds.
    pub const fn from_millis(millis: u64) -> Self {
        Self { millis }
    }

    /// A duration of `secs` seconds.
    pub const fn from_secs(secs: u64) -> Self {
        Self { millis: secs * 1000 }
    }

    /// The duration in whole milliseconds.
    pub const fn as_millis(self) -> u64 {
        self.millis
    }

    /// The same span as a `std::time::Duration`.
    pub const fn to_std(self) -> std::time::Duration {
        std::time::Duration::from_millis(self.millis)
    }

    /// Parses the textual form; the error says what was expected.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text == "0" {
            return Ok(Self::from_millis(0));
        }
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(|| format!("`{text}` has no unit; write e.g. `{text}ms` or `{text}s`"))?;
        let (number, unit) = text.split_at(split);
        if number.is_empty() {
            return Err(format!("`{text}` is not a duration; write e.g. `250ms`, `5s`, `2m`"));
        }
        let number: u64 = number.parse().map_err(|_| format!("`{text}`: the number is too large"))?;
        let factor = match unit.trim() {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            other => {
                return Err(format!("`{text}`: unknown duration unit `{other}`; use ms, s, m or h"));
            }
        };
        number.checked_mul(factor).map(Self::from_millis).ok_or_else(|| format!("`{text}` is too long"))
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.millis;
        if ms == 0 {
            f.write_str("0s")
        } else if ms.is_multiple_of(3_600_000) {
            write!(f, "{}h", ms / 3_600_000)
        } else if ms.is_multiple_of(60_000) {
            write!(f, "{}m", ms / 60_000)
        } else if ms.is_multiple_of(1000) {
            write!(f, "{}s", ms / 1000)
        } else {
            write!(f, "{ms}ms")
        }
    }
}

/// A number of bytes written as `512KiB`, `16MiB`, `1GiB` (binary), `16MB` (decimal) or
/// plain bytes (`1048576`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize {
    bytes: u64,
}

impl ByteSize {
    /// `bytes` bytes.
    pub const fn b(bytes: u64) -> Self {
        Self { bytes }
    }

    /// `n` kibibytes.
    pub const fn kib(n: u64) -> Self {
        Self { bytes: n << 10 }
    }

    /// `n` mebibytes.
    pub const fn mib(n: u64) -> Self {
        Self { bytes: n << 20 }
    }

    /// The size in bytes.
    pub const fn bytes(self) -> u64 {
        self.bytes
    }

    /// Parses the textual form; the error says what was expected.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        if number.is_empty() {
            return Err(format!("`{text}` is not a size; write e.g. `512KiB`, `16MiB`, `1GiB` or plain bytes"));
        }
        let number: u64 = number.parse().map_err(|_| format!("`{text}`: the number is too large"))?;
        if unit.starts_with('.') {
            return Err(format!("`{text}`: sizes are whole numbers; use a smaller unit (`1536MiB`, not `1.5GiB`)"));
        }
        let factor: u64 = match unit.trim() {
            "" | "B" => 1,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            "GiB" => 1 << 30,
            "TiB" => 1 << 40,
            "KB" | "kB" => 1_000,
            "MB" => 1_000_000,
            "GB" => 1_000_000_000,
            "TB" => 1_000_000_000_000,
            other => {
                return Err(format!(
                    "`{text}`: unknown size unit `{other}`; use B, KiB, MiB, GiB, TiB (binary) or KB, MB, GB, TB (decimal)"
                ));
            }
        };
        number.checked_mul(factor).map(Self::b).ok_or_else(|| format!("`{text}` is too large"))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 4] = [(1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
        for (factor, unit) in UNITS {
            if self.bytes >= factor && self.bytes.is_multiple_of(factor) {
                return write!(f, "{}{unit}", self.bytes / factor);
            }
        }
        write!(f, "{}", self.bytes)
    }
}

/// A decimal fraction such as `0.9`, kept exactly as `numerator / 10^scale`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ratio {
    numerator: u64,
    scale: u32,
}

impl Ratio {
    /// The ratio `numerator / 10^scale`.
    pub const fn new(numerator: u64, scale: u32) -> Self {
        Self { numerator, scale }
    }

    /// The numerator over [`Ratio::denominator`].
    pub const fn numerator(self) -> u64 {
        self.numerator
    }

    /// `10^scale`.
    pub const fn denominator(self) -> u64 {
        10u64.pow(self.scale)
    }

    /// The value as a float, for display and for the runtime's watermarks.
    pub fn to_f64(self) -> f64 {
        self.numerator as f64 / self.denominator() as f64
    }

    /// Parses a decimal literal (`0.9`, `1`, `.5`); at most 12 fractional digits.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let bad = || format!("`{text}` is not a decimal number such as `0.9`");
        let (int, frac) = text.split_once('.').unwrap_or((text, ""));
        if (int.is_empty() && frac.is_empty())
            || !int.chars().all(|c| c.is_ascii_digit())
            || !frac.chars().all(|c| c.is_ascii_digit())
        {
            return Err(bad());
        }
        let frac = frac.trim_end_matches('0');
        if frac.len() > 12 {
            return Err(format!("`{text}` has more than 12 decimal places"));
        }
        let digits = format!("{int}{frac}");
        let numerator: u64 = if digits.is_empty() { 0 } else { digits.parse().map_err(|_| bad())? };
        Ok(Self::new(numerator, frac.len() as u32))
    }

    /// `self < other`, exactly.
    pub fn lt(self, other: Self) -> bool {
        u128::from(self.numerator) * u128::from(other.denominator())
            < u128::from(other.numerator) * u128::from(self.denominator())
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.scale == 0 {
            return write!(f, "{}", self.numerator);
        }
        let den = self.denominator();
        write!(f, "{}.{:0width$}", self.numerator / den, self.numerator % den, width = self.scale as usize)
    }
}

/// A number of attempts, the first included, or `unlimited`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempts {
    /// Retry for as long as the error lasts.
    Unlimited,
    /// At most this many attempts.
    AtMost(u32),
}

impl Attempts {
    /// `None` for unlimited, as the runtime's `RetryConfig` takes it.
    pub const fn limit(self) -> Option<u32> {
        match self {
            Attempts::Unlimited => None,
            Attempts::AtMost(n) => Some(n),
        }
    }

    /// The inverse of [`Attempts::limit`].
    pub const fn from_limit(limit: Option<u32>) -> Self {
        match limit {
            None => Attempts::Unlimited,
            Some(n) => Attempts::AtMost(n),
        }
    }
}

impl fmt::Display for Attempts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attempts::Unlimited => f.write_str("unlimited"),
            Attempts::AtMost(n) => write!(f, "{n}"),
        }
    }
}

impl<'de> Deserialize<'de> for Attempts {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Attempts;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of attempts such as `10`, or `unlimited`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Attempts, E> {
                match v.trim() {
                    "unlimited" => Ok(Attempts::Unlimited),
                    other => other.parse::<u32>().map(Attempts::AtMost).map_err(|_| {
                        E::custom(format!("`{v}` is not a number of attempts; write e.g. `10`, or `unlimited`"))
                    }),
                }
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Attempts, E> {
                u32::try_from(v).map(Attempts::AtMost).map_err(|_| {
                    E::custom(format!("`{v}` attempts is more than {}; write `unlimited` instead", u32::MAX))
                })
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Attempts, E> {
                let v = u64::try_from(v).map_err(|_| E::custom(format!("`{v}` must not be negative")))?;
                self.visit_u64(v)
            }
        }
        deserializer.deserialize_any(V)
    }
}

impl Serialize for Attempts {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Attempts::Unlimited => serializer.serialize_str("unlimited"),
            Attempts::AtMost(n) => serializer.serialize_u32(*n),
        }
    }
}

/// Implements Deserialize (from a string or, where it makes sense, a number) and Serialize
/// (as the canonical text) for the unit types above.
macro_rules! text_unit {
    ($ty:ident, $expecting:literal, $from_u64:expr, $from_f64:expr) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct V;
                impl Visitor<'_> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expecting)
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$ty, E> {
                        $ty::parse(v).map_err(E::custom)
                    }
                    fn visit_u64<E: de::Error>(self, v: u64) -> Result<$ty, E> {
                        let from: fn(u64) -> Result<$ty, String> = $from_u64;
                        from(v).map_err(E::custom)
                    }
                    fn visit_i64<E: de::Error>(self, v: i64) -> Result<$ty, E> {
                        let v = u64::try_from(v).map_err(|_| E::custom(format!("`{v}` must not be negative")))?;
                        self.visit_u64(v)
                    }
                    fn visit_f64<E: de::Error>(self, v: f64) -> Result<$ty, E> {
                        let from: fn(f64) -> Result<$ty, String> = $from_f64;
                        from(v).map_err(E::custom)
                    }
                }
                deserializer.deserialize_any(V)
            }
        }

        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }
    };
}

text_unit!(
    Duration,
    "a duration such as `250ms`, `5s` or `2m`",
    |v| if v == 0 {
        Ok(Duration::from_millis(0))
    } else {
        Err(format!("`{v}` has no unit; write e.g. `{v}ms` or `{v}s`"))
    },
    |v| Err(format!("`{v}` is not a duration; write e.g. `250ms`, `5s` or `2m`"))
);
text_unit!(ByteSize, "a size such as `512KiB`, `16MiB` or a number of bytes", |v| Ok(ByteSize::b(v)), |v| Err(
    format!("`{v}` is not a whole number of bytes; write e.g. `16MiB`")
));
text_unit!(
    Ratio,
    "a decimal number such as `0.9`",
    |v| Ok(Ratio::new(v, 0)),
    // serde_yaml hands decimals over as f64; the shortest text that round-trips is the
    // literal the user wrote (`0.9` stays `0.9`), so the ratio stays exact.
    |v| if v.is_finite() && v >= 0.0 {
        Ratio::parse(&format!("{v}"))
    } else {
        Err(format!("`{v}` must be a number between 0 and 1"))
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    // `max_attempts` takes a count or `unlimited`, and prints back the same way.
    #[test]
    fn attempts_parse_and_print() {
        let parse = |text: &str| serde_yaml::from_str::<Attempts>(text);
        assert_eq!(parse("unlimited").unwrap(), Attempts::Unlimited);
        assert_eq!(parse("3").unwrap(), Attempts::AtMost(3));
        assert_eq!(parse("'7'").unwrap(), Attempts::AtMost(7));
        assert!(parse("forever").unwrap_err().to_string().contains("unlimited"));
        assert!(parse("-1").is_err());
        assert!(parse("5000000000").unwrap_err().to_string().contains("write `unlimited`"));
        assert_eq!(Attempts::Unlimited.limit(), None);
        assert_eq!(Attempts::from_limit(Some(4)).to_string(), "4");
        assert_eq!(serde_yaml::to_string(&Attempts::Unlimited).unwrap().trim(), "unlimited");
        assert_eq!(serde_yaml::to_string(&Attempts::AtMost(10)).unwrap().trim(), "10");
    }

    #[test]
    fn durations_parse_and_print() {
        assert_eq!(Duration::parse("250ms").unwrap().as_millis(), 250);
        assert_eq!(Duration::parse("5s").unwrap().as_millis(), 5_000);
        assert_eq!(Duration::parse("2m").unwrap().as_millis(), 120_000);
        assert_eq!(Duration::parse("0s").unwrap().as_millis(), 0);
        assert_eq!(Duration::parse("0").unwrap().as_millis(), 0);
        assert!(Duration::parse("5").unwrap_err().contains("no unit"));
        assert!(Duration::parse("5 sec").unwrap_err().contains("unknown duration unit"));
        assert!(Duration::parse("ms").is_err());
        assert_eq!(Duration::from_millis(1500).to_string(), "1500ms");
        assert_eq!(Duration::from_millis(120_000).to_string(), "2m");
    }

    #[test]
    fn sizes_parse_binary_and_decimal() {
        assert_eq!(ByteSize::parse("512KiB").unwrap().bytes(), 512 * 1024);
        assert_eq!(ByteSize::parse("16MiB").unwrap().bytes(), 16 << 20);
        assert_eq!(ByteSize::parse("1GiB").unwrap().bytes(), 1 << 30);
        assert_eq!(ByteSize::parse("16MB").unwrap().bytes(), 16_000_000);
        assert_eq!(ByteSize::parse("1048576").unwrap().bytes(), 1 << 20);
        assert!(ByteSize::parse("16 mb").unwrap_err().contains("unknown size unit"));
        assert!(ByteSize::parse("lots").is_err());
        assert_eq!(ByteSize::mib(68).to_string(), "68MiB");
        assert_eq!(ByteSize::b(1000).to_string(), "1000");
    }

    #[test]
    fn ratios_are_exact_decimals() {
        let r = Ratio::parse("0.9").unwrap();
        assert_eq!((r.numerator(), r.denominator()), (9, 10));
        assert_eq!(Ratio::parse("0.50").unwrap(), Ratio::new(5, 1));
        assert_eq!(Ratio::parse("1").unwrap(), Ratio::new(1, 0));
        assert_eq!(Ratio::parse(".25").unwrap(), Ratio::new(25, 2));
        assert!(Ratio::parse("0.5.1").is_err());
        assert!(Ratio::parse("-0.5").is_err());
        assert!(Ratio::new(5, 1).lt(Ratio::new(9, 1)));
        assert!(!Ratio::new(5, 1).lt(Ratio::new(50, 2)));
        assert_eq!(Ratio::new(5, 2).to_string(), "0.05");
        let from_yaml: Ratio = serde_yaml::from_str("0.3").unwrap();
        assert_eq!(from_yaml, Ratio::new(3, 1));
    }
}

/// JSON Schema for the unit types: they are written as text (or, for sizes and ratios,
/// numbers), which editors can check against these patterns.
mod json_schema {
    use std::borrow::Cow;

    use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

    use super::{Attempts, ByteSize, Duration, Ratio};

    impl JsonSchema for Attempts {
        fn schema_name() -> Cow<'static, str> {
            "Attempts".into()
        }
        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({
                "anyOf": [{ "type": "integer", "minimum": 1 }, { "const": "unlimited" }],
                "description": "A number of attempts, the first included, or `unlimited`."
            })
        }
    }

    impl JsonSchema for Duration {
        fn schema_name() -> Cow<'static, str> {
            "Duration".into()
        }
        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({ "type": "string", "pattern": "^[0-9]+(ms|s|m|h)$", "description": "A duration: `250ms`, `5s`, `2m`, `1h`." })
        }
    }

    impl JsonSchema for ByteSize {
        fn schema_name() -> Cow<'static, str> {
            "ByteSize".into()
        }
        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({
                "type": ["string", "integer"],
                "pattern": "^[0-9]+(B|KiB|MiB|GiB|TiB|KB|kB|MB|GB|TB)?$",
                "description": "A size: `512KiB`, `16MiB`, `1GiB` (binary), `16MB` (decimal) or bytes."
            })
        }
    }

    impl JsonSchema for Ratio {
        fn schema_name() -> Cow<'static, str> {
            "Ratio".into()
        }
        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({ "type": "number", "minimum": 0, "description": "A decimal ratio such as `0.9`." })
        }
    }
}
