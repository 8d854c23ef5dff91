//! The state every part of a running pipeline shares: configuration, budget, metrics, the fatal
//! slot, readiness, and the counters behind [`PipelineStats`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

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
        m.render()
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.source_ready.load(Ordering::Acquire) && self.sink_ready.load(Ordering::Acquire)
    }
}
