//! The process's allocator: mimalloc, for Rust and (through its `override` feature, which
//! exports `malloc` and `free`) for librdkafka's C code alike, when the `mimalloc` feature is on.
//!
//! librdkafka's broker thread allocates an op for every message it parses and the pipeline
//! threads free it. Under glibc those frees take the broker thread's arena lock, so the two sides
//! meet on one lock per message, and every contended hand-off is a futex call and a wake-up: in
//! the flagship's profile about a seventh of the process. mimalloc frees into the owning thread's
//! page without a lock (docs/BENCHMARKS.md, "The allocator under librdkafka").

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc 3's `mi_option_arena_eager_commit` (its `mi_option_e` in mimalloc.h; the constants in
/// libmimalloc-sys still name mimalloc 2's enum).
#[cfg(feature = "mimalloc")]
const ARENA_EAGER_COMMIT: std::os::raw::c_int = 4;

#[cfg(feature = "mimalloc")]
unsafe extern "C" {
    fn mi_option_set_default(option: std::os::raw::c_int, value: std::os::raw::c_long);
}

/// Commits arena memory as it is used instead of all at once. With eager commit (mimalloc's
/// default on Linux), a purge only resets pages, which then still count in the process's RSS:
/// the flagship peaked 28% higher for more CPU (docs/BENCHMARKS.md). A default, not a setting:
/// `MIMALLOC_ARENA_EAGER_COMMIT` in the environment still wins.
///
/// mimalloc's purge delay (1 s) stays its own. Ten seconds saved the flagship 6% of its CPU a record
/// in interleaved runs, but raised the peak RSS of the memory-bound scenarios by 12 to 30 MiB, a
/// third to a half of their margin under `gen --memory` (docs/BENCHMARKS.md, "The allocator's
/// purge delay"); `MIMALLOC_PURGE_DELAY` in the environment makes that trade for a deployment.
#[cfg(feature = "mimalloc")]
extern "C" fn commit_arenas_on_demand() {
    // SAFETY: sets one integer option; safe before mimalloc initialises (it then keeps the value
    // unless the environment names the option) and after (arenas made later use it).
    unsafe { mi_option_set_default(ARENA_EAGER_COMMIT, 0) }
}

/// Runs before the unprioritised constructors, mimalloc's own among them (gcc builds it without a
/// priority), so the first arena is already made with the default above.
#[cfg(all(feature = "mimalloc", target_os = "linux"))]
#[used]
#[unsafe(link_section = ".init_array.00100")]
static COMMIT_ARENAS_ON_DEMAND: extern "C" fn() = commit_arenas_on_demand;
