//! What else used the cores during a phase of `cargo xtask bench`: the machine's busy CPU time,
//! the servers', the measured process's and this driver's, so that the report can tell how much
//! went to other work on the machine.

use std::time::Instant;

use super::procfs;
use super::services::Infra;

/// CPU seconds during one phase: the whole machine, the servers, the measured client, this
/// driver; the rest is other work on the machine (another engineer's build, say).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Load {
    wall: f64,
    busy: f64,
    servers: f64,
    client: f64,
    driver: f64,
}

impl Load {
    /// Cores' worth of CPU that went to nothing this benchmark runs.
    pub(crate) fn other_cores(&self) -> f64 {
        ((self.busy - self.servers - self.client - self.driver) / self.wall).max(0.0)
    }

    pub(crate) fn server_cores(&self) -> f64 {
        self.servers / self.wall
    }
}

pub(crate) struct LoadMeter {
    started: Instant,
    busy: f64,
    servers: f64,
    driver: f64,
    pids: Vec<u32>,
}

impl LoadMeter {
    pub(crate) fn start(infra: &Infra) -> LoadMeter {
        let pids = infra.server_pids.clone();
        LoadMeter {
            started: Instant::now(),
            busy: procfs::machine_busy_seconds(),
            servers: pids.iter().filter_map(|p| procfs::cpu_seconds(*p)).sum(),
            driver: procfs::own_cpu_seconds(),
            pids,
        }
    }

    /// Ends the phase; `client` is the measured process's CPU seconds in it.
    pub(crate) fn finish(&self, client: f64) -> Load {
        Load {
            wall: self.started.elapsed().as_secs_f64(),
            busy: procfs::machine_busy_seconds() - self.busy,
            servers: self.pids.iter().filter_map(|p| procfs::cpu_seconds(*p)).sum::<f64>() - self.servers,
            client,
            driver: procfs::own_cpu_seconds() - self.driver,
        }
    }
}
