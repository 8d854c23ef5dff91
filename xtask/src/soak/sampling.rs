//! What the soak samples every second, on a thread of its own: the main instance's RSS (VmRSS),
//! peak RSS (VmHWM) and whether it runs, from /proc; its in-flight bytes and records out, and the
//! group's lag, from /metrics; and the producer's counts. `instances` keeps the sampler's
//! `Target` up to date and reads /metrics with the same short-timeout `scrape`.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::producer::Counters;
use crate::lab::{procfs, prom};

/// What the sampler reads: the main instance, and the second member's /metrics while it runs;
/// `instances::Members` keeps it up to date across restarts.
#[derive(Debug, Clone, Default)]
pub(super) struct Target {
    pub(super) pid: u32,
    pub(super) admin: String,
    /// Which run of the main instance (0 at first, one more after each restart).
    pub(super) lifetime: u32,
    pub(super) second: Option<String>,
}

/// One second of the run. `None`: not read (the instance was restarting, /metrics did not answer).
#[derive(Debug, Clone)]
pub(super) struct Sample {
    /// Seconds since the start of the load.
    pub(super) t: f64,
    /// Which run of the main instance this is ([`Target::lifetime`]).
    pub(super) lifetime: u32,
    pub(super) pid: u32,
    pub(super) alive: bool,
    pub(super) rss: Option<u64>,
    pub(super) peak_rss: Option<u64>,
    pub(super) inflight: Option<f64>,
    /// `etl_source_lag_records` summed over the main instance's partitions and, while a second
    /// member runs, over its partitions too (each member reports only what it owns).
    pub(super) lag: Option<f64>,
    pub(super) records_out: Option<f64>,
    pub(super) second: bool,
    pub(super) sent: u64,
    pub(super) delivered: u64,
}

/// The sampling thread.
pub(super) struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Sample>>,
}

impl Sampler {
    pub(super) fn start(epoch: Instant, target: Arc<Mutex<Target>>, counters: Arc<Counters>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut samples = Vec::new();
                let mut next = Instant::now();
                while !stop.load(Ordering::SeqCst) {
                    let target = target.lock().unwrap_or_else(PoisonError::into_inner).clone();
                    samples.push(sample(epoch, &target, &counters));
                    // Every second on the clock; a slow read skips seconds rather than bunching.
                    next += Duration::from_secs(1);
                    let now = Instant::now();
                    if next < now {
                        next = now;
                    }
                    std::thread::sleep(next - now);
                }
                samples
            })
        };
        Sampler { stop, thread }
    }

    pub(super) fn finish(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_default()
    }
}

fn sample(epoch: Instant, target: &Target, counters: &Counters) -> Sample {
    let t = epoch.elapsed().as_secs_f64();
    let status = std::fs::read_to_string(format!("/proc/{}/status", target.pid)).ok();
    let alive = status.as_deref().and_then(status_state).is_some_and(|s| s != 'Z');
    let status = status.filter(|_| alive);
    let main = scrape(&target.admin);
    let second = target.second.as_deref().and_then(scrape);
    let lag = main
        .as_ref()
        .map(|m| m.sum("etl_source_lag_records") + second.as_ref().map_or(0.0, |s| s.sum("etl_source_lag_records")));
    Sample {
        t,
        lifetime: target.lifetime,
        pid: target.pid,
        alive,
        rss: status.as_deref().and_then(status_vmrss),
        peak_rss: status.as_deref().and_then(procfs::status_vmhwm),
        inflight: main.as_ref().map(|m| m.sum("etl_backpressure_inflight_bytes")),
        lag,
        records_out: main.as_ref().map(|m| m.sum("etl_records_out_total")),
        second: target.second.is_some(),
        sent: counters.sent.load(Ordering::Relaxed),
        delivered: counters.delivered.load(Ordering::Relaxed),
    }
}

/// The state letter of the `State:` line of /proc/PID/status.
fn status_state(status: &str) -> Option<char> {
    status.lines().find_map(|l| l.strip_prefix("State:"))?.trim_start().chars().next()
}

/// `VmRSS` (resident set size now) in bytes from the text of /proc/PID/status.
fn status_vmrss(status: &str) -> Option<u64> {
    let kb = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().strip_suffix("kB")?.trim();
    Some(kb.parse::<u64>().ok()? * 1024)
}

/// GET /metrics of the instance at `admin`, with short timeouts: a sample is taken every second
/// and must not wait for an instance that is starting, gone or stuck.
pub(super) fn scrape(admin: &str) -> Option<prom::Scrape> {
    let addr: SocketAddr = admin.parse().ok()?;
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
    // HTTP/1.0: an unchunked answer, and the connection closes after it.
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {admin}\r\n\r\n").ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let split = response.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&response[..split]);
    if head.split_whitespace().nth(1) != Some("200") {
        return None;
    }
    Some(prom::Scrape::parse(&String::from_utf8_lossy(&response[split + 4..])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_and_state_are_read_from_status() {
        let status = "Name:\torders\nState:\tS (sleeping)\nVmHWM:\t   33200 kB\nVmRSS:\t   30100 kB\n";
        assert_eq!(status_vmrss(status), Some(30_100 * 1024));
        assert_eq!(status_state(status), Some('S'));
        assert_eq!(status_state("Name:\tx\nState:\tZ (zombie)\n"), Some('Z'));
        assert_eq!(status_vmrss("Name:\tx\n"), None);
    }
}
