//! What benchmarks of generated chains need: sample payloads for a schema, and a harness
//! that runs a chain on one record at a time without a pipeline around it.

use std::collections::HashMap;

use apache_avro::Schema;
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::chain::{Chain, OpenBuffer, RecordError, RowOut};
use crate::datagen::{Wire, random_value};
use crate::source::Record;

/// `n` payloads of random records of `schema`, framed as `wire` says; the same seed gives
/// the same payloads.
pub fn sample_payloads(schema: &Schema, wire: Wire, seed: u64, n: usize) -> Vec<Vec<u8>> {
    let names = HashMap::new();
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let datum = apache_avro::to_avro_datum(schema, random_value(schema, &names, &mut rng, 0))
                .expect("datagen values fit their schema");
            match wire {
                Wire::Raw => datum,
                Wire::Confluent { schema_id } => {
                    let mut framed = vec![0];
                    framed.extend_from_slice(&schema_id.to_be_bytes());
                    framed.extend_from_slice(&datum);
                    framed
                }
            }
        })
        .collect()
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

    /// Processes one record; returns the rows it produced.
    #[inline]
    pub fn process<C: Chain>(&mut self, chain: &mut C, record: &Record<'_>) -> Result<u32, RecordError> {
        for b in &mut self.buffers {
            if b.bytes.len() > 256 * 1024 {
                b.bytes.clear();
                b.rows = 0;
            }
        }
        let mut out = RowOut { buffers: &mut self.buffers, round_robin: &mut self.round_robin, rows: 0 };
        chain.process(record, &mut out)?;
        Ok(out.rows)
    }
}
