//! The exactly-once contract between a sink, a source and the runtime
//! (`sink.clickhouse.exactly_once`): batch spans, the ledger that makes them durable before their
//! insert (the `Ledger` trait; the ClickHouse sink's is `clickhouse/ledger_table.rs`), and the
//! replay plan a new owner of a partition re-cuts batches with. The delivery that acts on them is
//! `engine::delivery::exactly_once`; the hand-over fence is `engine::fence`.
//!
//! docs/adr/0001-exactly-once.md explains the design; in short: every batch holds the rows of one
//! partition for one shard, its span `(partition, shard, first offset, last offset)` is written to
//! the ledger before the batch is inserted, and its deduplication token is derived from the span
//! and the config hash. After a crash or a rebalance the new owner starts reading at
//! `min(committed, first offset of any recorded span above the committed offset)` and cuts the
//! replayed records at the recorded spans again, so each replayed batch carries the token it had:
//! ClickHouse drops the repeat.
//!
//! Every owner of a partition (each assignment of it, in any process) has an epoch, higher than
//! every earlier owner's: it claims it in the ledger before it reads the spans. Spans carry the
//! epoch of the owner that recorded them. A former owner's span can land after the next owner read
//! the ledger (its recording was in flight at the hand-over, see `engine::fence::Fence`); its batch is never
//! inserted, but the owner after next sees it overlapping the spans the next owner cut. Overlaps
//! are resolved for the higher epoch, which is always the span that may have been inserted.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::engine::errors::SinkError;
use crate::engine::lane::LaneKey;

/// The identity of one exactly-once batch: the rows of the records `first..=last` of `topic`'s
/// `partition` that go to `shard`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Span {
    /// The source topic.
    pub topic: Arc<str>,
    /// The source partition.
    pub partition: i32,
    /// The sink shard.
    pub shard: usize,
    /// The offset of the batch's first record.
    pub first: i64,
    /// The offset of the batch's last record.
    pub last: i64,
}

/// The spans recorded for one partition above its committed offset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recorded {
    /// Spans recorded under the running configuration, each with the highest epoch of the owners
    /// that recorded it: those above the watermark, and every span that may overlap one of them
    /// (needed to resolve overlaps, see [`Replay::new`]).
    pub spans: Vec<(Span, u64)>,
    /// Spans recorded under other config hashes in the same range, with their highest epochs:
    /// never replayed (their tokens are not this configuration's), but a current span they
    /// overlap with a higher epoch is not replayed either (see [`Replay::new`]).
    pub others: Vec<(Span, u64)>,
}

impl Recorded {
    /// How many spans of other config hashes lie above `watermark`: their rows cannot be re-cut
    /// under the same tokens, so they are inserted again (at-least-once for them).
    pub fn other_config_above(&self, watermark: Option<i64>) -> usize {
        self.others.iter().filter(|(span, _)| watermark.is_none_or(|w| span.last > w)).count()
    }
}

/// A boxed future, so that [`Ledger`] stays object safe.
pub type LedgerFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, SinkError>> + Send + 'a>>;

/// How many partitions read the ledger at once: a new owner's claims and spans (the assignment
/// callback waits for all of them) and `offsets show`'s newest spans. One partition after another,
/// 64 partitions kept the exactly-once flagship's first assignment 2.4 s longer than
/// at-least-once on the local ClickHouse (docs/BENCHMARKS.md, "64 partitions and exactly-once,
/// again"), and a ClickHouse farther away multiplies that by its round trip. Sixteen at once keeps
/// the burst of small queries on each shard modest.
pub(crate) const CONCURRENT_READS: usize = 16;

/// Runs `futures` concurrently on the calling task, each to completion; their outputs in the
/// futures' order. (A join for a handful of small ledger reads, without a dependency for it.)
pub(crate) async fn all_in_order<'a, T>(mut futures: Vec<Pin<Box<dyn Future<Output = T> + Send + 'a>>>) -> Vec<T> {
    let mut outputs: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut waiting = false;
        for (future, output) in futures.iter_mut().zip(&mut outputs) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(done) => *output = Some(done),
                    std::task::Poll::Pending => waiting = true,
                }
            }
        }
        if waiting { std::task::Poll::Pending } else { std::task::Poll::Ready(()) }
    })
    .await;
    outputs.into_iter().map(|o| o.expect("polled to completion")).collect()
}

/// Where batch spans are made durable before their insert (for ClickHouse: a small table on each
/// shard). Implemented by sinks that support exactly-once.
pub trait Ledger: Send + Sync + 'static {
    /// The highest epoch recorded for `lane` (claims and spans of every config hash), 0 when none.
    fn highest_epoch<'a>(&'a self, lane: &'a LaneKey) -> LedgerFuture<'a, u64>;

    /// Makes `epoch` the claim of `lane`'s new owner, durably.
    fn write_claim<'a>(&'a self, lane: &'a LaneKey, epoch: u64) -> LedgerFuture<'a, ()>;

    /// Claims `lane` for a new owner: makes an epoch higher than every epoch recorded for the
    /// lane durable, and returns it. Called before [`Ledger::recorded`]. A ledger made of
    /// several (one per output table) claims one epoch above all of theirs in each.
    fn claim<'a>(&'a self, lane: &'a LaneKey) -> LedgerFuture<'a, u64> {
        Box::pin(async move {
            let epoch = self.highest_epoch(lane).await? + 1;
            self.write_claim(lane, epoch).await?;
            Ok(epoch)
        })
    }

    /// The epoch of the partition's newest owner: the highest one claimed. A batch's write checks
    /// it after recording its span and before its insert; a higher epoch than its own means this
    /// member was cut off from the group without noticing (frozen past `session.timeout.ms`, say)
    /// and a newer owner has taken the partition over, so the batch is dropped (Invariant 8).
    ///
    /// It is asked for the lane and slot of `span`, the batch about to be inserted: the claims a
    /// batch is checked against live beside its span, so a table that is down delays only its
    /// own batches.
    fn owner<'a>(&'a self, span: &'a Span) -> LedgerFuture<'a, u64>;

    /// Makes `span`, recorded by the owner of `epoch`, durable. Called before the batch's insert,
    /// retried until it succeeded; must be idempotent.
    fn record<'a>(&'a self, span: &'a Span, epoch: u64) -> LedgerFuture<'a, ()>;

    /// The spans of `lane` whose last offset is above `watermark` (all of them when `None`).
    fn recorded<'a>(&'a self, lane: &'a LaneKey, watermark: Option<i64>) -> LedgerFuture<'a, Recorded>;

    /// The deduplication token of the batch with `span`: the same in every process that runs the
    /// same configuration, different under another config hash, and different after an operator
    /// retired the lane's spans ([`Ledger::retire`]): the ledger reads the lane's newest
    /// retirement in [`Ledger::recorded`], which every owner calls before it cuts a batch.
    fn token(&self, span: &Span) -> String;

    /// Retires every span recorded for `lane` so far, for a rewind that must insert the records
    /// again (`offsets reset --reingest`): a later owner's [`Ledger::recorded`] leaves them out,
    /// and the tokens of the batches it cuts differ from every earlier token, so ClickHouse does
    /// not drop them as repeats. `epoch` was just claimed ([`Ledger::claim`]), so a member still
    /// writing under an older claim is superseded. Idempotent per epoch.
    fn retire<'a>(&'a self, lane: &'a LaneKey, epoch: u64) -> LedgerFuture<'a, ()> {
        let _ = (lane, epoch);
        Box::pin(async { Err(SinkError::fatal("this sink's ledger cannot retire recorded batches")) })
    }

    /// The newest span recorded for `lane` on each table and shard, for `offsets show`.
    fn newest<'a>(&'a self, lane: &'a LaneKey) -> LedgerFuture<'a, Vec<Newest>> {
        let _ = lane;
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// The newest recorded span of a partition on one table and shard ([`Ledger::newest`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Newest {
    /// The table, `database.table`.
    pub table: String,
    /// The shard of that table.
    pub shard: usize,
    /// The batch's first offset.
    pub first: i64,
    /// The batch's last offset.
    pub last: i64,
    /// The epoch of the owner that recorded it.
    pub epoch: u64,
    /// Whether an operator retired it (and every span before it) for a re-ingest.
    pub retired: bool,
}

/// How the new owner of a partition replays it: where to start, which offsets are durable
/// already, and where each shard's recorded batches begin and end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replay {
    /// The committed offset minus one: every row of a record at or below it is durable.
    pub watermark: Option<i64>,
    /// Per shard, the recorded spans above the watermark as `(first, last)`, in offset order,
    /// without overlaps.
    pub spans: Vec<VecDeque<(i64, i64)>>,
    /// The epoch this owner claimed; its spans are recorded with it.
    pub epoch: u64,
}

/// What the new owner does with a row of the record at some offset, for one shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// The row belongs to the recorded batch `(first, last)`.
    Recorded(i64, i64),
    /// The row is durable already (its record is at or below the watermark, outside any recorded
    /// batch of this shard): drop it.
    Durable,
    /// A row no batch has held yet.
    New,
}

impl Replay {
    /// The plan for a partition with `shards` shards, from the committed offset's `watermark`, the
    /// spans recorded around it with their owners' epochs, and the epoch just claimed.
    ///
    /// A span overlapped by a span of a higher epoch (other boundaries) is dropped: its batch was
    /// never inserted. Why: the owner that inserted a span recorded it first, and before its
    /// hand-over (the fence, `engine::fence::Fence`); every later owner read it, so none of them cut a span that
    /// overlaps it, unless it dropped it for overlapping a span of a still higher epoch, which by
    /// the same argument cannot exist. The spans kept do not overlap. Only then are spans at or
    /// below the watermark left out: a span below it can still be the one that shows that a span
    /// above it is stray.
    ///
    /// A span of another config hash with a higher epoch also rules a current span out: it does
    /// not prove the span stray (an owner of another configuration cuts regardless), but
    /// replaying the span could insert again rows at or below the watermark that the other
    /// configuration inserted; leaving it out re-inserts only rows above the watermark, the
    /// at-least-once window a configuration change already has.
    pub fn new(shards: usize, watermark: Option<i64>, recorded: &Recorded, epoch: u64) -> Replay {
        let highest = |spans: &[(Span, u64)]| {
            let mut by_shard: Vec<BTreeMap<(i64, i64), u64>> = vec![BTreeMap::new(); shards];
            for (span, epoch) in spans {
                if span.shard < shards && span.first >= 0 {
                    let highest = by_shard[span.shard].entry((span.first, span.last)).or_insert(*epoch);
                    *highest = (*highest).max(*epoch);
                }
            }
            by_shard
        };
        let others = highest(&recorded.others);
        let spans = highest(&recorded.spans)
            .into_iter()
            .zip(others)
            .map(|(all, others)| {
                let overlapped = |(first, last): (i64, i64), epoch: u64| {
                    all.iter().any(|(&(f, l), &e)| e > epoch && (f, l) != (first, last) && f <= last && first <= l)
                        || others.iter().any(|(&(f, l), &e)| e > epoch && f <= last && first <= l)
                };
                all.iter()
                    .filter(|&(&span, &e)| !overlapped(span, e))
                    .map(|(&span, _)| span)
                    .filter(|&(_, last)| watermark.is_none_or(|w| last > w))
                    .collect()
            })
            .collect();
        Replay { watermark, spans, epoch }
    }

    /// The offset to start reading at: `min(watermark + 1, first offset of every recorded span)`,
    /// or `None` (nothing committed, nothing recorded: the source's reset policy decides).
    pub fn start(&self) -> Option<i64> {
        let first = self.spans.iter().filter_map(|s| s.front().map(|&(first, _)| first)).min();
        match (self.watermark.map(|w| w + 1), first) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The number of recorded spans still to replay.
    pub fn pending(&self) -> usize {
        self.spans.iter().map(VecDeque::len).sum()
    }

    /// Where a row of the record at `offset` goes on `shard`. Spans that end before `offset`
    /// are passed (records arrive in offset order).
    pub(crate) fn cut(&mut self, shard: usize, offset: i64) -> Cut {
        match self.next(shard, offset) {
            Some((first, last)) if first <= offset => Cut::Recorded(first, last),
            _ if self.watermark.is_some_and(|w| offset <= w) => Cut::Durable,
            _ => Cut::New,
        }
    }

    /// The first offset of the next recorded span of `shard` that ends at or after `offset`.
    pub(crate) fn next_first(&mut self, shard: usize, offset: i64) -> Option<i64> {
        self.next(shard, offset).map(|(first, _)| first)
    }

    /// The first span of `shard` that ends at or after `offset`; the ones before it are passed
    /// for good (records arrive in offset order), so each is looked at once per record at most.
    fn next(&mut self, shard: usize, offset: i64) -> Option<(i64, i64)> {
        let spans = &mut self.spans[shard];
        while spans.front().is_some_and(|&(_, last)| last < offset) {
            spans.pop_front();
        }
        spans.front().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `all_in_order` runs its futures at once and gives their outputs in their order, whatever
    /// order they finish in: the later a future is, the sooner it finishes here.
    #[tokio::test]
    async fn all_in_order_runs_the_futures_together_and_keeps_their_order() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::time::Duration;
        let (running, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let futures: Vec<Pin<Box<dyn Future<Output = usize> + Send + '_>>> = (0..5usize)
            .map(|i| {
                let (running, most) = (&running, &most);
                Box::pin(async move {
                    most.fetch_max(running.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5 * (5 - i as u64))).await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    i
                }) as Pin<Box<dyn Future<Output = usize> + Send + '_>>
            })
            .collect();
        assert_eq!(all_in_order(futures).await, vec![0, 1, 2, 3, 4]);
        assert_eq!(most.load(Ordering::SeqCst), 5, "all five were under way at once");
    }

    fn current(spans: &[(Span, u64)]) -> Recorded {
        Recorded { spans: spans.to_vec(), ..Recorded::default() }
    }

    fn span(shard: usize, first: i64, last: i64) -> (Span, u64) {
        (Span { topic: "t".into(), partition: 0, shard, first, last }, 1)
    }

    // Invariant 8: the replay starts at the lowest unfinished batch, whole, and never below it.
    #[test]
    fn replay_starts_at_the_first_recorded_span_above_the_watermark() {
        let recorded = [span(0, 100, 200), span(1, 150, 260), span(0, 201, 300), span(1, 10, 90)];
        let replay = Replay::new(2, Some(160), &current(&recorded), 2);
        // (10, 90) ends below the watermark: durable, not replayed.
        assert_eq!(replay.pending(), 3);
        assert_eq!(replay.start(), Some(100));
        assert_eq!(Replay::new(2, Some(400), &current(&recorded), 2).start(), Some(401));
        assert_eq!(Replay::new(2, None, &current(&recorded), 2).start(), Some(10));
        assert_eq!(Replay::new(2, None, &current(&[]), 2).start(), None);
    }

    // Invariant 8: a former owner's span that landed after the next owner read the ledger (so it
    // overlaps that owner's spans, and its batch was never inserted) gives way to the later epoch.
    #[test]
    fn overlapping_spans_resolve_for_the_later_owner() {
        let at = |shard, first, last, epoch| (Span { topic: "t".into(), partition: 0, shard, first, last }, epoch);
        let recorded = [
            at(0, 100, 200, 1), // owner 1, durable before the hand-over
            at(0, 201, 300, 1), // owner 1's stray span
            at(0, 201, 250, 2), // owner 2 cut these records after reading the ledger
            at(0, 251, 320, 2),
            at(0, 100, 200, 2), // owner 2 replayed owner 1's batch: the same span
            at(1, 150, 170, 1),
        ];
        let replay = Replay::new(2, Some(99), &current(&recorded), 3);
        assert_eq!(replay.spans[0], VecDeque::from([(100, 200), (201, 250), (251, 320)]));
        assert_eq!(replay.spans[1], VecDeque::from([(150, 170)]));
        assert_eq!(replay.epoch, 3);

        // A stray span that crosses the watermark: owner 2 inserted (201, 260) and committed up
        // to 264. The stray (201, 300) of owner 1 is still shown stray by the span below the
        // watermark, so nothing is replayed from 201.
        let crossing = [at(0, 201, 300, 1), at(0, 201, 260, 2)];
        let replay = Replay::new(1, Some(264), &current(&crossing), 3);
        assert_eq!(replay.pending(), 0);
        assert_eq!(replay.start(), Some(265));

        // Strays of strays: owner 1's (10, 20) is overlapped by owner 2's stray (15, 30), which
        // owner 3's (25, 40) overlaps. Both strays go, whether or not (10, 20) overlaps (25, 40).
        let chain = [at(0, 10, 20, 1), at(0, 15, 30, 2), at(0, 25, 40, 3)];
        assert_eq!(Replay::new(1, None, &current(&chain), 4).spans[0], VecDeque::from([(25, 40)]));

        // The same span recorded again by a later owner counts with its highest epoch: owner 2's
        // stray (15, 30) gives way to (10, 20), which owner 3 re-inserted.
        let again = [at(0, 10, 20, 1), at(0, 15, 30, 2), at(0, 10, 20, 3)];
        assert_eq!(Replay::new(1, None, &current(&again), 4).spans[0], VecDeque::from([(10, 20)]));

        // Configuration A's stray (10, 30), then configuration B inserted (10, 20) and committed
        // up to 20, then A again: A's span is not replayed (that would insert 10..20 twice);
        // 21..30 are new rows, inserted once more only if the stray was not stray after all.
        let mut switched = current(&[at(0, 10, 30, 1)]);
        switched.others = vec![at(0, 10, 20, 2)];
        let replay = Replay::new(1, Some(20), &switched, 3);
        assert_eq!((replay.pending(), replay.start()), (0, Some(21)));
    }

    // Invariant 8: rows of recorded spans keep their span; rows at or below the watermark outside
    // any span of their shard are durable; the rest are new.
    #[test]
    fn rows_are_cut_at_the_recorded_spans() {
        let mut replay = Replay::new(2, Some(160), &current(&[span(0, 100, 200), span(1, 150, 260)]), 2);
        assert_eq!(replay.cut(0, 100), Cut::Recorded(100, 200));
        assert_eq!(replay.cut(1, 120), Cut::Durable);
        assert_eq!(replay.cut(1, 155), Cut::Recorded(150, 260));
        assert_eq!(replay.next_first(1, 155), Some(150));
        assert_eq!(replay.cut(0, 201), Cut::New);
        assert_eq!(replay.cut(1, 261), Cut::New);
        assert_eq!(replay.pending(), 0);
    }
}
