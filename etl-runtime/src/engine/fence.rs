//! The hand-over fence of an exactly-once lane: after it closes, no write task records or inserts
//! a batch of the lane.

use std::sync::atomic::{AtomicU64, Ordering};

/// Keeps a lane's former owner from inserting a batch whose span the next owner may not have
/// seen.
///
/// A write task calls [`Fence::enter`] before it records a span and [`Fence::leave`] after; the
/// pipeline thread calls [`Fence::close`] when it removes the lane, before the source hands the
/// partition over (and so before the next owner reads the ledger). Both sides update one atomic
/// word (sequentially consistent). A task inserts its batch only if the fence was open from
/// before it started recording until the span was acknowledged: then the span was durable before
/// the hand-over, the next owner sees it and re-cuts the same batch. A span whose recording
/// overlapped the close may land after the next owner read the ledger; its batch is not inserted
/// (the next owner inserts those rows under its own spans), so a stray span costs nothing.
#[derive(Debug, Default)]
pub(crate) struct Fence {
    state: AtomicU64,
    /// The owner's epoch, recorded with its spans.
    pub(crate) epoch: u64,
}

const CLOSED: u64 = 1 << 63;

impl Fence {
    pub(crate) fn new(epoch: u64) -> Fence {
        Fence { state: AtomicU64::new(0), epoch }
    }

    /// True when the span may be recorded; then [`Fence::leave`] must follow.
    pub(crate) fn enter(&self) -> bool {
        let before = self.state.fetch_add(1, Ordering::SeqCst);
        if before & CLOSED != 0 {
            self.state.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Ends a recording; true when the fence stayed open throughout (the batch may be inserted).
    pub(crate) fn leave(&self) -> bool {
        self.state.fetch_sub(1, Ordering::SeqCst) & CLOSED == 0
    }

    /// True once [`Fence::close`] ran.
    pub(crate) fn is_closed(&self) -> bool {
        self.state.load(Ordering::SeqCst) & CLOSED != 0
    }

    /// Closes the fence; returns how many recordings are in progress.
    pub(crate) fn close(&self) -> u64 {
        self.state.fetch_or(CLOSED, Ordering::SeqCst) & !CLOSED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant 8: a closed fence admits no recording, and closing reports one in progress.
    #[test]
    fn the_fence_orders_recordings_and_the_hand_over() {
        let fence = Fence::new(7);
        assert!(fence.enter());
        assert!(fence.leave(), "a recording before any close may be followed by its insert");
        assert!(fence.enter());
        assert_eq!(fence.close(), 1, "a recording in progress is reported");
        assert!(!fence.leave(), "a recording that overlapped the close must not be followed by its insert");
        assert!(!fence.enter(), "no recording after the close");
        assert_eq!(fence.close(), 0);
    }
}
