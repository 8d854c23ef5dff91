//! The exactly-once half of the handle: a new owner of partitions reads the ledger and gets the
//! replay plan its lanes are positioned and cut with.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use crate::engine::errors::{SinkError, SinkErrorKind};
use crate::engine::handle::PipelineHandle;
use crate::engine::lane::LaneKey;
use crate::engine::ledger::{CONCURRENT_READS, Ledger, Recorded, Replay, all_in_order};

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
    /// checked before every round of claims ([`CONCURRENT_READS`] partitions read at once), so
    /// that an assignment that is over claims nothing more (a claim after the next owner's would
    /// supersede it).
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
        let over = || cancelled() || shared.stopping.load(std::sync::atomic::Ordering::Acquire);
        let Some(read) = read_ledger(&self.inner.runtime, ledger.as_ref(), lanes, deadline, &over)? else {
            return Ok(None);
        };
        let mut plans = Vec::with_capacity(lanes.len());
        for ((lane, watermark), (epoch, recorded)) in lanes.iter().zip(read) {
            let (topic, partition, watermark) = (&*lane.topic, lane.partition, *watermark);
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

/// Claims each lane and reads its recorded spans, [`CONCURRENT_READS`] lanes at a time, and
/// returns `(epoch, spans)` in the order of `lanes`. A lane whose read fails retryably is read
/// again (claiming again) after a backoff, until `deadline`; any other failure, or the deadline,
/// fails the whole read. `Ok(None)` when `over` says so: it is asked before every round of
/// claims, so that an assignment that is over claims nothing more (a claim after the next
/// owner's would supersede it).
fn read_ledger(
    runtime: &tokio::runtime::Handle,
    ledger: &dyn Ledger,
    lanes: &[(LaneKey, Option<i64>)],
    deadline: Instant,
    over: &dyn Fn() -> bool,
) -> Result<Option<Vec<(u64, Recorded)>>, LedgerReadError> {
    let mut read = Vec::with_capacity(lanes.len());
    for group in lanes.chunks(CONCURRENT_READS) {
        let mut results: Vec<Option<(u64, Recorded)>> = vec![None; group.len()];
        let mut pending: Vec<usize> = (0..group.len()).collect();
        let mut backoff = Duration::from_millis(100);
        while !pending.is_empty() {
            if over() {
                return Ok(None);
            }
            let outcomes = runtime.block_on(read_each(ledger, pending.iter().map(|&i| &group[i])));
            let mut again = Vec::new();
            for (i, outcome) in pending.iter().copied().zip(outcomes) {
                let (lane, _) = &group[i];
                match outcome {
                    Ok(done) => results[i] = Some(done),
                    Err(error) if error.kind == SinkErrorKind::Retryable && Instant::now() + backoff < deadline => {
                        tracing::warn!(topic = %lane.topic, partition = lane.partition, %error, retry_in = ?backoff, "reading the exactly-once ledger failed");
                        again.push(i);
                    }
                    Err(error) => return Err(LedgerReadError { lane: lane.clone(), source: error }),
                }
            }
            if !again.is_empty() {
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
            pending = again;
        }
        read.extend(results.into_iter().map(|r| r.expect("every lane of the group was read")));
    }
    Ok(Some(read))
}

type Read<'a> = Pin<Box<dyn Future<Output = Result<(u64, Recorded), SinkError>> + Send + 'a>>;

/// Claims and reads the spans of each lane concurrently; the outcomes in the lanes' order.
async fn read_each<'a>(
    ledger: &'a dyn Ledger,
    lanes: impl Iterator<Item = &'a (LaneKey, Option<i64>)>,
) -> Vec<Result<(u64, Recorded), SinkError>> {
    let reads: Vec<Read<'a>> = lanes
        .map(|(lane, watermark)| {
            Box::pin(async move {
                let epoch = ledger.claim(lane).await?;
                Ok((epoch, ledger.recorded(lane, *watermark).await?))
            }) as Read<'a>
        })
        .collect();
    all_in_order(reads).await
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::engine::ledger::{LedgerFuture, Span};

    /// A ledger whose every call takes a few milliseconds, counting how many claims overlap;
    /// `fail` holds how many more times each partition's spans read fails (retryably, or not when
    /// the count is `u32::MAX`).
    #[derive(Default)]
    struct SlowLedger {
        claims: Mutex<HashMap<i32, u64>>,
        in_flight: AtomicUsize,
        most: AtomicUsize,
        fail: Mutex<HashMap<i32, u32>>,
    }

    impl Ledger for SlowLedger {
        fn highest_epoch<'a>(&'a self, lane: &'a LaneKey) -> LedgerFuture<'a, u64> {
            Box::pin(async move {
                let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                self.most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
                // Each partition's epochs are its own: 100 × partition, plus its claims so far.
                Ok(self.claims.lock().unwrap().get(&lane.partition).copied().unwrap_or(100 * lane.partition as u64))
            })
        }

        fn write_claim<'a>(&'a self, lane: &'a LaneKey, epoch: u64) -> LedgerFuture<'a, ()> {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                self.claims.lock().unwrap().insert(lane.partition, epoch);
                Ok(())
            })
        }

        fn owner<'a>(&'a self, _span: &'a Span) -> LedgerFuture<'a, u64> {
            unreachable!("not asked while recovering")
        }

        fn record<'a>(&'a self, _span: &'a Span, _epoch: u64) -> LedgerFuture<'a, ()> {
            unreachable!("not asked while recovering")
        }

        fn recorded<'a>(&'a self, lane: &'a LaneKey, watermark: Option<i64>) -> LedgerFuture<'a, Recorded> {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                let failing = self.fail.lock().unwrap().get(&lane.partition).copied().unwrap_or(0);
                match failing {
                    0 => {}
                    u32::MAX => return Err(SinkError::fatal("the ledger table is missing")),
                    n => {
                        self.fail.lock().unwrap().insert(lane.partition, n - 1);
                        return Err(SinkError::retryable("connection refused"));
                    }
                }
                let span = Span {
                    topic: lane.topic.clone(),
                    partition: lane.partition,
                    shard: 0,
                    first: watermark.unwrap_or(-1) + 1,
                    last: watermark.unwrap_or(-1) + 10,
                };
                Ok(Recorded { spans: vec![(span, 1)], others: Vec::new() })
            })
        }

        fn token(&self, span: &Span) -> String {
            format!("{span:?}")
        }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap()
    }

    fn lanes(n: i32) -> Vec<(LaneKey, Option<i64>)> {
        (0..n).map(|p| (LaneKey::new("orders", p), Some(i64::from(p) * 1000))).collect()
    }

    fn deadline() -> Instant {
        Instant::now() + Duration::from_secs(30)
    }

    #[test]
    fn an_assignment_claims_its_partitions_sixteen_at_a_time_and_gets_each_its_own_plan() {
        let runtime = runtime();
        let ledger = SlowLedger::default();
        let lanes = lanes(40);
        let read = read_ledger(runtime.handle(), &ledger, &lanes, deadline(), &|| false).unwrap().unwrap();
        // In the lanes' order, each with its own claim and spans.
        assert_eq!(read.len(), 40);
        for ((lane, watermark), (epoch, recorded)) in lanes.iter().zip(&read) {
            assert_eq!(*epoch, 100 * lane.partition as u64 + 1, "partition {}", lane.partition);
            assert_eq!(recorded.spans[0].0.partition, lane.partition);
            assert_eq!(recorded.spans[0].0.first, watermark.unwrap() + 1);
        }
        // A whole group claims at once, and never more than a group.
        assert_eq!(ledger.most.load(Ordering::SeqCst), CONCURRENT_READS);
    }

    #[test]
    fn a_partition_whose_read_fails_retryably_is_read_again_and_a_fatal_failure_names_its_partition() {
        let runtime = runtime();
        let ledger = SlowLedger::default();
        ledger.fail.lock().unwrap().insert(3, 2);
        let lanes = lanes(5);
        let read = read_ledger(runtime.handle(), &ledger, &lanes, deadline(), &|| false).unwrap().unwrap();
        // Claimed three times (two failed reads after their claims), the others once.
        assert_eq!(read[3].0, 303);
        assert_eq!(read[2].0, 201);
        assert_eq!(read[3].1.spans[0].0.partition, 3);

        let ledger = SlowLedger::default();
        ledger.fail.lock().unwrap().insert(2, u32::MAX);
        let error = read_ledger(runtime.handle(), &ledger, &lanes, deadline(), &|| false).unwrap_err();
        assert_eq!(error.lane, LaneKey::new("orders", 2));

        // Past the deadline a retryable failure fails too.
        let ledger = SlowLedger::default();
        ledger.fail.lock().unwrap().insert(1, 1000);
        let soon = Instant::now() + Duration::from_millis(250);
        let error = read_ledger(runtime.handle(), &ledger, &lanes, soon, &|| false).unwrap_err();
        assert_eq!(error.lane, LaneKey::new("orders", 1));
        assert!(error.source.is_retryable());
    }

    #[test]
    fn an_assignment_that_is_over_claims_nothing_more() {
        let runtime = runtime();
        let ledger = SlowLedger::default();
        let lanes = lanes(40);
        // Over after the first group's claims: the other groups claim nothing.
        let asked = AtomicUsize::new(0);
        let over = || asked.fetch_add(1, Ordering::SeqCst) >= 1;
        assert!(read_ledger(runtime.handle(), &ledger, &lanes, deadline(), &over).unwrap().is_none());
        assert_eq!(ledger.claims.lock().unwrap().len(), CONCURRENT_READS);
        // Over from the start: nothing claimed at all.
        let ledger = SlowLedger::default();
        assert!(read_ledger(runtime.handle(), &ledger, &lanes, deadline(), &|| true).unwrap().is_none());
        assert!(ledger.claims.lock().unwrap().is_empty());
    }
}
