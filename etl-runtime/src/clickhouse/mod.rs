//! The ClickHouse sink: RowBinary batches inserted over HTTP with the `clickhouse` crate, one
//! replica list per shard with rotation, error classification, row-level isolation of refused
//! rows, and the start-up schema check.
//!
//! The contract (the insert, idempotent retries and the table settings they need, the error
//! classes, refused rows, replicas) is documented on [`ClickhouseSink`], where rustdoc shows it.

mod errors;
mod http;
mod ledger;
mod schema;
#[cfg(test)]
mod wire_tests;

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ::clickhouse::{Client, Compression};
use prometheus::{IntCounter, IntGauge};

use crate::engine::ledger::Ledger;
use crate::engine::metrics::sink_metrics;
use crate::secret::redact_url;
use crate::engine::chunk::Batch;
use crate::engine::errors::{SinkError, SinkErrorKind};
use crate::engine::sink::Sink;

use errors::Class;
pub use ledger::{ExactlyOnceConfig, ledger_table};
use schema::{LiveColumn, RowLayout};

/// The most sub-inserts spent isolating the refused rows of one batch (about `2 × log2(rows)` per
/// refused row).
const MAX_ISOLATION_INSERTS: usize = 256;

/// How long a replica that failed is passed over while another replica of its shard is available.
const REPLICA_COOLDOWN: Duration = Duration::from_secs(30);

/// Settings the sink sets itself; `settings` may not contain them.
const OWNED_SETTINGS: &[&str] = &[
    "wait_end_of_query",
    "insert_deduplication_token",
    "query",
    "database",
    "default_format",
    "decompress",
    "compress",
    "user",
    "password",
];

/// `sink.clickhouse` with its `${VAR}`s resolved: what the generated `main` passes to
/// [`ClickhouseSink::new`].
#[derive(Clone)]
pub struct ClickhouseSinkConfig {
    /// `shards[].replicas`: the replica URLs of each shard (`http://` or `https://`).
    pub shards: Vec<Vec<String>>,
    /// `database`.
    pub database: String,
    /// `table`: the table on every shard (a local table, not a `Distributed` one).
    pub table: String,
    /// `user`.
    pub user: String,
    /// `password`; never logged.
    pub password: String,
    /// `settings`: ClickHouse settings sent with every insert, verbatim.
    pub settings: Vec<(String, String)>,
    /// `timeout`: the bound on one insert request, from connecting to the server's answer.
    pub timeout: Duration,
    /// The columns the pipeline writes, in row order: (name, ClickHouse type).
    pub columns: Vec<(String, String)>,
    /// `ca_file`: PEM certificates trusted for `https://` replicas besides Mozilla's roots.
    pub ca_file: Option<std::path::PathBuf>,
    /// `exactly_once: true`: the ledger's identity (`None`: at-least-once).
    pub exactly_once: Option<ExactlyOnceConfig>,
}

impl fmt::Debug for ClickhouseSinkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shards: Vec<Vec<String>> = self.shards.iter().map(|s| s.iter().map(|u| redact_url(u)).collect()).collect();
        f.debug_struct("ClickhouseSinkConfig")
            .field("shards", &shards)
            .field("database", &self.database)
            .field("table", &self.table)
            .field("user", &self.user)
            .field("password", &if self.password.is_empty() { "" } else { "********" })
            .field("settings", &self.settings)
            .field("timeout", &self.timeout)
            .field("columns", &self.columns)
            .field("ca_file", &self.ca_file)
            .field("exactly_once", &self.exactly_once)
            .finish()
    }
}

/// The ClickHouse sink: RowBinary batches inserted over HTTP, sharded, with replica rotation.
///
/// # One attempt per write
///
/// The runtime's shard worker batches, bounds the concurrent writes per shard
/// (`inflight.max_per_shard`) and retries [`SinkErrorKind::Retryable`] errors with exponential
/// backoff and full jitter. [`ClickhouseSink::write`] therefore makes one attempt (plus, for a data
/// error, the sub-inserts that isolate the refused rows) and classifies the outcome.
///
/// # The insert
///
/// `INSERT INTO db.table (columns…) FORMAT RowBinary` with the generated encoders' bytes as the
/// body, sent through [`clickhouse::Client::insert_formatted_with`] (the crate's raw-bytes insert:
/// it streams the body in 256 KiB frames, each lz4-compressed with ClickHouse's block framing).
/// Every insert carries:
///
/// * `wait_end_of_query=1`, so a 200 answer means the insert finished: Invariant 3's "durably
///   written" is "the INSERT returned success";
/// * `insert_deduplication_token` = the batch token, the same on every attempt of that batch;
/// * the `settings` of the configuration, verbatim (the sink refuses the few it owns);
/// * `user` and `password` (as `X-ClickHouse-User`/`X-ClickHouse-Key` headers; the password never
///   appears in a log line, a metric or an error message);
/// * the per-insert `timeout`, covering the whole request.
///
/// `https://` replica URLs use TLS (rustls with the Mozilla roots of `webpki-roots`, plus the
/// certificates of `ca_file` for a server behind a private CA).
///
/// # Idempotent retries
///
/// A retry of an insert that in fact succeeded (the answer was lost, the timeout fired after the
/// server committed) is dropped by ClickHouse when the table deduplicates inserts. ClickHouse
/// remembers the tokens of the last N inserts into the table, so a retry must come before N other
/// inserts did:
///
/// * `ReplicatedMergeTree`: on by default; N is the table setting
///   `replicated_deduplication_window` (1000 in recent versions, 100 in older ones);
/// * `MergeTree`: off by default; enable it with the table setting
///   `non_replicated_deduplication_window = 1000` (any N > 0);
/// * materialized views on the table deduplicate their own inserts only with the setting
///   `deduplicate_blocks_in_dependent_materialized_views = 1` (put it in `settings`);
/// * with `async_insert = 1`, deduplication also needs `async_insert_deduplicate = 1` (not
///   tested here).
///
/// The sink writes to each shard's local table directly, not through a `Distributed` table. At
/// least once, the token identifies a batch only within one process (the runtime makes it from a
/// random prefix). Under `exactly_once` it is derived from the batch's span and the config hash,
/// and the span is written to the ledger table `<table>_etl_batches` first (`ledger.rs`), so a
/// batch replayed after a crash or a rebalance carries the same token. ClickHouse splits an
/// insert larger than `max_insert_block_size` rows (1,048,576 by default) into blocks with tokens
/// `<token>_0`, `<token>_1`, …; a retry sends the same bytes, so it is cut the same way.
///
/// # Error classes
///
/// Connection errors, timeouts, HTTP 5xx and transient ClickHouse codes (TOO_MANY_PARTS 252,
/// TIMEOUT_EXCEEDED 159, NETWORK_ERROR 210, SOCKET_TIMEOUT 209, MEMORY_LIMIT_EXCEEDED 241,
/// TABLE_IS_READ_ONLY 242, KEEPER_EXCEPTION 999, …) are **retryable**, and so is any code not
/// listed (bounded by `retry.max_attempts`, after which the batch is fatal).
/// Authentication (516, 192-195), access (497, 164), unknown table (60), database (81), column (16),
/// type mismatch (53), syntax and settings errors are **fatal**. Parse, range and constraint errors
/// (CANNOT_PARSE_* 6/27/38/41/72, CANNOT_READ_ALL_DATA 33, INCORRECT_DATA 117,
/// TOO_LARGE_STRING_SIZE 131, VIOLATED_CONSTRAINT 469, …) are **data** errors.
///
/// # Refused rows
///
/// On a data error the sink bisects the batch: it inserts each half under its own derived token
/// (`<token>:<first unit>-<end unit>`, so the sub-inserts are idempotent too), and keeps splitting
/// the halves that fail again until single rows remain. Chunks carry no row index, so the sink finds
/// row boundaries by walking the RowBinary encoding with the declared column types; a chunk whose
/// bytes do not decode as its rows (an encoder and the types disagree) is isolated as a whole.
/// Every row that can be inserted is inserted; the result is [`SinkErrorKind::Data`] with the batch
/// indexes of the refused rows, meant for `errors.policy` (the runtime still treats a data error as
/// fatal, so today the pipeline stops after the accepted rows are written). At most 256
/// sub-inserts are spent on one batch: when ClickHouse refuses more rows than that can isolate,
/// the error is systematic (the table changed) and fatal.
///
/// # Replicas
///
/// Each shard has a current replica. A retryable failure marks the replica unhealthy
/// (`etl_sink_replica_healthy{shard,replica}` = 0) and moves the shard to the next replica, so the
/// runtime's retry goes there; an unhealthy replica is passed over for 30 s, then it is a
/// candidate again. When every replica of a shard failed recently, the current one is tried anyway
/// (the runtime's backoff paces the attempts). Success marks a replica healthy.
pub struct ClickhouseSink {
    shards: Vec<Shard>,
    database: String,
    table: String,
    columns: Vec<(String, String)>,
    settings: Vec<(String, String)>,
    insert_sql: String,
    layout: Option<RowLayout>,
    timeout: Duration,
    /// Kept only to scrub it from error texts that might echo a request.
    password: String,
    /// Exactly-once: the ledger of batch spans.
    ledger: Option<std::sync::Arc<ledger::ClickhouseLedger>>,
}

impl fmt::Debug for ClickhouseSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClickhouseSink")
            .field("table", &format!("{}.{}", self.database, self.table))
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
}

struct Shard {
    replicas: Vec<Replica>,
    current: AtomicUsize,
    errors: [IntCounter; 3],
}

struct Replica {
    client: Client,
    /// The URL without credentials or query, for logs and the metric label.
    shown: String,
    failed_at: Mutex<Option<Instant>>,
    healthy: IntGauge,
}

/// A failed request, classified, its message already scrubbed of the password.
#[derive(Debug)]
struct Failure {
    class: Class,
    message: String,
}

impl Failure {
    /// `error`, classified, its message scrubbed of `password`.
    fn of(error: &::clickhouse::error::Error, password: &str) -> Failure {
        let message = crate::secret::redact_message(&errors::describe(error), [password]);
        Failure { class: errors::classify(error), message }
    }

    fn into_sink_error(self) -> SinkError {
        match self.class {
            Class::Retryable => SinkError::retryable(self.message),
            // A data error only reaches here from a request that is not an insert of rows.
            Class::Fatal | Class::Data => SinkError::fatal(self.message),
        }
    }
}

/// A slice of a batch that is inserted or refused as a whole: one row, or one chunk whose rows
/// could not be delimited.
struct Unit<'a> {
    bytes: &'a [u8],
    first_row: u64,
    rows: u64,
}

impl ClickhouseSink {
    /// Checks the configuration and prepares one HTTP client per replica. Nothing is contacted yet:
    /// [`Sink::check`] does that. Errors are fatal configuration errors.
    pub fn new(config: ClickhouseSinkConfig) -> Result<Self, SinkError> {
        if config.shards.is_empty() {
            return Err(SinkError::fatal("sink.clickhouse.shards is empty"));
        }
        if config.columns.is_empty() {
            return Err(SinkError::fatal("the pipeline writes no column"));
        }
        for (key, value) in &config.settings {
            if OWNED_SETTINGS.contains(&key.as_str()) {
                return Err(SinkError::fatal(format!(
                    "sink.clickhouse.settings.{key}: the sink sets `{key}` itself; remove it"
                )));
            }
            // Without waiting, an async insert returns before the data is written, which would
            // break Invariant 3 (durable = the INSERT returned success).
            if key == "wait_for_async_insert" && value.trim() == "0" {
                return Err(SinkError::fatal(
                    "sink.clickhouse.settings.wait_for_async_insert: 0 acknowledges inserts before they are \
                     written; remove it (async inserts are fine when they are waited for)",
                ));
            }
        }
        let layout = RowLayout::new(&config.columns);
        if layout.is_none() {
            tracing::warn!(
                columns = ?config.columns,
                "a column type has no known RowBinary layout; refused rows will be isolated by chunk, not by row"
            );
        }
        let metrics = sink_metrics();
        let connector = http::Connector::new(config.ca_file.as_deref())?;
        let mut shards = Vec::with_capacity(config.shards.len());
        for (index, urls) in config.shards.iter().enumerate() {
            if urls.is_empty() {
                return Err(SinkError::fatal(format!("sink.clickhouse.shards[{index}].replicas is empty")));
            }
            let label = index.to_string();
            let mut replicas = Vec::with_capacity(urls.len());
            for url in urls {
                let shown = redact_url(url);
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(SinkError::fatal(format!(
                        "sink.clickhouse.shards[{index}].replicas: `{shown}` is not an http:// or https:// URL"
                    )));
                }
                let mut client = connector
                    .client()
                    .with_url(url.as_str())
                    .with_database(config.database.as_str())
                    .with_compression(Compression::Lz4)
                    .with_user(config.user.as_str());
                if !config.password.is_empty() {
                    client = client.with_password(config.password.as_str());
                }
                let healthy = metrics.replica_healthy.with_label_values(&[label.as_str(), shown.as_str()]);
                healthy.set(1);
                replicas.push(Replica { client, shown, failed_at: Mutex::new(None), healthy });
            }
            let errors = [Class::Retryable, Class::Fatal, Class::Data]
                .map(|class| metrics.errors_by_class.with_label_values(&[label.as_str(), class.label()]));
            shards.push(Shard { replicas, current: AtomicUsize::new(0), errors });
        }
        let ledger = config.exactly_once.map(|eo| {
            std::sync::Arc::new(ledger::ClickhouseLedger {
                shards: shards
                    .iter()
                    .map(|s| s.replicas.iter().map(|r| (r.client.clone(), r.shown.clone())).collect())
                    .collect(),
                database: config.database.clone(),
                table: config.table.clone(),
                config: eo,
                timeout: config.timeout,
                password: config.password.clone(),
            })
        });
        Ok(ClickhouseSink {
            ledger,
            shards,
            insert_sql: schema::insert_sql(&config.database, &config.table, &config.columns),
            database: config.database,
            table: config.table,
            columns: config.columns,
            settings: config.settings,
            layout,
            timeout: config.timeout,
            password: config.password,
        })
    }

    /// One INSERT of `parts` (whole rows, back to back) under `token`, on the shard's current
    /// replica, bounded by the timeout; the replica's health follows the outcome.
    async fn insert(&self, shard: usize, token: &str, parts: &[&[u8]]) -> Result<(), Failure> {
        let state = &self.shards[shard];
        let index = state.pick();
        let replica = &state.replicas[index];
        let mut insert = replica
            .client
            .insert_formatted_with(self.insert_sql.as_str())
            .with_setting("wait_end_of_query", "1")
            .with_setting("insert_deduplication_token", token);
        for (key, value) in &self.settings {
            insert = insert.with_setting(key.as_str(), value.as_str());
        }
        let request = async move {
            let mut insert = insert.buffered();
            for part in parts {
                let mut rest = *part;
                while !rest.is_empty() {
                    let written = insert.write(rest).await?;
                    rest = &rest[written..];
                }
            }
            insert.end().await
        };
        let result = match tokio::time::timeout(self.timeout, request).await {
            Ok(result) => result,
            // Dropping the request aborts it; the retry carries the same token in case the server
            // still completes this one.
            Err(_) => Err(::clickhouse::error::Error::TimedOut),
        };
        match result {
            Ok(()) => {
                state.succeeded(index);
                Ok(())
            }
            Err(error) => {
                let failure = self.failure(&error);
                state.errors[failure.class.index()].inc();
                if failure.class == Class::Retryable {
                    state.failed(index);
                }
                tracing::warn!(
                    shard,
                    replica = %replica.shown,
                    token,
                    class = failure.class.label(),
                    error = %failure.message,
                    "ClickHouse insert failed"
                );
                Err(failure)
            }
        }
    }

    fn failure(&self, error: &::clickhouse::error::Error) -> Failure {
        Failure::of(error, &self.password)
    }

    /// Splits a batch into the units refused rows are isolated by: rows where the encoding can be
    /// walked, whole chunks elsewhere.
    fn units<'a>(&self, batch: &'a Batch) -> Vec<Unit<'a>> {
        let mut units = Vec::new();
        let mut first_row = 0u64;
        for chunk in batch.chunks() {
            let rows = u64::from(chunk.rows());
            let ends = self.layout.as_ref().and_then(|layout| layout.row_ends(chunk.bytes(), chunk.rows() as usize));
            match ends {
                Some(ends) => {
                    let mut start = 0;
                    for (i, end) in ends.into_iter().enumerate() {
                        units.push(Unit {
                            bytes: &chunk.bytes()[start..end],
                            first_row: first_row + i as u64,
                            rows: 1,
                        });
                        start = end;
                    }
                }
                None => {
                    if self.layout.is_some() {
                        tracing::warn!(
                            shard = batch.shard(),
                            partition = chunk.partition(),
                            first_offset = chunk.first_offset(),
                            "chunk does not decode as its rows of the declared column types; isolating it whole"
                        );
                    }
                    units.push(Unit { bytes: chunk.bytes(), first_row, rows });
                }
            }
            first_row += rows;
        }
        units
    }

    /// Bisects a batch ClickHouse refused: inserts what it accepts, returns the refused rows as a
    /// [`SinkErrorKind::Data`] error, or `Ok` if every row went in after all.
    async fn isolate(&self, shard: usize, batch: &Batch, first: Failure) -> Result<(), SinkError> {
        let units = self.units(batch);
        tracing::info!(
            shard,
            token = batch.token(),
            rows = batch.rows(),
            units = units.len(),
            "ClickHouse refused data; isolating the refused rows"
        );
        let mut refused: Vec<u64> = Vec::new();
        let mut failing = vec![(0, units.len())];
        let mut inserts = 0;
        while let Some((lo, hi)) = failing.pop() {
            if hi - lo <= 1 {
                // Tested alone (or the whole batch was this one unit): refused.
                if let Some(unit) = units.get(lo) {
                    refused.extend(unit.first_row..unit.first_row + unit.rows);
                }
                continue;
            }
            let mid = lo + (hi - lo) / 2;
            for (a, b) in [(lo, mid), (mid, hi)] {
                inserts += 1;
                if inserts > MAX_ISOLATION_INSERTS {
                    return Err(SinkError::fatal(format!(
                        "ClickHouse refuses too many rows of batch {} on shard {shard} to isolate them with \
                         {MAX_ISOLATION_INSERTS} inserts (the table or the data changed systematically): {}",
                        batch.token(),
                        first.message
                    )));
                }
                let parts: Vec<&[u8]> = units[a..b].iter().map(|u| u.bytes).collect();
                let token = format!("{}:{a}-{b}", batch.token());
                match self.insert(shard, &token, &parts).await {
                    Ok(()) => {}
                    Err(failure) if failure.class == Class::Data => failing.push((a, b)),
                    Err(failure) => return Err(failure.into_sink_error()),
                }
            }
        }
        if refused.is_empty() {
            tracing::info!(shard, token = batch.token(), inserts, "every row was accepted in smaller inserts");
            return Ok(());
        }
        refused.sort_unstable();
        tracing::warn!(
            shard,
            token = batch.token(),
            refused = refused.len(),
            rows = batch.rows(),
            inserts,
            "ClickHouse refused rows; the others are written"
        );
        Err(SinkError {
            message: format!(
                "ClickHouse refused {} of {} rows of batch {} on shard {shard} (the others are written): {}",
                refused.len(),
                batch.rows(),
                batch.token(),
                first.message
            ),
            kind: SinkErrorKind::Data { rows: refused },
        })
    }

    /// Why the target table does not deduplicate inserts on one replica of each shard (empty: it
    /// does everywhere), each problem prefixed with its shard. A table that does not remembers no
    /// insert token, so a retry of an insert whose answer was lost after the server committed it
    /// lands twice.
    async fn deduplication_problems(&self) -> Result<Vec<String>, SinkError> {
        let mut problems = Vec::new();
        for (index, shard) in self.shards.iter().enumerate() {
            let replica = &shard.replicas[shard.pick()];
            let at = format!("shard {index} ({})", replica.shown);
            let query = replica
                .client
                .query_raw(
                    "SELECT engine, create_table_query FROM system.tables \
                     WHERE database = {db:String} AND name = {table:String}",
                )
                .param("db", self.database.as_str())
                .param("table", self.table.as_str());
            let definition = async { query.fetch_bytes("JSONEachRow")?.collect().await };
            let definition = match tokio::time::timeout(self.timeout, definition).await {
                Ok(Ok(bytes)) => bytes,
                Ok(Err(error)) => return Err(self.failure(&error).into_sink_error()),
                Err(_) => return Err(SinkError::retryable(format!("{at}: reading system.tables timed out"))),
            };
            if let Ok(row) = serde_json::from_slice::<serde_json::Value>(&definition) {
                let engine = row["engine"].as_str().unwrap_or_default();
                let create = row["create_table_query"].as_str().unwrap_or_default();
                if let Some(problem) = ledger::deduplication_problem(engine, create) {
                    problems.push(format!("{at}: {problem}"));
                }
            }
        }
        Ok(problems)
    }

    /// At-least-once: a table that does not deduplicate inserts still works, but a retried insert
    /// may land twice, so the start-up check warns (and does not refuse). Not being able to tell
    /// (no grant on `system.tables`, a slow answer) is not a reason to refuse either.
    async fn warn_unless_deduplicating(&self) -> Result<(), SinkError> {
        let problems = match self.deduplication_problems().await {
            Ok(problems) => problems,
            Err(error) => {
                tracing::warn!(%error, "could not read the table's definition to check that it deduplicates inserts");
                return Ok(());
            }
        };
        for problem in problems {
            tracing::warn!(
                table = %format!("{}.{}", self.database, self.table),
                %problem,
                "the table does not deduplicate inserts: an insert retried after a lost answer can land twice; \
                 create it with the CREATE TABLE of `gen --ddl`"
            );
        }
        Ok(())
    }

    /// Exactly-once: on one replica of every shard, the target table must deduplicate inserts and
    /// the ledger table must exist with its columns. Either problem is fatal: replays would keep
    /// duplicates, or no span could be recorded.
    async fn check_exactly_once(&self) -> Result<(), SinkError> {
        let ledger_name = ledger_table(&self.table);
        let expected: Vec<(String, String)> =
            ledger::LEDGER_COLUMNS.iter().map(|(n, t)| ((*n).to_owned(), (*t).to_owned())).collect();
        let mut problems: Vec<String> = self
            .deduplication_problems()
            .await?
            .into_iter()
            .map(|p| format!("exactly_once needs table {}.{} to deduplicate inserts: {p}", self.database, self.table))
            .collect();
        for (index, shard) in self.shards.iter().enumerate() {
            let replica = &shard.replicas[shard.pick()];
            let at = format!("shard {index} ({})", replica.shown);
            let live =
                self.columns_of(replica, &ledger_name).await.map_err(|error| self.failure(&error).into_sink_error())?;
            if live.is_empty() {
                problems.push(format!(
                    "{at}: the exactly-once ledger table {}.{ledger_name} does not exist; create it with the CREATE \
                     TABLE that `cargo xtask gen pipeline.yaml --ddl` prints",
                    self.database
                ));
            } else {
                let found = schema::compare(&expected, &live);
                problems.extend(found.into_iter().map(|d| format!("{at}: ledger table {ledger_name}: {d}")));
            }
        }
        if problems.is_empty() {
            tracing::info!(ledger = %ledger_name, "exactly-once: the table deduplicates inserts and the ledger is in place");
            Ok(())
        } else {
            Err(SinkError::fatal(problems.join("\n  ")))
        }
    }

    /// The live columns of the table on one replica; empty when the table does not exist.
    async fn live_columns(&self, replica: &Replica) -> Result<Vec<LiveColumn>, ::clickhouse::error::Error> {
        self.columns_of(replica, &self.table).await
    }

    /// The live columns of `table` on one replica; empty when it does not exist.
    async fn columns_of(&self, replica: &Replica, table: &str) -> Result<Vec<LiveColumn>, ::clickhouse::error::Error> {
        let query = replica
            .client
            .query_raw(
                "SELECT name, type, default_kind FROM system.columns \
                 WHERE database = {db:String} AND table = {table:String} ORDER BY position",
            )
            .param("db", self.database.as_str())
            .param("table", table);
        let bytes = query.fetch_bytes("JSONEachRow")?.collect().await?;
        let mut columns = Vec::new();
        for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let row: serde_json::Value = serde_json::from_slice(line)
                .map_err(|e| ::clickhouse::error::Error::Custom(format!("unreadable system.columns row: {e}")))?;
            let text = |key: &str| row[key].as_str().unwrap_or_default().to_owned();
            columns.push(LiveColumn { name: text("name"), ty: text("type"), default_kind: text("default_kind") });
        }
        Ok(columns)
    }
}

impl Shard {
    /// The replica to use: the current one unless it failed within the cooldown and another one
    /// did not.
    fn pick(&self) -> usize {
        let count = self.replicas.len();
        let start = self.current.load(Ordering::Relaxed) % count;
        for step in 0..count {
            let index = (start + step) % count;
            if self.replicas[index].available() {
                if step > 0 {
                    self.current.store(index, Ordering::Relaxed);
                }
                return index;
            }
        }
        start
    }

    fn failed(&self, index: usize) {
        let replica = &self.replicas[index];
        *replica.failed_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        replica.healthy.set(0);
        let next = (index + 1) % self.replicas.len();
        // Only the first of several concurrent failures on this replica moves the shard on.
        if next != index && self.current.compare_exchange(index, next, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            tracing::info!(from = %replica.shown, to = %self.replicas[next].shown, "rotating to the next replica");
        }
    }

    fn succeeded(&self, index: usize) {
        let replica = &self.replicas[index];
        *replica.failed_at.lock().unwrap_or_else(|e| e.into_inner()) = None;
        replica.healthy.set(1);
    }
}

impl Replica {
    fn available(&self) -> bool {
        self.failed_at.lock().unwrap_or_else(|e| e.into_inner()).is_none_or(|at| at.elapsed() >= REPLICA_COOLDOWN)
    }
}

impl Sink for ClickhouseSink {
    async fn write(&self, shard: usize, batch: &Batch) -> Result<(), SinkError> {
        if shard >= self.shards.len() {
            return Err(SinkError::fatal(format!(
                "batch for shard {shard}, but sink.clickhouse has {} shards",
                self.shards.len()
            )));
        }
        let parts: Vec<&[u8]> = batch.chunks().iter().map(|c| c.bytes()).collect();
        match self.insert(shard, batch.token(), &parts).await {
            Ok(()) => Ok(()),
            Err(failure) if failure.class == Class::Data => self.isolate(shard, batch, failure).await,
            Err(failure) => Err(failure.into_sink_error()),
        }
    }

    /// Reaches every shard (at least one replica each) and compares the live table on each reached
    /// replica with the pipeline's columns. A difference or a missing table is fatal and lists
    /// every difference; a shard with no reachable replica is retryable.
    fn ledger(&self) -> Option<std::sync::Arc<dyn Ledger>> {
        self.ledger.clone().map(|l| l as std::sync::Arc<dyn Ledger>)
    }

    async fn check(&self) -> Result<(), SinkError> {
        let table = format!("{}.{}", self.database, self.table);
        let mut differences = Vec::new();
        let mut unreachable = Vec::new();
        for (index, shard) in self.shards.iter().enumerate() {
            let mut reached = false;
            let mut last_error = String::new();
            for (r, replica) in shard.replicas.iter().enumerate() {
                let live = match tokio::time::timeout(self.timeout, self.live_columns(replica)).await {
                    Ok(live) => live,
                    Err(_) => Err(::clickhouse::error::Error::TimedOut),
                };
                match live {
                    Ok(live) => {
                        shard.succeeded(r);
                        reached = true;
                        let at = format!("shard {index} ({})", replica.shown);
                        if live.is_empty() {
                            differences.push(format!(
                                "{at}: table {table} does not exist; create it with the CREATE TABLE that \
                                 `cargo xtask gen pipeline.yaml --ddl` prints"
                            ));
                        } else {
                            let found = schema::compare(&self.columns, &live);
                            differences.extend(found.into_iter().map(|d| format!("{at}: {d}")));
                        }
                    }
                    Err(error) => {
                        let failure = self.failure(&error);
                        if failure.class == Class::Fatal {
                            return Err(SinkError::fatal(format!(
                                "shard {index} ({}): {}",
                                replica.shown, failure.message
                            )));
                        }
                        shard.failed(r);
                        last_error = format!("{}: {}", replica.shown, failure.message);
                    }
                }
            }
            if !reached {
                unreachable.push(format!("shard {index}: no replica reachable (last: {last_error})"));
            }
        }
        if !differences.is_empty() {
            return Err(SinkError::fatal(format!(
                "the ClickHouse table {table} does not match the pipeline's columns:\n  {}",
                differences.join("\n  ")
            )));
        }
        if !unreachable.is_empty() {
            return Err(SinkError::retryable(unreachable.join("; ")));
        }
        if self.ledger.is_some() {
            self.check_exactly_once().await?;
        } else {
            self.warn_unless_deduplicating().await?;
        }
        tracing::info!(table = %table, shards = self.shards.len(), "ClickHouse table matches the pipeline's columns");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ClickhouseSinkConfig {
        ClickhouseSinkConfig {
            shards: vec![vec!["http://a:8123".into(), "http://b:8123".into()]],
            database: "default".into(),
            table: "t".into(),
            user: "default".into(),
            password: "hunter2".into(),
            settings: vec![],
            timeout: Duration::from_secs(1),
            columns: vec![("id".into(), "Int64".into())],
            ca_file: None,
            exactly_once: None,
        }
    }

    #[test]
    fn urls_are_shown_without_credentials() {
        let shown = format!("{:?}", ClickhouseSinkConfig { password: "hunter2".into(), ..config() });
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    // The configuration errors `new` catches, each naming the key.
    #[test]
    fn new_rejects_bad_configuration() {
        let err = |config| ClickhouseSink::new(config).unwrap_err().message;
        assert!(err(ClickhouseSinkConfig { shards: vec![], ..config() }).contains("shards is empty"));
        assert!(err(ClickhouseSinkConfig { shards: vec![vec![]], ..config() }).contains("shards[0].replicas"));
        assert!(
            err(ClickhouseSinkConfig { shards: vec![vec!["tcp://x:9000".into()]], ..config() }).contains("tcp://x")
        );
        let owned = ClickhouseSinkConfig { settings: vec![("wait_end_of_query".into(), "0".into())], ..config() };
        assert!(err(owned).contains("settings.wait_end_of_query"));
        let not_waited =
            ClickhouseSinkConfig { settings: vec![("wait_for_async_insert".into(), "0".into())], ..config() };
        assert!(err(not_waited).contains("wait_for_async_insert"));
        assert!(ClickhouseSink::new(config()).is_ok());
    }

    // A retryable failure moves the shard to the next replica and marks the failed one unhealthy;
    // while it cools down it is passed over, and success marks a replica healthy again.
    #[test]
    fn replicas_rotate_on_failure() {
        let sink = ClickhouseSink::new(config()).unwrap();
        let shard = &sink.shards[0];
        assert_eq!(shard.pick(), 0);
        shard.failed(0);
        assert_eq!(shard.replicas[0].healthy.get(), 0);
        assert_eq!(shard.pick(), 1);
        shard.failed(1);
        // Both failed recently: the current one (1) is tried anyway, and failing moved it to 0,
        // which is also cooling down, so 0 is tried.
        assert_eq!(shard.pick(), 0);
        shard.succeeded(0);
        assert_eq!(shard.replicas[0].healthy.get(), 1);
        assert_eq!(shard.pick(), 0);
    }
}
