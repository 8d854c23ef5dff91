//! The ClickHouse sink against real ClickHouse servers (two, as two shards), started on demand by
//! `cargo xtask infra up --only-clickhouse`: every mapped type round-trips through the runtime's
//! RowBinary encoders, outages are retried without losing rows, the start-up check names the
//! columns that differ, rows are routed to shards the way a Distributed table would, refused rows
//! are isolated one by one, a retried batch lands once, and ClickHouse parses the statements of
//! `gen --ddl --replicated`.

// Only the ClickHouse helpers: this binary needs none of the Kafka ones in `support/mod.rs`.
#[path = "support/clickhouse.rs"]
mod support_clickhouse;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etl_runtime::__private::{rowbinary as rb, shard_hash};
use etl_runtime::{Batch, ClickhouseSink, ClickhouseSinkConfig, InsertFormat, Sink, SinkError, SinkErrorKind};
use serde_json::json;
use support_clickhouse::{
    OUTAGE_SERVER, Row, clickhouse_https, clickhouse_mtls, clickhouse_urls, exec, freeze, metric_sum, run_pipeline,
    runtime_config, scalar, select, sink_config, start, start_server, stop, unique_table,
};

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(future)
}

/// The batch token of a data error and the bytes of each row it refused.
type Refused = (String, Vec<Vec<u8>>);

/// Wraps the sink: records the refused rows of data errors and then treats the batch as done, as
/// `errors.policy: skip` would; optionally writes every batch twice under its token, as a retry of
/// an insert whose answer was lost does.
struct Observed {
    inner: ClickhouseSink,
    twice: bool,
    /// The refused rows of each data error.
    refused: Arc<Mutex<Vec<Refused>>>,
    /// The row width, for reading refused rows back out of fixed-width test batches.
    row_reader: fn(&[u8]) -> usize,
}

impl Observed {
    fn new(inner: ClickhouseSink) -> Self {
        Observed { inner, twice: false, refused: Arc::default(), row_reader: |_| 0 }
    }
}

impl Sink for Observed {
    async fn write(&self, shard: usize, batch: &Batch) -> Result<(), SinkError> {
        if self.twice {
            self.inner.write(shard, batch).await?;
        }
        match self.inner.write(shard, batch).await {
            Err(SinkError { kind: SinkErrorKind::Data { rows }, message }) => {
                let bytes: Vec<u8> = batch.chunks().iter().flat_map(|c| c.bytes().iter().copied()).collect();
                let mut starts = Vec::new();
                let mut at = 0;
                while at < bytes.len() {
                    starts.push(at);
                    at += (self.row_reader)(&bytes[at..]);
                }
                starts.push(at);
                let picked = rows.iter().map(|&r| bytes[starts[r as usize]..starts[r as usize + 1]].to_vec()).collect();
                assert!(message.contains("refused"), "{message}");
                self.refused.lock().unwrap().push((batch.token().to_owned(), picked));
                Ok(())
            }
            other => other,
        }
    }

    async fn check(&self) -> Result<(), SinkError> {
        self.inner.check().await
    }
}

/// `sink.clickhouse.format`: the tests of types, refused rows and retries run in both.
const FORMATS: [InsertFormat; 2] = [InsertFormat::RowBinary, InsertFormat::Native];

/// Every type of the mapping in docs/configuration.md, as the DDL `gen --ddl` emits them.
const ALL_TYPES: &[(&str, &str)] = &[
    ("id", "Int64"),
    ("i32", "Int32"),
    ("f32", "Float32"),
    ("f64", "Float64"),
    ("flag", "Bool"),
    ("s", "String"),
    ("region", "LowCardinality(String)"),
    ("maybe", "Nullable(Int64)"),
    ("maybe_s", "Nullable(String)"),
    ("ints", "Array(Int32)"),
    ("names", "Array(String)"),
    ("attrs", "Map(String, Int64)"),
    ("scores", "Map(String, Nullable(Float64))"),
    ("ts_ms", "DateTime64(3, 'UTC')"),
    ("ts_us", "DateTime64(6, 'UTC')"),
    ("day", "Date32"),
    ("d9", "Decimal(9, 2)"),
    ("d18", "Decimal(18, 4)"),
    ("d38", "Decimal(38, 10)"),
    ("uid", "UUID"),
    ("level", "Enum8('debug' = 0, 'it\\'s' = 1, 'error' = 2)"),
    ("maybe_level", "Nullable(Enum16('a' = 0, 'b' = 1))"),
    ("t_ms", "Time64(3)"),
    ("t_us", "Time64(6)"),
    ("ip4", "IPv4"),
    ("ip6", "IPv6"),
    ("doc", "JSON"),
    ("maybe_doc", "Nullable(JSON)"),
    ("var", "Variant(Int64, String)"),
    ("vars", "Array(Variant(Float64, String))"),
];

/// A MergeTree ordered by `id`; `extra` goes into the column list (a constraint), `settings` after
/// the engine.
/// `name` backquoted for SQL, backslashes and backquotes escaped.
fn quoted(name: &str) -> String {
    format!("`{}`", name.replace('\\', "\\\\").replace('`', "\\`"))
}

fn create_table(url: &str, table: &str, columns: &[(&str, &str)], extra: &str, settings: &str) {
    let list: Vec<String> = columns.iter().map(|(n, t)| format!("`{n}` {t}")).collect();
    exec(
        url,
        &format!(
            "CREATE TABLE default.{} ({}{extra}) ENGINE = MergeTree ORDER BY id {settings}",
            quoted(table),
            list.join(", ")
        ),
    );
}

// Invariant 3 and the type mapping of docs/configuration.md: rows encoded with the runtime's RowBinary encoders
// (what generated code calls) land through a pipeline with every value intact, read back as
// ClickHouse renders them: UUID byte order, decimal widths, pre-1970 timestamps and dates, nulls,
// empty and nested containers.
#[test]
fn every_type_round_trips() {
    let (url, _) = clickhouse_urls();
    for format in FORMATS {
        every_type_round_trips_in(&url, format);
    }
}

/// [`every_type_round_trips`] with inserts in `format`.
fn every_type_round_trips_in(url: &str, format: InsertFormat) {
    let url = url.to_owned();
    let table = unique_table("ch_types");
    create_table(&url, &table, ALL_TYPES, "", "");

    let mut first = Vec::new();
    rb::i64(&mut first, 1);
    rb::i32(&mut first, i32::MIN);
    rb::f32(&mut first, 1.5);
    rb::f64(&mut first, 0.1);
    rb::boolean(&mut first, true);
    rb::string(&mut first, "héllo \"quoted\"\nline".as_bytes());
    rb::string(&mut first, b"EMEA");
    rb::null_marker(&mut first, false);
    rb::i64(&mut first, i64::MAX);
    rb::null_marker(&mut first, true);
    rb::varint(&mut first, 3);
    for v in [1, -2, 3] {
        rb::i32(&mut first, v);
    }
    rb::varint(&mut first, 2);
    rb::string(&mut first, b"a");
    rb::string(&mut first, b"");
    rb::varint(&mut first, 2);
    rb::string(&mut first, b"k1");
    rb::i64(&mut first, -7);
    rb::string(&mut first, b"k2");
    rb::i64(&mut first, i64::MIN);
    rb::varint(&mut first, 2);
    rb::string(&mut first, b"x");
    rb::null_marker(&mut first, false);
    rb::f64(&mut first, -2.25);
    rb::string(&mut first, b"y");
    rb::null_marker(&mut first, true);
    rb::i64(&mut first, 1_709_210_096_789); // 2024-02-29 12:34:56.789
    rb::i64(&mut first, 1_709_210_096_123_456);
    rb::i32(&mut first, 19_782); // 2024-02-29
    rb::decimal(&mut first, 9, -12_345);
    rb::decimal(&mut first, 18, 123_456_789_012_345_678);
    rb::decimal(&mut first, 38, 12_345_678_901_234_567_890_123_456_789_012_345_678);
    rb::uuid(&mut first, 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
    rb::enum_index(&mut first, 8, 1);
    rb::null_marker(&mut first, false);
    rb::enum_index(&mut first, 16, 1);
    rb::i64(&mut first, 45_296_789); // 12:34:56.789
    rb::i64(&mut first, 86_399_999_999); // 23:59:59.999999
    rb::ipv4(&mut first, 0xC000_0201); // 192.0.2.1
    rb::ipv6(&mut first, 0x2001_0db8_0000_0000_0000_0000_0000_0001);
    rb::string(&mut first, br#"{"a": 1, "b": {"c": ["x", "y"]}, "s": "h\u00e9"}"#);
    rb::null_marker(&mut first, false);
    rb::string(&mut first, b"{}");
    first.push(0); // Variant member 0: Int64
    rb::i64(&mut first, -42);
    rb::varint(&mut first, 3);
    first.push(1); // String
    rb::string(&mut first, b"x");
    first.push(255); // NULL
    first.push(0); // Float64
    rb::f64(&mut first, 2.5);

    let mut second = Vec::new();
    rb::i64(&mut second, 2);
    rb::i32(&mut second, 0);
    rb::f32(&mut second, -3.75);
    rb::f64(&mut second, 1e300);
    rb::boolean(&mut second, false);
    rb::string(&mut second, b"");
    rb::string(&mut second, "日本".as_bytes());
    rb::null_marker(&mut second, true);
    rb::null_marker(&mut second, false);
    rb::string(&mut second, b"present");
    rb::varint(&mut second, 0);
    rb::varint(&mut second, 0);
    rb::varint(&mut second, 0);
    rb::varint(&mut second, 0);
    rb::i64(&mut second, -1); // 1969-12-31 23:59:59.999
    rb::i64(&mut second, -1_000_001); // 1969-12-31 23:59:58.999999
    rb::i32(&mut second, -25_567); // 1900-01-01
    rb::decimal(&mut second, 9, 999_999_999);
    rb::decimal(&mut second, 18, -1);
    rb::decimal(&mut second, 38, -(10i128.pow(37)));
    rb::uuid(&mut second, u128::MAX);
    rb::enum_index(&mut second, 8, 2);
    rb::null_marker(&mut second, true);
    rb::i64(&mut second, 0);
    rb::i64(&mut second, 1);
    rb::ipv4(&mut second, u32::MAX);
    rb::ipv6(&mut second, 0xffff_0102_0304); // ::ffff:1.2.3.4
    rb::string(&mut second, b"{}");
    rb::null_marker(&mut second, true);
    second.push(255); // NULL
    rb::varint(&mut second, 0);

    let sink = ClickhouseSink::new(ClickhouseSinkConfig { format, ..sink_config(&[&url], &table, ALL_TYPES) }).unwrap();
    block_on(sink.check()).expect("the table made from the mapping passes the check");
    let end =
        run_pipeline(runtime_config(1), sink, vec![vec![(None, first), (None, second)]], None, Duration::from_secs(20));
    assert_eq!(end.fatal, None, "{format:?}");
    assert_eq!(end.stored, BTreeMap::from([(0, 2)]));

    let rows = select(&url, &format!("SELECT * FROM default.`{table}` ORDER BY id"));
    assert_eq!(rows.len(), 2, "{format:?}");
    assert_eq!(
        rows[0],
        json!({
            "id": 1, "i32": i32::MIN, "f32": 1.5, "f64": 0.1, "flag": true,
            "s": "héllo \"quoted\"\nline", "region": "EMEA", "maybe": i64::MAX, "maybe_s": null,
            "ints": [1, -2, 3], "names": ["a", ""], "attrs": {"k1": -7, "k2": i64::MIN},
            "scores": {"x": -2.25, "y": null},
            "ts_ms": "2024-02-29 12:34:56.789", "ts_us": "2024-02-29 12:34:56.123456", "day": "2024-02-29",
            "d9": "-123.45", "d18": "12345678901234.5678", "d38": "1234567890123456789012345678.9012345678",
            "uid": "01234567-89ab-cdef-fedc-ba9876543210",
            "level": "it's", "maybe_level": "b", "t_ms": "12:34:56.789", "t_us": "23:59:59.999999",
            "ip4": "192.0.2.1", "ip6": "2001:db8::1",
            "doc": {"a": 1, "b": {"c": ["x", "y"]}, "s": "hé"}, "maybe_doc": {},
            "var": -42, "vars": ["x", null, 2.5],
        }),
        "{format:?}"
    );
    assert_eq!(
        rows[1],
        json!({
            "id": 2, "i32": 0, "f32": -3.75, "f64": 1e300, "flag": false,
            "s": "", "region": "日本", "maybe": null, "maybe_s": "present",
            "ints": [], "names": [], "attrs": {}, "scores": {},
            "ts_ms": "1969-12-31 23:59:59.999", "ts_us": "1969-12-31 23:59:58.999999", "day": "1900-01-01",
            "d9": "9999999.99", "d18": "-0.0001", "d38": "-1000000000000000000000000000.0000000000",
            "uid": "ffffffff-ffff-ffff-ffff-ffffffffffff",
            "level": "error", "maybe_level": null, "t_ms": "00:00:00.000", "t_us": "00:00:00.000001",
            "ip4": "255.255.255.255", "ip6": "::ffff:1.2.3.4",
            "doc": {}, "maybe_doc": null, "var": null, "vars": [],
        }),
        "{format:?}"
    );
    exec(&url, &format!("DROP TABLE default.`{table}`"));
}

/// `(id Int64, payload String)` rows.
fn id_rows(ids: std::ops::Range<i64>, partitions: usize) -> Vec<Vec<Row>> {
    let mut out = vec![Vec::new(); partitions];
    for id in ids {
        let mut row = Vec::new();
        rb::i64(&mut row, id);
        rb::string(&mut row, format!("payload-{id}").as_bytes());
        out[id as usize % partitions].push((None, row));
    }
    out
}

const ID_COLUMNS: &[(&str, &str)] = &[("id", "Int64"), ("payload", "String")];
/// Deduplication of inserts in a plain MergeTree (on by default only in ReplicatedMergeTree).
const DEDUP: &str = "SETTINGS non_replicated_deduplication_window = 1000";

// Invariant 3 and the retry classes: the server is frozen (SIGSTOP: connections hang) for 3 s and
// then stopped for real (SIGTERM) and restarted with its data while a pipeline writes. The writes
// fail as retryable (timeouts, refused connections), the runtime retries them under the same
// tokens, the pipeline completes, and every row is in the table exactly once (the table
// deduplicates, so an insert that succeeded just before the outage is not doubled by its retry).
#[test]
fn outages_are_retried_without_losing_rows() {
    let url = start_server(OUTAGE_SERVER);
    let table = unique_table("ch_outage");
    create_table(&url, &table, ID_COLUMNS, "", DEDUP);
    let n = 30_000i64;
    let mut config = sink_config(&[&url], &table, ID_COLUMNS);
    config.timeout = Duration::from_millis(800);
    let sink = ClickhouseSink::new(config).unwrap();

    // 30k rows at ~4k rows/s: about 7.5 s of input, with the outages in the middle.
    let outages = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1_000));
        {
            let _frozen = freeze(OUTAGE_SERVER);
            std::thread::sleep(Duration::from_secs(3));
        }
        std::thread::sleep(Duration::from_millis(500));
        stop(OUTAGE_SERVER);
        std::thread::sleep(Duration::from_secs(2));
        let restarted = Instant::now();
        start(OUTAGE_SERVER);
        restarted.elapsed()
    });
    let end = run_pipeline(runtime_config(1), sink, id_rows(0..n, 2), Some(2_000.0), Duration::from_secs(60));
    let restart_took = outages.join().unwrap();
    assert_eq!(end.fatal, None, "{end:?}");
    assert_eq!(end.stored.values().sum::<i64>(), n);
    let retries = metric_sum(&end.metrics, "etl_sink_retries_total", &[]);
    assert!(retries >= 2.0, "the outages must have caused retries: {retries}");
    assert_eq!(scalar(&url, &format!("SELECT count() FROM default.`{table}`")), n);
    assert_eq!(scalar(&url, &format!("SELECT uniqExact(id) FROM default.`{table}`")), n);
    eprintln!("outage run took {:?} (restart {restart_took:?}), {retries} retries", end.took);
    exec(&url, &format!("DROP TABLE default.`{table}`"));
}

// The start-up check: a table that differs from the pipeline's columns is a fatal error naming
// every column that differs (missing, extra, other type), a missing table points at `--ddl`, and
// a failed authentication is fatal too; a matching table passes.
#[test]
fn schema_mismatch_is_fatal_and_names_the_columns() {
    let (url, url2) = clickhouse_urls();
    let table = unique_table("ch_schema");
    let expected = [("id", "Int64"), ("amount", "Decimal(18, 4)"), ("region", "LowCardinality(String)")];
    for u in [&url, &url2] {
        exec(
            u,
            &format!(
                "CREATE TABLE default.`{table}` (id Int64, amount Decimal(9, 2), extra String, \
                 inserted DateTime DEFAULT now()) ENGINE = MergeTree ORDER BY id"
            ),
        );
    }
    let sink = ClickhouseSink::new(sink_config(&[&url, &url2], &table, &expected)).unwrap();
    let error = block_on(sink.check()).unwrap_err();
    assert_eq!(error.kind, SinkErrorKind::Fatal);
    let message = error.message;
    for needle in [
        "shard 0",
        "shard 1",
        "column `amount` has type Decimal(9, 2) in the table, the pipeline writes Decimal(18, 4)",
        "column `region` is missing",
        "column `extra` (String) is in the table but the pipeline does not write it",
    ] {
        assert!(message.contains(needle), "`{needle}` missing from:\n{message}");
    }
    assert!(!message.contains("`inserted`"), "a column with a default is the table's own: {message}");

    let missing = ClickhouseSink::new(sink_config(&[&url], "no_such_table_here", &expected)).unwrap();
    let error = block_on(missing.check()).unwrap_err();
    assert_eq!(error.kind, SinkErrorKind::Fatal);
    assert!(error.message.contains("does not exist") && error.message.contains("--ddl"), "{}", error.message);

    let mut stranger = sink_config(&[&url], &table, &expected);
    stranger.user = "nobody".into();
    stranger.password = "s3cret-pw".into();
    let error = block_on(ClickhouseSink::new(stranger).unwrap().check()).unwrap_err();
    assert_eq!(error.kind, SinkErrorKind::Fatal, "{}", error.message);
    assert!(!error.message.contains("s3cret-pw"));

    let matching = [("id", "Int64"), ("amount", "Decimal(9,2)"), ("extra", "String")];
    let sink = ClickhouseSink::new(sink_config(&[&url, &url2], &table, &matching)).unwrap();
    block_on(sink.check()).expect("a matching table passes");
    for u in [&url, &url2] {
        exec(u, &format!("DROP TABLE default.`{table}`"));
    }
}

// Sharding: with a shard key, rows go to shard `xxHash64(key) % 2`, exactly what a Distributed
// table with sharding key `xxHash64(key)` and equal weights computes (checked against ClickHouse's
// own xxHash64 for many keys); each shard gets its share, and a key seen in two partitions lands
// on the same shard both times.
#[test]
fn rows_are_routed_to_shards_by_key_hash() {
    let (url, url2) = clickhouse_urls();

    let hashes = select(&url, "SELECT toInt64(number) - 5000 AS k, xxHash64(k) AS h FROM numbers(10000)");
    assert_eq!(hashes.len(), 10_000);
    for row in &hashes {
        let k = row["k"].as_i64().unwrap();
        let h = row["h"].as_u64().unwrap();
        assert_eq!(shard_hash(&k.to_le_bytes()), h, "key {k}");
        assert_eq!(shard_hash(&k.to_le_bytes()) % 2, h % 2);
    }

    let table = unique_table("ch_shards");
    for u in [&url, &url2] {
        create_table(u, &table, ID_COLUMNS, "", "");
    }
    let n = 4_000i64;
    let mut partitions = vec![Vec::new(), Vec::new()];
    for id in 0..n {
        // Every key twice, once in each partition.
        for partition in &mut partitions {
            let mut row = Vec::new();
            rb::i64(&mut row, id);
            rb::string(&mut row, b"x");
            partition.push((Some(id.to_le_bytes().to_vec()), row));
        }
    }
    let sink = ClickhouseSink::new(sink_config(&[&url, &url2], &table, ID_COLUMNS)).unwrap();
    let end = run_pipeline(runtime_config(2), sink, partitions, None, Duration::from_secs(30));
    assert_eq!(end.fatal, None);

    let mut total = 0;
    let mut keys: Vec<BTreeSet<i64>> = Vec::new();
    for (shard, u) in [&url, &url2].into_iter().enumerate() {
        let misplaced = scalar(u, &format!("SELECT count() FROM default.`{table}` WHERE xxHash64(id) % 2 != {shard}"));
        assert_eq!(misplaced, 0, "rows on shard {shard} that ClickHouse would route elsewhere");
        let count = scalar(u, &format!("SELECT count() FROM default.`{table}`"));
        assert!(count > 2 * n * 2 / 5, "shard {shard} got only {count} of {} rows", 2 * n);
        total += count;
        let rows = select(u, &format!("SELECT DISTINCT id FROM default.`{table}`"));
        keys.push(rows.iter().map(|r| r["id"].as_i64().unwrap()).collect());
        let per_key =
            scalar(u, &format!("SELECT max(c) FROM (SELECT count() AS c FROM default.`{table}` GROUP BY id)"));
        assert_eq!(per_key, 2, "both copies of a key on the same shard");
    }
    assert_eq!(total, 2 * n);
    assert!(keys[0].is_disjoint(&keys[1]), "a key on both shards");
    for u in [&url, &url2] {
        exec(u, &format!("DROP TABLE default.`{table}`"));
    }
}

/// Reads one `(id Int64, payload String, amount Int32)` row's length.
fn amount_row_len(bytes: &[u8]) -> usize {
    let len = bytes[8] as usize; // payloads here are shorter than 128 bytes: a one-byte varint
    8 + 1 + len + 4
}

// Refused rows: a CHECK constraint refuses two rows of a batch. The sink inserts every other row
// and reports exactly those two as refused (found by bisection at row granularity, boundaries taken
// from the column types), which a skip policy then drops: the table holds all rows but the two.
#[test]
fn refused_rows_are_isolated_one_by_one() {
    let (url, _) = clickhouse_urls();
    for format in FORMATS {
        refused_rows_are_isolated_in(&url, format);
    }
}

/// [`refused_rows_are_isolated_one_by_one`] with inserts in `format`.
fn refused_rows_are_isolated_in(url: &str, format: InsertFormat) {
    let url = url.to_owned();
    let table = unique_table("ch_refused");
    let columns = [("id", "Int64"), ("payload", "String"), ("amount", "Int32")];
    create_table(&url, &table, &columns, ", CONSTRAINT positive CHECK amount > 0", "");
    let bad: BTreeSet<i64> = [37, 150].into();
    let mut rows = Vec::new();
    for id in 0..200i64 {
        let mut row = Vec::new();
        rb::i64(&mut row, id);
        rb::string(&mut row, format!("row {id}{}", "!".repeat(id as usize % 7)).as_bytes());
        rb::i32(&mut row, if bad.contains(&id) { -1 } else { 10 });
        rows.push((None, row));
    }
    let mut sink = Observed::new(
        ClickhouseSink::new(ClickhouseSinkConfig { format, ..sink_config(&[&url], &table, &columns) }).unwrap(),
    );
    sink.row_reader = amount_row_len;
    let refused = sink.refused.clone();
    let mut config = runtime_config(1);
    // One batch for all 200 rows, so both refused rows are isolated within the same batch.
    config.batch.linger = Duration::from_millis(500);
    let end = run_pipeline(config, sink, vec![rows], None, Duration::from_secs(30));
    assert_eq!(end.fatal, None);
    assert_eq!(end.stored, BTreeMap::from([(0, 200)]));

    let refused = refused.lock().unwrap().clone();
    assert_eq!(refused.len(), 1, "one batch, one data error: {refused:?}");
    let refused_ids: BTreeSet<i64> = refused
        .iter()
        .flat_map(|(_, rows)| rows.iter().map(|r| i64::from_le_bytes(r[..8].try_into().unwrap())))
        .collect();
    assert_eq!(refused_ids, bad, "{format:?}: exactly the rows the constraint refuses: {refused:?}");
    let stored = select(&url, &format!("SELECT id FROM default.`{table}` ORDER BY id"));
    let stored: BTreeSet<i64> = stored.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    let expected: BTreeSet<i64> = (0..200).filter(|id| !bad.contains(id)).collect();
    assert_eq!(stored, expected, "{format:?}: every other row once");
    assert_eq!(scalar(&url, &format!("SELECT count() FROM default.`{table}`")), 198);
    exec(&url, &format!("DROP TABLE default.`{table}`"));
}

// Idempotent retries: every batch written twice under its token lands once in a MergeTree with
// `non_replicated_deduplication_window`; without the setting the same run doubles the rows, which
// is why the module documentation asks for it.
#[test]
fn a_retried_batch_lands_once() {
    let (url, _) = clickhouse_urls();
    let n = 3_000i64;
    let runs =
        [(true, n, InsertFormat::RowBinary), (true, n, InsertFormat::Native), (false, 2 * n, InsertFormat::default())];
    for (dedup, expected, format) in runs {
        let table = unique_table("ch_dedup");
        create_table(&url, &table, ID_COLUMNS, "", if dedup { DEDUP } else { "" });
        let inner =
            ClickhouseSink::new(ClickhouseSinkConfig { format, ..sink_config(&[&url], &table, ID_COLUMNS) }).unwrap();
        // At least once, a table that does not deduplicate is warned about, not refused.
        block_on(inner.check()).expect("the start-up check passes either way");
        let mut sink = Observed::new(inner);
        sink.twice = true;
        let end = run_pipeline(runtime_config(1), sink, id_rows(0..n, 2), None, Duration::from_secs(30));
        assert_eq!(end.fatal, None);
        assert_eq!(
            scalar(&url, &format!("SELECT count() FROM default.`{table}`")),
            expected,
            "dedup {dedup}, {format:?}"
        );
        exec(&url, &format!("DROP TABLE default.`{table}`"));
    }
}

// Replica rotation against a real server: the shard's first replica is dead (nothing listens), so
// the first insert fails as retryable, the shard rotates to the live replica and the runtime's
// retry lands there; the dead replica shows as unhealthy in `etl_sink_replica_healthy`.
#[test]
fn a_dead_replica_is_rotated_out() {
    let (url, _) = clickhouse_urls();
    let table = unique_table("ch_replicas");
    create_table(&url, &table, ID_COLUMNS, "", DEDUP);
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let mut config = sink_config(&[&url], &table, ID_COLUMNS);
    config.shards = vec![vec![dead.clone(), url.clone()]];
    let sink = ClickhouseSink::new(config).unwrap();
    block_on(sink.check()).expect("one reachable replica per shard is enough");
    let n = 2_000;
    let end = run_pipeline(runtime_config(1), sink, id_rows(0..n, 2), None, Duration::from_secs(30));
    assert_eq!(end.fatal, None);
    assert_eq!(scalar(&url, &format!("SELECT count() FROM default.`{table}`")), n);
    let health = |replica: &str| metric_sum(&end.metrics, "etl_sink_replica_healthy", &[("replica", replica)]);
    assert_eq!(health(&dead), 0.0);
    assert_eq!(health(&url), 1.0);
    assert!(end.metrics.contains(&format!("etl_sink_replica_healthy{{output=\"\",replica=\"{dead}\",shard=\"0\"}} 0")));
    exec(&url, &format!("DROP TABLE default.`{table}`"));
}

// `https://` replicas (`sink.clickhouse.shards`): the sink's rustls client trusts Mozilla's roots plus
// `ca_file`. Through the HTTPS front of the local ClickHouse, whose certificate comes from a
// private CA, the start-up check and every insert work with `ca_file` set. Without it the check
// fails on the certificate as a fatal error that says so: a CA mismatch does not heal by retrying.
#[test]
fn https_replicas_trust_the_ca_file() {
    let (url, _) = clickhouse_urls();
    let (https, ca_file) = clickhouse_https();
    let table = unique_table("ch_https");
    create_table(&url, &table, ID_COLUMNS, "", DEDUP);

    let mut config = sink_config(&[&https], &table, ID_COLUMNS);
    config.ca_file = Some(ca_file);
    let sink = ClickhouseSink::new(config).unwrap();
    block_on(sink.check()).expect("the start-up check passes over TLS");
    let n = 2_000;
    let end = run_pipeline(runtime_config(1), sink, id_rows(0..n, 2), None, Duration::from_secs(30));
    assert_eq!(end.fatal, None);
    assert_eq!(scalar(&url, &format!("SELECT count() FROM default.`{table}`")), n);

    let untrusted = ClickhouseSink::new(sink_config(&[&https], &table, ID_COLUMNS)).unwrap();
    let error = block_on(untrusted.check()).unwrap_err();
    assert_eq!(error.kind, SinkErrorKind::Fatal, "{}", error.message);
    assert!(error.message.contains("certificate") && error.message.contains("ca_file"), "{}", error.message);
    exec(&url, &format!("DROP TABLE default.`{table}`"));
}

// Mutual TLS (`sink.clickhouse.client_cert`, `client_key`): through the local front that requires
// a client certificate of the infra CA, a sink without one cannot even pass the start-up check,
// and one with the right certificate checks the table and inserts every row.
#[test]
fn mutual_tls_needs_the_client_certificate_and_inserts_with_it() {
    let (url, _) = clickhouse_urls();
    let (_, ca_file) = clickhouse_https();
    let (mtls, client_cert, client_key) = clickhouse_mtls();
    let table = unique_table("ch_mtls");
    create_table(&url, &table, ID_COLUMNS, "", DEDUP);

    let mut anonymous = sink_config(&[&mtls], &table, ID_COLUMNS);
    anonymous.ca_file = Some(ca_file.clone());
    let refused = block_on(ClickhouseSink::new(anonymous).unwrap().check()).unwrap_err();
    assert_eq!(refused.kind, SinkErrorKind::Fatal, "{}", refused.message);
    assert!(refused.message.contains("client_cert"), "says what to set: {}", refused.message);

    let mut config = sink_config(&[&mtls], &table, ID_COLUMNS);
    config.ca_file = Some(ca_file);
    config.client_cert = Some(client_cert);
    config.client_key = Some(client_key);
    let sink = ClickhouseSink::new(config).unwrap();
    block_on(sink.check()).expect("the start-up check passes with the client certificate");
    let n = 2_000;
    let end = run_pipeline(runtime_config(1), sink, id_rows(0..n, 2), None, Duration::from_secs(30));
    assert_eq!(end.fatal, None);
    assert_eq!(scalar(&url, &format!("SELECT count() FROM default.`{table}`")), n);
    exec(&url, &format!("DROP TABLE default.`{table}`"));
}

/// The exactly-once ledger table of `table`, as `cargo xtask gen --ddl` creates it.
fn create_ledger(url: &str, table: &str) {
    exec(
        url,
        &format!(
            "CREATE TABLE default.{} (pipeline String, topic String, partition Int32, shard UInt32, \
             first_offset Int64, last_offset Int64, config_hash String, epoch UInt64, \
             recorded_at DateTime DEFAULT now()) ENGINE = MergeTree ORDER BY (pipeline, topic, partition, last_offset) \
             {DEDUP}",
            quoted(&etl_runtime::ledger_table(table))
        ),
    );
}

fn exactly_once(config_hash: &str) -> Option<etl_runtime::ExactlyOnceConfig> {
    Some(etl_runtime::ExactlyOnceConfig {
        pipeline: "ledger-test".into(),
        topic: "orders".into(),
        config_hash: config_hash.into(),
    })
}

// Invariant 8, against two real servers: each claim returns a higher epoch; spans are recorded on
// their shard with the claiming epoch and read back from every shard above a watermark; a span of
// another config hash is counted, not returned; recording a span twice keeps one row; tokens
// depend on the span and the config hash only. The lanes of two topics with the same partition
// number keep their epochs, spans and tokens apart. The table's name holds a backquote and a
// backslash, which every ledger statement must quote.
#[test]
fn the_ledger_claims_epochs_and_keeps_spans_per_shard() {
    use etl_runtime::{LaneKey, Span};
    let (url, url2) = clickhouse_urls();
    let table = format!("{}_q`uo\\te", unique_table("ch_ledger"));
    for u in [&url, &url2] {
        create_table(u, &table, ID_COLUMNS, "", DEDUP);
        create_ledger(u, &table);
    }
    let sink = |hash: &str| {
        let mut config = sink_config(&[&url, &url2], &table, ID_COLUMNS);
        config.exactly_once = exactly_once(hash);
        ClickhouseSink::new(config).unwrap()
    };
    let (current, other) = (sink("aaaa"), sink("bbbb"));
    let ledger = current.ledger().expect("exactly_once gives the sink a ledger");
    assert!(block_on(current.check()).is_ok(), "deduplicating table and ledger in place");
    let span = |shard, first, last| Span { topic: "orders".into(), partition: 3, shard, first, last };
    let refunds = |shard, first, last| Span { topic: "refunds".into(), partition: 3, shard, first, last };
    let (orders_3, refunds_3) = (LaneKey::new("orders", 3), LaneKey::new("refunds", 3));
    block_on(async {
        let first = ledger.claim(&orders_3).await.unwrap();
        let second = ledger.claim(&orders_3).await.unwrap();
        assert!(second > first, "a later owner's epoch is higher ({first}, {second})");
        ledger.record(&span(0, 10, 20), second).await.unwrap();
        ledger.record(&span(0, 10, 20), second).await.unwrap();
        ledger.record(&span(1, 15, 40), second).await.unwrap();
        ledger.record(&span(0, 0, 9), second).await.unwrap();
        other.ledger().unwrap().record(&span(1, 41, 50), 9).await.unwrap();
        let refunds_epoch = ledger.claim(&refunds_3).await.unwrap();
        assert_eq!(refunds_epoch, 1, "another topic's partition 3 has epochs of its own");
        ledger.record(&refunds(0, 10, 20), refunds_epoch).await.unwrap();
        assert_eq!(ledger.owner(&span(1, 15, 40)).await.unwrap(), second);
        assert_eq!(ledger.owner(&refunds(0, 10, 20)).await.unwrap(), refunds_epoch);
        let recorded = ledger.recorded(&orders_3, Some(9)).await.unwrap();
        let mut spans = recorded.spans.clone();
        spans.sort();
        assert_eq!(spans, vec![(span(0, 10, 20), second), (span(1, 15, 40), second)]);
        assert_eq!(recorded.others, vec![(span(1, 41, 50), 9)]);
        assert_eq!(recorded.other_config_above(Some(9)), 1);
        assert_eq!(recorded.other_config_above(Some(50)), 0);
        assert!(
            ledger.recorded(&LaneKey::new("orders", 4), None).await.unwrap().spans.is_empty(),
            "another partition has none"
        );
        let refunds_recorded = ledger.recorded(&refunds_3, None).await.unwrap();
        assert_eq!(refunds_recorded.spans, vec![(refunds(0, 10, 20), refunds_epoch)]);
        assert!(ledger.claim(&orders_3).await.unwrap() > 9, "epochs of every config hash count");
    });
    assert_eq!(
        scalar(
            &url,
            &format!(
                "SELECT count() FROM default.{} WHERE first_offset = 10",
                quoted(&etl_runtime::ledger_table(&table))
            )
        ),
        2
    );
    let token = ledger.token(&span(0, 10, 20));
    assert_ne!(token, ledger.token(&refunds(0, 10, 20)), "another topic, another token");
    assert_eq!(token, ledger.token(&span(0, 10, 20)));
    assert_ne!(token, ledger.token(&span(0, 10, 21)));
    assert_ne!(token, other.ledger().unwrap().token(&span(0, 10, 20)), "another config hash, another token");
    for u in [&url, &url2] {
        exec(u, &format!("DROP TABLE default.{}", quoted(&table)));
        exec(u, &format!("DROP TABLE default.{}", quoted(&etl_runtime::ledger_table(&table))));
    }
}

// Invariant 8: exactly_once refuses to start against a table that keeps repeated inserts, or
// without its ledger table, and says how to fix each.
#[test]
fn exactly_once_refuses_a_table_that_does_not_deduplicate() {
    let (url, _) = clickhouse_urls();
    let table = unique_table("ch_nodedup");
    create_table(&url, &table, ID_COLUMNS, "", "");
    let mut config = sink_config(&[&url], &table, ID_COLUMNS);
    config.exactly_once = exactly_once("aaaa");
    let sink = ClickhouseSink::new(config).unwrap();
    let error = block_on(sink.check()).unwrap_err();
    assert_eq!(error.kind, SinkErrorKind::Fatal);
    assert!(error.message.contains("non_replicated_deduplication_window"), "{}", error.message);
    assert!(error.message.contains("does not exist"), "the missing ledger is named: {}", error.message);
    assert!(error.message.contains("--ddl"), "{}", error.message);
    exec(&url, &format!("DROP TABLE default.`{table}`"));
}

/// A TCP proxy before a ClickHouse server that loses the answer to the first INSERT: it lets
/// the request through, waits until the server answers (with `wait_end_of_query` the answer
/// comes after the insert is committed), then closes the client's connection instead of
/// passing the answer on, as a timeout between client and server would.
struct LosingProxy {
    url: String,
    lost: Arc<std::sync::atomic::AtomicUsize>,
}

impl LosingProxy {
    fn start(upstream: &str) -> LosingProxy {
        use std::io::{Read, Write};
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let upstream = upstream.trim_start_matches("http://").trim_end_matches('/').to_owned();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let lost = Arc::new(AtomicUsize::new(0));
        let lost_count = lost.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = std::net::TcpStream::connect(&upstream) else { continue };
                let insert_sent = Arc::new(AtomicBool::new(false));
                let (mut from_client, mut to_server) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let sent = insert_sent.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 64 * 1024];
                    while let Ok(n) = from_client.read(&mut buf) {
                        if n == 0 || to_server.write_all(&buf[..n]).is_err() {
                            break;
                        }
                        if String::from_utf8_lossy(&buf[..n]).to_ascii_uppercase().contains("INSERT") {
                            sent.store(true, Ordering::SeqCst);
                        }
                    }
                    let _ = to_server.shutdown(std::net::Shutdown::Write);
                });
                let (mut from_server, mut to_client) = (server, client);
                let lost = lost_count.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 64 * 1024];
                    while let Ok(n) = from_server.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        if insert_sent.load(Ordering::SeqCst)
                            && lost.compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst).is_ok()
                        {
                            // The server committed and answered; the client never hears of it.
                            let _ = to_client.shutdown(std::net::Shutdown::Both);
                            let _ = from_server.shutdown(std::net::Shutdown::Both);
                            return;
                        }
                        if to_client.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = to_client.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        LosingProxy { url, lost }
    }
}

// A retried insert never duplicates rows: the answer to an insert is lost after the server
// committed it, the sink retries under the same deduplication token, and the table that
// `gen --ddl` prints in both modes (non_replicated_deduplication_window) keeps one copy.
#[test]
fn an_insert_whose_answer_is_lost_lands_once() {
    let (url, _) = clickhouse_urls();
    let table = unique_table("ch_lost_answer");
    create_table(&url, &table, ID_COLUMNS, "", DEDUP);
    let proxy = LosingProxy::start(&url);
    let sink = ClickhouseSink::new(sink_config(&[&proxy.url], &table, ID_COLUMNS)).unwrap();
    let n = 3_000i64;
    let end = run_pipeline(runtime_config(1), sink, id_rows(0..n, 2), None, Duration::from_secs(30));
    assert_eq!(end.fatal, None);
    assert_eq!(proxy.lost.load(std::sync::atomic::Ordering::SeqCst), 1, "one answer was lost");
    assert_eq!(scalar(&url, &format!("SELECT count() FROM default.`{table}`")), n, "the retry landed nothing twice");
    assert_eq!(scalar(&url, &format!("SELECT uniqExact(id) FROM default.`{table}`")), n);
    exec(&url, &format!("DROP TABLE default.`{table}`"));
}

/// What `cargo xtask gen <pipeline> --ddl <args>` prints: the statements a user runs, not a copy
/// of them.
fn gen_ddl(pipeline: &str, args: &[&str]) -> String {
    let output = std::process::Command::new(env!("CARGO"))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args(["xtask", "gen", pipeline, "--ddl"])
        .args(args)
        .output()
        .expect("running cargo xtask gen --ddl");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "cargo xtask gen {pipeline} --ddl {args:?} failed:\n{stderr}");
    String::from_utf8(output.stdout).unwrap()
}

/// ClickHouse's parser on one statement, which it does not run: `formatQuery` answers with the
/// statement as the server formats what it parsed, or with the syntax error.
fn format_query(url: &str, statement: &str) -> Result<String, String> {
    let client = clickhouse::Client::default().with_url(url);
    let query = client.query("SELECT formatQuery({statement:String})").param("statement", statement);
    let bytes = block_on(async { query.fetch_bytes("TabSeparatedRaw")?.collect().await }).map_err(|e| e.to_string())?;
    Ok(String::from_utf8(bytes.to_vec()).unwrap())
}

// `gen --ddl --replicated` prints statements for a cluster with Keeper, which the test servers do not
// have, so they cannot be run here; ClickHouse's own parser reads each one instead (ON CLUSTER, the
// ReplicatedMergeTree with its macros, the ledger's TTL), and the settings they set exist (a
// parser takes any name).
#[test]
fn replicated_ddl_parses_in_clickhouse() {
    let (url, _) = clickhouse_urls();
    let cases: [(&str, &[&str], &[&str]); 3] = [
        ("examples/kafka_avro_to_clickhouse/pipeline.yaml", &["--replicated"], &["orders"]),
        ("etl-gen/tests/corpus/valid/exactly_once.yaml", &["--replicated"], &["orders", "orders_etl_batches"]),
        (
            "etl-gen/tests/corpus/valid/exactly_once.yaml",
            &["--replicated", "--cluster", "prod"],
            &["orders", "orders_etl_batches"],
        ),
    ];
    for (pipeline, args, tables) in cases {
        let ddl = gen_ddl(pipeline, args);
        // One statement per request, as operations.md runs them: split where `--ddl` ends one.
        let statements: Vec<&str> = ddl
            .split(";\n")
            .filter(|s| s.lines().any(|l| !l.trim().is_empty() && !l.trim_start().starts_with("--")))
            .collect();
        assert_eq!(statements.len(), tables.len(), "{ddl}");
        let on_cluster = if args.contains(&"--cluster") { "ON CLUSTER prod" } else { "ON CLUSTER `{cluster}`" };
        for (statement, table) in statements.into_iter().zip(tables) {
            let parsed = format_query(&url, statement)
                .unwrap_or_else(|e| panic!("ClickHouse does not parse `gen --ddl {args:?}`: {e}\n{statement}"));
            let engine =
                format!("ENGINE = ReplicatedMergeTree('/clickhouse/tables/{{shard}}/default/{table}', '{{replica}}')");
            assert!(
                parsed.contains(&format!("CREATE TABLE IF NOT EXISTS default.{table} {on_cluster}\n"))
                    && parsed.contains(&engine),
                "{parsed}"
            );
            if *table == "orders_etl_batches" {
                assert!(parsed.contains("\nTTL recorded_at + toIntervalDay(7)\n"), "{parsed}");
            }
            let settings = parsed.lines().find_map(|l| l.strip_prefix("SETTINGS ")).expect("a SETTINGS clause");
            for setting in settings.split(", ") {
                let name = setting.split(" = ").next().unwrap();
                let known =
                    scalar(&url, &format!("SELECT count() FROM system.merge_tree_settings WHERE name = '{name}'"));
                assert_eq!(known, 1, "{name} is not a MergeTree setting: {parsed}");
            }
        }
    }
}

// Invariant 8, the owner check, against two real servers: a lane whose epoch a newer owner
// superseded in the ledger (it claimed the partition after the lane's plan was read, as for a
// member cut off from the group without noticing) records its batches' spans but inserts none of
// them, counts them as superseded, and stores no offset past them.
#[test]
fn a_superseded_owner_inserts_nothing() {
    use support_clickhouse::{PassRows, RowsLane, Stored};
    let (url, url2) = clickhouse_urls();
    let table = unique_table("ch_zombie");
    for u in [&url, &url2] {
        create_table(u, &table, ID_COLUMNS, "", DEDUP);
        create_ledger(u, &table);
    }
    let mut config = sink_config(&[&url, &url2], &table, ID_COLUMNS);
    config.exactly_once = exactly_once("zzzz");
    let sink = ClickhouseSink::new(config.clone()).unwrap();
    // The newer owner: another process, with a sink of its own.
    let newer = ClickhouseSink::new(config).unwrap();
    let mut runtime = runtime_config(2);
    runtime.exactly_once = true;
    let pipeline = etl_runtime::Pipeline::start(runtime, || PassRows, sink, None).unwrap();
    let plans = pipeline.handle().recover(&[(etl_runtime::LaneKey::new("orders", 0), None)]).unwrap();
    let epoch = plans[0].epoch;
    let claimed = block_on(newer.ledger().unwrap().claim(&etl_runtime::LaneKey::new("orders", 0))).unwrap();
    assert!(claimed > epoch, "the newer owner's epoch ({claimed}) is above the lane's ({epoch})");

    let stored = Stored::default();
    let rows = id_rows(0..300, 1).remove(0);
    pipeline.handle().add_lane_replaying(Box::new(RowsLane::new(0, rows, None, &stored)), plans.into_iter().next());
    let deadline = Instant::now() + Duration::from_secs(20);
    let superseded = loop {
        let metrics = pipeline.metrics_text();
        let superseded = metric_sum(&metrics, "etl_exactly_once_superseded_batches_total", &[]);
        if superseded > 0.0 || Instant::now() > deadline {
            break superseded;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(500));
    let metrics = pipeline.metrics_text();
    pipeline.abort();
    assert!(superseded > 0.0, "the lane's batches are dropped as superseded");
    assert!(metric_sum(&metrics, "etl_exactly_once_spans_recorded_total", &[]) > 0.0, "their spans were recorded");
    for u in [&url, &url2] {
        assert_eq!(scalar(u, &format!("SELECT count() FROM default.`{table}`")), 0, "nothing inserted on {u}");
    }
    let offset = stored.lock().unwrap().get(&0).copied();
    assert!(offset.is_none_or(|o| o == 0), "no offset passes a dropped batch: {offset:?}");
    for u in [&url, &url2] {
        exec(u, &format!("DROP TABLE default.`{table}`"));
        exec(u, &format!("DROP TABLE default.`{}`", etl_runtime::ledger_table(&table)));
    }
}

/// `cargo xtask gen <pipeline> --migrate --against <url>`: exit code, stdout and stderr.
fn gen_migrate(pipeline: &std::path::Path, url: &str) -> (Option<i32>, String, String) {
    gen_migrate_with(pipeline, url, &[])
}

/// [`gen_migrate`] with `env` set.
fn gen_migrate_with(pipeline: &std::path::Path, url: &str, env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let output = std::process::Command::new(env!("CARGO"))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args(["xtask", "gen"])
        .arg(pipeline)
        .args(["--migrate", "--against", url])
        .envs(env.iter().copied())
        .output()
        .expect("running cargo xtask gen --migrate");
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (output.status.code(), text(output.stdout), text(output.stderr))
}

/// The flagship with its table renamed, in a directory of its own (its schema beside it).
fn flagship_writing_to(dir: &std::path::Path, table: &str) -> std::path::PathBuf {
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/kafka_avro_to_clickhouse");
    std::fs::create_dir_all(dir.join("schemas")).unwrap();
    std::fs::copy(example.join("schemas/order.avsc"), dir.join("schemas/order.avsc")).unwrap();
    let text = std::fs::read_to_string(example.join("pipeline.yaml")).unwrap();
    assert!(text.contains("    table: orders\n"));
    let path = dir.join("pipeline.yaml");
    std::fs::write(&path, text.replace("    table: orders\n", &format!("    table: {table}\n"))).unwrap();
    path
}

// `gen --migrate` against the real server: a table missing two of the flagship's columns (and
// with one of its own that has a default) gets the ALTER that adds them, which ClickHouse runs;
// then the table passes the sink's start-up check and `--migrate` prints nothing. A column of
// another type is refused: exit 1, the column named, and nothing printed to run (not even the
// column that could be added).
#[test]
fn migrate_adds_missing_columns_and_refuses_a_type_change() {
    let (url, _) = clickhouse_urls();
    let dir = tempfile::tempdir().unwrap();
    let flagship = [
        ("order_id", "Int64"),
        ("customer_id", "Int64"),
        ("region", "LowCardinality(String)"),
        ("total", "Float64"),
        ("created_at", "DateTime64(3, 'UTC')"),
    ];

    let table = unique_table("ch_migrate");
    exec(
        &url,
        &format!(
            "CREATE TABLE default.`{table}` (order_id Int64, customer_id Int64, created_at DateTime64(3, 'UTC'), \
             inserted_at DateTime DEFAULT now()) ENGINE = MergeTree ORDER BY order_id"
        ),
    );
    let pipeline = flagship_writing_to(&dir.path().join("missing"), &table);
    let sink = ClickhouseSink::new(sink_config(&[&url], &table, &flagship)).unwrap();
    assert!(block_on(sink.check()).is_err(), "the table does not fit before the migration");
    let (code, stdout, stderr) = gen_migrate(&pipeline, &url);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout,
        format!(
            "ALTER TABLE `default`.`{table}`\n    ADD COLUMN IF NOT EXISTS `region` LowCardinality(String),\n    ADD \
             COLUMN IF NOT EXISTS `total` Float64;\n"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("column `inserted_at` (DateTime DEFAULT) is not written by the pipeline"), "{stderr}");
    for statement in stdout.split(";\n").filter(|s| !s.trim().is_empty()) {
        exec(&url, statement);
    }
    block_on(sink.check()).expect("the migrated table passes the start-up check");
    let (code, stdout, stderr) = gen_migrate(&pipeline, &url);
    assert_eq!((code, stdout.as_str()), (Some(0), ""), "a fitting table needs nothing: {stderr}");
    exec(&url, &format!("DROP TABLE default.`{table}`"));

    let table = unique_table("ch_migrate_conflict");
    exec(
        &url,
        &format!(
            "CREATE TABLE default.`{table}` (order_id Int64, customer_id Int64, total String, \
             created_at DateTime64(3, 'UTC')) ENGINE = MergeTree ORDER BY order_id"
        ),
    );
    let pipeline = flagship_writing_to(&dir.path().join("conflict"), &table);
    let (code, stdout, stderr) = gen_migrate(&pipeline, &url);
    assert_eq!(code, Some(1), "a type change is refused: {stdout}{stderr}");
    assert_eq!(stdout, "", "nothing to run when a change is unsafe, not even the ADD COLUMN of `region`");
    assert!(stderr.contains("column `total` has type String in the table, the pipeline writes Float64"), "{stderr}");
    assert!(stderr.contains("help: a type change rewrites the column's data"), "{stderr}");
    exec(&url, &format!("DROP TABLE default.`{table}`"));
}

// `gen --migrate` reaches a ClickHouse that requires a client certificate with the pipeline's
// own `ca_file`, `client_cert` and `client_key` (given as `${VAR}`s, resolved like the binary
// resolves them); without the certificate the server cannot be read, and the error says why.
#[test]
fn migrate_over_mutual_tls_uses_the_pipelines_certificates() {
    let (url, _) = clickhouse_urls();
    let (_, ca_file) = clickhouse_https();
    let (mtls, client_cert, client_key) = clickhouse_mtls();
    let dir = tempfile::tempdir().unwrap();
    let table = unique_table("ch_migrate_mtls");
    exec(
        &url,
        &format!(
            "CREATE TABLE default.`{table}` (order_id Int64, customer_id Int64, region LowCardinality(String), \
             created_at DateTime64(3, 'UTC')) ENGINE = MergeTree ORDER BY order_id"
        ),
    );
    let plain = flagship_writing_to(&dir.path().join("plain"), &table);
    let text = std::fs::read_to_string(&plain).unwrap();
    let with_tls = text.replace(
        &format!("    table: {table}\n"),
        &format!(
            "    table: {table}\n    ca_file: ${{TEST_CA_FILE}}\n    client_cert: ${{TEST_CLIENT_CERT}}\n    \
             client_key: ${{TEST_CLIENT_KEY}}\n"
        ),
    );
    let mutual = dir.path().join("plain/pipeline-mtls.yaml");
    std::fs::write(&mutual, with_tls).unwrap();
    let env = [
        ("TEST_CA_FILE", ca_file.to_str().unwrap()),
        ("TEST_CLIENT_CERT", client_cert.to_str().unwrap()),
        ("TEST_CLIENT_KEY", client_key.to_str().unwrap()),
    ];
    let (code, stdout, stderr) = gen_migrate_with(&mutual, &mtls, &env);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout,
        format!("ALTER TABLE `default`.`{table}`\n    ADD COLUMN IF NOT EXISTS `total` Float64;\n"),
        "{stderr}"
    );
    // The server's CA trusted, but no client certificate.
    let anonymous = dir.path().join("plain/pipeline-anonymous.yaml");
    let text = text
        .replace(&format!("    table: {table}\n"), &format!("    table: {table}\n    ca_file: ${{TEST_CA_FILE}}\n"));
    std::fs::write(&anonymous, text).unwrap();
    let (code, stdout, stderr) = gen_migrate_with(&anonymous, &mtls, &env);
    assert_eq!((code, stdout.as_str()), (Some(1), ""), "no certificate, no answer: {stderr}");
    assert!(stderr.contains(&format!("error: {mtls}")), "names the server: {stderr}");
    exec(&url, &format!("DROP TABLE default.`{table}`"));
}

/// Each record's row goes to output 0 (slots `0..2`), and even ids' rows to output 1 too (slots/// Each record's row goes to output 0 (slots `0..2`), and even ids' rows to output 1 too (slots
/// `2..4`): two tables of two shards behind [`etl_runtime::Outputs`].
struct TwoOutputs;

impl etl_runtime::Chain for TwoOutputs {
    fn process(
        &mut self,
        record: &etl_runtime::Record<'_>,
        out: &mut etl_runtime::RowOut<'_>,
    ) -> Result<(), etl_runtime::RecordError> {
        let payload = record.payload.unwrap_or_default();
        let id = i64::from_le_bytes(payload[..8].try_into().expect("an id"));
        let shard = (id % 2) as usize;
        out.push_row(shard, |buf| buf.extend_from_slice(payload));
        if id % 2 == 0 {
            out.push_row(2 + shard, |buf| buf.extend_from_slice(payload));
        }
        Ok(())
    }
}

// ADR 0002 (several outputs, the runtime half): two tables behind `Outputs`, exactly once. A
// first owner is aborted mid-stream, with spans recorded in both tables' ledgers; none of its
// offsets is committed (as after a crash before the first commit), so the next owner replays
// every batch the first one recorded. It claims one epoch in both ledgers, re-cuts each table's
// recorded spans at their own slots, and each table ends with its rows exactly once.
#[test]
fn outputs_write_each_table_exactly_once_across_a_replay() {
    use etl_runtime::{LaneKey, Outputs};
    use support_clickhouse::{RowsLane, Stored};
    const N: i64 = 4_000;
    let (url, url2) = clickhouse_urls();
    let tables = [unique_table("ch_out_all"), unique_table("ch_out_even")];
    for u in [&url, &url2] {
        for table in &tables {
            create_table(u, table, ID_COLUMNS, "", DEDUP);
            create_ledger(u, table);
        }
    }
    let outputs = || {
        let sinks = tables
            .iter()
            .map(|table| {
                let mut config = sink_config(&[&url, &url2], table, ID_COLUMNS);
                config.exactly_once = exactly_once("oooo");
                (table.clone(), ClickhouseSink::for_output(table, config).unwrap())
            })
            .collect();
        Outputs::new(sinks, 2).unwrap()
    };
    let mut runtime = runtime_config(4);
    runtime.exactly_once = true;
    runtime.batch.max_rows = 300;
    let lane = LaneKey::new("orders", 0);
    let stored = Stored::default();

    let first = etl_runtime::Pipeline::start(runtime.clone(), || TwoOutputs, outputs(), None).unwrap();
    let plans = first.handle().recover(&[(lane.clone(), None)]).unwrap();
    let rows = id_rows(0..N, 1).remove(0);
    first
        .handle()
        .add_lane_replaying(Box::new(RowsLane::new(0, rows.clone(), Some(4_000.0), &stored)), plans.into_iter().next());
    std::thread::sleep(Duration::from_millis(600));
    let metrics = first.metrics_text();
    first.abort();
    assert!(metric_sum(&metrics, "etl_exactly_once_spans_recorded_total", &[]) > 0.0, "the first owner recorded spans");
    let stopped = stored.lock().unwrap().get(&0).copied();
    assert!(stopped.is_none_or(|next| next < N), "the first owner stopped mid-stream ({stopped:?})");

    let second = etl_runtime::Pipeline::start(runtime, || TwoOutputs, outputs(), None).unwrap();
    let plans = second.handle().recover(&[(lane, None)]).unwrap();
    assert!(plans[0].epoch >= 2, "one epoch above the first owner's in both ledgers");
    assert_eq!(plans[0].spans.len(), 4, "a replay plan over the four slots");
    let replayed = plans[0].pending();
    assert!(replayed > 1, "recorded batches of both tables to replay ({replayed})");
    second.handle().add_lane_replaying(Box::new(RowsLane::new(0, rows, None, &stored)), plans.into_iter().next());
    let done = |table: &str, n: i64| {
        [&url, &url2].iter().map(|u| scalar(u, &format!("SELECT uniqExact(id) FROM default.`{table}`"))).sum::<i64>()
            == n
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(done(&tables[0], N) && done(&tables[1], N / 2)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let report = second.shutdown(Duration::from_secs(10));
    assert_eq!(report.fatal, None);
    eprintln!("outputs: {replayed} recorded batches replayed by the second owner");
    for (table, n) in [(&tables[0], N), (&tables[1], N / 2)] {
        let [count, uniq] = [&url, &url2].iter().fold([0, 0], |[c, q], u| {
            [
                c + scalar(u, &format!("SELECT count() FROM default.`{table}`")),
                q + scalar(u, &format!("SELECT uniqExact(id) FROM default.`{table}`")),
            ]
        });
        assert_eq!((count, uniq), (n, n), "`{table}` holds its rows exactly once");
        let spans: i64 = [&url, &url2]
            .iter()
            .map(|u| {
                scalar(
                    u,
                    &format!(
                        "SELECT count() FROM default.`{}` WHERE first_offset >= 0",
                        etl_runtime::ledger_table(table)
                    ),
                )
            })
            .sum();
        assert!(spans > 0, "`{table}`'s own ledger holds its spans");
    }
    for u in [&url, &url2] {
        for table in &tables {
            exec(u, &format!("DROP TABLE default.`{table}`"));
            exec(u, &format!("DROP TABLE default.`{}`", etl_runtime::ledger_table(table)));
        }
    }
}
