//! ClickHouse RowBinary: how each column type is written.

/// An unsigned LEB128 length, as RowBinary prefixes strings and arrays.
#[inline]
pub fn varint(buf: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        buf.push((n as u8) | 0x80);
        n >>= 7;
    }
    buf.push(n as u8);
}

/// `String`: a length and the bytes.
#[inline]
pub fn string(buf: &mut Vec<u8>, bytes: &[u8]) {
    varint(buf, bytes.len() as u64);
    buf.extend_from_slice(bytes);
}

/// `Bool`.
#[inline]
pub fn boolean(buf: &mut Vec<u8>, v: bool) {
    buf.push(u8::from(v));
}

/// `Int32`, `Date32`.
#[inline]
pub fn i32(buf: &mut Vec<u8>, v: i32) {
    buf.extend_from_slice(&v.to_le_bytes());
}

/// `Int64`, `DateTime64`, `Time64`.
#[inline]
pub fn i64(buf: &mut Vec<u8>, v: i64) {
    buf.extend_from_slice(&v.to_le_bytes());
}

/// `UInt32`.
#[inline]
pub fn u32(buf: &mut Vec<u8>, v: u32) {
    buf.extend_from_slice(&v.to_le_bytes());
}

/// `UInt64`.
#[inline]
pub fn u64(buf: &mut Vec<u8>, v: u64) {
    buf.extend_from_slice(&v.to_le_bytes());
}

/// `Float32`.
#[inline]
pub fn f32(buf: &mut Vec<u8>, v: f32) {
    buf.extend_from_slice(&v.to_le_bytes());
}

/// `Float64`.
#[inline]
pub fn f64(buf: &mut Vec<u8>, v: f64) {
    buf.extend_from_slice(&v.to_le_bytes());
}

/// `Decimal(p, s)`: the unscaled value in 4, 8 or 16 bytes by precision.
#[inline]
pub fn decimal(buf: &mut Vec<u8>, precision: u32, v: i128) {
    match precision {
        0..=9 => buf.extend_from_slice(&(v as i32).to_le_bytes()),
        10..=18 => buf.extend_from_slice(&(v as i64).to_le_bytes()),
        _ => buf.extend_from_slice(&v.to_le_bytes()),
    }
}

/// `UUID`: the high and the low 64 bits, each little-endian.
#[inline]
pub fn uuid(buf: &mut Vec<u8>, v: u128) {
    buf.extend_from_slice(&((v >> 64) as u64).to_le_bytes());
    buf.extend_from_slice(&(v as u64).to_le_bytes());
}

/// `Enum8` or `Enum16` (`bits`), whose values number the symbols from 0: `index` in one or two
/// bytes.
#[inline]
pub fn enum_index(buf: &mut Vec<u8>, bits: u32, index: u32) {
    if bits == 8 {
        buf.push(index as u8);
    } else {
        buf.extend_from_slice(&(index as u16).to_le_bytes());
    }
}

/// `IPv4`: the address as a little-endian `UInt32` (`1.2.3.4` is `0x01020304`).
#[inline]
pub fn ipv4(buf: &mut Vec<u8>, v: u32) {
    buf.extend_from_slice(&v.to_le_bytes());
}

/// `IPv6`: the 16 bytes in network order.
#[inline]
pub fn ipv6(buf: &mut Vec<u8>, v: u128) {
    buf.extend_from_slice(&v.to_be_bytes());
}

/// The `Nullable` marker: 1 for null (nothing follows), 0 for a value (the value follows).
#[inline]
pub fn null_marker(buf: &mut Vec<u8>, is_null: bool) {
    buf.push(u8::from(is_null));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints() {
        let mut buf = Vec::new();
        varint(&mut buf, 0);
        varint(&mut buf, 127);
        varint(&mut buf, 300);
        assert_eq!(buf, [0, 127, 0xac, 0x02]);
    }
}
