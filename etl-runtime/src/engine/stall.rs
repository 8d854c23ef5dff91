//! The stall watchdog (Invariant 9): a lane whose source holds records for it but does not deliver
//! them, while nothing on the pipeline's side holds the lane back, is found, recovered once, and
//! stops the pipeline if that did not help.
//!
//! Each pipeline thread samples every lane it owns once a second ([`StallWatch::observe`]). A
//! sample counts towards a stall when the lane is free (not paused by backpressure or a held
//! record, no chunk waiting for its queue, not draining), its source is reachable, and the source
//! reports records past the lane's position (or cannot say yet: nothing was ever fetched). Any
//! other sample ends the window. A lane is stalled when such samples span `stall_timeout`
//! without a break, its lag did not shrink from the first of them to the last, and in at least
//! nine in ten of them its last poll found nothing to take: the source is not delivering. The last
//! condition keeps a lane that is merely slower than its producer (its queue always holds records:
//! the pipeline is the limit, not the source) from ever being called stalled; a lane that catches
//! up, however slowly, is not stalled either, since its lag shrinks.
//!
//! The first verdict recovers the lane: the source restarts its fetch at the lane's next record.
//! If a whole window after that ends in the same verdict, the pipeline stops with a fatal error
//! (exit 1), storing nothing past durable data, so that the orchestrator starts it afresh. A
//! stalled lane whose window ends otherwise, or whose lag reaches zero, is healthy again.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::engine::lane::Backlog;

/// One sample of a lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sample {
    /// Nothing on the pipeline's side holds the lane back.
    pub(crate) free: bool,
    pub(crate) backlog: Backlog,
    /// The lane's last poll found nothing to take.
    pub(crate) starved: bool,
}

/// What the watchdog decided at a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing to do.
    Fine,
    /// The lane stalled: recover it (restart its fetch) and count it as stalled.
    Stalled,
    /// The lane stalled again a whole window after its recovery: stop the pipeline.
    StillStalled,
    /// A stalled lane is healthy again.
    Recovered,
}

/// The share of a window's samples whose last poll found nothing, at or above which the source is
/// not delivering: nine in ten.
const STARVED_NUMERATOR: usize = 9;
const STARVED_DENOMINATOR: usize = 10;

/// The most samples a window keeps.
const WINDOW_SAMPLES: u32 = 60;

/// One lane's watch: the samples of the last `timeout` that count towards a stall (a window that
/// slides one sample at a time), and whether the lane is stalled now.
#[derive(Debug)]
pub(crate) struct StallWatch {
    timeout: Duration,
    /// Since when every sample counted towards a stall.
    since: Option<Instant>,
    /// The window: per sample, its time, whether the lane was starved, and its lag (`None` while
    /// nothing was fetched).
    samples: VecDeque<(Instant, bool, Option<i64>)>,
    stalled: bool,
}

impl StallWatch {
    /// A watch with `timeout` (`source.kafka.stall_timeout`); zero never reports a stall.
    pub(crate) fn new(timeout: Duration) -> Self {
        StallWatch { timeout, since: None, samples: VecDeque::new(), stalled: false }
    }

    /// Whether the lane is stalled now (counted in `etl_source_stalled_partitions`).
    pub(crate) fn is_stalled(&self) -> bool {
        self.stalled
    }

    /// Takes one sample at `now` and says what to do.
    pub(crate) fn observe(&mut self, now: Instant, sample: Sample) -> Verdict {
        if self.timeout.is_zero() || sample.backlog == Backlog::Untracked {
            return Verdict::Fine;
        }
        let lag = match sample.backlog {
            Backlog::Records(n) if n <= 0 => {
                // Caught up: whatever happened, the source delivered everything.
                self.reset();
                return self.healthy();
            }
            Backlog::Records(n) => Some(n),
            Backlog::Unknown => None,
            Backlog::SourceDown | Backlog::Untracked => {
                self.reset();
                return Verdict::Fine;
            }
        };
        if !sample.free {
            // The pipeline holds the lane back: no verdict either way while it does.
            self.reset();
            return Verdict::Fine;
        }
        let since = *self.since.get_or_insert(now);
        // At most `WINDOW_SAMPLES` samples a window: a long timeout is sampled more sparsely, so
        // that the watch of each lane stays small whatever the timeout.
        let spacing = self.timeout / WINDOW_SAMPLES;
        if self.samples.back().is_some_and(|&(at, ..)| now.duration_since(at) < spacing) {
            return Verdict::Fine;
        }
        self.samples.push_back((now, sample.starved, lag));
        while self.samples.front().is_some_and(|&(at, ..)| now.duration_since(at) > self.timeout) {
            self.samples.pop_front();
        }
        if now.duration_since(since) < self.timeout {
            return Verdict::Fine;
        }
        let starved = self.samples.iter().filter(|(_, starved, _)| *starved).count();
        let not_delivering = starved * STARVED_DENOMINATOR >= self.samples.len() * STARVED_NUMERATOR;
        let lag_at_start = self.samples.front().and_then(|&(.., lag)| lag);
        let not_shrunk = match (lag_at_start, lag) {
            (Some(start), Some(now)) => now >= start,
            // Still nothing fetched after a whole window.
            (None, None) => true,
            // The first fetch answered during the window: the source moves.
            (None, Some(_)) => false,
            (Some(_), None) => true,
        };
        match (not_delivering && not_shrunk, self.stalled) {
            (true, stalled) => {
                // A verdict of stalled ends the window: the next one, after the recovery, starts
                // with the next sample.
                self.reset();
                self.stalled = true;
                if stalled { Verdict::StillStalled } else { Verdict::Stalled }
            }
            // The window slides on: the next sample drops its oldest one.
            (false, _) => self.healthy(),
        }
    }

    fn reset(&mut self) {
        self.since = None;
        self.samples.clear();
    }

    fn healthy(&mut self) -> Verdict {
        if std::mem::take(&mut self.stalled) { Verdict::Recovered } else { Verdict::Fine }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(10);

    fn sample(free: bool, backlog: Backlog, starved: bool) -> Sample {
        Sample { free, backlog, starved }
    }

    /// Feeds one sample a second and returns the verdicts.
    fn run(watch: &mut StallWatch, start: Instant, samples: &[Sample]) -> Vec<Verdict> {
        samples.iter().enumerate().map(|(i, &s)| watch.observe(start + Duration::from_secs(i as u64), s)).collect()
    }

    #[test]
    fn a_partition_never_fetched_stalls_then_stops_the_pipeline() {
        let mut watch = StallWatch::new(TIMEOUT);
        let verdicts = run(&mut watch, Instant::now(), &[sample(true, Backlog::Unknown, true); 23]);
        // Samples 0..=10 span the timeout: the verdict at 10, then a whole window after it at 21.
        assert_eq!(verdicts.iter().position(|&v| v == Verdict::Stalled), Some(10));
        assert_eq!(verdicts.iter().position(|&v| v == Verdict::StillStalled), Some(21));
        assert!(watch.is_stalled());
    }

    #[test]
    fn a_crawl_whose_lag_grows_stalls_and_recovers_once_it_catches_up() {
        let mut watch = StallWatch::new(TIMEOUT);
        let start = Instant::now();
        let growing: Vec<Sample> = (0..11).map(|i| sample(true, Backlog::Records(1000 + i * 10), i % 4 != 0)).collect();
        assert_eq!(run(&mut watch, start, &growing).last(), Some(&Verdict::Fine), "one sample in four had records");
        let mut watch = StallWatch::new(TIMEOUT);
        let growing: Vec<Sample> = (0..11).map(|i| sample(true, Backlog::Records(1000 + i * 10), i != 3)).collect();
        assert_eq!(run(&mut watch, start, &growing).last(), Some(&Verdict::Stalled));
        assert_eq!(
            watch.observe(start + Duration::from_secs(12), sample(true, Backlog::Records(0), true)),
            Verdict::Recovered
        );
        assert!(!watch.is_stalled());
    }

    #[test]
    fn an_outage_or_zero_timeout_is_never_a_stall() {
        let mut watch = StallWatch::new(TIMEOUT);
        assert!(
            run(&mut watch, Instant::now(), &[sample(true, Backlog::SourceDown, true); 40])
                .iter()
                .all(|&v| v == Verdict::Fine)
        );
        let mut watch = StallWatch::new(Duration::ZERO);
        assert!(
            run(&mut watch, Instant::now(), &[sample(true, Backlog::Unknown, true); 40])
                .iter()
                .all(|&v| v == Verdict::Fine)
        );
    }

    /// What one second of a lane can look like.
    fn any_sample() -> impl Strategy<Value = Sample> {
        let backlog = prop_oneof![
            Just(Backlog::SourceDown),
            Just(Backlog::Unknown),
            (-5i64..5).prop_map(Backlog::Records),
            (1000i64..1010).prop_map(Backlog::Records),
        ];
        (prop::bool::weighted(0.9), backlog, prop::bool::weighted(0.8)).prop_map(|(free, backlog, starved)| Sample {
            free,
            backlog,
            starved,
        })
    }

    proptest! {
        /// Invariant 9, the watchdog's half: a lane is declared stalled only after `stall_timeout`
        /// of samples that are all free, all with records (or an unknown end) at the source, at
        /// least nine in ten of them starved, and a lag no smaller at the end than at the start;
        /// and the pipeline is stopped only by a second such window after the first.
        #[test]
        fn a_stall_is_declared_only_after_a_whole_window_that_shows_one(
            samples in proptest::collection::vec(any_sample(), 0..80),
        ) {
            let mut watch = StallWatch::new(TIMEOUT);
            let start = Instant::now();
            let mut stalls = 0;
            for (i, &s) in samples.iter().enumerate() {
                let verdict = watch.observe(start + Duration::from_secs(i as u64), s);
                if matches!(verdict, Verdict::Stalled | Verdict::StillStalled) {
                    // The window: the samples of the last `TIMEOUT`, back to a break.
                    let window: Vec<&Sample> = samples[..=i].iter().rev().take(TIMEOUT.as_secs() as usize + 1).collect();
                    prop_assert_eq!(window.len(), TIMEOUT.as_secs() as usize + 1, "a window spans the timeout");
                    for s in &window {
                        prop_assert!(s.free, "a sample held back by the pipeline is in the window");
                        prop_assert!(matches!(s.backlog, Backlog::Unknown | Backlog::Records(1..)), "{:?} in the window", s.backlog);
                    }
                    let starved = window.iter().filter(|s| s.starved).count();
                    prop_assert!(starved * 10 >= window.len() * 9, "only {starved} of {} starved", window.len());
                    let lag = |s: &Sample| match s.backlog { Backlog::Records(n) => Some(n), _ => None };
                    match (lag(window[window.len() - 1]), lag(window[0])) {
                        (Some(first), Some(last)) => prop_assert!(last >= first, "the lag shrank from {first} to {last}"),
                        (None, Some(_)) => prop_assert!(false, "the first fetch answered during the window"),
                        _ => {}
                    }
                    if verdict == Verdict::StillStalled {
                        prop_assert!(stalls > 0, "stopped without a recovery first");
                    }
                    stalls += 1;
                }
            }
        }
    }
}
