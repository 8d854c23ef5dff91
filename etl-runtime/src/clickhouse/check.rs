//! The start-up checks: the live table against the pipeline's columns on every shard, that it
//! deduplicates inserts, and under exactly-once the ledger table.

use crate::clickhouse::ClickhouseSink;
use crate::clickhouse::errors::Class;
use crate::clickhouse::ledger_table::{self, ledger_table};
use crate::clickhouse::replicas::Replica;
use crate::clickhouse::table_columns::{self, LiveColumn};
use crate::engine::errors::SinkError;

/// What the target table's engines say about deduplicating inserts, one line per shard each.
#[derive(Debug, Default)]
struct Deduplication {
    /// Why a shard's table does not deduplicate inserts at all.
    problems: Vec<String>,
    /// Why a shard's deduplication does not survive a crash of its ClickHouse server.
    crash_caveats: Vec<String>,
}

impl ClickhouseSink {
    /// Reaches every shard (at least one replica each) and compares the live table on each reached
    /// replica with the pipeline's columns. A difference or a missing table is fatal and lists
    /// every difference; a shard with no reachable replica is retryable. Then the deduplication
    /// (and under exactly-once the ledger) checks.
    pub(super) async fn check_table(&self) -> Result<(), SinkError> {
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
                            let found = table_columns::compare(&self.columns, &live);
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

    /// What the target table's engine on one replica of each shard means for deduplication.
    async fn deduplication(&self) -> Result<Deduplication, SinkError> {
        let mut found = Deduplication::default();
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
                // A table that does not deduplicate cannot drop a retry as a duplicate, so the
                // crash caveat is about deduplicating tables only.
                if let Some(problem) = ledger_table::deduplication_problem(engine, create) {
                    found.problems.push(format!("{at}: {problem}"));
                } else if let Some(caveat) = ledger_table::crash_caveat(engine) {
                    found.crash_caveats.push(format!("{at}: {caveat}"));
                }
            }
        }
        Ok(found)
    }

    /// At-least-once: a table that does not deduplicate inserts still works, but a retried insert
    /// may land twice, so the start-up check warns (and does not refuse). One that deduplicates on
    /// a non-replicated engine can lose a batch to a crash of its server (see
    /// [`ledger_table::crash_caveat`]), which is worth a warning too. Not being able to tell (no
    /// grant on `system.tables`, a slow answer) is not a reason to refuse either.
    async fn warn_unless_deduplicating(&self) -> Result<(), SinkError> {
        let table = format!("{}.{}", self.database, self.table);
        let deduplication = match self.deduplication().await {
            Ok(deduplication) => deduplication,
            Err(error) => {
                tracing::warn!(%error, "could not read the table's definition to check that it deduplicates inserts");
                return Ok(());
            }
        };
        for problem in deduplication.problems {
            tracing::warn!(
                table = %table,
                %problem,
                "the table does not deduplicate inserts: an insert retried after a lost answer can land twice; \
                 create it with the CREATE TABLE of `gen --ddl`"
            );
        }
        for caveat in deduplication.crash_caveats {
            tracing::warn!(table = %table, %caveat, "at-least-once: not safe against a ClickHouse server crash");
        }
        Ok(())
    }

    /// Exactly-once: on one replica of every shard, the target table must deduplicate inserts and
    /// the ledger table must exist with its columns. Either problem is fatal: replays would keep
    /// duplicates, or no span could be recorded.
    async fn check_exactly_once(&self) -> Result<(), SinkError> {
        let ledger_name = ledger_table(&self.table);
        let expected: Vec<(String, String)> =
            ledger_table::LEDGER_COLUMNS.iter().map(|(n, t)| ((*n).to_owned(), (*t).to_owned())).collect();
        let deduplication = self.deduplication().await?;
        for caveat in &deduplication.crash_caveats {
            tracing::warn!(table = %format!("{}.{}", self.database, self.table), %caveat, "exactly-once: not safe against a ClickHouse server crash");
        }
        let mut problems: Vec<String> = deduplication
            .problems
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
                let found = table_columns::compare(&expected, &live);
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
