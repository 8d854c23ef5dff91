//! Test-only kill points in the exactly-once write path (`ETL_FAULT`), compiled to nothing
//! without the `fault-injection` feature.

#[cfg(feature = "fault-injection")]
use std::sync::atomic::{AtomicU64, Ordering};

/// A place in the exactly-once write path where the tests kill the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FaultPoint {
    /// The span is in the ledger; the insert was not sent.
    SpanRecorded,
    /// The insert was acknowledged; the chunks' acks (and so the offsets) were not.
    InsertAcked,
}

/// Without the `fault-injection` feature (every production build) there is no fault point.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn fault(_point: FaultPoint) {}

/// SIGKILLs the process at the `n`-th passage through `point` when `ETL_FAULT=<point>:<n>` is set
/// (`span_recorded` or `insert_acked`). Compiled only with the `fault-injection` feature, which
/// the end-to-end tests' builds enable; without the variable this is one relaxed load.
#[cfg(feature = "fault-injection")]
pub(crate) fn fault(point: FaultPoint) {
    use std::sync::OnceLock;
    static PLAN: OnceLock<Option<(FaultPoint, u64)>> = OnceLock::new();
    static PASSED: AtomicU64 = AtomicU64::new(0);
    let plan = PLAN.get_or_init(|| {
        let value = std::env::var("ETL_FAULT").ok()?;
        let (name, n) = value.split_once(':')?;
        let point = match name {
            "span_recorded" => FaultPoint::SpanRecorded,
            "insert_acked" => FaultPoint::InsertAcked,
            _ => return None,
        };
        Some((point, n.parse().ok()?))
    });
    if let Some((at, n)) = *plan
        && at == point
        && PASSED.fetch_add(1, Ordering::SeqCst) + 1 == n
    {
        tracing::warn!(?point, n, "ETL_FAULT: killing the process");
        // kill(1) rather than kill(2): the workspace forbids unsafe code, and this is a test hook.
        let _ = std::process::Command::new("kill").arg("-KILL").arg(std::process::id().to_string()).status();
        // Nothing may happen after the fault point: wait for the signal.
        loop {
            std::thread::park();
        }
    }
}
