//! The flagship (examples/kafka_avro_to_clickhouse/pipeline.yaml) as `bench` and `soak` run it:
//! its text with name, table, budget or exactly-once changed, validated and built by
//! `cargo xtask build`, and the command that starts a binary of it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use etl_gen::Validated;
use etl_gen::rules::sizing::Sizing;

use super::services::xtask;

/// A variant's text with `exactly_once: true` added under `sink.clickhouse` (next to `table:`).
pub(crate) fn exactly_once_text(text: &str) -> anyhow::Result<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let i = lines.iter().position(|l| l.trim_start().starts_with("table:")).context("no `table:` line")?;
    let indent = lines[i].len() - lines[i].trim_start().len();
    lines.insert(i + 1, format!("{}exactly_once: true", " ".repeat(indent)));
    Ok(lines.join("\n") + "\n")
}

pub(crate) fn validate(path: &Path, allow_unsafe_sizing: bool) -> anyhow::Result<Validated> {
    let outcome = etl_gen::validate_file(path, &etl_gen::Options { allow_unsafe_sizing })?;
    outcome.pipeline.with_context(|| outcome.report.render())
}

/// The smallest budget the sizing rule allows for `v`'s sink, in whole MiB (rounded up).
pub(crate) fn min_budget_mib(v: &Validated) -> u64 {
    let bytes = Sizing::of(&v.model).evaluate().min_inflight_bytes;
    u64::try_from(bytes.div_ceil(1 << 20)).unwrap_or(u64::MAX)
}

/// The flagship's text with `pipeline.name`, `sink.clickhouse.table` and (if given)
/// `backpressure.max_inflight_bytes` replaced; comments and everything else kept.
pub(crate) fn variant_text(flagship: &str, name: &str, table: &str, budget: Option<&str>) -> anyhow::Result<String> {
    let mut replacements = vec![("name:", name), ("table:", table)];
    if let Some(budget) = budget {
        replacements.push(("max_inflight_bytes:", budget));
    }
    let mut lines: Vec<String> = flagship.lines().map(str::to_owned).collect();
    for (key, value) in replacements {
        let matching: Vec<usize> = (0..lines.len()).filter(|&i| lines[i].trim_start().starts_with(key)).collect();
        let [i] = matching[..] else {
            bail!("the flagship has {} `{key}` lines, expected one", matching.len());
        };
        let indent = lines[i].len() - lines[i].trim_start().len();
        lines[i] = format!("{}{key} {value}", " ".repeat(indent));
    }
    let header = format!(
        "# Written by `cargo xtask bench` from examples/kafka_avro_to_clickhouse/pipeline.yaml: the same\n\
         # pipeline with name {name}, table {table}{}.\n",
        budget.map(|b| format!(", max_inflight_bytes {b}")).unwrap_or_default()
    );
    Ok(header + &lines.join("\n") + "\n")
}

pub(crate) fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        fs::copy(entry.path(), to.join(entry.file_name()))?;
    }
    Ok(())
}

/// `cargo xtask build` (a release build in the shared target directory); returns the binary.
pub(crate) fn build(yaml: &Path, allow_unsafe_sizing: bool) -> anyhow::Result<PathBuf> {
    let mut command = xtask();
    command.arg("build");
    if allow_unsafe_sizing {
        command.arg("--allow-unsafe-sizing");
    }
    let output = command.arg(yaml).stderr(Stdio::inherit()).output()?;
    if !output.status.success() {
        bail!("cargo xtask build {} failed ({})", yaml.display(), output.status);
    }
    let stdout = String::from_utf8(output.stdout)?;
    let binary = PathBuf::from(stdout.lines().last().context("build printed no binary")?.trim());
    if !binary.exists() {
        bail!("build printed {}, which does not exist", binary.display());
    }
    Ok(binary)
}

/// A flagship binary with its environment: the broker, both shards, topic and group, its admin
/// address, `RUST_LOG=info`, no registry, stdout and stderr into `log`.
pub(crate) fn flagship_command(
    binary: &Path,
    brokers: &str,
    clickhouse: &[String],
    (topic, group): (&str, &str),
    admin: &str,
    log: fs::File,
) -> anyhow::Result<Command> {
    let mut command = Command::new(binary);
    command
        .env("KAFKA_BROKERS", brokers)
        .env("CLICKHOUSE_URL", &clickhouse[0])
        .env("CLICKHOUSE_URL_2", &clickhouse[1])
        .env("ORDERS_TOPIC", topic)
        .env("ORDERS_GROUP", group)
        .env("ADMIN_LISTEN", admin)
        .env("RUST_LOG", "info")
        .env_remove("SCHEMA_REGISTRY_URL")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    Ok(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flagship_minimum_budget_is_its_comment_s() {
        // pipeline.yaml: 256MiB ≥ 2 × (2 × 2 × 16MiB + 2 × 8 × 256KiB) = 136MiB at low_ratio 0.5.
        let flagship = crate::workspace::root().join("examples/kafka_avro_to_clickhouse/pipeline.yaml");
        assert_eq!(min_budget_mib(&validate(&flagship, false).unwrap()), 272);
    }

    /// The flagship's text, and a scratch directory with its schemas to validate variants in.
    struct Scratch {
        flagship: String,
        dir: PathBuf,
    }

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let root = crate::workspace::root();
            let flagship = fs::read_to_string(root.join("examples/kafka_avro_to_clickhouse/pipeline.yaml")).unwrap();
            let dir = std::env::temp_dir().join(format!("xtask-bench-{name}-{}", std::process::id()));
            copy_dir(&root.join("examples/kafka_avro_to_clickhouse/schemas"), &dir.join("schemas")).unwrap();
            Scratch { flagship, dir }
        }

        fn validate(&self, text: &str, allow_unsafe_sizing: bool) -> anyhow::Result<Validated> {
            let path = self.dir.join("v.yaml");
            fs::write(&path, text)?;
            validate(&path, allow_unsafe_sizing)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }

    #[test]
    fn a_variant_changes_name_table_and_budget_only() {
        let scratch = Scratch::new("variant");
        let text = variant_text(&scratch.flagship, "bench-x", "bench_x", Some("32MiB")).unwrap();
        assert!(scratch.validate(&text, false).is_err(), "32 MiB breaks the sizing rule");
        let v = scratch.validate(&text, true).unwrap();
        assert_eq!(v.model.pipeline.name, "bench-x");
        assert_eq!(v.model.backpressure.max_inflight_bytes.bytes(), 32 << 20);
        let etl_gen::model::Sink::Clickhouse(sink) = &v.model.sink else { panic!("a ClickHouse sink") };
        assert_eq!(sink.table.as_deref(), Some("bench_x"));
        assert_eq!(v.model.sink.flow().batch.max_bytes.bytes(), 16 << 20, "the rest is the flagship's");
        assert!(variant_text("a: 1\n", "x", "y", None).is_err(), "a missing key is an error");
    }

    // The exactly-once variant is the flagship with the key added, and needs a larger budget.
    #[test]
    fn the_exactly_once_variant_needs_the_budget_the_rule_computes() {
        let scratch = Scratch::new("eo");
        let variant = |budget: Option<&str>| {
            exactly_once_text(&variant_text(&scratch.flagship, "bench-eo", "bench_eo", budget).unwrap()).unwrap()
        };
        let budget = min_budget_mib(&scratch.validate(&variant(None), true).unwrap());
        let v = scratch.validate(&variant(Some(&format!("{budget}MiB"))), false).unwrap();
        let etl_gen::model::Sink::Clickhouse(sink) = &v.model.sink else { panic!("a ClickHouse sink") };
        assert!(sink.exactly_once);
        // 2 × 2 shards × (2 in flight + 8 queued) × 16 MiB = 640 MiB at low_ratio 0.5.
        assert_eq!(budget, 1280);
    }
}
