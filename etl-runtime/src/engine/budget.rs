//! The global in-flight byte budget: bytes sealed into chunks and not yet durably written.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::BackpressureConfig;

/// Counts every byte from the moment a chunk is sealed until the sink reports its batch durable.
///
/// It is a pair of atomics shared by the pipeline threads (which acquire) and the sink tasks (which
/// release), so neither side ever waits for the other (Invariant 2). The budget does not refuse an
/// acquisition: it tells the caller that the high watermark is reached and the caller pauses the
/// lane. Because every lane pauses right after the acquisition that reaches the high watermark, and
/// resumes only below the low watermark, in-flight bytes stay below `high + one chunk per lane`
/// (Invariant 7; the argument is in `docs/INVARIANTS.md`).
#[derive(Debug)]
pub(crate) struct Budget {
    inflight: AtomicU64,
    peak: AtomicU64,
    max: u64,
    high: u64,
    low: u64,
}

impl Budget {
    pub(crate) fn new(config: &BackpressureConfig) -> Self {
        let max = config.max_inflight_bytes;
        Budget {
            inflight: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            max,
            high: (max as f64 * config.high_ratio) as u64,
            low: (max as f64 * config.low_ratio) as u64,
        }
    }

    /// Adds `bytes` and returns true when in-flight bytes are now at or above the high watermark.
    pub(crate) fn acquire(&self, bytes: u64) -> bool {
        let now = self.inflight.fetch_add(bytes, Ordering::AcqRel) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
        now >= self.high
    }

    /// Subtracts `bytes` once they are durable (or dropped).
    pub(crate) fn release(&self, bytes: u64) {
        self.inflight.fetch_sub(bytes, Ordering::AcqRel);
    }

    pub(crate) fn inflight(&self) -> u64 {
        self.inflight.load(Ordering::Acquire)
    }

    pub(crate) fn above_high(&self) -> bool {
        self.inflight() >= self.high
    }

    pub(crate) fn below_low(&self) -> bool {
        self.inflight() < self.low
    }

    /// The largest value in-flight bytes ever reached.
    pub(crate) fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    pub(crate) fn max(&self) -> u64 {
        self.max
    }

    #[cfg(test)]
    pub(crate) fn high(&self) -> u64 {
        self.high
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn budget(max: u64) -> Budget {
        Budget::new(&BackpressureConfig {
            max_inflight_bytes: max,
            high_ratio: 0.9,
            low_ratio: 0.5,
            min_pause: Duration::ZERO,
        })
    }

    /// One step of the model schedule: a lane tries to seal a chunk, or the sink releases one.
    #[derive(Debug, Clone)]
    enum Step {
        Seal { lane: usize, bytes: u64 },
        Release { index: usize },
    }

    fn steps(lanes: usize, max_chunk: u64) -> impl Strategy<Value = Vec<Step>> {
        let step = prop_oneof![
            (0..lanes, 1..=max_chunk).prop_map(|(lane, bytes)| Step::Seal { lane, bytes }),
            any::<usize>().prop_map(|index| Step::Release { index }),
        ];
        proptest::collection::vec(step, 1..400)
    }

    proptest! {
        // Invariant 7: a model of the pause protocol around the shared budget. Any interleaving of
        // lanes sealing (acquire, pause when the high watermark is reached, resume only below the
        // low watermark) and the sink releasing keeps in-flight bytes below high + one chunk per lane.
        #[test]
        fn budget_protocol_bounds_inflight_bytes(schedule in steps(4, 1000)) {
            let lanes = 4;
            let max_chunk = 1000;
            let budget = budget(10_000);
            let mut paused = vec![false; lanes];
            let mut live: Vec<u64> = Vec::new();
            for step in schedule {
                match step {
                    Step::Seal { lane, bytes } => {
                        if paused[lane] && budget.below_low() {
                            paused[lane] = false;
                        }
                        if !paused[lane] {
                            if budget.acquire(bytes) {
                                paused[lane] = true;
                            }
                            live.push(bytes);
                        }
                    }
                    Step::Release { index } => {
                        if !live.is_empty() {
                            let bytes = live.swap_remove(index % live.len());
                            budget.release(bytes);
                        }
                    }
                }
                prop_assert!(budget.inflight() < budget.high() + lanes as u64 * max_chunk);
                prop_assert_eq!(budget.inflight(), live.iter().sum::<u64>());
            }
        }
    }

    // Invariant 2: acquisitions and releases from many threads at once never lose an update, so the
    // budget returns to zero once everything acquired is released, and no side ever waits.
    #[test]
    fn concurrent_acquire_release_balances() {
        let budget = std::sync::Arc::new(budget(u64::MAX / 2));
        let (tx, rx) = crossbeam_channel::unbounded::<u64>();
        let producers: Vec<_> = (0..4u64)
            .map(|t| {
                let budget = budget.clone();
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..10_000u64 {
                        let bytes = 1 + (i * 7 + t) % 97;
                        budget.acquire(bytes);
                        tx.send(bytes).unwrap();
                    }
                })
            })
            .collect();
        drop(tx);
        let releaser = {
            let budget = budget.clone();
            std::thread::spawn(move || {
                let mut released = 0u64;
                for bytes in rx {
                    budget.release(bytes);
                    released += bytes;
                }
                released
            })
        };
        for p in producers {
            p.join().unwrap();
        }
        let released = releaser.join().unwrap();
        assert!(released > 0);
        assert_eq!(budget.inflight(), 0);
        assert!(budget.peak() <= released);
    }
}
