//! The servers as `cargo xtask bench` measures them: the addresses `cargo xtask infra up` prints
//! and the pids it recorded, whose CPU time each phase reads (`cpu_time`).

use std::fs;

use crate::lab::services::run_infra_up;

/// The services of `cargo xtask infra up`.
pub(crate) struct Servers {
    pub(crate) brokers: String,
    pub(crate) clickhouse: Vec<String>,
    /// The broker's processes, for their CPU time.
    pub(crate) broker_pids: Vec<u32>,
    /// The ClickHouse servers' processes (both shards), for their CPU time.
    pub(crate) clickhouse_pids: Vec<u32>,
}

/// `cargo xtask infra up` (idempotent): the addresses it prints and the pids it recorded.
pub(crate) fn start_servers() -> anyhow::Result<Servers> {
    let output = run_infra_up(&[])?;
    let value = |key: &str| output.value(key);
    let pids = |names: &[&str]| -> Vec<u32> {
        names
            .iter()
            .filter_map(|name| fs::read_to_string(crate::infra::state_dir().join(format!("{name}.pid"))).ok())
            .filter_map(|pid| pid.trim().parse().ok())
            .collect()
    };
    Ok(Servers {
        brokers: value("KAFKA_BROKERS")?,
        clickhouse: vec![value("CLICKHOUSE_URL")?, value("CLICKHOUSE_URL_2")?],
        broker_pids: pids(&["kafka"]),
        clickhouse_pids: pids(&["clickhouse", "clickhouse-2"]),
    })
}
