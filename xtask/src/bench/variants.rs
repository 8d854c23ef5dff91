//! The pipelines `cargo xtask bench` runs: variants of the flagship (written, validated and built
//! by `lab::flagship`) under their labels, and what only the bench varies: the insert format and
//! compression.

use std::path::PathBuf;

use anyhow::Context;
use etl_gen::Validated;

/// One pipeline to build and run.
pub(crate) struct Variant {
    pub(crate) label: String,
    pub(crate) yaml: PathBuf,
    pub(crate) validated: Validated,
    pub(crate) table: String,
    pub(crate) binary: PathBuf,
}

impl Variant {
    pub(crate) fn budget(&self) -> u64 {
        self.validated.model.backpressure.max_inflight_bytes.bytes()
    }

    /// The tables the variant writes: its `table`, or one per output.
    pub(crate) fn tables(&self) -> Vec<String> {
        self.validated.model.output_tables().iter().map(|t| t.table.to_owned()).collect()
    }

    pub(crate) fn watermarks(&self) -> (f64, f64) {
        let b = &self.validated.model.backpressure;
        (self.budget() as f64 * b.high_ratio.to_f64(), self.budget() as f64 * b.low_ratio.to_f64())
    }
}

/// The label of the exactly-once variant.
pub(crate) const EXACTLY_ONCE: &str = "eo";

/// The label of the variant with three outputs.
pub(crate) const OUTPUTS: &str = "outputs-3";

/// `text` (a flagship variant) with its one table split into three outputs by
/// `customer_id % 3`: every row goes to exactly one of `<table>_0`, `_1` and `_2`, sharded by
/// the flagship's key, so the rows written are the flagship's and only the routing differs.
pub(crate) fn outputs_text(text: &str) -> anyhow::Result<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let table_line = lines.iter().position(|l| l.trim_start().starts_with("table:")).context("no `table:` line")?;
    let table = lines[table_line].trim_start().trim_start_matches("table:").trim().to_owned();
    lines.remove(table_line);
    let key_line =
        lines.iter().position(|l| l.trim_start().starts_with("shard_key:")).context("no `shard_key:` line")?;
    let key = lines[key_line].trim_start().trim_start_matches("shard_key:").trim().to_owned();
    lines.remove(key_line);
    let sink = lines.iter().position(|l| l == "sink:").context("no `sink:` line")?;
    let mut outputs = vec!["outputs:".to_owned()];
    for k in 0..3 {
        outputs.push(format!("  part{k}:"));
        outputs.push(format!("    table: {table}_{k}"));
        outputs.push(format!("    when: \"{key} % 3 == {k}\""));
        outputs.push(format!("    shard_key: {key}"));
    }
    lines.splice(sink..sink, outputs);
    Ok(lines.join("\n") + "\n")
}

/// Every `sink.clickhouse.format` and `compression`, each pair a run of its own besides the
/// flagship (which keeps the defaults).
pub(crate) const FORMATS: [&str; 2] = ["native", "rowbinary"];
pub(crate) const COMPRESSIONS: [&str; 3] = ["lz4", "zstd", "none"];

/// The label of the sink variant with `format` and `codec`.
pub(crate) fn sink_label(format: &str, codec: &str) -> String {
    format!("{format}+{codec}")
}

/// `sink.clickhouse.format` and `compression` of a sink variant's label.
pub(crate) fn sink_of(label: &str) -> Option<(&str, &str)> {
    let (format, codec) = label.split_once('+')?;
    (FORMATS.contains(&format) && COMPRESSIONS.contains(&codec)).then_some((format, codec))
}

/// `text` with `sink.clickhouse.format` and `compression` set (after its `table:` line).
pub(crate) fn sink_text(text: &str, format: &str, codec: &str) -> anyhow::Result<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let i = lines.iter().position(|l| l.trim_start().starts_with("table:")).context("no `table:` line")?;
    let indent = " ".repeat(lines[i].len() - lines[i].trim_start().len());
    lines.insert(i + 1, format!("{indent}compression: {codec}"));
    lines.insert(i + 1, format!("{indent}format: {format}"));
    Ok(lines.join("\n") + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    // The three-output case is the flagship's rows routed to three tables: valid, three outputs
    // of the flagship's shards and key, and a budget the sizing rule accepts once raised.
    #[test]
    fn the_outputs_case_splits_the_flagship_into_three_tables() {
        let root = crate::workspace::root();
        let dir = root.join("examples/kafka_avro_to_clickhouse");
        let flagship = std::fs::read_to_string(dir.join("pipeline.yaml")).unwrap();
        let text = crate::lab::flagship::variant_text(&flagship, "bench-x", "bench_x", Some("2GiB")).unwrap();
        let split = outputs_text(&text).unwrap();
        let outcome = etl_gen::validate_str("x.yaml", &split, &dir, &etl_gen::Options::default());
        let v = outcome.pipeline.unwrap_or_else(|| panic!("{}\n{split}", outcome.report.render()));
        let tables: Vec<&str> = v.model.output_tables().iter().map(|t| t.table).collect();
        assert_eq!(tables, ["bench_x_0", "bench_x_1", "bench_x_2"]);
        assert!(v.model.outputs.values().all(|o| o.shard_key.as_deref() == Some("customer_id")));
    }
}
