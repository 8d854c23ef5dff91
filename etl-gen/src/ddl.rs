//! `gen --ddl`: the CREATE TABLE that fits a pipeline's output row, per shard or replicated.

use crate::ir::Ty;
use crate::load::Validated;
use crate::model::Sink;

/// Why there is no CREATE TABLE for a pipeline.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The pipeline writes files, not a ClickHouse table.
    #[error("--ddl describes a ClickHouse table; this pipeline writes to `sink.file`")]
    NotClickhouse,
    /// `ON CLUSTER ''` names no cluster; ClickHouse would refuse it only when it runs.
    #[error(
        "the cluster name is empty; name a cluster of the servers' <remote_servers>, or leave it out for the \
         `{{cluster}}` macro"
    )]
    EmptyCluster,
}

/// How the tables are created.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Replication {
    /// One MergeTree per shard, created on each shard's server (`--ddl`).
    #[default]
    PerShard,
    /// ReplicatedMergeTree tables created once for the whole cluster with ON CLUSTER
    /// (`--ddl --replicated`), their Keeper paths and replica names from the servers' macros.
    Replicated {
        /// The cluster ON CLUSTER names; `None` is the `{cluster}` macro.
        cluster: Option<String>,
    },
}

/// The CREATE TABLE statement for the pipeline's ClickHouse table (and, under exactly-once, its
/// ledger's), one per shard: `create_tables` without replication.
pub fn create_table(v: &Validated) -> Result<String, Error> {
    create_tables(v, &Replication::PerShard)
}

/// The CREATE TABLE statements for the pipeline's ClickHouse table and, under exactly-once, its
/// ledger table, in the given form; or why there are none.
pub fn create_tables(v: &Validated, replication: &Replication) -> Result<String, Error> {
    let Sink::Clickhouse(c) = &v.model.sink else {
        return Err(Error::NotClickhouse);
    };
    let form = Form::new(replication)?;
    let mut sql = form.header(&v.model.pipeline.name);
    let tables = v.model.output_tables();
    for (i, (output, table)) in v.plan.outputs.iter().zip(&tables).enumerate() {
        if let Some(name) = table.name {
            sql.push_str(&format!("{}-- outputs.{name}\n", if i == 0 { "" } else { "\n" }));
        }
        create_output(&mut sql, &form, output, table, c.exactly_once);
    }
    Ok(sql)
}

/// Appends the CREATE TABLE of one output's table (and, under exactly-once, its ledger's).
fn create_output(
    sql: &mut String,
    form: &Form,
    output: &crate::plan::OutputPlan,
    table: &crate::model::OutputTable<'_>,
    exactly_once: bool,
) {
    let (database, name) = (table.database, table.table);
    let columns = &output.output;
    let width = columns.iter().map(|c| c.name.len() + 2).max().unwrap_or(0);
    sql.push_str(&format!(
        "CREATE TABLE IF NOT EXISTS {}.{}{}\n(\n",
        quote_ident(database),
        quote_ident(name),
        form.on_cluster
    ));
    let lines: Vec<String> =
        columns.iter().map(|col| format!("    {:width$} {}", quote_ident(&col.name), col.ty.clickhouse())).collect();
    sql.push_str(&lines.join(",\n"));
    sql.push_str(&format!("\n)\nENGINE = {}\n", form.engine(database, name)));
    // Order by the shard key when there is one, else by the first column that can be a
    // sorting key (not nullable, not a container, not JSON or a Variant, which ClickHouse does
    // not sort by).
    let order = output
        .shard_key
        .clone()
        .or_else(|| {
            columns
                .iter()
                .find(|c| {
                    !matches!(
                        c.ty,
                        Ty::Nullable(_) | Ty::Array(_) | Ty::Map(..) | Ty::Record(_) | Ty::Json | Ty::Variant(_)
                    )
                })
                .map(|c| c.name.clone())
        })
        .map(|name| quote_ident(&name))
        .unwrap_or_else(|| "tuple()".into());
    // A table that remembers insert tokens drops a retried insert that the server had committed
    // while its answer was lost (a timeout at the client), in both modes; under exactly-once it
    // also drops replayed batches.
    sql.push_str(&format!("ORDER BY {order}\nSETTINGS {};\n", form.settings));
    if exactly_once {
        let ledger = format!("{name}_etl_batches");
        sql.push_str(&format!(
            "\n-- The exactly-once ledger: one row per batch span, written before the batch's insert.\n{}\
             CREATE TABLE IF NOT EXISTS {}.{}{}\n(\n    \
             `pipeline`     String,\n    \
             `topic`        String,\n    \
             `partition`    Int32,\n    \
             `shard`        UInt32,\n    \
             `first_offset` Int64,\n    \
             `last_offset`  Int64,\n    \
             `config_hash`  String,\n    \
             `epoch`        UInt64,\n    \
             `recorded_at`  DateTime DEFAULT now()\n)\n\
             ENGINE = {}\n\
             ORDER BY (`pipeline`, `topic`, `partition`, `last_offset`)\n\
             TTL `recorded_at` + INTERVAL 7 DAY\n\
             SETTINGS {};\n",
            form.ledger_note,
            quote_ident(database),
            quote_ident(&ledger),
            form.on_cluster,
            form.engine(database, &ledger),
            form.settings
        ));
    }
}

/// The statements of `--ddl`'s output, one by one (ClickHouse's HTTP interface runs one per
/// request): split at the `;` that ends a line, comment-only pieces left out.
pub fn statements(sql: &str) -> impl Iterator<Item = &str> {
    sql.split(";\n").filter(|s| s.lines().any(|l| !l.trim().is_empty() && !l.trim_start().starts_with("--")))
}

/// What differs between the per-shard and the replicated statements.
struct Form {
    replicated: bool,
    /// ` ON CLUSTER '…'`, or nothing.
    on_cluster: String,
    /// ON CLUSTER names the `{cluster}` macro, which every server must define.
    cluster_macro: bool,
    settings: &'static str,
    /// Comment lines before the ledger's statement.
    ledger_note: &'static str,
}

/// Replicated tables keep the hashes of recent inserts in Keeper and forget them by count and by
/// age. The count is the non-replicated form's (docs/adr/0001-exactly-once.md states its limits
/// with it), written out because the server's default moved (100 in old releases, 1000, then
/// 10000 in 25.9). The age has no non-replicated counterpart, and its default fell from a week to
/// an hour in 25.10: a batch replayed more than an hour after its first insert, with other inserts
/// in between (a partition held back by a slow shard, then a crash), would land twice. A week is
/// the ledger's TTL, so a replay the ledger can still plan is still deduplicated; Keeper holds at
/// most 1000 hashes per table and shard all the same.
const REPLICATED_SETTINGS: &str =
    "replicated_deduplication_window = 1000, replicated_deduplication_window_seconds = 604800";

impl Form {
    fn new(replication: &Replication) -> Result<Form, Error> {
        Ok(match replication {
            Replication::PerShard => Form {
                replicated: false,
                on_cluster: String::new(),
                cluster_macro: false,
                settings: "non_replicated_deduplication_window = 1000",
                ledger_note: "",
            },
            Replication::Replicated { cluster } => {
                let cluster = match cluster.as_deref() {
                    Some("") => return Err(Error::EmptyCluster),
                    Some(name) => name,
                    None => "{cluster}",
                };
                Form {
                    replicated: true,
                    on_cluster: format!(" ON CLUSTER {}", quote_string(cluster)),
                    cluster_macro: cluster == "{cluster}",
                    settings: REPLICATED_SETTINGS,
                    ledger_note: "-- Several replicas per shard are untested under exactly-once: the ledger is read without\n\
                                  -- sequential consistency (docs/adr/0001-exactly-once.md, Limits).\n",
                }
            }
        })
    }

    /// The header comment: where to run the statements and what they expect of the servers.
    fn header(&self, pipeline: &str) -> String {
        if !self.replicated {
            return format!(
                "-- Generated by `cargo xtask gen --ddl` for pipeline `{pipeline}`. Create it on every shard.\n"
            );
        }
        let macros = if self.cluster_macro {
            "three <macros>: `shard` (the same on the replicas of\n\
             -- a shard, different across shards), `replica` (different on each replica of a shard) and\n\
             -- `cluster` (the cluster's name in <remote_servers>)"
        } else {
            "two <macros>: `shard` (the same on the replicas of\n\
             -- a shard, different across shards) and `replica` (different on each replica of a shard)"
        };
        format!(
            "-- Generated by `cargo xtask gen --ddl --replicated` for pipeline `{pipeline}`.\n\
             -- Run it once, on any one server: ON CLUSTER creates each table on every replica of every shard.\n\
             -- Every server needs Keeper (or ZooKeeper) and {macros}.\n\
             -- Each entry of sink.clickhouse.shards lists the replicas of one shard of the cluster.\n"
        )
    }

    /// The engine clause of `database`.`table`.
    fn engine(&self, database: &str, table: &str) -> String {
        if !self.replicated {
            return "MergeTree".into();
        }
        // The Keeper path names the table literally, as ClickHouse's own examples do: it can be
        // found in Keeper by name and stays put when the table is renamed. `{shard}` keeps the
        // shards' data apart; `{replica}` names this server among the shard's replicas.
        format!(
            "ReplicatedMergeTree({}, '{{replica}}')",
            quote_string(&format!("/clickhouse/tables/{{shard}}/{database}/{table}"))
        )
    }
}

/// A ClickHouse identifier in backquotes. Inside them a backslash escapes, so it is escaped too:
/// a name ending in `\` would otherwise swallow the closing backquote.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('\\', "\\\\").replace('`', "\\`"))
}

/// A ClickHouse string literal.
fn quote_string(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

#[cfg(test)]
mod tests {
    use super::*;

    // ClickHouse reads a backslash inside backquotes as an escape: both it and the backquote are
    // escaped, or a name ending in a backslash would run into the next token.
    #[test]
    fn identifiers_escape_backslashes_and_backquotes() {
        assert_eq!(quote_ident("orders"), "`orders`");
        assert_eq!(quote_ident("order`s"), "`order\\`s`");
        assert_eq!(quote_ident("orders\\"), "`orders\\\\`");
    }
}
