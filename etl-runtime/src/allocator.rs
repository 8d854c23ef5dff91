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

/// mimalloc 3's `mi_option_purge_delay`, in the same enum.
#[cfg(feature = "mimalloc")]
const PURGE_DELAY: std::os::raw::c_int = 15;

/// How long freed pages stay with the process before mimalloc gives them back, in ms (its own
/// default is 1 000). librdkafka's broker thread allocates an op for every message and the
/// pipeline threads free it a moment later, so at a million records a second whole pages empty
/// and fill again all the time; purged after one second, they are given back and faulted in
/// again, and every purge is a system call that can interrupt the threads of the process on other
/// cores. Ten seconds keeps them through a steady run: in four interleaved pairs on 3M records the
/// flagship spent 6% less CPU a record and its librdkafka threads 9% less, at the same peak RSS;
/// on 10M records the peak was a median 20% higher (docs/BENCHMARKS.md, "The allocator's purge
/// delay"), still a third of its `gen --memory` bound.
#[cfg(feature = "mimalloc")]
const PURGE_DELAY_MS: std::os::raw::c_long = 10_000;

#[cfg(feature = "mimalloc")]
unsafe extern "C" {
    fn mi_option_set_default(option: std::os::raw::c_int, value: std::os::raw::c_long);
}

/// Commits arena memory as it is used instead of all at once, and purges freed pages after
/// `PURGE_DELAY_MS`. With eager commit (mimalloc's default on Linux), a purge only resets pages,
/// which then still count in the process's RSS: the flagship peaked 28% higher for more CPU
/// (docs/BENCHMARKS.md). Defaults, not settings: `MIMALLOC_ARENA_EAGER_COMMIT` and
/// `MIMALLOC_PURGE_DELAY` in the environment still win.
#[cfg(feature = "mimalloc")]
extern "C" fn commit_arenas_on_demand() {
    // SAFETY: sets two integer options; safe before mimalloc initialises (it then keeps the values
    // unless the environment names the options) and after (arenas made later use them).
    unsafe {
        mi_option_set_default(ARENA_EAGER_COMMIT, 0);
        mi_option_set_default(PURGE_DELAY, PURGE_DELAY_MS);
    }
}

/// Runs before the unprioritised constructors, mimalloc's own among them (gcc builds it without a
/// priority), so the first arena is already made with the default above.
#[cfg(all(feature = "mimalloc", target_os = "linux"))]
#[used]
#[unsafe(link_section = ".init_array.00100")]
static COMMIT_ARENAS_ON_DEMAND: extern "C" fn() = commit_arenas_on_demand;
