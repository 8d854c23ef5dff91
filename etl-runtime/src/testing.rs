//! Helpers for the crate's unit tests: a pass-through chain, a null sink, a small configuration.

use std::time::Duration;

use crate::config::{BackpressureConfig, BatchConfig, RuntimeConfig};
use crate::engine::chain::{Chain, RowOut};
use crate::engine::chunk::Batch;
use crate::engine::errors::RecordError;
use crate::engine::errors::SinkError;
use crate::engine::lane::Record;
use crate::engine::sink::Sink;

/// A small configuration that satisfies the sizing rule.
pub(crate) fn config(threads: usize, shards: usize) -> RuntimeConfig {
    RuntimeConfig {
        threads,
        shards,
        backpressure: BackpressureConfig {
            max_inflight_bytes: 1 << 20,
            high_ratio: 0.9,
            low_ratio: 0.5,
            min_pause: Duration::from_millis(20),
        },
        batch: BatchConfig { max_rows: 1000, max_bytes: 16 << 10, linger: Duration::from_millis(5) },
        chunk_target_bytes: 1024,
        drain_timeout: Duration::from_secs(5),
        ..RuntimeConfig::default()
    }
}

/// Copies each payload as one row, round-robin over the shards.
pub(crate) struct PassThrough;

impl Chain for PassThrough {
    fn process(&mut self, record: &Record<'_>, out: &mut RowOut<'_>) -> Result<(), RecordError> {
        let shard = out.round_robin();
        out.push_row(shard, |buf| buf.extend_from_slice(record.payload.unwrap_or_default()));
        Ok(())
    }
}

/// Accepts everything at once.
pub(crate) struct NullSink;

impl Sink for NullSink {
    async fn write(&self, _shard: usize, _batch: &Batch) -> Result<(), SinkError> {
        Ok(())
    }

    async fn check(&self) -> Result<(), SinkError> {
        Ok(())
    }
}
