//! The chain harness: what benchmarks and fuzz tests of generated chains need: sample payloads
//! for a schema, a harness that runs a chain on one record at a time without a pipeline around
//! it, the alternating-pass timer generated benchmarks compare decoders with, and the fuzz loop
//! generated crates test themselves with. (Not `cargo xtask bench`, the side-by-side benchmark of
//! whole pipelines.)

use apache_avro::Schema;
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::datagen::{Encoding, Policy, Wire, encode, random_value};
use crate::engine::chain::{Chain, OpenBuffer, RowOut};
use crate::engine::errors::{RecordError, RecordErrorKind};
use crate::engine::lane::Record;

/// `n` payloads of random records of `schema`, encoded as `encoding` and framed as `wire`
/// says; the same seed gives the same payloads.
pub fn sample_payloads(schema: &Schema, encoding: Encoding, wire: Wire, seed: u64, n: usize) -> Vec<Vec<u8>> {
    let names = crate::datagen::names_of(schema).expect("a parsed schema resolves its names");
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let mut payload = Vec::new();
            encode(
                schema,
                &names,
                random_value(schema, &names, &mut rng, 0, Policy::of(encoding)),
                encoding,
                wire,
                &mut payload,
            )
            .expect("datagen values fit their schema");
            payload
        })
        .collect()
}

/// Times each of `passes` (a name, and one pass over `records` records) in alternating rounds
/// for about `budget`, and prints each one's median time per record and its ratio to the first.
///
/// Criterion measures one function after another, and on a shared machine a slow window of a few
/// seconds then lands on one side of a comparison only (runs of the same build differed by a
/// fifth). Alternating pass by pass puts every slow window on all sides alike, so the ratio is
/// what the comparison means. Returns the medians, in nanoseconds per record.
pub fn interleaved(passes: &mut [(&str, &mut dyn FnMut())], records: usize, budget: std::time::Duration) -> Vec<f64> {
    let started = std::time::Instant::now();
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); passes.len()];
    // One warm-up round, then rounds until the budget is spent (at least 21, for a median).
    for (_, pass) in passes.iter_mut() {
        pass();
    }
    while times[0].len() < 21 || started.elapsed() < budget {
        for (i, (_, pass)) in passes.iter_mut().enumerate() {
            let t = std::time::Instant::now();
            pass();
            times[i].push(t.elapsed().as_nanos() as f64 / records.max(1) as f64);
        }
    }
    let medians: Vec<f64> = times
        .iter_mut()
        .map(|t| {
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        })
        .collect();
    println!("interleaved: {} rounds, median per record", times[0].len());
    for ((name, _), median) in passes.iter().zip(&medians) {
        println!("  {name:<70} {median:>9.1} ns   {:>5.2}x the first", median / medians[0]);
    }
    medians
}

/// Runs a chain over records into per-shard buffers that are emptied as they fill, as a
/// pipeline thread would (without sealing or sending).
#[derive(Debug)]
pub struct ChainHarness {
    buffers: Vec<OpenBuffer>,
    round_robin: usize,
}

impl ChainHarness {
    /// A harness for `shards` shards.
    pub fn new(shards: usize) -> Self {
        ChainHarness { buffers: (0..shards.max(1)).map(|_| OpenBuffer::default()).collect(), round_robin: 0 }
    }

    /// The encoded rows in the buffers now, shard after shard, and empties them: what a test
    /// of a generated chain reads back (NDJSON rows for a file sink).
    pub fn take_output(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        for b in &mut self.buffers {
            out.append(&mut b.bytes);
            b.rows = 0;
        }
        out
    }

    /// Processes one record; returns the rows it produced.
    #[inline]
    pub fn process<C: Chain>(&mut self, chain: &mut C, record: &Record<'_>) -> Result<u32, RecordError> {
        for b in &mut self.buffers {
            if b.bytes.len() > 256 * 1024 {
                b.bytes.clear();
                b.rows = 0;
            }
        }
        // As a pipeline thread does: round-robin follows the offset, so a record's rows go to the
        // same shards every time.
        self.round_robin = record.offset as usize;
        let mut out = RowOut { buffers: &mut self.buffers, round_robin: &mut self.round_robin, rows: 0 };
        chain.process(record, &mut out)?;
        Ok(out.rows)
    }
}

/// What [`measure_parts`] measured: the CPU seconds of the fastest of its passes over the
/// payloads, for the decoder alone and for the whole chain.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PartsMeasured {
    /// Payloads per pass.
    pub records: usize,
    /// Payloads the decoder took (the rest are record errors).
    pub decoded: usize,
    /// Rows the chain made of them.
    pub rows: u64,
    /// RowBinary bytes the chain wrote for them.
    pub row_bytes: u64,
    /// The generated decoder alone (into its typed fields, nothing kept).
    pub decode_cpu_seconds: f64,
    /// The whole chain: decode, operators, row encoding into per-shard buffers.
    pub chain_cpu_seconds: f64,
}

/// Measures the parts of a chain's work on `payloads` (a topic's own records), each in `passes`
/// passes on this thread, keeping the least CPU time of each (what the machine's other work
/// added least to): `decode` runs the generated decoder alone, then the chain runs through a
/// [`ChainHarness`] of `shards` shards. `cargo xtask bench` compares their sum with the
/// pipeline's CPU. A payload that is a record error is counted like any other (the pipeline pays
/// for it too).
pub fn measure_parts<C: Chain>(
    payloads: &[Vec<u8>],
    chain: &mut C,
    shards: usize,
    passes: usize,
    mut decode: impl FnMut(&[u8]) -> bool,
) -> PartsMeasured {
    let mut measured = PartsMeasured {
        records: payloads.len(),
        decoded: 0,
        rows: 0,
        row_bytes: 0,
        decode_cpu_seconds: f64::INFINITY,
        chain_cpu_seconds: f64::INFINITY,
    };
    for _ in 0..passes.max(1) {
        let started = thread_cpu_seconds();
        let mut ok = 0usize;
        for p in payloads {
            ok += usize::from(std::hint::black_box(decode(p)));
        }
        measured.decoded = ok;
        measured.decode_cpu_seconds = measured.decode_cpu_seconds.min(thread_cpu_seconds() - started);

        let mut harness = ChainHarness::new(shards);
        let (mut rows, mut row_bytes) = (0u64, 0u64);
        let started = thread_cpu_seconds();
        for (offset, p) in payloads.iter().enumerate() {
            let record = Record {
                payload: Some(p),
                key: None,
                topic: "bench",
                partition: 0,
                offset: offset as i64,
                timestamp_ms: Some(0),
                headers: crate::Headers::NONE,
            };
            let before: usize = harness.buffers.iter().map(|b| b.bytes.len()).sum();
            // The harness empties a buffer past 256 KiB before the record, so `before` is what
            // stays: the growth is this record's rows.
            if let Ok(n) = harness.process(chain, &record) {
                rows += u64::from(n);
                let after: usize = harness.buffers.iter().map(|b| b.bytes.len()).sum();
                row_bytes += after.saturating_sub(before) as u64;
            }
        }
        measured.chain_cpu_seconds = measured.chain_cpu_seconds.min(thread_cpu_seconds() - started);
        (measured.rows, measured.row_bytes) = (rows, row_bytes);
    }
    measured
}

/// The payloads of a file `cargo xtask bench-raw dump` wrote: each a 4-byte little-endian length
/// and that many bytes.
pub fn read_payload_file(path: &std::path::Path) -> std::io::Result<Vec<Vec<u8>>> {
    let bytes = std::fs::read(path)?;
    let mut payloads = Vec::new();
    let mut rest = &bytes[..];
    while let Some((len, tail)) = rest.split_first_chunk::<4>() {
        let len = u32::from_le_bytes(*len) as usize;
        let Some((payload, tail)) = tail.split_at_checked(len) else {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "a payload runs past the file's end"));
        };
        payloads.push(payload.to_vec());
        rest = tail;
    }
    Ok(payloads)
}

/// The CPU time this thread has used, in seconds: the scheduler's nanosecond count
/// (`/proc/thread-self/schedstat`), else user + system time in clock ticks.
pub fn thread_cpu_seconds() -> f64 {
    if let Some(ns) = std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
    {
        return ns as f64 / 1e9;
    }
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of proc(5), the 12th and 13th after the name.
    (ticks(11) + ticks(12)) as f64 / 100.0
}

/// Runs `cases` random and mutated payloads through chains made by `make` and panics, naming
/// the payload, if the chain panics on one: a record that does not decode must be a record
/// error, whatever its bytes. Half the payloads are valid records of `schema` (encoded and framed
/// as `encoding` and `wire` say) with random damage (bit flips, truncation, inserted or overwritten bytes, varint
/// continuation runs, another schema id); the rest are random bytes, framed or not. The same
/// seed gives the same payloads. Generated crates call it from their own tests.
///
/// First, unless `valid_need_registry` (their schema id is known only to a registry, which a test
/// has not), every undamaged valid payload must be taken by the chain, giving the same rows each
/// time it is processed.
pub fn fuzz_chain<C: Chain>(
    mut make: impl FnMut() -> C,
    schema: &Schema,
    encoding: Encoding,
    wire: Wire,
    valid_need_registry: bool,
    cases: usize,
    seed: u64,
) {
    use rand::Rng;
    let mut rng = StdRng::seed_from_u64(seed);
    let valid = sample_payloads(schema, encoding, wire, seed, 64);
    let mut harness = ChainHarness::new(4);
    let mut chain = make();
    // Every undamaged payload of the schema is a record the chain takes (rows, or none when a
    // filter drops it), and it gives the same rows each time: a chain that refused everything
    // would pass the damaged cases below.
    let mut valid_rows = 0u32;
    // An operator may refuse an edge value (an addition that overflows at i64::MAX): that is the
    // chain's contract, not a decoding fault, so it is allowed, for a minority of records.
    let mut operator_errors = 0usize;
    for (i, payload) in valid.iter().enumerate().filter(|_| !valid_need_registry) {
        let record = Record {
            payload: Some(payload),
            key: Some(b"k"),
            topic: "orders",
            partition: 0,
            offset: i as i64,
            timestamp_ms: Some(1),
            headers: crate::engine::headers::Headers::NONE,
        };
        let rows = match harness.process(&mut chain, &record) {
            Ok(rows) => rows,
            Err(e) if e.kind == RecordErrorKind::Operator => {
                operator_errors += 1;
                harness.take_output();
                continue;
            }
            Err(e) => panic!("valid payload #{i} (seed {seed}) is a record error: {e}: {payload:02x?}"),
        };
        let first = harness.take_output();
        assert_eq!(harness.process(&mut chain, &record).ok(), Some(rows), "valid payload #{i}: the same rows again");
        assert_eq!(harness.take_output(), first, "valid payload #{i} (seed {seed}): the same bytes again");
        valid_rows += rows;
    }
    let (mut decoded, mut rejected) = (0usize, 0usize);
    for case in 0..cases {
        let payload = if case % 2 == 0 {
            let mut p = valid[rng.random_range(0..valid.len())].clone();
            for _ in 0..rng.random_range(1..4) {
                mutate(&mut p, &mut rng, wire);
            }
            p
        } else {
            let len = rng.random_range(0..64);
            let mut p: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            if let (Wire::Confluent { schema_id }, true) = (wire, rng.random_bool(0.5)) {
                let mut framed = vec![0];
                framed.extend_from_slice(&schema_id.to_be_bytes());
                framed.append(&mut p);
                p = framed;
            }
            p
        };
        let key: Vec<u8> = (0..rng.random_range(0..8)).map(|_| rng.random()).collect();
        let record = Record {
            payload: Some(&payload),
            key: Some(&key),
            topic: "orders",
            partition: 0,
            offset: case as i64,
            timestamp_ms: Some(rng.random_range(0..2_000_000_000_000)),
            headers: crate::engine::headers::Headers::NONE,
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| harness.process(&mut chain, &record)));
        match outcome {
            Ok(Ok(_)) => decoded += 1,
            Ok(Err(_)) => rejected += 1,
            Err(_) => {
                panic!("the chain panicked on payload #{case} (seed {seed}), a record error was due: {payload:02x?}")
            }
        }
        if case % 256 == 255 {
            // A fresh chain now and then, as a pipeline thread's would be.
            chain = make();
        }
    }
    let checked = if valid_need_registry { 0 } else { valid.len() };
    assert!(
        operator_errors * 2 <= checked,
        "{operator_errors} of {checked} valid payloads (seed {seed}) were refused by an operator: a chain that \
         refuses most records proves nothing"
    );
    eprintln!(
        "fuzz_chain: {checked} valid payloads decoded into {valid_rows} rows ({operator_errors} refused by an \
         operator); {cases} damaged payloads, {decoded} decoded, {rejected} record errors, no panic"
    );
}

/// One random damage to a payload. For Confluent framing it sometimes rewrites the schema id,
/// so the chain's check of the id is exercised too.
fn mutate(p: &mut Vec<u8>, rng: &mut StdRng, wire: Wire) {
    use rand::Rng;
    let len = p.len();
    match rng.random_range(0..7) {
        0 if len > 0 => {
            let i = rng.random_range(0..len);
            p[i] ^= 1 << rng.random_range(0..8);
        }
        1 => p.truncate(rng.random_range(0..=len)),
        2 => {
            let at = rng.random_range(0..=len);
            let bytes: Vec<u8> = (0..rng.random_range(1..9)).map(|_| rng.random()).collect();
            p.splice(at..at, bytes);
        }
        3 if len > 0 => {
            // A run of continuation bits: the longest varint there is, and then some.
            let at = rng.random_range(0..len);
            let end = (at + rng.random_range(1..12)).min(len);
            p[at..end].fill(0xff);
        }
        4 if len > 0 => {
            let at = rng.random_range(0..len);
            p[at] = [0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff][rng.random_range(0..6)];
        }
        5 if matches!(wire, Wire::Confluent { .. }) && len >= 5 => {
            p[1..5].copy_from_slice(&rng.random::<u32>().to_be_bytes());
        }
        _ => {
            let at = rng.random_range(0..=len);
            p.drain(at..(at + rng.random_range(0..4)).min(len));
        }
    }
}
