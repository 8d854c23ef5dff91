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
    /// Lanes the stall watchdog found stalled and that have not recovered (Invariant 9).
    pub(crate) stalled_lanes: AtomicUsize,
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
    /// A graceful stop was asked for (a signal); set before the stop message is sent.
    pub(crate) shutdown_requested: AtomicBool,
    /// Paused by `POST /admin/pause` until `POST /admin/resume`: every lane pauses at the source
    /// through the pause controller, after writing what it read.
    pub(crate) operator_paused: AtomicBool,
    /// Per shard, since when its writes fail (see [`ShardHealth`]).
    pub(crate) shard_health: Vec<ShardHealth>,
}

/// Since when one shard's writes have been failing: the writes of the shard that are in their
/// retry loops (a batch's insert, its span's recording or its owner check, after a retryable
/// failure) are counted; the shard is failing from the moment the count left 0 until it is back
/// at 0. One stuck batch keeps it failing however many others succeed. While it fails, `/readyz`
/// answers not ready and `etl_sink_shard_failing_seconds` counts.
#[derive(Debug)]
pub(crate) struct ShardHealth {
    shard: usize,
    retrying: AtomicUsize,
    /// Nanoseconds from `origin` to when the count left 0, plus one; 0 while it is 0.
    failing_since: AtomicU64,
    origin: Instant,
}

impl ShardHealth {
    pub(crate) fn new(shard: usize) -> Self {
        ShardHealth { shard, retrying: AtomicUsize::new(0), failing_since: AtomicU64::new(0), origin: Instant::now() }
    }

    /// A write of the shard failed and will be retried: it counts until the guard drops (when the
    /// write succeeded, or ended otherwise).
    pub(crate) fn retrying(&self, error: &dyn std::fmt::Display) -> Retrying<'_> {
        if self.retrying.fetch_add(1, Ordering::AcqRel) == 0 {
            let now = self.origin.elapsed().as_nanos().min(u128::from(u64::MAX - 1)) as u64 + 1;
            self.failing_since.store(now, Ordering::Release);
            tracing::error!(
                shard = self.shard,
                %error,
                "the shard's writes fail; its batches are retried and the lanes pause until it accepts them again"
            );
        }
        Retrying(self)
    }

    /// How long the shard has been failing (zero while it is healthy).
    pub(crate) fn failing_for(&self) -> Duration {
        match self.failing_since.load(Ordering::Acquire) {
            0 => Duration::ZERO,
            since => self.origin.elapsed().saturating_sub(Duration::from_nanos(since - 1)),
        }
    }
}

/// One write of a shard in its retry loop (see [`ShardHealth::retrying`]).
#[must_use]
pub(crate) struct Retrying<'a>(&'a ShardHealth);

impl Drop for Retrying<'_> {
    fn drop(&mut self) {
        let health = self.0;
        if health.retrying.fetch_sub(1, Ordering::AcqRel) == 1 {
            let failed_for = health.failing_for();
            health.failing_since.store(0, Ordering::Release);
            tracing::info!(shard = health.shard, ?failed_for, "the shard accepts writes again");
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
        m.stalled_partitions.set(self.stalled_lanes.load(Ordering::Acquire) as i64);
        for (gauge, rx) in m.queue_depth.iter().zip(&self.queue_rx) {
            gauge.set(rx.len() as i64);
        }
        for (gauge, health) in m.shard_failing.iter().zip(&self.shard_health) {
            gauge.set(health.failing_for().as_secs_f64());
        }
        m.render()
    }

    /// Ready: the source joined its group, the sink's start-up check passed, no shard's writes
    /// are failing now, and no partition is stalled.
    pub(crate) fn is_ready(&self) -> bool {
        self.not_ready_because().is_none()
    }

    /// Whether the operator paused the pipeline (`POST /admin/pause`).
    pub(crate) fn operator_paused(&self) -> bool {
        self.operator_paused.load(Ordering::Acquire)
    }

    /// Pauses (`true`) or resumes the pipeline for the operator; returns whether that changed
    /// anything.
    pub(crate) fn set_operator_paused(&self, paused: bool) -> bool {
        let changed = self.operator_paused.swap(paused, Ordering::AcqRel) != paused;
        self.metrics.admin_paused.set(i64::from(paused));
        changed
    }

    /// Why the pipeline is not ready, in words for `/readyz`; `None` when it is.
    pub(crate) fn not_ready_because(&self) -> Option<String> {
        if self.operator_paused() {
            return Some("paused by POST /admin/pause; POST /admin/resume resumes it".into());
        }
        if !self.source_ready.load(Ordering::Acquire) {
            return Some("the source has not joined its group".into());
        }
        if !self.sink_ready.load(Ordering::Acquire) {
            return Some("the sink's start-up check has not passed".into());
        }
        if let Some(health) = self.shard_health.iter().find(|h| !h.failing_for().is_zero()) {
            return Some(format!("the writes of shard {} are failing", health.shard));
        }
        match self.stalled_lanes.load(Ordering::Acquire) {
            0 => None,
            n => Some(format!("{n} partition(s) stalled: the source holds records it does not deliver")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A shard fails while any of its writes retries: one stuck write keeps it failing however
    // many others recover, and it is healthy again only when the last one ends.
    #[test]
    fn a_shard_fails_until_its_last_retrying_write_ends() {
        let health = ShardHealth::new(0);
        assert!(health.failing_for().is_zero());
        let stuck = health.retrying(&"timeout");
        let other = health.retrying(&"timeout");
        std::thread::sleep(Duration::from_millis(5));
        drop(other);
        assert!(!health.failing_for().is_zero(), "one write still retries");
        let since = health.failing_for();
        std::thread::sleep(Duration::from_millis(5));
        assert!(health.failing_for() > since, "counted from the first failure, not reset by a recovery");
        drop(stuck);
        assert!(health.failing_for().is_zero());
    }
}
