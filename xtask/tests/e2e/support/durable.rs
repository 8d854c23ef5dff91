//! The durable brokers of `cargo xtask infra up --durable` (Tansu over one moto S3 bucket): a
//! broker stopped or killed and started again with its data, and which broker a process talks to.

use std::process::Command;
use std::time::{Duration, Instant};

use super::freeze::{listening_pids, process_state};
use super::infra::infra;
use super::xtask;

/// The durable brokers' addresses (two brokers over one bucket, each serving all the data).
pub fn durable_brokers() -> &'static [String] {
    let durable = &infra().durable;
    assert!(
        durable.len() >= 2,
        "the durable-broker scenarios need `cargo xtask infra up --durable` (or $KAFKA_DURABLE_BROKERS and \
         $KAFKA_DURABLE_BROKERS_2)"
    );
    durable
}

/// Sends `signal` (`TERM` or `KILL`) to the broker at `addr` and waits until it is gone, so that
/// its port refuses connections.
pub fn stop_broker(addr: &str, signal: &str) {
    for pid in listening_pids(addr) {
        let ok = Command::new("kill").args([&format!("-{signal}"), &pid.to_string()]).status().unwrap().success();
        assert!(ok, "kill -{signal} {pid} (the broker at {addr})");
        let deadline = Instant::now() + Duration::from_secs(15);
        while process_state(pid).is_some_and(|s| s != 'Z') {
            assert!(Instant::now() < deadline, "pid {pid} (the broker at {addr}) did not end after SIG{signal}");
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("SIG{signal} ended pid {pid}, the broker at {addr}");
    }
}

/// Starts the durable brokers that do not run (a stopped one comes back over the same bucket).
pub fn start_durable_brokers() {
    let output = xtask().args(["infra", "up", "--only-kafka", "--durable"]).output().expect("running infra up");
    assert!(
        output.status.success(),
        "infra up --durable failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The remote ports of the established TCP connections of process `pid` (its sockets' inodes,
/// matched in /proc/net/tcp{,6}).
pub fn connected_ports(pid: u32) -> Vec<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.flatten()
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .filter_map(|t| t.to_str()?.strip_prefix("socket:[")?.strip_suffix(']').map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        for line in std::fs::read_to_string(table).unwrap_or_default().lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st ... inode; 01 = ESTABLISHED
            let (Some(remote), Some(&"01"), Some(inode)) = (fields.get(2), fields.get(3), fields.get(9)) else {
                continue;
            };
            if !inodes.iter().any(|i| i == inode) {
                continue;
            }
            if let Some(port) = remote.rsplit_once(':').and_then(|(_, p)| u16::from_str_radix(p, 16).ok()) {
                ports.push(port);
            }
        }
    }
    ports
}

/// The port of `addr` (`host:port`).
pub fn port_of(addr: &str) -> u16 {
    addr.rsplit_once(':').and_then(|(_, p)| p.parse().ok()).unwrap_or_else(|| panic!("{addr}: no port"))
}
