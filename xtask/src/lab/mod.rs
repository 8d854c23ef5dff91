//! The services, pipeline runs and probes that `bench` and `soak` share: the release xtask and
//! `infra up` with the tables and topics on its servers (`services`), the flagship rewritten,
//! built and started (`flagship`), and what reads a running pipeline and draws the result:
//! ClickHouse and `/metrics` over plain HTTP (`http`, `prom`), /proc (`procfs`) and SVG (`plot`).
//!
//! Neither command imports the other: what one of them alone uses stays in its own folder.

pub(crate) mod flagship;
pub(crate) mod http;
pub(crate) mod plot;
pub(crate) mod procfs;
pub(crate) mod prom;
pub(crate) mod services;

/// Bytes in a mebibyte, for the reports' MiB figures.
pub(crate) const MIB: f64 = 1024.0 * 1024.0;

/// The nanoseconds of the current second: a suffix that keeps the topics, tables and groups of
/// two runs apart.
pub(crate) fn nanos() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() % 1_000_000_000)
}
