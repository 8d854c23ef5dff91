//! The orders the scenarios produce: their Avro datums in the Confluent wire format, built by hand
//! and deterministic per id, so that ClickHouse's content can be checked per key.

/// The Confluent wire header: magic byte 0 and schema id 1 (no registry: the reader schema is
/// compiled in, the id is not looked up).
const CONFLUENT_HEADER: [u8; 5] = [0, 0, 0, 0, 1];

fn zigzag(buf: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        buf.push((z as u8) | 0x80);
        z >>= 7;
    }
    buf.push(z as u8);
}

/// The fields of order `id` (deterministic, so ClickHouse's content can be checked per key).
pub fn customer_id(id: i64) -> i64 {
    (id * 7919) % 10007
}

pub fn total_cents(id: i64) -> i64 {
    100 + id % 9000
}

/// The Avro datum (schemas/order.avsc) of order `id`, without framing. `coupon_len` > 0 adds a
/// coupon of that many pseudo-random alphanumerics (LZ4 hardly compresses them, so the sink's
/// bytes on the wire are about the rows' bytes).
pub fn order_datum(id: i64, coupon_len: usize) -> Vec<u8> {
    let mut buf = Vec::with_capacity(40 + coupon_len);
    zigzag(&mut buf, id);
    zigzag(&mut buf, customer_id(id));
    zigzag(&mut buf, id % 3); // region: EMEA, AMER, APAC
    zigzag(&mut buf, total_cents(id));
    if coupon_len == 0 {
        zigzag(&mut buf, 0); // union branch null
    } else {
        zigzag(&mut buf, 1);
        zigzag(&mut buf, coupon_len as i64);
        let mut x = (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        for _ in 0..coupon_len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf.push(ALPHABET[(x % ALPHABET.len() as u64) as usize]);
        }
    }
    zigzag(&mut buf, 1_700_000_000_000 + id); // created_at, timestamp-millis
    buf
}

/// Order `id` in the Confluent wire format.
pub fn order(id: i64, coupon_len: usize) -> Vec<u8> {
    let mut payload = CONFLUENT_HEADER.to_vec();
    payload.extend(order_datum(id, coupon_len));
    payload
}

/// Order `id` in the Confluent wire format, framed with writer schema `schema_id` (which a
/// pipeline with a registry must look up unless it is the reader's own id, 1).
pub fn order_framed(id: i64, schema_id: u32) -> Vec<u8> {
    let mut payload = vec![0];
    payload.extend(schema_id.to_be_bytes());
    payload.extend(order_datum(id, 0));
    payload
}

/// The bytes [`Producer::send_orders`] puts in the topic for orders `ids`: keys and payloads.
pub fn orders_bytes(ids: std::ops::Range<i64>, coupon_len: usize) -> u64 {
    ids.map(|id| (id.to_string().len() + CONFLUENT_HEADER.len() + order_datum(id, coupon_len).len()) as u64).sum()
}

/// The per-key checksum of a set of distinct order ids, as `ChStats::checksum` computes it in
/// ClickHouse from the stored columns.
pub fn checksum(ids: impl IntoIterator<Item = i64>) -> i64 {
    ids.into_iter().map(|id| id * 3 + customer_id(id) * 7 + total_cents(id)).sum()
}
