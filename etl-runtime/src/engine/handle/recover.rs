//! The exactly-once half of the handle: a new owner of partitions reads the ledger and gets the
//! replay plan its lanes are positioned and cut with.

use std::time::{Duration, Instant};

use crate::engine::errors::{SinkError, SinkErrorKind};
use crate::engine::handle::PipelineHandle;
use crate::engine::ledger::Replay;

/// The exactly-once ledger could not be read for a partition: the new owner cannot know where to
/// start, so the source must stop.
#[derive(Debug, Clone, thiserror::Error)]
#[error("reading the exactly-once ledger for partition {partition}: {source}")]
pub struct LedgerReadError {
    /// The partition whose spans were being read.
    pub partition: i32,
    /// The last error of the ledger.
    pub source: SinkError,
}

impl PipelineHandle {
    /// Exactly-once: reads the spans recorded for each `(partition, watermark)` (the watermark is
    /// the committed offset minus one, `None` when nothing is committed) and returns each
    /// partition's replay plan, in the same order. Blocks the caller (for Kafka: the assignment
    /// callback) while the ledger is read, retrying a sink that is unreachable for up to
    /// `checkpoint.drain_timeout`; then, or on a fatal error, it fails and the caller must stop.
    pub fn recover(&self, partitions: &[(i32, Option<i64>)]) -> Result<Vec<Replay>, LedgerReadError> {
        let shared = &self.inner.shared;
        let Some(ledger) = self.inner.ledger.as_ref() else {
            return Ok(partitions.iter().map(|_| Replay::default()).collect());
        };
        let deadline = Instant::now() + shared.config.drain_timeout;
        let mut plans = Vec::with_capacity(partitions.len());
        for &(partition, watermark) in partitions {
            let mut backoff = Duration::from_millis(100);
            let (epoch, recorded) = loop {
                let read = async {
                    let epoch = ledger.claim(partition).await?;
                    Ok::<_, SinkError>((epoch, ledger.recorded(partition, watermark).await?))
                };
                match self.inner.runtime.block_on(read) {
                    Ok(read) => break read,
                    Err(error) if error.kind == SinkErrorKind::Retryable && Instant::now() + backoff < deadline => {
                        tracing::warn!(partition, %error, retry_in = ?backoff, "reading the exactly-once ledger failed");
                        std::thread::sleep(backoff);
                        backoff = (backoff * 2).min(Duration::from_secs(2));
                    }
                    Err(error) => {
                        return Err(LedgerReadError { partition, source: error });
                    }
                }
            };
            let other_config = recorded.other_config_above(watermark);
            if other_config > 0 {
                tracing::warn!(
                    partition,
                    batches = other_config,
                    "batches above the committed offset were written under another config hash; their records are \
                     inserted again (at-least-once for them)"
                );
            }
            let plan = Replay::new(shared.config.shards, watermark, &recorded, epoch);
            shared.metrics.replayed_batches.inc_by(plan.pending() as u64);
            tracing::info!(partition, epoch, ?watermark, start = ?plan.start(), replayed_batches = plan.pending(), "exactly-once replay plan");
            plans.push(plan);
        }
        Ok(plans)
    }
}
