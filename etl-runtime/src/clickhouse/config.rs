//! `sink.clickhouse` as the generated `main` hands it over, and what of it may be shown.

use std::fmt;
use std::time::Duration;

use crate::clickhouse::ledger_table::ExactlyOnceConfig;
use crate::secret::redact_url;

/// Settings the sink sets itself; `settings` may not contain them.
pub(super) const OWNED_SETTINGS: &[&str] = &[
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
/// [`ClickhouseSink::new`](super::ClickhouseSink::new).
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
    /// `format`: how rows travel in insert bodies.
    pub format: InsertFormat,
    /// `compression`: how insert bodies are compressed.
    pub compression: InsertCompression,
    /// `timeout`: the bound on one insert request, from connecting to the server's answer.
    pub timeout: Duration,
    /// The columns the pipeline writes, in row order: (name, ClickHouse type).
    pub columns: Vec<(String, String)>,
    /// `ca_file`: PEM certificates trusted for `https://` replicas besides Mozilla's roots.
    pub ca_file: Option<std::path::PathBuf>,
    /// `client_cert`: the PEM certificate chain this client shows to `https://` replicas that
    /// require one (mutual TLS); always with `client_key`.
    pub client_cert: Option<std::path::PathBuf>,
    /// `client_key`: the PEM private key of `client_cert`. Its path may be shown, never its
    /// contents.
    pub client_key: Option<std::path::PathBuf>,
    /// `exactly_once: true`: the ledger's identity (`None`: at-least-once).
    pub exactly_once: Option<ExactlyOnceConfig>,
}

/// `sink.clickhouse.format`: the ClickHouse input format of insert bodies. Batches are RowBinary
/// either way (chunks, refused-row isolation and exactly-once replays work on rows); `Native` is
/// what the sink sends, made from them as the body streams.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum InsertFormat {
    /// Rows as the generated encoders wrote them; ClickHouse parses every value of every row.
    RowBinary,
    /// Columns: more work here (one copy of every value), much less in ClickHouse.
    #[default]
    Native,
}

/// `sink.clickhouse.compression`: how insert bodies travel. Each is ClickHouse's own block
/// framing (a checksum, a method byte, the sizes) over HTTP with `decompress=1`, or the plain body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum InsertCompression {
    /// LZ4 blocks: cheap to compress and to decompress.
    #[default]
    Lz4,
    /// Zstandard blocks at level 3: smaller than LZ4, more CPU on both sides.
    Zstd,
    /// The body as it is.
    None,
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
            .field("format", &self.format)
            .field("compression", &self.compression)
            .field("timeout", &self.timeout)
            .field("columns", &self.columns)
            .field("ca_file", &self.ca_file)
            .field("client_cert", &self.client_cert)
            .field("client_key", &self.client_key)
            .field("exactly_once", &self.exactly_once)
            .finish()
    }
}
