//! `gen --migrate`: the statements that bring a live ClickHouse table to the columns a pipeline
//! writes, or the columns it cannot change safely. The comparison is the sink's start-up check's
//! own (`contract::columns`), so a migrated table passes that check.

use crate::contract::columns::{self, Difference, LiveColumn};
use crate::ddl::{self, Replication, quote_ident};
use crate::load::Validated;
use crate::model::Sink;

/// What one server holds of the pipeline's tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LiveTable {
    /// The table's columns; empty when the table does not exist.
    pub(crate) columns: Vec<LiveColumn>,
    /// Whether the exactly-once ledger table exists.
    pub(crate) ledger: bool,
}

/// The outcome for one server.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Migration {
    /// Statements to run, in order, each without its `;`.
    pub(crate) statements: Vec<String>,
    /// Columns the table has and the pipeline does not write, which take their defaults:
    /// `(name, type, default kind)`.
    pub(crate) defaulted: Vec<(String, String, String)>,
    /// What cannot be changed safely; when not empty, nothing is to be run.
    pub(crate) refused: Vec<Refusal>,
}

/// A column `--migrate` will not change, and what the user can do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) difference: String,
    pub(crate) help: String,
}

/// The columns of output `output` as `(name, ClickHouse type)`, as `--ddl` declares them.
pub(crate) fn written_columns(v: &Validated, output: usize) -> Vec<(String, String)> {
    v.plan.outputs[output].output.iter().map(|c| (c.name.clone(), c.ty.clickhouse())).collect()
}

/// Plans the migration of one server's table of output `output` (an index into the plan's
/// outputs) and its ledger. `cluster` adds `ON CLUSTER` (and a missing table is created
/// replicated, as `--ddl --replicated --cluster` prints it).
pub(crate) fn plan(
    v: &Validated,
    output: usize,
    live: &LiveTable,
    cluster: Option<&str>,
) -> Result<Migration, ddl::Error> {
    let Sink::Clickhouse(c) = &v.model.sink else { return Err(ddl::Error::NotClickhouse) };
    let tables = v.model.output_tables();
    let Some(target) = tables.get(output) else { return Err(ddl::Error::NotClickhouse) };
    let table = format!("{}.{}", quote_ident(target.database), quote_ident(target.table));
    let ledger_name = format!("{}_etl_batches", target.table);
    let ledger = format!("{}.{}", quote_ident(target.database), quote_ident(&ledger_name));
    let replication = match cluster {
        Some(name) => Replication::Replicated { cluster: Some(name.to_owned()) },
        None => Replication::PerShard,
    };
    let create = ddl::create_tables(v, &replication)?;
    // `--ddl` creates every output's tables; this output's are those that name them.
    let created: Vec<String> = ddl::statements(&create)
        .map(strip_comments)
        .filter(|s| s.contains(&format!("{table} ")) || s.contains(&format!("{table}\n")) || s.contains(&ledger))
        .collect();
    let mut out = Migration::default();
    if live.columns.is_empty() {
        // No table: what `--ddl` prints creates it (and the ledger, which IF NOT EXISTS keeps).
        out.statements = created;
        return Ok(out);
    }
    let expected = written_columns(v, output);
    let shown = format!("{}.{}", target.database, target.table);
    // Quoted as `--ddl --cluster` quotes it.
    let on_cluster = cluster
        .map(|name| format!(" ON CLUSTER '{}'", name.replace('\\', "\\\\").replace('\'', "\\'")))
        .unwrap_or_default();
    let mut added = Vec::new();
    for difference in columns::differences(&expected, &live.columns) {
        match difference {
            Difference::Missing { name, ty } => {
                added.push(format!("    ADD COLUMN IF NOT EXISTS {} {ty}", quote_ident(&name)));
            }
            Difference::TypeDiffers { ref name, .. } => out.refused.push(Refusal {
                help: format!(
                    "a type change rewrites the column's data and can fail on rows it already holds, so it is \
                     not made for you: change what the pipeline writes (a `map:` with a cast), or change \
                     `{name}` by hand (ALTER TABLE {shown}{on_cluster} MODIFY COLUMN ..., or a new column and \
                     a backfill)"
                ),
                difference: difference.to_string(),
            }),
            Difference::NotInsertable { ref name, ref kind } => out.refused.push(Refusal {
                help: format!(
                    "no insert can name a {kind} column: rename the pipeline's `{name}` (`rename:`) or drop \
                     the computed column from the table"
                ),
                difference: difference.to_string(),
            }),
            Difference::Unwritten { ref name, .. } => out.refused.push(Refusal {
                help: format!(
                    "give it a default (ALTER TABLE {shown}{on_cluster} MODIFY COLUMN {} DEFAULT <expr>) or \
                     write it from the pipeline",
                    quote_ident(name)
                ),
                difference: difference.to_string(),
            }),
        }
    }
    out.defaulted = columns::defaulted(&expected, &live.columns)
        .into_iter()
        .map(|col| (col.name.clone(), col.ty.clone(), col.default_kind.clone()))
        .collect();
    if !out.refused.is_empty() {
        return Ok(out);
    }
    if !added.is_empty() {
        out.statements.push(format!("ALTER TABLE {table}{on_cluster}\n{}", added.join(",\n")));
    }
    if c.exactly_once && !live.ledger {
        out.statements.extend(created.into_iter().filter(|s| s.contains(&ledger)));
    }
    Ok(out)
}

/// The statement without the comment lines `--ddl` puts before it.
fn strip_comments(statement: &str) -> String {
    let lines: Vec<&str> = statement.lines().filter(|l| !l.trim_start().starts_with("--")).collect();
    lines.join("\n").trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipeline(exactly_once: bool) -> Validated {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/valid");
        let file = if exactly_once { "exactly_once.yaml" } else { "kafka_everything.yaml" };
        let outcome = crate::validate_file(&dir.join(file), &crate::Options::default()).unwrap();
        outcome.pipeline.unwrap()
    }

    fn live(v: &Validated, drop: &[&str], extra: &[(&str, &str, &str)]) -> LiveTable {
        let mut columns: Vec<LiveColumn> = written_columns(v, 0)
            .into_iter()
            .filter(|(name, _)| !drop.contains(&name.as_str()))
            .map(|(name, ty)| LiveColumn { name, ty, default_kind: String::new() })
            .collect();
        for (name, ty, kind) in extra {
            columns.push(LiveColumn { name: (*name).into(), ty: (*ty).into(), default_kind: (*kind).into() });
        }
        LiveTable { columns, ledger: true }
    }

    // A table that fits needs nothing; its defaulted extra columns are listed.
    #[test]
    fn a_fitting_table_needs_no_statement() {
        let v = pipeline(false);
        let m = plan(&v, 0, &live(&v, &[], &[("inserted_at", "DateTime", "DEFAULT")]), None).unwrap();
        assert!(m.statements.is_empty() && m.refused.is_empty(), "{m:?}");
        assert_eq!(m.defaulted, [("inserted_at".into(), "DateTime".into(), "DEFAULT".into())]);
    }

    // Missing columns become one ALTER, ON CLUSTER when asked for; a missing ledger is created.
    #[test]
    fn missing_columns_are_added() {
        let v = pipeline(false);
        let written = written_columns(&v, 0);
        let (a, b) = (&written[1], &written[2]);
        let m = plan(&v, 0, &live(&v, &[&a.0, &b.0], &[]), Some("prod")).unwrap();
        assert_eq!(
            m.statements,
            [format!(
                "ALTER TABLE `shop`.`orders` ON CLUSTER 'prod'\n    ADD COLUMN IF NOT EXISTS `{}` {},\n    ADD \
                 COLUMN IF NOT EXISTS `{}` {}",
                a.0, a.1, b.0, b.1
            )]
        );
        let eo = pipeline(true);
        let mut table = live(&eo, &[], &[]);
        table.ledger = false;
        let m = plan(&eo, 0, &table, None).unwrap();
        assert_eq!(m.statements.len(), 1, "{m:?}");
        assert!(m.statements[0].starts_with("CREATE TABLE IF NOT EXISTS `default`.`orders_etl_batches`"), "{m:?}");
    }

    // A missing table is created as `--ddl` prints it.
    #[test]
    fn a_missing_table_is_created() {
        let v = pipeline(false);
        let m = plan(&v, 0, &LiveTable { columns: Vec::new(), ledger: false }, None).unwrap();
        assert_eq!(m.statements.len(), 1);
        assert!(m.statements[0].starts_with("CREATE TABLE IF NOT EXISTS `shop`.`orders`"), "{m:?}");
    }

    // Type changes, computed columns under the pipeline's names and unwritten columns without a
    // default are refused, one by one, and then nothing is to be run.
    #[test]
    fn unsafe_changes_are_refused() {
        let v = pipeline(false);
        let written = written_columns(&v, 0);
        // written[2] is missing too: it could be added, but not while anything is refused.
        let mut table = live(&v, &[&written[0].0, &written[1].0, &written[2].0], &[("legacy", "String", "")]);
        table.columns.push(LiveColumn { name: written[0].0.clone(), ty: "UInt8".into(), default_kind: String::new() });
        table.columns.push(LiveColumn {
            name: written[1].0.clone(),
            ty: written[1].1.clone(),
            default_kind: "MATERIALIZED".into(),
        });
        let m = plan(&v, 0, &table, None).unwrap();
        assert!(m.statements.is_empty(), "{m:?}");
        let said: Vec<&str> = m.refused.iter().map(|r| r.difference.as_str()).collect();
        assert_eq!(
            said,
            [
                format!("column `{}` has type UInt8 in the table, the pipeline writes {}", written[0].0, written[0].1),
                format!("column `{}` is MATERIALIZED in the table and cannot be inserted into", written[1].0),
                "column `legacy` (String) is in the table but the pipeline does not write it".to_owned(),
            ]
        );
        assert!(m.refused.iter().all(|r| !r.help.is_empty()));
    }

    // With `outputs`, each output's table is compared with its own columns, a missing one is
    // created with its own ledger and nothing of the other outputs', and its missing columns are
    // added to it alone.
    #[test]
    fn each_output_is_migrated_on_its_own() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/route_to_tables/pipeline.yaml");
        let v = crate::validate_file(&path, &crate::Options::default()).unwrap().pipeline.unwrap();
        let m = plan(&v, 1, &LiveTable { columns: Vec::new(), ledger: false }, None).unwrap();
        assert_eq!(m.statements.len(), 2, "{m:?}");
        assert!(m.statements[0].starts_with("CREATE TABLE IF NOT EXISTS `default`.`shop_order_lines`\n"), "{m:?}");
        assert!(m.statements[1].starts_with("CREATE TABLE IF NOT EXISTS `default`.`shop_order_lines_etl_batches`"));
        let refunds = written_columns(&v, 2);
        assert_ne!(refunds, written_columns(&v, 0), "each output has its own columns");
        let mut columns: Vec<LiveColumn> = refunds
            .iter()
            .map(|(name, ty)| LiveColumn { name: name.clone(), ty: ty.clone(), default_kind: String::new() })
            .collect();
        let (name, ty) = refunds.last().unwrap().clone();
        columns.pop();
        let m = plan(&v, 2, &LiveTable { columns, ledger: true }, None).unwrap();
        assert_eq!(
            m.statements,
            [format!("ALTER TABLE `default`.`shop_refunds`\n    ADD COLUMN IF NOT EXISTS `{name}` {ty}")]
        );
    }
}
