//! Shared helpers of the tests against a real ClickHouse: the two local servers (started on demand
//! with `cargo xtask infra up --only-clickhouse`), queries, freezing and restarting a server, and a
//! small pipeline harness (pre-encoded rows in in-memory lanes, a key-hashing chain).
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use etl_runtime::__private::shard_hash;
use etl_runtime::{
    BackpressureConfig, BatchConfig, Chain, ClickhouseSinkConfig, Lane, Pipeline, Record, RecordError, RetryConfig,
    RowOut, RuntimeConfig, Sink, SourceError, Wake,
};

fn workspace_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// `$CLICKHOUSE_URL` and `$CLICKHOUSE_URL_2` if both are set; otherwise starts the two local
/// servers with `cargo xtask infra up --only-clickhouse` (idempotent: it reuses running ones) and
/// returns the URLs it prints. Once per test binary.
pub fn clickhouse_urls() -> (String, String) {
    static URLS: OnceLock<(String, String)> = OnceLock::new();
    URLS.get_or_init(|| {
        if let (Ok(a), Ok(b)) = (std::env::var("CLICKHOUSE_URL"), std::env::var("CLICKHOUSE_URL_2")) {
            return (a, b);
        }
        (infra_value("CLICKHOUSE_URL"), infra_value("CLICKHOUSE_URL_2"))
    })
    .clone()
}

/// The HTTPS front of the first ClickHouse (`CLICKHOUSE_HTTPS_URL`) and the file of the CA that
/// signed its certificate (`ETL_INFRA_CA_FILE`), from `cargo xtask infra up`.
pub fn clickhouse_https() -> (String, PathBuf) {
    (infra_value("CLICKHOUSE_HTTPS_URL"), PathBuf::from(infra_value("ETL_INFRA_CA_FILE")))
}

/// The mutual-TLS front of the first ClickHouse (`CLICKHOUSE_MTLS_URL`, which refuses a client
/// without a certificate of the infra CA), and the client certificate and key it accepts
/// (`ETL_INFRA_CLIENT_CERT`, `ETL_INFRA_CLIENT_KEY`), from `cargo xtask infra up`.
pub fn clickhouse_mtls() -> (String, PathBuf, PathBuf) {
    (
        infra_value("CLICKHOUSE_MTLS_URL"),
        PathBuf::from(infra_value("ETL_INFRA_CLIENT_CERT")),
        PathBuf::from(infra_value("ETL_INFRA_CLIENT_KEY")),
    )
}

/// Runs `cargo xtask infra up --only-clickhouse` (idempotent: it starts only what is stopped);
/// returns what it printed.
fn run_infra_up() -> String {
    let output = Command::new(env!("CARGO"))
        .current_dir(workspace_root())
        .args(["xtask", "infra", "up", "--only-clickhouse"])
        .output()
        .expect("running cargo xtask infra up");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "cargo xtask infra up --only-clickhouse failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// One value `cargo xtask infra up --only-clickhouse` printed (run once per test binary).
fn infra_value(key: &str) -> String {
    static PRINTED: OnceLock<String> = OnceLock::new();
    let stdout = PRINTED.get_or_init(run_infra_up);
    stdout
        .lines()
        .find_map(|line| line.trim_start_matches("export ").strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in the output of infra up:\n{stdout}"))
        .to_owned()
}

/// A table name no other test run uses.
pub fn unique_table(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{prefix}_{}_{nanos}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(future)
}

/// Runs a statement (DDL) and panics with ClickHouse's message if it fails.
pub fn exec(url: &str, sql: &str) {
    let client = clickhouse::Client::default().with_url(url);
    block_on(client.query_raw(sql).execute()).unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Runs a SELECT and returns its rows as JSON objects (64-bit integers as numbers, decimals as
/// strings with their full scale).
pub fn select(url: &str, sql: &str) -> Vec<serde_json::Value> {
    let client = clickhouse::Client::default()
        .with_url(url)
        .with_setting("output_format_json_quote_64bit_integers", "0")
        .with_setting("output_format_json_quote_decimals", "1")
        .with_setting("output_format_decimal_trailing_zeros", "1");
    let bytes = block_on(async { client.query_raw(sql).fetch_bytes("JSONEachRow")?.collect().await })
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).unwrap()).collect()
}

/// The single number a `SELECT count() ...`-like query returns.
pub fn scalar(url: &str, sql: &str) -> i64 {
    let rows = select(url, sql);
    let row = rows.first().unwrap_or_else(|| panic!("{sql}: no row"));
    let value = row.as_object().unwrap().values().next().unwrap();
    value.as_i64().or_else(|| value.as_str().and_then(|s| s.parse().ok())).unwrap()
}

/// A sink configuration for `table` on one server per shard.
pub fn sink_config(shards: &[&str], table: &str, columns: &[(&str, &str)]) -> ClickhouseSinkConfig {
    ClickhouseSinkConfig {
        shards: shards.iter().map(|url| vec![(*url).to_owned()]).collect(),
        database: "default".into(),
        table: table.into(),
        user: "default".into(),
        password: String::new(),
        settings: Vec::new(),
        format: etl_runtime::InsertFormat::default(),
        compression: etl_runtime::InsertCompression::Lz4,
        timeout: Duration::from_secs(10),
        columns: columns.iter().map(|(n, t)| ((*n).to_owned(), (*t).to_owned())).collect(),
        ca_file: None,
        client_cert: None,
        client_key: None,
        exactly_once: None,
    }
}

/// The server the outage test freezes, stops and starts again: one of its own, so that the tests
/// (and end-to-end scenarios) that run meanwhile keep theirs.
pub const OUTAGE_SERVER: usize = 5;

/// Starts ClickHouse server `index` of `cargo xtask infra up` unless it runs (the others are left
/// alone); returns its URL.
pub fn start_server(index: usize) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args(["xtask", "infra", "up", "--only-clickhouse", "--clickhouse-index", &index.to_string()])
        .current_dir(workspace_root())
        .output()
        .expect("running cargo xtask infra up");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "infra up failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let key = format!("CLICKHOUSE_URL_{}=", index + 1);
    stdout
        .lines()
        .find_map(|line| line.strip_prefix(key.as_str()))
        .unwrap_or_else(|| panic!("no {key} in the output of infra up:\n{stdout}"))
        .to_owned()
}

/// The pid file `infra up` writes for server `index`.
fn pid_of(index: usize) -> u32 {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace_root().join("target"), PathBuf::from);
    let name = if index == 0 { "clickhouse.pid".to_owned() } else { format!("clickhouse-{}.pid", index + 1) };
    let path = target.join("etl-infra").join(name);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (was the server started by infra up?)", path.display()))
        .trim()
        .parse()
        .unwrap()
}

fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill").args([signal, &pid.to_string()]).status().unwrap();
    assert!(status.success(), "kill {signal} {pid}");
}

/// A frozen (SIGSTOPped) server: it accepts connections into the backlog but answers nothing,
/// like a hung server. Dropping the guard resumes it, also when the test fails.
pub struct Frozen(u32);

/// Freezes server `index` until the guard is dropped.
pub fn freeze(index: usize) -> Frozen {
    let pid = pid_of(index);
    signal(pid, "-STOP");
    Frozen(pid)
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

/// Stops server `index` for real (SIGTERM, as `infra down` does) and waits until it is gone.
pub fn stop(index: usize) {
    let pid = pid_of(index);
    signal(pid, "-TERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    while PathBuf::from(format!("/proc/{pid}")).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if PathBuf::from(format!("/proc/{pid}")).exists() {
        signal(pid, "-KILL");
    }
}

/// Starts server `index` again (its data is kept).
pub fn start(index: usize) {
    start_server(index);
}

/// A runtime configuration for these tests: one thread, small chunks and batches, quick retries.
pub fn runtime_config(shards: usize) -> RuntimeConfig {
    RuntimeConfig {
        threads: 1,
        shards,
        backpressure: BackpressureConfig {
            max_inflight_bytes: 64 << 20,
            high_ratio: 0.9,
            low_ratio: 0.5,
            min_pause: Duration::from_millis(20),
        },
        batch: BatchConfig { max_rows: 5_000, max_bytes: 1 << 20, linger: Duration::from_millis(50) },
        chunk_target_bytes: 16 << 10,
        retry: RetryConfig {
            max_attempts: Some(60),
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(500),
        },
        drain_timeout: Duration::from_secs(10),
        ..RuntimeConfig::default()
    }
}

/// The offsets each partition stored.
pub type Stored = Arc<Mutex<BTreeMap<i32, i64>>>;

/// One record of a [`RowsLane`]: an optional key (hashed for the shard) and a RowBinary row.
pub type Row = (Option<Vec<u8>>, Vec<u8>);

/// An in-memory lane whose records are pre-encoded rows, optionally at a bounded rate.
pub struct RowsLane {
    partition: i32,
    rows: Vec<Row>,
    next: usize,
    paused: bool,
    per_second: Option<f64>,
    started: Option<Instant>,
    stored: Stored,
}

impl RowsLane {
    pub fn new(partition: i32, rows: Vec<Row>, per_second: Option<f64>, stored: &Stored) -> Self {
        RowsLane { partition, rows, next: 0, paused: false, per_second, started: None, stored: stored.clone() }
    }
}

impl Lane for RowsLane {
    fn topic(&self) -> &str {
        "orders"
    }

    fn partition(&self) -> i32 {
        self.partition
    }

    fn next(&mut self) -> Option<Result<Record<'_>, SourceError>> {
        if self.paused || self.next >= self.rows.len() {
            return None;
        }
        if let Some(rate) = self.per_second {
            let started = *self.started.get_or_insert_with(Instant::now);
            if self.next as f64 >= started.elapsed().as_secs_f64() * rate {
                return None;
            }
        }
        let offset = self.next;
        self.next += 1;
        let (key, payload) = &self.rows[offset];
        Some(Ok(Record {
            payload: Some(payload),
            key: key.as_deref(),
            topic: "orders",
            partition: self.partition,
            offset: offset as i64,
            timestamp_ms: None,
            headers: etl_runtime::Headers::NONE,
        }))
    }

    fn is_finished(&self) -> bool {
        self.next >= self.rows.len()
    }

    fn pause(&mut self) {
        self.paused = true;
    }

    fn resume(&mut self) {
        self.paused = false;
    }

    fn store_offset(&mut self, next_offset: i64) -> Result<(), SourceError> {
        self.stored.lock().unwrap().insert(self.partition, next_offset);
        Ok(())
    }
}

/// Passes each payload through as one row; the shard is `shard_hash(key) % shards` when the record
/// has a key (what generated code does with a `shard_key`), else round-robin.
pub struct PassRows;

impl Chain for PassRows {
    fn process(&mut self, record: &Record<'_>, out: &mut RowOut<'_>) -> Result<(), RecordError> {
        let shard = match record.key {
            Some(key) => out.shard_for_key_hash(shard_hash(key)),
            None => out.round_robin(),
        };
        out.push_row(shard, |buf| buf.extend_from_slice(record.payload.unwrap_or_default()));
        Ok(())
    }
}

/// How a pipeline run ended.
#[derive(Debug)]
pub struct RunEnd {
    /// The stored next offset of each partition.
    pub stored: BTreeMap<i32, i64>,
    /// The fatal error, if the pipeline stopped on one.
    pub fatal: Option<String>,
    /// The metrics at the end.
    pub metrics: String,
    pub took: Duration,
}

/// Runs `partitions` (rows per partition) through a pipeline into `sink` until every row is
/// acknowledged, a fatal error stops it, or `limit` passes; then shuts it down.
pub fn run_pipeline<K: Sink>(
    config: RuntimeConfig,
    sink: K,
    partitions: Vec<Vec<Row>>,
    per_second: Option<f64>,
    limit: Duration,
) -> RunEnd {
    let started = Instant::now();
    let stored = Stored::default();
    let ends: BTreeMap<i32, i64> =
        partitions.iter().enumerate().map(|(p, rows)| (p as i32, rows.len() as i64)).collect();
    let pipeline = Pipeline::start(config, || PassRows, sink, None).expect("pipeline starts");
    for (partition, rows) in partitions.into_iter().enumerate() {
        pipeline.handle().add_lane(Box::new(RowsLane::new(partition as i32, rows, per_second, &stored)));
    }
    let mut fatal = None;
    while started.elapsed() < limit {
        if *stored.lock().unwrap() == ends {
            break;
        }
        if let Wake::Fatal(message) = pipeline.wait(Duration::from_millis(10)) {
            fatal = Some(message);
            break;
        }
    }
    let metrics = pipeline.metrics_text();
    let report = if fatal.is_some() { pipeline.abort() } else { pipeline.shutdown(Duration::from_secs(10)) };
    let stored = stored.lock().unwrap().clone();
    RunEnd { stored, fatal: fatal.or(report.fatal), metrics, took: started.elapsed() }
}

/// The sum of a metric family's samples whose label set contains every `labels` pair.
pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| line.starts_with(name) && line[name.len()..].starts_with(['{', ' ']))
        .filter(|line| labels.iter().all(|(k, v)| line.contains(&format!("{k}=\"{v}\""))))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
