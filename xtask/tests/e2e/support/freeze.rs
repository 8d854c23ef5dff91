//! The freeze fault: servers SIGSTOPped, found by the loopback port they listen on (or a pipeline
//! process by its pid), and thawed when the guard drops.

use std::process::Command;
use std::time::{Duration, Instant};

use super::http::host_port;

/// The local processes that listen on the TCP port of `url` (a loopback address), found the way
/// `ss -ltnp` finds them: the listening sockets' inodes in /proc/net/tcp{,6}, then the processes
/// holding `socket:[inode]` among their file descriptors. What matters is which process serves the
/// URL the pipeline uses, not what `cargo xtask infra` started: with `$CLICKHOUSE_URL` pointing
/// elsewhere the infra's pid files name servers nobody talks to. Panics when no local process
/// listens there, since freezing nothing would make the outage scenarios pass without an outage.
pub fn listening_pids(url: &str) -> Vec<u32> {
    let addr = host_port(url);
    let (host, port) = addr.rsplit_once(':').unwrap_or_else(|| panic!("{url}: no port to freeze the server of"));
    let port: u16 = port.parse().unwrap_or_else(|_| panic!("{url}: bad port"));
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    assert!(
        loopback,
        "cannot freeze the server of {url}: {host} is not a loopback address, so it is no process of this machine \
         (the outage scenarios need local servers)"
    );
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let (Some(local), Some(&"0A"), Some(inode)) = (fields.get(1), fields.get(3), fields.get(9)) else {
                continue; // not LISTEN
            };
            let Some((ip, p)) = local.split_once(':') else { continue };
            if u16::from_str_radix(p, 16) != Ok(port) || !accepts_loopback(ip) {
                continue;
            }
            inodes.push(format!("socket:[{inode}]"));
        }
    }
    assert!(
        !inodes.is_empty(),
        "cannot freeze the server of {url}: no process listens on loopback port {port} (is it up? the outage \
         scenarios need its server to run on this machine)"
    );
    let me = std::process::id();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else { continue };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|target| inodes.iter().any(|i| target.as_os_str() == i.as_str()))
        });
        if holds {
            pids.push(pid);
        }
    }
    assert!(
        !pids.contains(&me),
        "the server of {url} is this test process (a proxy?): freezing it would freeze the test"
    );
    assert!(
        !pids.is_empty(),
        "cannot freeze the server of {url}: port {port} listens ({inodes:?}) but no process of ours holds the socket \
         (another user's or a container's server cannot be frozen from here)"
    );
    pids
}

/// Whether a listening socket's local address from /proc/net/tcp{,6} (hex, 32-bit words in host
/// order) takes connections to loopback: a loopback address or the wildcard.
fn accepts_loopback(hex: &str) -> bool {
    let words: Vec<u32> =
        (0..hex.len() / 8).filter_map(|i| u32::from_str_radix(&hex[i * 8..i * 8 + 8], 16).ok()).collect();
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    match bytes.len() {
        4 => {
            let ip = std::net::Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]);
            ip.is_loopback() || ip.is_unspecified()
        }
        16 => {
            let ip = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(bytes).unwrap());
            ip.is_loopback()
                || ip.is_unspecified()
                || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback() || v4.is_unspecified())
        }
        _ => false,
    }
}

/// The state letter of /proc/PID/stat (`T` = stopped), `None` once the process is gone.
pub(super) fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ...: comm may hold spaces and parentheses, the state follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Processes SIGSTOPped; dropping the guard SIGCONTs them, also when the test fails. A frozen
/// server accepts connections into the backlog and answers nothing, like a hung one.
pub struct Frozen(Vec<u32>);

/// The servers of `urls` SIGSTOPped: only servers a scenario owns (the shared two are never
/// frozen: a scenario freezes them for its own pipelines through [`super::ShardProxies`]).
pub fn freeze_servers(urls: &[String]) -> Frozen {
    let mut frozen = Frozen(Vec::new());
    for url in urls {
        for pid in listening_pids(url) {
            frozen.add(pid, &format!("the server of {url}"));
        }
    }
    frozen
}

/// The process `pid` (`what` names it in messages) SIGSTOPped.
pub fn freeze_pid(pid: u32, what: &str) -> Frozen {
    let mut frozen = Frozen(Vec::new());
    frozen.add(pid, what);
    frozen
}

impl Frozen {
    fn add(&mut self, pid: u32, what: &str) {
        if self.0.contains(&pid) {
            return;
        }
        let ok = Command::new("kill").args(["-STOP", &pid.to_string()]).status().unwrap().success();
        assert!(ok, "kill -STOP {pid} ({what})");
        // Pushed before the check, so that the guard thaws it whatever happens next.
        self.0.push(pid);
        let deadline = Instant::now() + Duration::from_secs(2);
        while process_state(pid) != Some('T') {
            assert!(Instant::now() < deadline, "pid {pid} ({what}) did not stop: {:?}", process_state(pid));
            std::thread::sleep(Duration::from_millis(10));
        }
        eprintln!("froze pid {pid}, {what}");
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = Command::new("kill").args(["-CONT", &pid.to_string()]).status();
        }
    }
}
