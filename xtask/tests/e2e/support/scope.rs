//! What a scenario needs to itself while it runs. The scenarios run concurrently (`cargo xtask
//! test` gives the e2e binary a thread per scenario); each takes, in one fixed order, the locks of
//! what it touches, so none can deadlock and none disturbs another:
//!
//! 1. its load on the machine. A [`Load::Heavy`] scenario (a million records decoded, hundreds of
//!    MiB produced and read) runs alone among the heavy and the [`Load::Timed`] ones, whose checks
//!    measure durations or rates; timed ones run together; [`Load::Light`] ones (mostly waiting)
//!    run beside anything;
//! 2. the durable brokers, for the scenarios that restart or kill them, or read at their pace;
//! 3. the table of each pipeline variant it uses, in [`Variant`] order: every scenario empties
//!    its tables and counts every row in them;
//! 4. last, the build lock ([`super::build_lock`]): building a variant's binary takes it, and so
//!    does a scenario that measures the broker's pace.
//!
//! Nothing else is shared that a scenario changes: topics and groups are unique, the Kafka
//! helpers reach the broker each topic was created on ([`super::route_topic`]), outages of
//! ClickHouse are proxies a scenario owns, and servers a scenario kills or freezes are its own.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::variant::{VARIANTS, Variant};

/// How a scenario loads the machine (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    /// Mostly waiting: runs beside anything.
    Light,
    /// Its checks measure time or rates: never beside a heavy scenario.
    Timed,
    /// CPU- or memory-heavy: alone among the heavy and timed ones.
    Heavy,
}

/// The locks a running scenario holds; dropping it lets the others in.
pub struct Scope {
    _load: Option<LoadGuard>,
    _durable: Option<MutexGuard<'static, ()>>,
    _tables: Vec<MutexGuard<'static, ()>>,
}

enum LoadGuard {
    Shared(RwLockReadGuard<'static, ()>),
    Alone(RwLockWriteGuard<'static, ()>),
}

static LOAD: RwLock<()> = RwLock::new(());
static DURABLE: Mutex<()> = Mutex::new(());
static TABLES: [Mutex<()>; VARIANTS] = [const { Mutex::new(()) }; VARIANTS];

/// Takes the locks of a scenario with this `load` that uses the tables of `variants`.
pub fn scope(load: Load, variants: &[Variant]) -> Scope {
    take(load, false, variants)
}

/// [`scope`] for a scenario that also needs the durable brokers to itself.
pub fn scope_durable(load: Load, variants: &[Variant]) -> Scope {
    take(load, true, variants)
}

fn take(load: Load, durable: bool, variants: &[Variant]) -> Scope {
    let load = match load {
        Load::Light => None,
        Load::Timed => Some(LoadGuard::Shared(LOAD.read().unwrap_or_else(|e| e.into_inner()))),
        Load::Heavy => Some(LoadGuard::Alone(LOAD.write().unwrap_or_else(|e| e.into_inner()))),
    };
    let durable = durable.then(|| DURABLE.lock().unwrap_or_else(|e| e.into_inner()));
    let mut indexes: Vec<usize> = variants.iter().map(|v| v.index()).collect();
    indexes.sort_unstable();
    indexes.dedup();
    let tables = indexes.into_iter().map(|i| TABLES[i].lock().unwrap_or_else(|e| e.into_inner())).collect();
    Scope { _load: load, _durable: durable, _tables: tables }
}
