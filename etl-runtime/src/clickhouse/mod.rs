//! The ClickHouse sink: RowBinary batches inserted over HTTP with the `clickhouse` crate. This
//! file holds the sink and its `Sink` impl; [`config`] the configuration and what of it is shown,
//! [`insert`] one insert and its failure, [`isolate`] refused-row bisection, [`replicas`] replica
//! rotation, [`check`] the start-up checks, [`ledger_table`](mod@ledger_table) the exactly-once
//! ledger table, [`table_columns`] the column types, their comparison and the row layout,
//! [`native`] the RowBinary-to-Native transposition, [`errors`] the error classes, [`http`] the
//! HTTP client.
//!
//! The contract (the insert, idempotent retries and the table settings they need, the error
//! classes, refused rows, replicas) is documented on [`ClickhouseSink`], where rustdoc shows it.

mod check;
mod config;
mod errors;
mod http;
mod insert;
mod isolate;
mod ledger_table;
pub(crate) mod native;
mod replicas;
mod table_columns;
#[cfg(test)]
mod wire_tests;

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use ::clickhouse::Compression;

use crate::engine::chunk::Batch;
use crate::engine::errors::SinkError;
use crate::engine::ledger::Ledger;
use crate::engine::metrics::sink_metrics;
use crate::engine::sink::Sink;
use crate::secret::redact_url;

use config::OWNED_SETTINGS;

/// The RowBinary setting that reads a `JSON` column's values as their text.
const JSON_AS_STRING: &str = "input_format_binary_read_json_as_string";
pub use config::{ClickhouseSinkConfig, InsertCompression, InsertFormat};
use errors::Class;
pub use ledger_table::{ExactlyOnceConfig, ledger_table};
use replicas::{Replica, Shard};
use table_columns::RowLayout;

/// The ClickHouse sink: RowBinary batches inserted over HTTP, sharded, with replica rotation.
///
/// # One attempt per write
///
/// The runtime's shard worker batches, bounds the concurrent writes per shard
/// (`inflight.max_per_shard`) and retries [`SinkErrorKind::Retryable`](crate::SinkErrorKind::Retryable) errors with exponential
/// backoff and full jitter. [`ClickhouseSink::write`] therefore makes one attempt (plus, for a data
/// error, the sub-inserts that isolate the refused rows) and classifies the outcome.
///
/// # The insert
///
/// `INSERT INTO db.table (columns…) FORMAT RowBinary` with the generated encoders' bytes as the
/// body, sent through [`clickhouse::Client::insert_formatted_with`] (the crate's raw-bytes insert:
/// it streams the body in 256 KiB frames, each compressed (lz4 by default, zstd, or not at all:
/// `compression`) with ClickHouse's block framing).
/// Every insert carries:
///
/// * `wait_end_of_query=1`, so a 200 answer means the insert finished: Invariant 3's "durably
///   written" is "the INSERT returned success";
/// * `insert_deduplication_token` = the batch token, the same on every attempt of that batch;
/// * the `settings` of the configuration, verbatim (the sink refuses the few it owns);
/// * `async_insert=0` unless those settings name `async_insert`: a server whose default turns
///   async inserts on cannot change what an acknowledgement means;
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
/// and the span is written to the ledger table `<table>_etl_batches` first (`ledger_table.rs`), so a
/// batch replayed after a crash or a rebalance carries the same token. ClickHouse splits an
/// insert larger than `max_insert_block_size` rows (1,048,576 by default) into blocks with tokens
/// `<token>_0`, `<token>_1`, …; a retry sends the same bytes, so it is cut the same way.
///
/// # Error classes
///
/// Connection errors, timeouts, HTTP 5xx and transient ClickHouse codes (TOO_MANY_PARTS 252,
/// TIMEOUT_EXCEEDED 159, NETWORK_ERROR 210, SOCKET_TIMEOUT 209, MEMORY_LIMIT_EXCEEDED 241,
/// TABLE_IS_READ_ONLY 242, KEEPER_EXCEPTION 999, …) are **retryable**, and so is any code not
/// listed (without limit by default; `retry.max_attempts` can bound them, after which the batch is
/// fatal).
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
/// Every row that can be inserted is inserted; the result is [`SinkErrorKind::Data`](crate::SinkErrorKind::Data) with the batch
/// indexes of the refused rows, meant for `errors.policy` (the runtime still treats a data error as
/// fatal, so today the pipeline stops after the accepted rows are written). At most 256
/// sub-inserts are spent on one batch: when ClickHouse refuses more rows than that can isolate,
/// the error is systematic (the table changed) and fatal.
///
/// # Replicas
///
/// Each shard has a current replica. A retryable failure (refused, timed out, 5xx, a transient
/// code) marks the replica unhealthy (`etl_sink_replica_healthy{shard,replica}` = 0) and moves the
/// shard to the next replica, so the runtime's retry goes there: a hung replica costs one insert
/// `timeout`, then the inserts go elsewhere. An unhealthy replica is passed over for 30 s; then
/// the next insert on its shard, or the sink's idle prober (every 10 s from the first check on,
/// inserts or not), starts a probe (within `timeout`, as a task of its own: a query that fails on
/// a replica whose copy of the table is read-only) that marks it healthy again or starts a new
/// cooldown, so the gauge tells the truth about replicas nobody writes to. The shard stays on the replica that works; a recovered one is used
/// again when that one fails. When every replica of a shard failed recently, the current one is
/// tried anyway (the runtime's backoff paces the attempts). The exactly-once ledger rotates over
/// the same replicas, starting at the current one. Success marks a replica healthy.
pub struct ClickhouseSink {
    /// Shared with the ledger (which rotates over the same replicas) and the replica probes.
    shards: std::sync::Arc<Vec<Shard>>,
    database: String,
    table: String,
    columns: Vec<(String, String)>,
    settings: Vec<(String, String)>,
    insert_sql: String,
    /// The query that probes a failed replica (`replicas::probe_query`).
    probe: std::sync::Arc<str>,
    /// Whether `replicas::probe_while_idle` runs (started by the first check).
    idle_probes: std::sync::atomic::AtomicBool,
    layout: Option<RowLayout>,
    /// `format: native`: an empty encoder of the columns, and the ones inserts have finished
    /// with, kept so their buffers are reused.
    native: Option<(native::NativeEncoder, Mutex<Vec<native::NativeEncoder>>)>,
    timeout: Duration,
    /// Kept only to scrub it from error texts that might echo a request.
    password: String,
    /// Exactly-once: the ledger of batch spans.
    ledger: Option<std::sync::Arc<ledger_table::ClickhouseLedger>>,
}

impl fmt::Debug for ClickhouseSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClickhouseSink")
            .field("table", &format!("{}.{}", self.database, self.table))
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
}

impl ClickhouseSink {
    /// Checks the configuration and prepares one HTTP client per replica. Nothing is contacted yet:
    /// [`Sink::check`] does that. Errors are fatal configuration errors.
    pub fn new(config: ClickhouseSinkConfig) -> Result<Self, SinkError> {
        Self::for_output("", config)
    }

    /// [`ClickhouseSink::new`] for the output `output` of a pipeline with several (its replica
    /// health and error metrics carry its name in their `output` label).
    pub fn for_output(output: &str, config: ClickhouseSinkConfig) -> Result<Self, SinkError> {
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
        // A server or user profile whose default turns async inserts on would otherwise decide
        // what an acknowledgement means (with `wait_for_async_insert = 0` there, one that comes
        // before the rows are written). Unless the pipeline chose async inserts itself, every
        // insert pins them off, so a 200 answer means what Invariant 3 needs on any server.
        let mut settings = config.settings;
        if !settings.iter().any(|(key, _)| key == "async_insert") {
            settings.push(("async_insert".to_owned(), "0".to_owned()));
        }
        // A `JSON` column's values are the objects' text; RowBinary reads them so only when told
        // (Native sends such a column as `String`, which the server converts).
        if config.format == InsertFormat::RowBinary
            && config.columns.iter().any(|(_, ty)| table_columns::mentions_json(ty))
            && !settings.iter().any(|(key, _)| key == JSON_AS_STRING)
        {
            settings.push((JSON_AS_STRING.to_owned(), "1".to_owned()));
        }
        let layout = RowLayout::new(&config.columns);
        if layout.is_none() {
            tracing::warn!(
                columns = ?config.columns,
                "a column type has no known RowBinary layout; refused rows will be isolated by chunk, not by row"
            );
        }
        let native = match config.format {
            InsertFormat::RowBinary => None,
            InsertFormat::Native => match native::NativeEncoder::new(&config.columns) {
                Some(encoder) => Some((encoder, Mutex::new(Vec::new()))),
                None => {
                    return Err(SinkError::fatal(format!(
                        "sink.clickhouse.format: native needs the encoding of every column type, and one of {:?} \
                         has none known to the sink; use `format: rowbinary`",
                        config.columns.iter().map(|(_, ty)| ty.as_str()).collect::<Vec<_>>()
                    )));
                }
            },
        };
        let metrics = sink_metrics();
        let client_auth = match (&config.client_cert, &config.client_key) {
            (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
            (None, None) => None,
            _ => {
                return Err(SinkError::fatal(
                    "sink.clickhouse.client_cert and client_key go together: set both for mutual TLS, or neither",
                ));
            }
        };
        let connector = http::Connector::new(config.ca_file.as_deref(), client_auth)?;
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
                    .with_compression(match config.compression {
                        InsertCompression::Lz4 => Compression::Lz4,
                        InsertCompression::Zstd => Compression::zstd(),
                        InsertCompression::None => Compression::None,
                    })
                    .with_user(config.user.as_str());
                if !config.password.is_empty() {
                    client = client.with_password(config.password.as_str());
                }
                let healthy = metrics.replica_healthy.with_label_values(&[output, label.as_str(), shown.as_str()]);
                healthy.set(1);
                replicas.push(Replica {
                    client,
                    shown,
                    failed_at: Mutex::new(None),
                    healthy,
                    probing: std::sync::atomic::AtomicBool::new(false),
                });
            }
            let errors = [Class::Retryable, Class::Fatal, Class::Data]
                .map(|class| metrics.errors_by_class.with_label_values(&[output, label.as_str(), class.label()]));
            shards.push(Shard { replicas, current: AtomicUsize::new(0), errors });
        }
        let shards = std::sync::Arc::new(shards);
        let ledger = config.exactly_once.map(|eo| {
            std::sync::Arc::new(ledger_table::ClickhouseLedger {
                shards: shards.clone(),
                database: config.database.clone(),
                table: config.table.clone(),
                config: eo,
                timeout: config.timeout,
                password: config.password.clone(),
                generations: Default::default(),
            })
        });
        Ok(ClickhouseSink {
            ledger,
            shards,
            insert_sql: table_columns::insert_sql(&config.database, &config.table, &config.columns, config.format),
            probe: replicas::probe_query(&config.database, &config.table).into(),
            idle_probes: std::sync::atomic::AtomicBool::new(false),
            database: config.database,
            table: config.table,
            columns: config.columns,
            settings,
            layout,
            native,
            timeout: config.timeout,
            password: config.password,
        })
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

    fn ledger(&self) -> Option<std::sync::Arc<dyn Ledger>> {
        self.ledger.clone().map(|l| l as std::sync::Arc<dyn Ledger>)
    }

    async fn check(&self) -> Result<(), SinkError> {
        // The start-up check runs on the sink's runtime, where the idle prober then lives.
        if !self.idle_probes.swap(true, std::sync::atomic::Ordering::AcqRel) {
            replicas::probe_while_idle(&self.shards, &self.probe, self.timeout);
        }
        self.check_table().await
    }

    // The write path compiles here, once; see `Sink::erase`.
    #[inline(never)]
    fn erase(self) -> crate::engine::sink::ErasedSink {
        crate::engine::sink::ErasedSink::new(self)
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
            format: InsertFormat::Native,
            compression: InsertCompression::Lz4,
            timeout: Duration::from_secs(1),
            columns: vec![("id".into(), "Int64".into())],
            ca_file: None,
            client_cert: None,
            client_key: None,
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
