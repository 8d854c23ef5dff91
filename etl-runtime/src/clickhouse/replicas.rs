//! Replica rotation: each shard's current replica, the cooldown of one that failed, and the
//! `etl_sink_replica_healthy` gauge.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ::clickhouse::Client;
use prometheus::{IntCounter, IntGauge};

/// How long a replica that failed is passed over while another replica of its shard is available.
const REPLICA_COOLDOWN: Duration = Duration::from_secs(30);

/// One shard: its replicas, the current one, and its error counters by class.
pub(super) struct Shard {
    pub(super) replicas: Vec<Replica>,
    pub(super) current: AtomicUsize,
    pub(super) errors: [IntCounter; 3],
}

/// One replica's client and health.
pub(super) struct Replica {
    pub(super) client: Client,
    /// The URL without credentials or query, for logs and the metric label.
    pub(super) shown: String,
    pub(super) failed_at: Mutex<Option<Instant>>,
    pub(super) healthy: IntGauge,
}

impl Shard {
    /// The replica to use: the current one unless it failed within the cooldown and another one
    /// did not.
    pub(super) fn pick(&self) -> usize {
        let count = self.replicas.len();
        let start = self.current.load(Ordering::Relaxed) % count;
        for step in 0..count {
            let index = (start + step) % count;
            if self.replicas[index].available() {
                if step > 0 {
                    self.current.store(index, Ordering::Relaxed);
                }
                return index;
            }
        }
        start
    }

    pub(super) fn failed(&self, index: usize) {
        let replica = &self.replicas[index];
        *replica.failed_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        replica.healthy.set(0);
        let next = (index + 1) % self.replicas.len();
        // Only the first of several concurrent failures on this replica moves the shard on.
        if next != index && self.current.compare_exchange(index, next, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            tracing::info!(from = %replica.shown, to = %self.replicas[next].shown, "rotating to the next replica");
        }
    }

    pub(super) fn succeeded(&self, index: usize) {
        let replica = &self.replicas[index];
        *replica.failed_at.lock().unwrap_or_else(|e| e.into_inner()) = None;
        replica.healthy.set(1);
    }
}

impl Replica {
    pub(super) fn available(&self) -> bool {
        self.failed_at.lock().unwrap_or_else(|e| e.into_inner()).is_none_or(|at| at.elapsed() >= REPLICA_COOLDOWN)
    }
}
