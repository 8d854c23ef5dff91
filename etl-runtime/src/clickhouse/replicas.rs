//! Replica rotation: each shard's current replica, the cooldown of one that failed, the probe
//! that tries it again after the cooldown, and the `etl_sink_replica_healthy` gauge.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ::clickhouse::Client;
use prometheus::{IntCounter, IntGauge};

/// How long a replica that failed is passed over while another replica of its shard is available,
/// and how long after a failure it is probed again.
#[cfg(not(test))]
pub(super) const REPLICA_COOLDOWN: Duration = Duration::from_secs(30);
/// Short in unit tests, which wait for cooldowns to end.
#[cfg(test)]
pub(super) const REPLICA_COOLDOWN: Duration = Duration::from_millis(300);

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
    /// A probe of this replica is running.
    pub(super) probing: AtomicBool,
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
        let was = replica.failed_at.lock().unwrap_or_else(|e| e.into_inner()).take();
        replica.healthy.set(1);
        if was.is_some() {
            tracing::info!(replica = %replica.shown, "the replica answers again");
        }
    }

    /// The replicas other than `current` whose cooldown is over and that no probe tries yet;
    /// each is marked as being probed.
    fn due_for_probe(&self, current: usize) -> Vec<usize> {
        (0..self.replicas.len())
            .filter(|&index| index != current)
            .filter(|&index| {
                let replica = &self.replicas[index];
                let due = replica
                    .failed_at
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .is_some_and(|at| at.elapsed() >= REPLICA_COOLDOWN);
                due && !replica.probing.swap(true, Ordering::AcqRel)
            })
            .collect()
    }
}

/// Tries again, with the probe query (`probe_query`) bounded by `timeout`, every replica of
/// `shard` but `current`
/// whose cooldown is over: one that answers is healthy again (gauge 1, and a candidate when the
/// current replica fails); one that does not starts a new cooldown. The probes run as their own
/// tasks, so an insert never waits for a hung replica it does not write to.
pub(super) fn probe_recovered(
    shards: &Arc<Vec<Shard>>,
    probe: &Arc<str>,
    shard: usize,
    current: usize,
    timeout: Duration,
) {
    for index in shards[shard].due_for_probe(current) {
        let (shards, probe) = (shards.clone(), probe.clone());
        tokio::spawn(async move {
            let state = &shards[shard];
            let replica = &state.replicas[index];
            // Cleared however the task ends (also when its runtime drops it midway).
            let _probing = Probing(&replica.probing);
            let answer = tokio::time::timeout(timeout, replica.client.query(&probe).execute()).await;
            match answer {
                Ok(Ok(())) => state.succeeded(index),
                Ok(Err(error)) => {
                    tracing::debug!(replica = %replica.shown, %error, "the replica still fails");
                    *replica.failed_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
                }
                Err(_) => {
                    tracing::debug!(replica = %replica.shown, ?timeout, "the replica still does not answer");
                    *replica.failed_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
                }
            }
        });
    }
}

/// How often the replicas of every shard are looked at for probes due, whether or not anything
/// is inserted (`probe_while_idle`).
const IDLE_PROBE_EVERY: Duration = Duration::from_millis(REPLICA_COOLDOWN.as_millis() as u64 / 3);

/// Probes the failed replicas of every shard when their cooldown is over, also while no insert
/// comes (a pipeline that has caught up, or a shard no row goes to): otherwise a replica that came
/// back would stay `etl_sink_replica_healthy` 0 until the next insert on its shard, and an alert
/// on the gauge would fire for a replica that is fine. Runs on the caller's tokio runtime until
/// the sink is dropped (it holds the shards weakly) or the runtime ends.
pub(super) fn probe_while_idle(shards: &Arc<Vec<Shard>>, probe: &Arc<str>, timeout: Duration) {
    let (shards, probe) = (Arc::downgrade(shards), probe.clone());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(IDLE_PROBE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(shards) = shards.upgrade() else { return };
            for shard in 0..shards.len() {
                let current = shards[shard].current.load(Ordering::Relaxed) % shards[shard].replicas.len();
                probe_recovered(&shards, &probe, shard, current, timeout);
            }
        }
    });
}

/// The probe query of a table: it fails on a replica that cannot take inserts into it (a
/// replicated table in read-only mode, its Keeper session lost), where `SELECT 1` would pass.
pub(super) fn probe_query(database: &str, table: &str) -> String {
    let quote = |s: &str| s.replace('\\', "\\\\").replace('\'', "\\'");
    format!(
        "SELECT throwIf(count() > 0, 'the replica is read-only') FROM system.replicas \
         WHERE database = '{}' AND table = '{}' AND is_readonly",
        quote(database),
        quote(table)
    )
}

/// Clears a replica's probing flag when dropped.
struct Probing<'a>(&'a AtomicBool);

impl Drop for Probing<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Replica {
    pub(super) fn available(&self) -> bool {
        self.failed_at.lock().unwrap_or_else(|e| e.into_inner()).is_none_or(|at| at.elapsed() >= REPLICA_COOLDOWN)
    }
}
