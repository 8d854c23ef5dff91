//! The per-partition checkpointer: turns out-of-order chunk acks into a contiguous watermark.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Tracks one partition's progress on the pipeline thread that owns the lane (no locks).
///
/// * `processed_through` is the last offset whose record is fully processed: all its rows sit in
///   open buffers or sealed chunks, or it was filtered, skipped, or handed to the dead-letter sink.
/// * `pending` counts, per offset, the live chunks whose first row came from that offset, plus the
///   outstanding dead-letter writes of that offset. An open buffer registers its `first_offset` when
///   it receives its first row; an ack of the chunk sealed from it removes one count.
///
/// The safe watermark is `min(processed_through, min(pending) - 1)`. Why it is safe: a chunk's
/// rows come from records at or after its `first_offset`, so every unacknowledged row of record `o`
/// sits in a chunk whose key is `<= o`; while that chunk is pending the watermark is `< o`. Records
/// are processed in offset order, so everything up to `processed_through` has left the chain.
#[derive(Debug, Default)]
pub(crate) struct Checkpointer {
    processed_through: Option<i64>,
    pending: BTreeMap<i64, u32>,
    /// The last `next_offset` handed to the lane's `store_offset`.
    stored: Option<i64>,
    /// The watermark never passes this: set when an exactly-once lane gives up a partly replayed
    /// batch at a drain (its rows are replayed by the next owner, from its first offset).
    cap: Option<i64>,
    /// Since when the stored offset has stood still with records past it waiting (`None`: none
    /// waits). Read for `etl_checkpoint_watermark_age_seconds`; the clock is read when the
    /// offset is stored and when a record arrives at a settled lane, never per record otherwise.
    waiting_since: Option<Instant>,
}

impl Checkpointer {
    /// A chunk (or dead-letter write) whose first record is `first_offset` is now outstanding.
    pub(crate) fn register(&mut self, first_offset: i64) {
        *self.pending.entry(first_offset).or_insert(0) += 1;
    }

    /// A chunk (or dead-letter write) registered at `first_offset` is durable. Returns false for an
    /// ack nobody registered, which the caller logs: it would be a bug in the runtime.
    pub(crate) fn ack(&mut self, first_offset: i64) -> bool {
        match self.pending.get_mut(&first_offset) {
            Some(count) if *count > 1 => {
                *count -= 1;
                true
            }
            Some(_) => {
                self.pending.remove(&first_offset);
                true
            }
            None => false,
        }
    }

    /// Gives up the open buffer registered at `first_offset` without writing it: the registration
    /// goes, and the watermark stays below `first_offset` for good.
    pub(crate) fn abandon(&mut self, first_offset: i64) {
        self.ack(first_offset);
        let below = first_offset - 1;
        self.cap = Some(self.cap.map_or(below, |c| c.min(below)));
    }

    /// Every row of the record at `offset` has been placed (or the record was dropped).
    pub(crate) fn processed(&mut self, offset: i64) {
        debug_assert!(self.processed_through.is_none_or(|p| p < offset));
        self.processed_through = Some(offset);
        if self.waiting_since.is_none() {
            self.waiting_since = Some(Instant::now());
        }
    }

    /// The last offset whose record is fully processed, if any.
    pub(crate) fn processed_through(&self) -> Option<i64> {
        self.processed_through
    }

    /// The last offset below which everything is done, if any.
    pub(crate) fn watermark(&self) -> Option<i64> {
        let processed = self.processed_through?;
        let watermark = match self.pending.keys().next() {
            Some(&first) => (first - 1).min(processed),
            None => processed,
        };
        Some(self.cap.map_or(watermark, |cap| cap.min(watermark)))
    }

    /// The next offset to store when the watermark moved past the last stored one. The caller stores
    /// it through the lane and then calls [`Checkpointer::mark_stored`].
    pub(crate) fn offset_to_store(&self) -> Option<i64> {
        let next = self.watermark()? + 1;
        match self.stored {
            Some(stored) if stored >= next => None,
            _ => Some(next),
        }
    }

    pub(crate) fn mark_stored(&mut self, next_offset: i64) {
        self.stored = Some(next_offset);
        let waiting = self.processed_through.is_some_and(|p| p >= next_offset);
        self.waiting_since = waiting.then(Instant::now);
    }

    /// How long the stored offset has stood still while records past it wait, at `now`; zero
    /// while none waits. The wait starts when a record arrives at a lane whose records were all
    /// stored, and again each time the offset moves with records still past it.
    pub(crate) fn standing_still(&self, now: Instant) -> Duration {
        self.waiting_since.map_or(Duration::ZERO, |since| now.saturating_duration_since(since))
    }

    /// The last stored `next_offset`.
    pub(crate) fn stored(&self) -> Option<i64> {
        self.stored
    }

    /// True when no chunk or dead-letter write is outstanding.
    pub(crate) fn is_settled(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SHARDS: usize = 3;

    /// What happens after a record in the generated scenario.
    #[derive(Debug, Clone)]
    struct Step {
        /// The shards of the record's rows (empty = filtered or skipped).
        rows: Vec<usize>,
        /// The record fails and goes to the dead-letter sink instead.
        dead_letter: bool,
        /// Which open buffers to seal after the record (bit per shard).
        seal_mask: u8,
        /// How many outstanding chunks to ack now, and which (indexes modulo the outstanding set).
        acks: Vec<usize>,
    }

    fn step() -> impl Strategy<Value = Step> {
        (
            proptest::collection::vec(0..SHARDS, 0..4),
            proptest::bool::weighted(0.1),
            any::<u8>(),
            proptest::collection::vec(any::<usize>(), 0..3),
        )
            .prop_map(|(rows, dead_letter, seal_mask, acks)| Step { rows, dead_letter, seal_mask, acks })
    }

    /// A sealed chunk or dead-letter write: its key and the offsets of its rows.
    struct Outstanding {
        first_offset: i64,
        rows: Vec<i64>,
    }

    /// The model lane: open buffers with their rows' offsets, the outstanding set, and the
    /// checkpointer under test.
    struct Model {
        open: Vec<Vec<i64>>,
        outstanding: Vec<Outstanding>,
        cp: Checkpointer,
        last_stored: Option<i64>,
    }

    impl Model {
        fn seal(&mut self, shard: usize) {
            let rows = std::mem::take(&mut self.open[shard]);
            if let Some(&first_offset) = rows.first() {
                self.outstanding.push(Outstanding { first_offset, rows });
            }
        }

        fn ack(&mut self, index: usize) {
            if self.outstanding.is_empty() {
                return;
            }
            let done = self.outstanding.swap_remove(index % self.outstanding.len());
            assert!(self.cp.ack(done.first_offset));
        }

        /// Stores like the pipeline thread does and checks the safety and monotonicity properties.
        fn store_and_check(&mut self) -> Result<(), TestCaseError> {
            if let Some(next) = self.cp.offset_to_store() {
                prop_assert!(self.last_stored.is_none_or(|s| next > s), "stored offsets must grow");
                self.cp.mark_stored(next);
                self.last_stored = Some(next);
            }
            if let Some(stored) = self.last_stored {
                let unacked = self
                    .open
                    .iter()
                    .flatten()
                    .chain(self.outstanding.iter().flat_map(|o| o.rows.iter()))
                    .copied()
                    .min();
                if let Some(oldest) = unacked {
                    prop_assert!(stored <= oldest, "stored {} passes unacked row of offset {}", stored, oldest);
                }
            }
            Ok(())
        }
    }

    proptest! {
        // Invariant 3: under random rows per record, random chunk sealing, out-of-order acks,
        // filtered records and dead-letter writes, the stored offset never passes an offset with an
        // unacknowledged row, only grows, and reaches the end once everything is acknowledged.
        #[test]
        fn watermark_is_safe_monotonic_and_complete(
            start in 0i64..1_000,
            steps in proptest::collection::vec(step(), 1..120),
        ) {
            let mut model = Model {
                open: vec![Vec::new(); SHARDS],
                outstanding: Vec::new(),
                cp: Checkpointer::default(),
                last_stored: None,
            };
            let last = start + steps.len() as i64 - 1;
            for (i, step) in steps.iter().enumerate() {
                let offset = start + i as i64;
                if step.dead_letter {
                    model.cp.register(offset);
                    model.outstanding.push(Outstanding { first_offset: offset, rows: vec![offset] });
                } else {
                    for &shard in &step.rows {
                        if model.open[shard].is_empty() {
                            model.cp.register(offset);
                        }
                        model.open[shard].push(offset);
                    }
                }
                model.cp.processed(offset);
                for shard in 0..SHARDS {
                    if step.seal_mask & (1 << shard) != 0 {
                        model.seal(shard);
                    }
                }
                for &index in &step.acks {
                    model.ack(index);
                }
                model.store_and_check()?;
            }
            for shard in 0..SHARDS {
                model.seal(shard);
            }
            while !model.outstanding.is_empty() {
                let n = model.outstanding.len();
                model.ack(n / 2);
                model.store_and_check()?;
            }
            model.store_and_check()?;
            prop_assert!(model.cp.is_settled());
            prop_assert_eq!(model.last_stored, Some(last + 1));
        }
    }

    // Invariant 8: an abandoned (partly replayed) batch holds the watermark below its first
    // offset although nothing is pending any more.
    #[test]
    fn an_abandoned_batch_caps_the_watermark() {
        let mut cp = Checkpointer::default();
        cp.register(10);
        cp.register(12);
        cp.processed(15);
        assert!(cp.ack(10));
        cp.abandon(12);
        assert!(cp.is_settled());
        assert_eq!(cp.watermark(), Some(11));
        cp.processed(20);
        assert_eq!(cp.offset_to_store(), Some(12));
    }

    // The watermark's age: zero while nothing waits, growing while an unacknowledged chunk holds
    // the stored offset, and restarting when the offset moves with records still waiting.
    #[test]
    fn the_watermark_age_counts_only_while_records_wait() {
        let mut cp = Checkpointer::default();
        let start = Instant::now();
        assert_eq!(cp.standing_still(start + Duration::from_secs(60)), Duration::ZERO);
        cp.register(0);
        cp.processed(0);
        cp.processed(1);
        assert_eq!(cp.offset_to_store(), Some(0), "the chunk of offset 0 holds the watermark at 0");
        cp.mark_stored(0);
        assert_eq!(cp.offset_to_store(), None);
        let since = cp.waiting_since.expect("records wait");
        assert_eq!(cp.standing_still(since + Duration::from_secs(30)), Duration::from_secs(30));

        // Offset 0's chunk is durable: the offset moves to 2, past everything; nothing waits.
        assert!(cp.ack(0));
        cp.mark_stored(cp.offset_to_store().expect("the watermark moved"));
        assert_eq!(cp.standing_still(since + Duration::from_secs(90)), Duration::ZERO);

        // A record past the stored offset waits again, from when it arrived.
        cp.register(2);
        cp.processed(2);
        let again = cp.waiting_since.expect("a record waits");
        assert!(again >= since);
        assert_eq!(cp.standing_still(again + Duration::from_secs(5)), Duration::from_secs(5));

        // The offset moves but a record past it still waits: the age starts again.
        cp.register(4);
        cp.processed(3);
        cp.processed(4);
        assert!(cp.ack(2));
        cp.mark_stored(cp.offset_to_store().expect("the watermark moved to 4"));
        assert_eq!(cp.stored(), Some(4));
        let moved = cp.waiting_since.expect("offset 4 still waits");
        assert!(moved >= again);
        assert!(cp.standing_still(moved) < Duration::from_secs(1));
    }

    // Invariant 3: an unknown ack is refused instead of silently moving the watermark.
    #[test]
    fn unknown_ack_is_refused() {
        let mut cp = Checkpointer::default();
        cp.register(5);
        cp.processed(5);
        assert!(!cp.ack(4));
        assert_eq!(cp.watermark(), Some(4));
        assert!(cp.ack(5));
        assert_eq!(cp.watermark(), Some(5));
    }
}
