//! The state every part of a running pipeline shares: configuration, budget, metrics, the fatal
//! slot, readiness, each shard's health, and the counters behind [`PipelineStats`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::config::RuntimeConfig;
use crate::engine::budget::Budget;
use crate::engine::chunk::Chunk;
use crate::engine::fatal::FatalSlot;
use crate::engine::metrics::Metrics;
use crate::engine::sink::DeadLetter;

/// Counters about the pipeline's own behaviour, for tests and diagnostics.
#[derive(Debug, Clone, Copy)]
pub struct PipelineStats {
    /// The in-flight bytes right now.
    pub inflight_bytes: u64,
    /// The largest in-flight byte count seen so far.
    pub peak_inflight_bytes: u64,
    /// `backpressure.max_inflight_bytes`.
    pub max_inflight_bytes: u64,
    /// The longest gap between two iterations of any pipeline thread's loop.
    pub max_loop_gap: Duration,
    /// Lane pauses so far.
    pub pause_events: u64,
    /// Lanes paused right now.
    pub paused_lanes: usize,
    /// Lanes owned right now.
    pub live_lanes: usize,
}

/// State shared by the pipeline threads, the shard workers, the write tasks and the admin server.
pub(crate) struct Shared {
    pub(crate) config: RuntimeConfig,
    pub(crate) budget: Budget,
    pub(crate) metrics: Metrics,
    pub(crate) fatal: FatalSlot,
    pub(crate) paused_lanes: AtomicUsize,
    pub(crate) lane_counts: Vec<AtomicUsize>,
    pub(crate) max_loop_gap_ns: AtomicU64,
    pub(crate) dead_letter: Option<Arc<dyn DeadLetter>>,
    /// Chunks keep each row's source offset: only when refused rows are dead-lettered.
    pub(crate) track_row_sources: bool,
    /// Receiver clones, only to read the queue depths for the gauge.
    pub(crate) queue_rx: Vec<Receiver<Chunk>>,
    pub(crate) source_ready: AtomicBool,
    pub(crate) sink_ready: AtomicBool,
    /// The sink's start-up check failed fatally (the pipeline must not start).
    pub(crate) sink_check_failed: AtomicBool,
    pub(crate) stopping: AtomicBool,
    /// Per shard, since when its writes fail (see [`ShardHealth`]).
    pub(crate) shard_health: Vec<ShardHealth>,
}

/// Since when one shard's writes have been failing: set by the first failed attempt (of a
/// batch's insert or of its span's recording) that no success has followed, cleared by the next
/// success. While it is set the shard's batches wait in their retry loops, the shard queue fills
/// and the lanes pause; `/readyz` answers not ready and `etl_sink_shard_failing_seconds` counts.
#[derive(Debug)]
pub(crate) struct ShardHealth {
    /// Nanoseconds from `origin` to the first failure, plus one; 0 while the shard is healthy.
    failing_since: AtomicU64,
    origin: Instant,
}

impl ShardHealth {
    pub(crate) fn new() -> Self {
        ShardHealth { failing_since: AtomicU64::new(0), origin: Instant::now() }
    }

    /// A write attempt failed; returns true when the shard was healthy until now.
    pub(crate) fn failed(&self) -> bool {
        let now = self.origin.elapsed().as_nanos().min(u128::from(u64::MAX - 1)) as u64 + 1;
        self.failing_since.compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// A write succeeded; returns how long the shard had been failing, if it was.
    pub(crate) fn succeeded(&self) -> Option<Duration> {
        match self.failing_since.swap(0, Ordering::AcqRel) {
            0 => None,
            since => Some(self.origin.elapsed().saturating_sub(Duration::from_nanos(since - 1))),
        }
    }

    /// How long the shard has been failing (zero while it is healthy).
    pub(crate) fn failing_for(&self) -> Duration {
        match self.failing_since.load(Ordering::Acquire) {
            0 => Duration::ZERO,
            since => self.origin.elapsed().saturating_sub(Duration::from_nanos(since - 1)),
        }
    }
}

impl Shared {
    pub(crate) fn stats(&self) -> PipelineStats {
        PipelineStats {
            inflight_bytes: self.budget.inflight(),
            peak_inflight_bytes: self.budget.peak(),
            max_inflight_bytes: self.budget.max(),
            max_loop_gap: Duration::from_nanos(self.max_loop_gap_ns.load(Ordering::Relaxed)),
            pause_events: self.metrics.pause_events.get(),
            paused_lanes: self.paused_lanes.load(Ordering::Acquire),
            live_lanes: self.lane_counts.iter().map(|c| c.load(Ordering::Acquire)).sum(),
        }
    }

    /// Sets the gauges that mirror atomics, then renders the registry. Gauges are set at scrape
    /// time so the hot paths only touch their atomics.
    pub(crate) fn render_metrics(&self) -> String {
        let m = &self.metrics;
        m.inflight_bytes.set(self.budget.inflight() as i64);
        m.paused.set(i64::from(self.paused_lanes.load(Ordering::Acquire) > 0));
        for (gauge, rx) in m.queue_depth.iter().zip(&self.queue_rx) {
            gauge.set(rx.len() as i64);
        }
        for (gauge, health) in m.shard_failing.iter().zip(&self.shard_health) {
            gauge.set(health.failing_for().as_secs_f64());
        }
        m.render()
    }

    /// Ready: the source joined its group, the sink's start-up check passed, and no shard's
    /// writes are failing now.
    pub(crate) fn is_ready(&self) -> bool {
        self.source_ready.load(Ordering::Acquire)
            && self.sink_ready.load(Ordering::Acquire)
            && self.shard_health.iter().all(|h| h.failing_for().is_zero())
    }
}
