//! The `format: native` transposition on the flagship's row shape (two Int64, a
//! LowCardinality(String), a Float64, a DateTime64), in rows per second, next to a plain copy of
//! the same RowBinary bytes: what Native costs the client per row (docs/BENCHMARKS.md).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use etl_runtime::__private::{NativeEncoder, rowbinary as rb};

const ROWS: usize = 100_000;

fn columns() -> Vec<(String, String)> {
    [
        ("order_id", "Int64"),
        ("customer_id", "Int64"),
        ("region", "LowCardinality(String)"),
        ("total", "Float64"),
        ("created_at", "DateTime64(3, 'UTC')"),
    ]
    .iter()
    .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
    .collect()
}

fn rows() -> Vec<u8> {
    let regions: [&[u8]; 4] = [b"EMEA", b"APAC", b"AMER", b"LATAM"];
    let mut bytes = Vec::new();
    for i in 0..ROWS as i64 {
        rb::i64(&mut bytes, i);
        rb::i64(&mut bytes, i % 10_007);
        rb::string(&mut bytes, regions[i as usize % 4]);
        rb::f64(&mut bytes, i as f64 * 0.25);
        rb::i64(&mut bytes, 1_700_000_000_000 + i);
    }
    bytes
}

fn transpose(c: &mut Criterion) {
    let bytes = rows();
    let mut group = c.benchmark_group("native");
    group.throughput(Throughput::Elements(ROWS as u64));
    let mut encoder = NativeEncoder::new(&columns()).expect("known types");
    let mut out = Vec::with_capacity(bytes.len() * 2);
    group.bench_function("transpose", |b| {
        b.iter(|| {
            out.clear();
            encoder.encode(&bytes, |piece| out.extend_from_slice(piece)).expect("rows");
            out.len()
        });
    });
    // The floor: the rows copied as they are, in the 256 KiB pieces a RowBinary body is sent in.
    group.bench_function("copy", |b| {
        b.iter(|| {
            out.clear();
            for piece in bytes.chunks(256 << 10) {
                out.extend_from_slice(std::hint::black_box(piece));
            }
            out.len()
        });
    });
    group.finish();
}

criterion_group!(benches, transpose);
criterion_main!(benches);
