//! The exactly-once ledger table in ClickHouse (the sink's `Ledger`, and its configuration): one
//! row per batch span in `<table>_etl_batches` on the batch's shard, written before the batch's
//! insert and read by the next owner of a lane (topic, partition); one claim row per new owner of
//! a lane (offsets -1, on shard `partition % shards`) with its epoch; and the start-up checks that
//! the target table deduplicates inserts. Every row names its topic, so one ledger serves a
//! pipeline that reads several topics.

use ::clickhouse::Client;

use crate::clickhouse::insert::Failure;
use crate::clickhouse::replicas::Shard;
use crate::clickhouse::table_columns::quote_ident;
use crate::engine::errors::SinkError;
use crate::engine::lane::LaneKey;
use crate::engine::ledger::{Ledger, LedgerFuture, Newest, Recorded, Span};

/// The ledger table of `table`.
pub fn ledger_table(table: &str) -> String {
    format!("{table}_etl_batches")
}

/// The ledger's columns as the sink writes them; `recorded_at` (with a default, for the TTL) is
/// not written. `cargo xtask gen --ddl` prints the CREATE TABLE.
pub(super) const LEDGER_COLUMNS: [(&str, &str); 8] = [
    ("pipeline", "String"),
    ("topic", "String"),
    ("partition", "Int32"),
    ("shard", "UInt32"),
    ("first_offset", "Int64"),
    ("last_offset", "Int64"),
    ("config_hash", "String"),
    ("epoch", "UInt64"),
];

/// What `sink.clickhouse.exactly_once` needs to know besides the sink's own configuration.
#[derive(Debug, Clone)]
pub struct ExactlyOnceConfig {
    /// `pipeline.name`: the ledger is shared by the pipelines that write one table.
    pub pipeline: String,
    /// The source subscription. The ledger no longer reads it: every ledger row and token names
    /// the topic of its own lane (a pipeline may read several topics). It stays so that the code
    /// generated for existing pipelines, which sets it, is unchanged; it can go with the next
    /// change that regenerates every pipeline anyway.
    pub topic: String,
    /// The config hash: tokens and spans of another configuration are never reused.
    pub config_hash: String,
}

/// The ledger: it writes through the sink's replicas, and rotates over them the same way.
pub(super) struct ClickhouseLedger {
    pub(super) shards: std::sync::Arc<Vec<Shard>>,
    pub(super) database: String,
    pub(super) table: String,
    pub(super) config: ExactlyOnceConfig,
    pub(super) timeout: std::time::Duration,
    pub(super) password: String,
    /// Per `(topic, partition)`, the epoch of the lane's newest retirement (0: never retired),
    /// as [`Ledger::recorded`] last read it; it salts the lane's tokens (see [`Ledger::token`]).
    pub(super) generations: std::sync::Mutex<std::collections::HashMap<(String, i32), u64>>,
}

/// `first_offset` of a claim row.
const CLAIM: i64 = -1;
/// `first_offset` of a retirement row (`offsets reset --reingest`): every span of the lane with a
/// lower epoch is retired. Its `last_offset` is -2 too; it is never read as a span.
const RETIREMENT: i64 = -2;

impl ClickhouseLedger {
    /// A query of this pipeline's rows of `lane`: the `pipeline`, `topic` and `partition`
    /// parameters are set.
    fn scoped(&self, client: &Client, sql: &str, topic: &str, partition: i32) -> ::clickhouse::query::Query {
        client
            .query_raw(sql)
            .param("pipeline", self.config.pipeline.as_str())
            .param("topic", topic)
            .param("partition", partition)
    }

    /// Runs a scoped SELECT (with the extra parameters `bind` sets) on every shard; its TSV
    /// answer from each.
    async fn select_everywhere(
        &self,
        sql: &str,
        lane: &LaneKey,
        bind: impl Fn(::clickhouse::query::Query) -> ::clickhouse::query::Query,
    ) -> Result<Vec<Vec<u8>>, SinkError> {
        let mut answers = Vec::with_capacity(self.shards.len());
        for shard in 0..self.shards.len() {
            let answer = self
                .on_shard(shard, |client| {
                    // A replica that misses a quorum-acknowledged ledger row refuses to answer
                    // instead of answering without it (the on_shard loop tries the next one).
                    let query = bind(self.scoped(&client, sql, &lane.topic, lane.partition))
                        .with_setting("select_sequential_consistency", "1");
                    async move { query.fetch_bytes("TSV")?.collect().await.map(|b| b.to_vec()) }
                })
                .await?;
            answers.push(answer);
        }
        Ok(answers)
    }

    /// Runs `request` on the replicas of `shard` in turn, from the shard's current one, until one
    /// answers (a replica that fails is rotated out as for an insert, so a hung replica costs one
    /// `timeout`, not one per request); a fatal error stops at once, otherwise the last retryable
    /// error is returned.
    async fn on_shard<T, F, Fut>(&self, shard: usize, request: F) -> Result<T, SinkError>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, ::clickhouse::error::Error>>,
    {
        let state =
            self.shards.get(shard).ok_or_else(|| SinkError::fatal(format!("no shard {shard} in the ledger")))?;
        let mut last = SinkError::retryable(format!("shard {shard} has no replica"));
        let (start, count) = (state.pick(), state.replicas.len());
        for index in (0..count).map(|step| (start + step) % count) {
            let replica = &state.replicas[index];
            let result = match tokio::time::timeout(self.timeout, request(replica.client.clone())).await {
                Ok(result) => result,
                Err(_) => Err(::clickhouse::error::Error::TimedOut),
            };
            match result {
                Ok(value) => {
                    state.succeeded(index);
                    return Ok(value);
                }
                Err(error) => {
                    let error = Failure::of(&error, &self.password).into_sink_error();
                    if !error.is_retryable() {
                        return Err(error);
                    }
                    // A quorum that cannot be met now (too few live replicas, or the previous
                    // quorum insert still running) is the shard's state, not this replica's.
                    if !is_quorum_wait(&error.message) {
                        state.failed(index);
                    }
                    tracing::warn!(shard, replica = %replica.shown, %error, "exactly-once ledger request failed");
                    last = error;
                }
            }
        }
        Err(last)
    }
}

impl ClickhouseLedger {
    /// The ledger table's name in SQL, quoted (a table name may hold a backquote or a backslash).
    fn qualified(&self) -> String {
        format!("{}.{}", quote_ident(&self.database), quote_ident(&ledger_table(&self.table)))
    }

    /// The epoch of `lane`'s newest retirement on any shard, 0 when it was never retired.
    async fn retirement(&self, lane: &LaneKey) -> Result<u64, SinkError> {
        self.max_epoch(lane, &format!("AND first_offset = {RETIREMENT}")).await
    }

    /// The highest epoch of `lane`'s rows that meet `condition` (SQL after `AND`, or nothing),
    /// over every shard; 0 when there is none.
    async fn max_epoch(&self, lane: &LaneKey, condition: &str) -> Result<u64, SinkError> {
        let sql = format!(
            "SELECT max(epoch) FROM {} WHERE pipeline = {{pipeline:String}} AND topic = {{topic:String}} \
             AND partition = {{partition:Int32}} {condition}",
            self.qualified()
        );
        let mut highest = 0u64;
        for text in self.select_everywhere(&sql, lane, |query| query).await? {
            let text = String::from_utf8_lossy(&text);
            let max = text.trim().parse::<u64>().map_err(|_| {
                SinkError::fatal(format!("unreadable epoch in the exactly-once ledger: `{}`", text.trim()))
            })?;
            highest = highest.max(max);
        }
        Ok(highest)
    }

    /// Inserts one ledger row on the span's shard and waits until it is written.
    async fn insert_row(&self, span: &Span, epoch: u64, token: Option<String>) -> Result<(), SinkError> {
        let sql = format!(
            "INSERT INTO {} ({}) SELECT {{pipeline:String}}, {{topic:String}}, {{partition:Int32}}, \
             {{shard:UInt32}}, {{first:Int64}}, {{last:Int64}}, {{hash:String}}, {{epoch:UInt64}}",
            self.qualified(),
            LEDGER_COLUMNS.map(|(name, _)| format!("`{name}`")).join(", ")
        );
        self.on_shard(span.shard, |client| {
            let mut query = self
                .scoped(&client, &sql, &span.topic, span.partition)
                .param("shard", span.shard as u32)
                .param("first", span.first)
                .param("last", span.last)
                .param("hash", self.config.config_hash.as_str())
                .param("epoch", epoch)
                .with_setting("wait_end_of_query", "1")
                // The ledger row must be written before the batch it names, whatever the
                // server's default for async inserts (and whatever the data inserts use).
                .with_setting("async_insert", "0")
                // On a replicated ledger a row is acknowledged only once a majority of the shard's
                // replicas has it, in one linear order, so the replica a later owner reads from
                // (with sequential consistency) has it too; a non-replicated table ignores both.
                .with_setting("insert_quorum", "auto")
                .with_setting("insert_quorum_parallel", "0");
            if let Some(token) = &token {
                query = query.with_setting("insert_deduplication_token", token.as_str());
            }
            query.execute()
        })
        .await
    }
}

impl Ledger for ClickhouseLedger {
    fn highest_epoch<'a>(&'a self, lane: &'a LaneKey) -> LedgerFuture<'a, u64> {
        // Claims, spans and retirements of every config hash.
        Box::pin(self.max_epoch(lane, ""))
    }

    fn write_claim<'a>(&'a self, lane: &'a LaneKey, epoch: u64) -> LedgerFuture<'a, ()> {
        Box::pin(async move {
            let home = lane.partition.rem_euclid(self.shards.len() as i32) as usize;
            // The claim row: offsets -1, never read as a span. Without a token, ClickHouse's
            // content-based deduplication drops only an identical claim (the same epoch).
            let claim =
                Span { topic: lane.topic.clone(), partition: lane.partition, shard: home, first: CLAIM, last: CLAIM };
            self.insert_row(&claim, epoch, None).await
        })
    }

    fn owner<'a>(&'a self, span: &'a Span) -> LedgerFuture<'a, u64> {
        Box::pin(async move {
            // The claims live on the partition's home shard (`claim`), so one shard answers.
            let sql = format!(
                "SELECT max(epoch) FROM {} WHERE pipeline = {{pipeline:String}} AND topic = {{topic:String}} \
                 AND partition = {{partition:Int32}} AND first_offset = {CLAIM}",
                self.qualified()
            );
            let home = span.partition.rem_euclid(self.shards.len() as i32) as usize;
            let text = self
                .on_shard(home, |client| {
                    let query = self
                        .scoped(&client, &sql, &span.topic, span.partition)
                        .with_setting("select_sequential_consistency", "1");
                    async move { query.fetch_bytes("TSV")?.collect().await.map(|b| b.to_vec()) }
                })
                .await?;
            let text = String::from_utf8_lossy(&text);
            text.trim().parse::<u64>().map_err(|_| {
                SinkError::fatal(format!("unreadable epoch in the exactly-once ledger: `{}`", text.trim()))
            })
        })
    }

    fn record<'a>(&'a self, span: &'a Span, epoch: u64) -> LedgerFuture<'a, ()> {
        // A retried span whose first attempt landed is not written twice; the same span recorded
        // again by a later owner is a row of its own, so the span's highest epoch is its last
        // owner's (overlaps are resolved by it).
        Box::pin(self.insert_row(span, epoch, Some(format!("{}:span:{epoch}", self.token(span)))))
    }

    fn recorded<'a>(&'a self, lane: &'a LaneKey, watermark: Option<i64>) -> LedgerFuture<'a, Recorded> {
        Box::pin(async move {
            // The newest retirement over every shard: spans below its epoch are an earlier
            // ingest's, which the operator asked to write again. One answer for all shards, so a
            // retirement that reached only some of them still retires the lane everywhere.
            let retired = self.retirement(lane).await?;
            self.generations
                .lock()
                .expect("generations lock")
                .insert((lane.topic.to_string(), lane.partition), retired);
            let sql = format!(
                // The spans above the watermark, and every span that could overlap one of the
                // running configuration's (its last offset at or above their lowest first
                // offset): the replay resolves overlaps over those (`Replay::new`).
                "SELECT shard, first_offset, last_offset, config_hash = {{hash:String}} AS current, max(epoch) \
                 FROM {table} \
                 WHERE pipeline = {{pipeline:String}} AND topic = {{topic:String}} AND partition = {{partition:Int32}} \
                 AND first_offset >= 0 AND epoch >= {{retired:UInt64}} AND (last_offset > {{above:Int64}} OR last_offset >= ( \
                   SELECT minOrNull(first_offset) FROM {table} \
                   WHERE pipeline = {{pipeline:String}} AND topic = {{topic:String}} AND partition = {{partition:Int32}} \
                   AND config_hash = {{hash:String}} AND first_offset >= 0 AND epoch >= {{retired:UInt64}} \
                   AND last_offset > {{above:Int64}})) \
                 GROUP BY shard, first_offset, last_offset, current",
                table = self.qualified()
            );
            let mut recorded = Recorded::default();
            let answers = self
                .select_everywhere(&sql, lane, |query| {
                    query
                        .param("hash", self.config.config_hash.as_str())
                        .param("above", watermark.unwrap_or(-1))
                        .param("retired", retired)
                })
                .await?;
            for text in answers {
                for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                    let line = String::from_utf8_lossy(line);
                    let fields: Vec<&str> = line.split('\t').collect();
                    let number = |i: usize| fields.get(i).and_then(|f| f.parse::<i64>().ok());
                    let parsed = match (number(0), number(1), number(2), fields.get(3), number(4)) {
                        (Some(shard), Some(first), Some(last), Some(current), Some(epoch)) if fields.len() == 5 => {
                            let span = Span {
                                topic: lane.topic.clone(),
                                partition: lane.partition,
                                shard: shard as usize,
                                first,
                                last,
                            };
                            Some((span, *current == "1", epoch as u64))
                        }
                        _ => None,
                    };
                    match parsed {
                        Some((span, true, epoch)) => recorded.spans.push((span, epoch)),
                        Some((span, false, epoch)) => {
                            recorded.others.push((span, epoch));
                        }
                        None => {
                            return Err(SinkError::fatal(format!(
                                "unreadable row of the exactly-once ledger: `{line}`"
                            )));
                        }
                    }
                }
            }
            Ok(recorded)
        })
    }

    fn token(&self, span: &Span) -> String {
        let base = format!(
            "etl-eo:{}:{}:{}:{}:{}:{}-{}",
            self.config.pipeline,
            self.config.config_hash,
            span.topic,
            span.partition,
            span.shard,
            span.first,
            span.last
        );
        // After a retirement the same span names another batch (the same records, ingested
        // again): a suffix keeps its token apart from every token of the earlier ingest. Never
        // retired, the token is what it always was, so upgrades replay under the same tokens.
        let generation = self
            .generations
            .lock()
            .expect("generations lock")
            .get(&(span.topic.to_string(), span.partition))
            .copied()
            .unwrap_or(0);
        if generation == 0 { base } else { format!("{base}:g{generation}") }
    }

    fn retire<'a>(&'a self, lane: &'a LaneKey, epoch: u64) -> LedgerFuture<'a, ()> {
        Box::pin(async move {
            // On every shard: `recorded` reads the newest retirement over all of them, and any
            // one shard's row is enough, but each shard's own row keeps a shard's answer whole
            // when another shard's table is recreated.
            for shard in 0..self.shards.len() {
                let row = Span {
                    topic: lane.topic.clone(),
                    partition: lane.partition,
                    shard,
                    first: RETIREMENT,
                    last: RETIREMENT,
                };
                self.insert_row(&row, epoch, None).await?;
            }
            Ok(())
        })
    }

    fn newest<'a>(&'a self, lane: &'a LaneKey) -> LedgerFuture<'a, Vec<Newest>> {
        Box::pin(async move {
            let retired = self.retirement(lane).await?;
            let sql = format!(
                "SELECT shard, first_offset, last_offset, max(epoch) AS e FROM {} \
                 WHERE pipeline = {{pipeline:String}} AND topic = {{topic:String}} AND partition = {{partition:Int32}} \
                 AND config_hash = {{hash:String}} AND first_offset >= 0 \
                 GROUP BY shard, first_offset, last_offset ORDER BY last_offset DESC LIMIT 1 BY shard",
                self.qualified()
            );
            let mut newest = Vec::new();
            let answers = self
                .select_everywhere(&sql, lane, |query| query.param("hash", self.config.config_hash.as_str()))
                .await?;
            for text in answers {
                for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                    let line = String::from_utf8_lossy(line);
                    let fields: Vec<i64> = line.split('\t').filter_map(|f| f.parse().ok()).collect();
                    let [shard, first, last, epoch] = fields[..] else {
                        return Err(SinkError::fatal(format!("unreadable row of the exactly-once ledger: `{line}`")));
                    };
                    newest.push(Newest {
                        table: format!("{}.{}", self.database, self.table),
                        shard: shard as usize,
                        first,
                        last,
                        epoch: epoch as u64,
                        retired: (epoch as u64) < retired,
                    });
                }
            }
            newest.sort_by_key(|n| n.shard);
            Ok(newest)
        })
    }
}

/// Whether a failed ledger request waits for a quorum (TOO_FEW_LIVE_REPLICAS,
/// UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE) rather than failing on its replica.
fn is_quorum_wait(message: &str) -> bool {
    message.contains("TOO_FEW_LIVE_REPLICAS") || message.contains("UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE")
}

/// Why a table does not deduplicate inserts, from its engine and `create_table_query`; `None` when
/// it does (a replicated MergeTree with a non-zero `replicated_deduplication_window`, or a
/// MergeTree with a non-zero `non_replicated_deduplication_window`).
pub(super) fn deduplication_problem(engine: &str, create: &str) -> Option<String> {
    // The setting's value, matched as a whole word: `replicated_deduplication_window` must not
    // match inside `non_replicated_deduplication_window`.
    let window = |setting: &str| -> Option<u64> {
        let needle = format!("{setting} = ");
        let at = create
            .match_indices(&needle)
            .map(|(at, _)| at)
            .find(|&at| create[..at].chars().next_back().is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_')))?;
        let digits: String = create[at + needle.len()..].chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    if engine.starts_with("Replicated") {
        return (window("replicated_deduplication_window") == Some(0)).then(|| {
            "its replicated_deduplication_window is 0; set it above the number of batches inserted while one \
             is retried or replayed (ALTER TABLE … MODIFY SETTING replicated_deduplication_window = 1000)"
                .to_owned()
        });
    }
    if engine.ends_with("MergeTree") {
        return match window("non_replicated_deduplication_window") {
            Some(n) if n > 0 => None,
            _ => Some(format!(
                "a {engine} table deduplicates inserts only with non_replicated_deduplication_window > 0 (ALTER \
                 TABLE … MODIFY SETTING non_replicated_deduplication_window = 1000, or recreate it from `cargo \
                 xtask gen --ddl`)"
            )),
        };
    }
    Some(format!("its engine {engine} does not deduplicate inserts; use a MergeTree family engine"))
}

/// Why a deduplicating table with this engine can lose a batch to a crash of the ClickHouse server
/// itself; `None` for replicated engines.
///
/// A non-replicated MergeTree appends an insert's token to its deduplication log before it commits
/// the insert's part. A server killed between the two keeps the token and loses the part, and the
/// retry (at least once) or the replay (exactly once) of that batch is then dropped as a
/// duplicate: its rows are lost. A replicated MergeTree commits the block id in Keeper together
/// with the part. Seen twice in the e2e scenario `one_shard_down_then_frozen_for_minutes`: under
/// exactly-once (the token's log entry named part `all_667_667_0`, and after the restart another
/// insert was given block number 667) and, later, at least once (60 rows of 160,000 missing with
/// the committed offsets at the end).
pub(super) fn crash_caveat(engine: &str) -> Option<&'static str> {
    (!engine.starts_with("Replicated") && engine.ends_with("MergeTree")).then_some(
        "a non-replicated MergeTree records an insert's token before it commits the insert's part, so a ClickHouse \
         server killed mid-insert can keep the token and lose the rows, and their replay is then dropped as a \
         duplicate; no rows are lost to a crash of this pipeline, and none to a ClickHouse crash only with a \
         Replicated*MergeTree table (or, at least once, a table that does not deduplicate: retries then duplicate)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // A quorum that cannot be met is not held against the replica that said so.
    #[test]
    fn quorum_waits_are_told_apart() {
        assert!(is_quorum_wait(
            "Code: 285. DB::Exception: Number of alive replicas (1) is less than requested quorum (2/2). (TOO_FEW_LIVE_REPLICAS)"
        ));
        assert!(is_quorum_wait(
            "Code: 286. DB::Exception: Quorum for previous write has not been satisfied yet. (UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE)"
        ));
        assert!(!is_quorum_wait("Code: 242. DB::Exception: Table is in readonly mode. (TABLE_IS_READ_ONLY)"));
    }

    // Invariant 8: the start-up check refuses a table that would keep replayed batches twice.
    #[test]
    fn deduplication_is_read_from_the_table_definition() {
        let with = "CREATE TABLE default.t (`id` Int64) ENGINE = MergeTree ORDER BY id SETTINGS \
                    non_replicated_deduplication_window = 1000, index_granularity = 8192";
        assert_eq!(deduplication_problem("MergeTree", with), None);
        let without =
            "CREATE TABLE default.t (`id` Int64) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192";
        assert!(deduplication_problem("MergeTree", without).unwrap().contains("non_replicated_deduplication_window"));
        let zero = with.replace("= 1000", "= 0");
        assert!(deduplication_problem("MergeTree", &zero).is_some());
        assert_eq!(deduplication_problem("ReplicatedMergeTree", without), None);
        assert!(deduplication_problem("ReplicatedMergeTree", "SETTINGS replicated_deduplication_window = 0").is_some());
        let both = "SETTINGS non_replicated_deduplication_window = 1000, replicated_deduplication_window = 0";
        assert!(deduplication_problem("ReplicatedMergeTree", both).is_some(), "whole words only");
        assert!(deduplication_problem("Memory", "").unwrap().contains("engine Memory"));
    }

    // The crash caveat names the engines whose deduplication log is not committed with the part.
    #[test]
    fn only_non_replicated_merge_trees_lose_rows_to_a_server_crash() {
        assert!(crash_caveat("MergeTree").unwrap().contains("Replicated*MergeTree"));
        assert!(crash_caveat("ReplacingMergeTree").is_some());
        assert_eq!(crash_caveat("ReplicatedMergeTree"), None);
        assert_eq!(crash_caveat("ReplicatedReplacingMergeTree"), None);
        assert_eq!(crash_caveat("Memory"), None);
    }
}
