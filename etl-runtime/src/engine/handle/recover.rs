//! The exactly-once half of the handle: a new owner of partitions reads the ledger and gets the
//! replay plan its lanes are positioned and cut with.

use std::time::{Duration, Instant};

use crate::engine::errors::{SinkError, SinkErrorKind};
use crate::engine::handle::PipelineHandle;
use crate::engine::lane::LaneKey;
use crate::engine::ledger::Replay;

/// The exactly-once ledger could not be read for a lane: the new owner cannot know where to
/// start, so the source must stop.
#[derive(Debug, Clone, thiserror::Error)]
#[error("reading the exactly-once ledger for {lane}: {source}")]
pub struct LedgerReadError {
    /// The lane whose spans were being read.
    pub lane: LaneKey,
    /// The last error of the ledger.
    pub source: SinkError,
}

impl PipelineHandle {
    /// Exactly-once: reads the spans recorded for each `(lane, watermark)` (the watermark is the
    /// committed offset minus one, `None` when nothing is committed) and returns each lane's
    /// replay plan, in the same order. Blocks the caller (for Kafka: the assignment
    /// callback) while the ledger is read, retrying a sink that is unreachable for up to
    /// `checkpoint.drain_timeout`; then, or on a fatal error, it fails and the caller must stop.
    pub fn recover(&self, lanes: &[(LaneKey, Option<i64>)]) -> Result<Vec<Replay>, LedgerReadError> {
        match self.recover_unless(lanes, &|| false)? {
            Some(plans) => Ok(plans),
            // Only when the pipeline stops meanwhile.
            None => Err(LedgerReadError {
                lane: lanes.first().map_or_else(|| LaneKey::new("", -1), |l| l.0.clone()),
                source: SinkError::retryable("the pipeline is stopping"),
            }),
        }
    }

    /// [`PipelineHandle::recover`] that gives up, with `Ok(None)`, as soon as `cancelled` says so:
    /// checked before every claim, so that an assignment that is over claims nothing more (a
    /// claim after the next owner's would supersede it).
    pub fn recover_unless(
        &self,
        lanes: &[(LaneKey, Option<i64>)],
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Option<Vec<Replay>>, LedgerReadError> {
        let shared = &self.inner.shared;
        let Some(ledger) = self.inner.ledger.as_ref() else {
            return Ok(Some(lanes.iter().map(|_| Replay::default()).collect()));
        };
        let deadline = Instant::now() + shared.config.drain_timeout;
        let mut plans = Vec::with_capacity(lanes.len());
        for (lane, watermark) in lanes {
            let (topic, partition, watermark) = (&*lane.topic, lane.partition, *watermark);
            let mut backoff = Duration::from_millis(100);
            let (epoch, recorded) = loop {
                if cancelled() || shared.stopping.load(std::sync::atomic::Ordering::Acquire) {
                    return Ok(None);
                }
                let read = async {
                    let epoch = ledger.claim(lane).await?;
                    Ok::<_, SinkError>((epoch, ledger.recorded(lane, watermark).await?))
                };
                match self.inner.runtime.block_on(read) {
                    Ok(read) => break read,
                    Err(error) if error.kind == SinkErrorKind::Retryable && Instant::now() + backoff < deadline => {
                        tracing::warn!(topic, partition, %error, retry_in = ?backoff, "reading the exactly-once ledger failed");
                        std::thread::sleep(backoff);
                        backoff = (backoff * 2).min(Duration::from_secs(2));
                    }
                    Err(error) => {
                        return Err(LedgerReadError { lane: lane.clone(), source: error });
                    }
                }
            };
            let other_config = recorded.other_config_above(watermark);
            if other_config > 0 {
                tracing::warn!(
                    topic,
                    partition,
                    batches = other_config,
                    "batches above the committed offset were written under another config hash; their records are \
                     inserted again (at-least-once for them)"
                );
            }
            let plan = Replay::new(shared.config.shards, watermark, &recorded, epoch);
            shared.metrics.replayed_batches.inc_by(plan.pending() as u64);
            tracing::info!(topic, partition, epoch, ?watermark, start = ?plan.start(), replayed_batches = plan.pending(), "exactly-once replay plan");
            plans.push(plan);
        }
        Ok(Some(plans))
    }
}
