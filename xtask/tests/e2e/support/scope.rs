//! What a scenario needs to itself while it runs. The scenarios run concurrently (`cargo xtask
//! test` gives the e2e binary a thread per scenario); each takes the locks 1 to 3 of what it
//! touches all at once or not at all (it never waits for one while it holds another; the build
//! lock, always last, is held only while a binary builds), so none can deadlock, none keeps
//! another out while it waits, and none disturbs another:
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
    let mut indexes: Vec<usize> = variants.iter().map(|v| v.index()).collect();
    indexes.sort_unstable();
    indexes.dedup();
    loop {
        if let Some(scope) = try_take(load, durable, &indexes) {
            return scope;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// All of a scenario's locks, or none: what it got is given back when one is taken. A scenario
/// that held its load lock while it waited for a table would keep every heavy scenario out for
/// as long as light ones use that table (it did: the heavy ones of a CI run started 1,000 s in).
fn try_take(load: Load, durable: bool, indexes: &[usize]) -> Option<Scope> {
    use std::sync::TryLockError;
    fn got<G>(attempt: Result<G, TryLockError<G>>) -> Option<G> {
        match attempt {
            Ok(guard) => Some(guard),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }
    let load = match load {
        Load::Light => None,
        Load::Timed => Some(LoadGuard::Shared(got(LOAD.try_read())?)),
        Load::Heavy => Some(LoadGuard::Alone(got(LOAD.try_write())?)),
    };
    let durable = if durable { Some(got(DURABLE.try_lock())?) } else { None };
    let tables = indexes.iter().map(|&i| got(TABLES[i].try_lock())).collect::<Option<Vec<_>>>()?;
    Some(Scope { _load: load, _durable: durable, _tables: tables })
}
