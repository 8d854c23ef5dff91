//! What else used the cores during a phase of `cargo xtask bench`: the machine's busy CPU time,
//! the servers', the measured process's and this driver's, so that the report can tell how much
//! went to other work on the machine.

use std::time::Instant;

use super::servers::Servers;
use crate::lab::procfs;

/// CPU seconds during one phase: the whole machine, the broker, ClickHouse, the measured client,
/// this driver; the rest is other work on the machine (another engineer's build, say).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Load {
    wall: f64,
    busy: f64,
    /// The broker's CPU seconds in the phase.
    pub(crate) broker: f64,
    /// Both ClickHouse servers' CPU seconds in the phase.
    pub(crate) clickhouse: f64,
    client: f64,
    driver: f64,
}

impl Load {
    /// Cores' worth of CPU that went to nothing this benchmark runs.
    pub(crate) fn other_cores(&self) -> f64 {
        ((self.busy - self.broker - self.clickhouse - self.client - self.driver) / self.wall).max(0.0)
    }

    pub(crate) fn server_cores(&self) -> f64 {
        (self.broker + self.clickhouse) / self.wall
    }
}

pub(crate) struct LoadMeter {
    started: Instant,
    busy: f64,
    broker: f64,
    clickhouse: f64,
    driver: f64,
    broker_pids: Vec<u32>,
    clickhouse_pids: Vec<u32>,
}

/// The CPU seconds the processes `pids` used so far (those still running).
fn cpu_of(pids: &[u32]) -> f64 {
    pids.iter().filter_map(|p| procfs::cpu_seconds(*p)).sum()
}

impl LoadMeter {
    pub(crate) fn start(infra: &Servers) -> LoadMeter {
        LoadMeter {
            started: Instant::now(),
            busy: procfs::machine_busy_seconds(),
            broker: cpu_of(&infra.broker_pids),
            clickhouse: cpu_of(&infra.clickhouse_pids),
            driver: procfs::own_cpu_seconds(),
            broker_pids: infra.broker_pids.clone(),
            clickhouse_pids: infra.clickhouse_pids.clone(),
        }
    }

    /// Ends the phase; `client` is the measured process's CPU seconds in it.
    pub(crate) fn finish(&self, client: f64) -> Load {
        Load {
            wall: self.started.elapsed().as_secs_f64(),
            busy: procfs::machine_busy_seconds() - self.busy,
            broker: cpu_of(&self.broker_pids) - self.broker,
            clickhouse: cpu_of(&self.clickhouse_pids) - self.clickhouse,
            client,
            driver: procfs::own_cpu_seconds() - self.driver,
        }
    }
}
