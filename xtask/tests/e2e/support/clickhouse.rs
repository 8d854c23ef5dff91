//! ClickHouse checks over both shards: statements, row counts, distinct orders, the per-key
//! checksum of the stored columns, and waiting for rows to arrive.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::http::{host_port, http};
use super::infra::infra;

/// Tables whose two shards are other servers than the scenarios' shared two.
static TABLES: Mutex<BTreeMap<String, [String; 2]>> = Mutex::new(BTreeMap::new());

/// From now on the checks read (and empty) `table` on `shards`: a scenario whose shard 1 is a
/// server of its own that it kills and freezes.
pub fn route_table(table: &str, shards: [String; 2]) {
    TABLES.lock().unwrap_or_else(|e| e.into_inner()).insert(table.to_owned(), shards);
}

/// The two servers `table` lives on.
pub fn shards_of(table: &str) -> [String; 2] {
    TABLES.lock().unwrap_or_else(|e| e.into_inner()).get(table).cloned().unwrap_or_else(|| infra().clickhouse.clone())
}

/// Runs a statement on the server at `url`; panics with ClickHouse's message if it fails.
pub fn ch_query(url: &str, sql: &str) -> String {
    let (status, body) = http(host_port(url), "POST", "/", sql.as_bytes()).unwrap_or_else(|e| panic!("{url}: {e}"));
    assert_eq!(status, 200, "{sql}: {body}");
    body
}

pub fn ch_exec(url: &str, sql: &str) {
    ch_query(url, sql);
}

/// Numbers of a one-row TabSeparated result.
pub fn ch_numbers(url: &str, sql: &str) -> Vec<i64> {
    ch_query(url, sql).split_whitespace().map(|v| v.parse().unwrap_or_else(|_| panic!("{sql}: {v}"))).collect()
}

/// What a table holds, summed over both shards (rows of one key always go to the same shard:
/// the pipeline routes by customer_id, a function of the key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChStats {
    pub count: i64,
    pub uniq: i64,
}

impl ChStats {
    pub fn duplicates(&self) -> i64 {
        self.count - self.uniq
    }
}

pub fn ch_stats(table: &str) -> ChStats {
    let mut stats = ChStats::default();
    for url in &shards_of(table) {
        let n = ch_numbers(url, &format!("SELECT count(), uniqExact(order_id) FROM default.{table}"));
        stats.count += n[0];
        stats.uniq += n[1];
    }
    stats
}

/// Rows per shard.
pub fn ch_counts(table: &str) -> [i64; 2] {
    shards_of(table).map(|url| ch_numbers(&url, &format!("SELECT count() FROM default.{table}"))[0])
}

/// The per-key checksum over distinct order ids (see [`checksum`]), from the stored columns.
pub fn ch_checksum(table: &str, where_: &str) -> i64 {
    ch_total(
        table,
        &format!(
            "SELECT sum(order_id * 3 + customer_id * 7 + total_cents) FROM (SELECT order_id, customer_id, \
             total_cents FROM default.{table} WHERE {where_} LIMIT 1 BY order_id)"
        ),
    )
}

/// The sum over both shards of `table` of the one number `sql` selects.
pub fn ch_total(table: &str, sql: &str) -> i64 {
    shards_of(table).iter().map(|url| ch_numbers(url, sql)[0]).sum()
}

/// Empties `table` on both shards.
pub fn truncate(table: &str) {
    for url in &shards_of(table) {
        ch_exec(url, &format!("TRUNCATE TABLE default.{table}"));
    }
}

/// Waits until `table` holds `n` distinct orders; returns the last stats.
pub fn await_rows(table: &str, n: i64, timeout: Duration) -> ChStats {
    let deadline = Instant::now() + timeout;
    loop {
        let stats = ch_stats(table);
        if stats.uniq >= n || Instant::now() > deadline {
            return stats;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}
