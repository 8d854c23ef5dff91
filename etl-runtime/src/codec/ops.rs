//! Arithmetic of the expression language: integers are checked (overflow and division by
//! zero are record errors), doubles follow IEEE 754.

use crate::engine::errors::{RecordError, RecordErrorKind};

fn overflow(op: &str) -> RecordError {
    RecordError::new(RecordErrorKind::Operator, format!("integer overflow in `{op}`"))
}

/// `a + b`
#[inline]
pub fn add(a: i64, b: i64) -> Result<i64, RecordError> {
    a.checked_add(b).ok_or_else(|| overflow("+"))
}

/// `a - b`
#[inline]
pub fn sub(a: i64, b: i64) -> Result<i64, RecordError> {
    a.checked_sub(b).ok_or_else(|| overflow("-"))
}

/// `a * b`
#[inline]
pub fn mul(a: i64, b: i64) -> Result<i64, RecordError> {
    a.checked_mul(b).ok_or_else(|| overflow("*"))
}

/// `a / b`, truncating; division by zero is a record error.
#[inline]
pub fn div(a: i64, b: i64) -> Result<i64, RecordError> {
    if b == 0 {
        return Err(RecordError::new(RecordErrorKind::Operator, "integer division by zero"));
    }
    a.checked_div(b).ok_or_else(|| overflow("/"))
}

/// `a % b`; by zero is a record error.
#[inline]
pub fn rem(a: i64, b: i64) -> Result<i64, RecordError> {
    if b == 0 {
        return Err(RecordError::new(RecordErrorKind::Operator, "integer division by zero"));
    }
    a.checked_rem(b).ok_or_else(|| overflow("%"))
}

/// `-a`
#[inline]
pub fn neg(a: i64) -> Result<i64, RecordError> {
    a.checked_neg().ok_or_else(|| overflow("-"))
}

/// `abs(a)`
#[inline]
pub fn abs(a: i64) -> Result<i64, RecordError> {
    a.checked_abs().ok_or_else(|| overflow("abs"))
}

/// A decimal's value as a double, for arithmetic.
#[inline]
pub fn decimal_to_f64(unscaled: i128, scale: u32) -> f64 {
    unscaled as f64 / 10f64.powi(scale as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked() {
        assert_eq!(add(2, 3).unwrap(), 5);
        assert!(add(i64::MAX, 1).is_err());
        assert!(div(1, 0).unwrap_err().message.contains("division by zero"));
        assert!(rem(1, 0).is_err());
        assert!(div(i64::MIN, -1).is_err());
        assert_eq!(div(-7, 2).unwrap(), -3);
        assert!((decimal_to_f64(12345, 2) - 123.45).abs() < 1e-9);
    }
}
