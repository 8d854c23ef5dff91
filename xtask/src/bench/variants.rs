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

    pub(crate) fn watermarks(&self) -> (f64, f64) {
        let b = &self.validated.model.backpressure;
        (self.budget() as f64 * b.high_ratio.to_f64(), self.budget() as f64 * b.low_ratio.to_f64())
    }
}

/// The label of the exactly-once variant.
pub(crate) const EXACTLY_ONCE: &str = "eo";

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
