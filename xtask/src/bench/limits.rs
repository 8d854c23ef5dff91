//! The driver's side of the raw limits of `cargo xtask bench`: the `bench-raw consume` and
//! `bench-raw insert` children started with the flagship's settings, and their results read
//! back. What the children themselves do is in `raw.rs`.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::bail;

use super::cpu_time::{Load, LoadMeter};
use super::rates::{per_million, per_second};
use super::servers::Servers;
use super::variants::Variant;
use super::{BenchArgs, RAW_TABLE, cores, raw};
use crate::lab::http;
use crate::lab::services::{recreate_table, xtask};

/// How many times the raw consumer reads the topic. One read of a 3M topic lasts about 1.4 s,
/// and on this shared machine its CPU per record varied by a quarter from one bench run to the
/// next; the ratios the pipeline is judged by (to the parts' sum, librdkafka's threads to the raw
/// consumer's) have it as their denominator. Three reads cost a few seconds.
const CONSUME_RUNS: usize = 3;

/// The raw source limit: `bench-raw consume` of the whole topic, with the threads the pipeline
/// would have, [`CONSUME_RUNS`] times; the run with the median CPU per record stands for them.
pub(crate) fn consume(args: &BenchArgs, infra: &Servers, main: &Variant, topic: &str) -> anyhow::Result<Raw> {
    let mut runs = Vec::with_capacity(CONSUME_RUNS);
    for _ in 0..CONSUME_RUNS {
        runs.push(run_raw(
            infra,
            bench_raw().args(["consume", "--brokers", &infra.brokers, "--topic", topic]).args([
                "--partitions",
                &args.partitions.to_string(),
                "--records",
                &args.records.to_string(),
                "--threads",
                // Unset means one per core at run time, as the pipeline would have.
                &main.validated.model.pipeline.threads.map_or_else(cores, u64::from).to_string(),
            ]),
            args.records,
        )?);
    }
    Ok(median_run(runs))
}

/// The run with the median CPU per record (the lower middle one of an even count), carrying
/// every run's CPU per record in run order, for the report.
fn median_run(runs: Vec<Raw>) -> Raw {
    let all: Vec<f64> = runs.iter().map(Raw::cpu_per_million).collect();
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|&a, &b| all[a].total_cmp(&all[b]));
    let middle = order[(runs.len() - 1) / 2];
    let mut median = runs.into_iter().nth(middle).expect("at least one run");
    median.runs_cpu_per_million = all;
    median
}

/// The raw sink limit: the rows the pipeline wrote, read back per shard as RowBinary into
/// `work/rows-SHARD.bin` and inserted by `bench-raw insert` into [`RAW_TABLE`] with the
/// pipeline's batch and in-flight settings. The caller removes the files.
pub(crate) fn insert(args: &BenchArgs, infra: &Servers, main: &Variant, work: &Path) -> anyhow::Result<Raw> {
    let ddl = etl_gen::ddl::create_table(&main.validated).map_err(anyhow::Error::msg)?;
    let raw_ddl = ddl.replace(&format!("`default`.`{}`", main.table), &format!("`default`.`{RAW_TABLE}`"));
    let mut insert = bench_raw();
    insert.args(["insert", "--table", RAW_TABLE]);
    for (shard, url) in infra.clickhouse.iter().enumerate() {
        recreate_table(url, RAW_TABLE, &raw_ddl)?;
        let rows = http::clickhouse(url, &format!("SELECT * FROM default.`{}` FORMAT RowBinary", main.table))?;
        let file = work.join(format!("rows-{shard}.bin"));
        fs::write(&file, rows)?;
        insert.arg("--url").arg(url).arg("--data").arg(&file);
    }
    let flow = main.validated.model.sink.flow();
    if let etl_gen::model::Sink::Clickhouse(c) = &main.validated.model.sink {
        insert.args(["--format", c.format.key()]);
    }
    insert.args([
        "--batch-bytes",
        &flow.batch.max_bytes.bytes().to_string(),
        "--batch-rows",
        &flow.batch.max_rows.to_string(),
        "--inflight",
        &flow.inflight.max_per_shard.to_string(),
    ]);
    eprintln!("bench: raw inserter");
    run_raw(infra, &mut insert, args.records)
}

/// How many of the topic's records the decoder and the chain are measured on (all of them up to
/// this): a million gives stable figures in a few seconds a pass.
const PARTS_RECORDS: u64 = 1_000_000;

/// The generated crate of `main` with its benchmarks, compiled before anything is measured;
/// returns its directory for [`chain_parts`].
pub(crate) fn build_parts(main: &Variant) -> anyhow::Result<std::path::PathBuf> {
    let crate_dir = crate::chain_criterion::generate(&main.yaml)?;
    eprintln!("bench: building the parts benchmark of {}", main.yaml.display());
    let status = parts_command(&crate_dir).arg("--no-run").status()?;
    if !status.success() {
        bail!("building {}'s benches/parts.rs failed ({status})", crate_dir.display());
    }
    Ok(crate_dir)
}

/// The parts that need the generated code, alone, on the topic's own payloads: its first
/// [`PARTS_RECORDS`] written to a file by `bench-raw dump`, then the generated decoder alone and
/// the whole chain (decode, operators, row encoding) over them, on one thread
/// (`benches/parts.rs`). The values are per `records`.
pub(crate) fn chain_parts(
    args: &BenchArgs,
    infra: &Servers,
    crate_dir: &Path,
    topic: &str,
    work: &Path,
) -> anyhow::Result<std::collections::BTreeMap<String, f64>> {
    let records = args.records.min(PARTS_RECORDS);
    let file = work.join("payloads.bin");
    let dump = bench_raw()
        .args(["dump", "--brokers", &infra.brokers, "--topic", topic])
        .args(["--partitions", &args.partitions.to_string(), "--records", &records.to_string()])
        .arg("--out")
        .arg(&file)
        .stderr(Stdio::inherit())
        .output()?;
    if !dump.status.success() {
        bail!("bench-raw dump failed ({})", dump.status);
    }
    let output = parts_command(crate_dir).env("ETL_BENCH_PAYLOADS", &file).stderr(Stdio::inherit()).output()?;
    let _ = fs::remove_file(&file);
    if !output.status.success() {
        bail!("benches/parts.rs failed ({})", output.status);
    }
    let values = raw::parse_result(&String::from_utf8_lossy(&output.stdout))?;
    if values["decoded"] < values["records"] {
        bail!("the decoder took {} of the topic's {} payloads", values["decoded"], values["records"]);
    }
    Ok(values)
}

fn parts_command(crate_dir: &Path) -> Command {
    let mut command = Command::new(crate::workspace::cargo());
    command
        .args(["bench", "--bench", "parts", "--manifest-path"])
        .arg(crate_dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", crate::workspace::root().join("target"));
    command
}

/// A raw measurement: the child's `bench-result` values and the phase's load.
pub(crate) struct Raw {
    pub(crate) records: u64,
    pub(crate) values: std::collections::BTreeMap<String, f64>,
    pub(crate) load: Load,
    /// When the measurement was repeated: every run's CPU per million records, in run order
    /// (this one's among them); otherwise this run's alone.
    pub(crate) runs_cpu_per_million: Vec<f64>,
}

impl Raw {
    pub(crate) fn records_per_second(&self) -> f64 {
        per_second(self.records as f64, self.values["seconds"])
    }

    pub(crate) fn cpu_per_million(&self) -> f64 {
        per_million(self.values["cpu_seconds"], self.records)
    }
}

fn run_raw(infra: &Servers, command: &mut Command, records: u64) -> anyhow::Result<Raw> {
    let meter = LoadMeter::start(infra);
    let output = command.stderr(Stdio::inherit()).output()?;
    if !output.status.success() {
        bail!("{command:?} failed ({})", output.status);
    }
    let values = raw::parse_result(&String::from_utf8_lossy(&output.stdout))?;
    let client = values.get("cpu_total_seconds").or(values.get("cpu_seconds")).copied().unwrap_or(0.0);
    let mut raw = Raw { records, values, load: meter.finish(client), runs_cpu_per_million: Vec::new() };
    raw.runs_cpu_per_million.push(raw.cpu_per_million());
    Ok(raw)
}

fn bench_raw() -> Command {
    let mut command = xtask();
    command.arg("bench-raw");
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(cpu_seconds: f64, librdkafka: f64) -> Raw {
        let values = [("cpu_seconds", cpu_seconds), ("cpu_librdkafka_seconds", librdkafka), ("seconds", 1.0)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        Raw { records: 1_000_000, values, load: Load::default(), runs_cpu_per_million: Vec::new() }
    }

    #[test]
    fn the_median_run_stands_for_the_raw_consumer_and_keeps_every_runs_figure() {
        let median = median_run(vec![run(0.30, 0.20), run(0.22, 0.14), run(0.26, 0.17)]);
        // The whole run stands in, not a mix: its librdkafka figure is the median run's.
        assert_eq!(median.values["cpu_seconds"], 0.26);
        assert_eq!(median.values["cpu_librdkafka_seconds"], 0.17);
        assert_eq!(median.runs_cpu_per_million, vec![0.30, 0.22, 0.26]);
        // An even count takes the lower middle run; one run is itself.
        assert_eq!(median_run(vec![run(0.4, 0.0), run(0.1, 0.0)]).values["cpu_seconds"], 0.1);
        assert_eq!(median_run(vec![run(0.5, 0.0)]).runs_cpu_per_million, vec![0.5]);
    }
}
