//! What the end-to-end tests share: the broker and ClickHouse of `cargo xtask infra up`, the pipeline
//! binaries of `cargo xtask build`, a producer that keeps its delivery reports, ClickHouse checks,
//! a running pipeline process (signals, /metrics, peak RSS, log) and a throttling TCP proxy.
//!
//! One module per job, everything re-exported here so that the scenarios `use support::*`:
//! `infra` (where the services are), `variant` (the pipelines and their binaries), `config` (the
//! numbers of a pipeline file), `records` (the orders), `kafka` and `producer`, `http` and
//! `clickhouse`, `process` (a running pipeline), and the faults and stubs: `durable` (brokers restarted), `freeze`, `servers`
//! (killed servers, hung and failing replicas), `proxy`, `registry`, `rng`.
#![allow(dead_code, unreachable_pub)]

mod clickhouse;
mod config;
mod durable;
mod freeze;
mod http;
mod infra;
mod kafka;
mod process;
mod producer;
mod proxy;
mod records;
mod registry;
mod rng;
mod scope;
mod servers;
mod variant;

use std::path::{Path, PathBuf};
use std::process::Command;

pub use self::clickhouse::*;
pub use self::config::*;
pub use self::durable::*;
pub use self::freeze::*;
pub use self::infra::*;
pub use self::kafka::*;
pub use self::process::*;
pub use self::producer::*;
pub use self::proxy::*;
pub use self::records::*;
pub use self::registry::*;
pub use self::rng::*;
pub use self::scope::*;
pub use self::servers::*;
pub use self::variant::*;

/// Partitions of every topic the scenarios create (except the poison ones).
pub const PARTITIONS: i32 = 4;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_owned()
}

/// `cargo xtask` as built for this test binary (the same program `cargo xtask` runs, without a
/// nested `cargo run`), in the workspace root.
fn xtask() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_xtask"));
    command.current_dir(root());
    command
}

/// MiB, for messages.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
