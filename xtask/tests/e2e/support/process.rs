//! A running pipeline process: started with the scenario's environment and its own log, its
//! /metrics, signals, exit, peak RSS, and what its log says.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::http::http;
use super::infra::infra;
use super::root;
use super::variant::Variant;

/// /metrics, parsed: `name{labels}` → value.
#[derive(Debug, Default, Clone)]
pub struct Metrics(pub BTreeMap<String, f64>);

impl Metrics {
    /// The sum of every series of `name`. A name with no series panics: a missing series never
    /// passes for a zero.
    pub fn sum(&self, name: &str) -> f64 {
        self.series(name, "").iter().sum()
    }

    /// The largest value among the series of `name` (which must have one).
    pub fn max(&self, name: &str) -> f64 {
        self.series(name, "").into_iter().fold(f64::MIN, f64::max)
    }

    /// The sum of the series of `name` whose labels contain `labels`, e.g. `le="20.48"` (at least
    /// one must).
    pub fn sum_with(&self, name: &str, labels: &str) -> f64 {
        self.series(name, labels).iter().sum()
    }

    fn series(&self, name: &str, labels: &str) -> Vec<f64> {
        let found: Vec<f64> = self
            .0
            .iter()
            .filter(move |(k, _)| {
                (k.as_str() == name && labels.is_empty())
                    || k.strip_prefix(name).is_some_and(|r| r.starts_with('{') && r.contains(labels))
            })
            .map(|(_, v)| *v)
            .collect();
        assert!(!found.is_empty(), "no series {name}{{{labels}}} in /metrics: {:?}", self.0.keys().collect::<Vec<_>>());
        found
    }

    /// The value of one series, e.g. `etl_records_dropped_total{reason="error"}`, which must be
    /// exported.
    pub fn get(&self, series: &str) -> f64 {
        self.try_get(series).unwrap_or_else(|| panic!("no series {series} in /metrics"))
    }

    /// The value of one series, or `None` when it is not exported.
    pub fn try_get(&self, series: &str) -> Option<f64> {
        self.0.get(series).copied()
    }
}

/// A running pipeline binary. Dropping it SIGKILLs the process if it still runs.
pub struct Process {
    pub label: String,
    child: Child,
    pub admin: SocketAddr,
    pub log: PathBuf,
    pub exit: Option<ExitStatus>,
    /// The last /metrics scraped from it: [`Process::final_metrics`] after it exited.
    last_metrics: std::cell::RefCell<Option<Metrics>>,
}

/// A loopback port nothing listens on, and one this test process never handed out before: the
/// port is free only until the pipeline binds it, so two scenarios starting pipelines at once must
/// not be given the same one.
fn free_port() -> SocketAddr {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        if GIVEN.lock().unwrap_or_else(|e| e.into_inner()).insert(addr.port()) {
            return addr;
        }
    }
}

/// `variant`'s binary (built on first use) with `args`, the services of [`infra`], `topic` and
/// `group`, and no input.
fn binary_command(variant: Variant, topic: &str, group: &str, args: &[&str]) -> (PathBuf, Command) {
    let binary = variant.binary();
    let infra = infra();
    let mut command = Command::new(&binary);
    command
        .args(args)
        .env("KAFKA_BROKERS", &infra.brokers)
        .env("CLICKHOUSE_URL", &infra.clickhouse[0])
        .env("CLICKHOUSE_URL_2", &infra.clickhouse[1])
        .envs(infra.tls.iter().map(|(k, v)| (k, v)))
        .env("ORDERS_TOPIC", topic)
        .env("ORDERS_GROUP", group)
        .stdin(Stdio::null());
    (binary, command)
}

/// What a one-shot command of a pipeline binary (`offsets …`) printed, and how it exited.
#[derive(Debug)]
pub struct CommandOutput {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `variant`'s binary with `args`, configured for `topic` and `group` as [`spawn`] configures
/// a run, and waits for it.
pub fn run_binary(variant: Variant, topic: &str, group: &str, args: &[&str]) -> CommandOutput {
    let (binary, mut command) = binary_command(variant, topic, group, args);
    let output = command
        .env_remove("RUST_LOG")
        .output()
        .unwrap_or_else(|e| panic!("running {} {args:?}: {e}", binary.display()));
    let out = CommandOutput {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    eprintln!("$ {} {}\n{}{}", binary.display(), args.join(" "), out.stdout, out.stderr);
    out
}

/// Environment of a run: topic, group and anything extra (e.g. shard URLs of a proxy).
pub fn spawn(variant: Variant, label: &str, topic: &str, group: &str, extra: &[(&str, &str)]) -> Process {
    spawn_with_args(variant, label, topic, group, extra, &[])
}

/// [`spawn`] with command-line arguments (`dlq replay`).
pub fn spawn_with_args(
    variant: Variant,
    label: &str,
    topic: &str,
    group: &str,
    extra: &[(&str, &str)],
    args: &[&str],
) -> Process {
    let admin = free_port();
    let dir = root().join("target/e2e-logs");
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join(format!("{label}.log"));
    let file = std::fs::File::create(&log).unwrap();
    let (binary, mut command) = binary_command(variant, topic, group, args);
    command
        .env("ADMIN_LISTEN", admin.to_string())
        .env("RUST_LOG", "info")
        .stdout(file.try_clone().unwrap())
        .stderr(file);
    for (k, v) in extra {
        command.env(k, v);
    }
    let child = command.spawn().unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
    eprintln!("[{label}] started pid {} (admin {admin}, log {})", child.id(), log.display());
    Process { label: label.to_owned(), child, admin, log, exit: None, last_metrics: Default::default() }
}

impl Process {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// /metrics, or `None` while the admin server is not up (or the process is gone).
    pub fn metrics(&self) -> Option<Metrics> {
        let (status, body) = http(&self.admin.to_string(), "GET", "/metrics", b"").ok()?;
        if status != 200 {
            return None;
        }
        let mut out = BTreeMap::new();
        for line in body.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
            if let Some((series, Ok(v))) = line.rsplit_once(' ').map(|(s, v)| (s, v.parse::<f64>())) {
                out.insert(series.to_owned(), v);
            }
        }
        let metrics = Metrics(out);
        *self.last_metrics.borrow_mut() = Some(metrics.clone());
        Some(metrics)
    }

    /// The last /metrics scraped from the process: waiting for its exit scrapes it every 250 ms
    /// and a clean stop right before SIGTERM, so that counters of a process that is gone (a
    /// replay, a drain that gave up) are read from the process, not from its log.
    pub fn final_metrics(&self) -> Metrics {
        self.last_metrics
            .borrow()
            .clone()
            .unwrap_or_else(|| panic!("[{}] /metrics was never scraped:\n{}", self.label, self.log_tail()))
    }

    /// `POST path` on the admin server (`/admin/pause`, `/admin/resume`): status and body.
    pub fn admin_post(&self, path: &str) -> (u16, String) {
        http(&self.admin.to_string(), "POST", path, b"")
            .unwrap_or_else(|e| panic!("[{}] POST {path}: {e}\n{}", self.label, self.log_tail()))
    }

    /// `GET /readyz`: status and body.
    pub fn readyz(&self) -> (u16, String) {
        http(&self.admin.to_string(), "GET", "/readyz", b"")
            .unwrap_or_else(|e| panic!("[{}] GET /readyz: {e}\n{}", self.label, self.log_tail()))
    }

    /// What /readyz answers: `Some(true)` for 200, `Some(false)` for 503, `None` while the admin
    /// server is not up.
    pub fn ready(&self) -> Option<bool> {
        let (status, _) = http(&self.admin.to_string(), "GET", "/readyz", b"").ok()?;
        match status {
            200 => Some(true),
            503 => Some(false),
            _ => None,
        }
    }

    /// Polls /metrics until `pred` holds; panics after `timeout` (with the log's tail).
    pub fn await_metrics(&mut self, what: &str, timeout: Duration, pred: impl Fn(&Metrics) -> bool) -> Metrics {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(m) = self.metrics().filter(|m| pred(m)) {
                return m;
            }
            if let Some(status) = self.try_exit() {
                panic!("[{}] exited ({status}) while waiting for {what}:\n{}", self.label, self.log_tail());
            }
            assert!(Instant::now() < deadline, "[{}] no {what} within {timeout:?}:\n{}", self.label, self.log_tail());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Peak resident set size so far (VmHWM), in bytes. The process must be alive: a peak that
    /// cannot be read panics rather than passing for 0 bytes under any bound.
    pub fn peak_rss(&self) -> u64 {
        let path = format!("/proc/{}/status", self.pid());
        let status = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("[{}] reading {path}: {e}", self.label));
        let kb = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("[{}] no VmHWM in {path}", self.label));
        assert!(kb > 0, "[{}] a live process has a peak resident set", self.label);
        kb * 1024
    }

    pub fn signal(&self, name: &str) {
        let status = Command::new("kill").arg(format!("-{name}")).arg(self.pid().to_string()).status().unwrap();
        assert!(status.success(), "kill -{name} {}", self.pid());
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        self.exit = Some(self.child.wait().unwrap());
    }

    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().unwrap();
        }
        self.exit
    }

    /// Waits for the process to exit, at most `timeout`, scraping /metrics every 250 ms meanwhile
    /// (see [`Process::final_metrics`]).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        let mut next_scrape = Instant::now();
        while Instant::now() < deadline {
            if let Some(status) = self.try_exit() {
                return Some(status);
            }
            if Instant::now() >= next_scrape {
                let _ = self.metrics();
                next_scrape = Instant::now() + Duration::from_millis(250);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// SIGTERM; returns the exit status and how long the exit took (panics past `timeout`).
    pub fn terminate(&mut self, timeout: Duration) -> (ExitStatus, Duration) {
        let started = Instant::now();
        self.signal("TERM");
        let status = self.wait_exit(timeout).unwrap_or_else(|| {
            panic!("[{}] still running {timeout:?} after SIGTERM:\n{}", self.label, self.log_tail())
        });
        (status, started.elapsed())
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_tail(&self) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Lines of the log that contain `needle`.
    pub fn log_lines(&self, needle: &str) -> Vec<String> {
        self.log_text().lines().filter(|l| l.contains(needle)).map(str::to_owned).collect()
    }

    /// The pipeline never panics, whatever happened to it.
    /// SIGTERM, then: it exits 0 within 60 s and never panicked.
    pub fn stop_cleanly(&mut self) {
        let _ = self.metrics();
        let (status, _) = self.terminate(Duration::from_secs(60));
        assert!(status.success(), "[{}] SIGTERM exits 0: {status}", self.label);
        self.assert_no_panic();
    }

    pub fn assert_no_panic(&self) {
        let panics = self.log_lines("panicked");
        assert!(panics.is_empty(), "[{}] panicked:\n{}", self.label, panics.join("\n"));
    }

    /// The sum of the integer field `field=N` over the log's lines (the logs are plain text: the
    /// runtime colours them only on a terminal).
    pub fn log_field_sum(&self, field: &str) -> i64 {
        self.log_text().lines().filter_map(|l| field_value(l, field)).sum()
    }

    /// Records a revocation's drain left undurable (logged with `abandoned=N`).
    pub fn abandoned(&self) -> i64 {
        self.log_field_sum("abandoned")
    }

    /// Recorded batches the exactly-once replay plans of this process replay
    /// (`etl_exactly_once_replayed_batches_total` as last scraped: its plans are read at each
    /// assignment, long before it stops).
    pub fn replayed_batches(&self) -> i64 {
        self.final_metrics().get("etl_exactly_once_replayed_batches_total") as i64
    }
}

/// The integer of `field=N` in a log line.
fn field_value(line: &str, field: &str) -> Option<i64> {
    let rest = line.split(&format!("{field}=")).nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.try_exit().is_none() {
            self.kill();
        }
    }
}
