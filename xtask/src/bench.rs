//! `cargo xtask bench`: the flagship pipeline end to end against the local broker and ClickHouse
//! (`cargo xtask infra up`), next to the raw limits of both, in one run.
//! Results and how to read them: docs/BENCHMARKS.md. Never part of `cargo xtask test`.
//!
//! One run, one phase after the other so that they do not share the two cores:
//!
//! 1. build the pipelines (`cargo xtask build`), produce `--records` orders to a fresh topic;
//! 2. the raw source limit: `bench-raw consume` (librdkafka consume-and-discard, a child process);
//! 3. the pipeline: the flagship's pipeline.yaml, copied under target/ with only its name and
//!    table changed (the tests own the `orders` table), reading the whole topic; /metrics is
//!    scraped every 50 ms (a sample kept every 250 ms for the plot), CPU time and VmHWM read from
//!    /proc before SIGTERM;
//! 4. the raw sink limit: the rows the pipeline wrote, read back per shard as RowBinary and
//!    inserted by `bench-raw insert` (a child process) into a table of the same columns;
//! 5. the sizing rule's reason: the same saturated run with the smallest budget the rule allows,
//!    then with one that breaks it (`--unsafe-budget`, built with `--allow-unsafe-sizing`);
//! 6. the cost of exactly-once: the flagship with `exactly_once: true` (and the budget the sizing
//!    rule then needs), the same records, compared with (3).
//!
//! Each child's CPU time is its whole process's (every thread), so the three figures compare.
//! The servers' CPU and the machine's other load are reported per phase, since on two cores
//! anything else running moves the numbers.

mod http;
mod plot;
mod procfs;
mod prom;
pub(crate) mod raw;
mod rowbinary;

use std::fmt::Write as _;
use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use etl_gen::Validated;
use etl_gen::rules::sizing::Sizing;

/// `bench` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchArgs {
    /// Records to produce and move through each case.
    #[arg(long, default_value_t = 10_000_000)]
    records: u64,
    /// Partitions of the topic (the one pipeline instance owns them all).
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    /// In-flight budgets that break the sizing rule, one comparison run each.
    #[arg(long, default_values = ["32MiB", "8MiB"])]
    unsafe_budget: Vec<String>,
    /// Skip the sizing-rule comparison (two more pipeline runs).
    #[arg(long)]
    no_sizing: bool,
    /// Skip the exactly-once run.
    #[arg(long)]
    no_exactly_once: bool,
    /// Where the SVG plots go (default: docs/bench/).
    #[arg(long)]
    plots: Option<PathBuf>,
}

/// The services of `cargo xtask infra up`.
struct Infra {
    brokers: String,
    clickhouse: Vec<String>,
    /// Broker and ClickHouse processes, for their CPU time.
    server_pids: Vec<u32>,
}

/// One pipeline to build and run.
struct Variant {
    label: String,
    yaml: PathBuf,
    validated: Validated,
    table: String,
    binary: PathBuf,
}

impl Variant {
    fn budget(&self) -> u64 {
        self.validated.model.backpressure.max_inflight_bytes.bytes()
    }

    fn watermarks(&self) -> (f64, f64) {
        let b = &self.validated.model.backpressure;
        (self.budget() as f64 * b.high_ratio.to_f64(), self.budget() as f64 * b.low_ratio.to_f64())
    }
}

pub(crate) fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let root = crate::workspace_root();
    let work = root.join("target/etl-bench-e2e");
    let logs = work.join("logs");
    fs::create_dir_all(&logs)?;
    let plots = args.plots.clone().unwrap_or_else(|| root.join("docs/bench"));
    fs::create_dir_all(&plots)?;
    eprintln!("bench: building xtask --release for the children");
    let exe = release_xtask()?;
    let _ = XTASK.set(exe.clone());
    let result = run_with(args, &root, &work, logs, plots);
    let _ = fs::remove_file(exe);
    result
}

fn run_with(args: &BenchArgs, root: &Path, work: &Path, logs: PathBuf, plots: PathBuf) -> anyhow::Result<()> {
    let infra = infra_up()?;

    // 1. The pipelines, built before anything is measured.
    let flagship = root.join("examples/kafka_avro_to_clickhouse/pipeline.yaml");
    let text = fs::read_to_string(&flagship)?;
    copy_dir(&root.join("examples/kafka_avro_to_clickhouse/schemas"), &work.join("schemas"))?;
    let flagship_validated = validate(&flagship, false)?;
    let min_budget = min_budget_mib(&flagship_validated);
    let flagship_budget = flagship_validated.model.backpressure.max_inflight_bytes.bytes().div_ceil(1 << 20);
    // (label, budget, built with --allow-unsafe-sizing): the flagship's budget, the rule's
    // minimum, then each budget that breaks it.
    let mut variants = vec![("pipeline".to_owned(), None, false)];
    if !args.no_sizing {
        variants.push(("fit".to_owned(), Some(format!("{min_budget}MiB")), false));
        for (i, budget) in args.unsafe_budget.iter().enumerate() {
            variants.push((format!("unsafe-{}", i + 1), Some(budget.clone()), true));
        }
    }
    if !args.no_exactly_once {
        // Exactly-once queues whole batches: the budget the sizing rule then needs, if larger.
        let eo = exactly_once_text(&variant_text(&text, "bench-orders-eo", "bench_orders_eo", None)?)?;
        let probe = work.join("bench-orders-eo-probe.yaml");
        fs::write(&probe, &eo)?;
        let budget = min_budget_mib(&validate(&probe, true)?).max(flagship_budget);
        variants.push((EXACTLY_ONCE.to_owned(), Some(format!("{budget}MiB")), false));
    }
    let mut built = Vec::new();
    for (label, budget, unsafe_sizing) in variants {
        let name = if label == "pipeline" { "bench-orders".to_owned() } else { format!("bench-orders-{label}") };
        let table = name.replace('-', "_");
        let yaml = work.join(format!("{name}.yaml"));
        let mut yaml_text = variant_text(&text, &name, &table, budget.as_deref())?;
        if label == EXACTLY_ONCE {
            yaml_text = exactly_once_text(&yaml_text)?;
        }
        fs::write(&yaml, yaml_text)?;
        let validated = validate(&yaml, unsafe_sizing)?;
        let passes = Sizing::of(&validated.model).evaluate().passes(validated.model.backpressure.low_ratio);
        if unsafe_sizing && passes {
            bail!("--unsafe-budget {} satisfies the sizing rule; pick a smaller one", budget.unwrap_or_default());
        }
        eprintln!("bench: building {}", yaml.display());
        let binary = build(&yaml, unsafe_sizing)?;
        built.push(Variant { label, yaml, validated, table, binary });
    }
    let exactly_once = built.iter().position(|v| v.label == EXACTLY_ONCE).map(|i| built.remove(i));
    let main = &built[0];
    let partitions = u64::from(args.partitions);
    let memory_text = etl_gen::memory::render(&main.validated, partitions);
    let memory_bound = etl_gen::memory::total(&main.validated, partitions);
    eprint!("{memory_text}");

    let topic = format!("bench-orders-{}-{}", std::process::id(), nanos());
    eprintln!("bench: producing {} records to {topic}", args.records);
    let started = Instant::now();
    let status = xtask()
        .arg("produce")
        .arg(&main.yaml)
        .args(["--count", &args.records.to_string(), "--partitions", &args.partitions.to_string()])
        .args(["--topic", &topic, "--brokers", &infra.brokers])
        .status()?;
    if !status.success() {
        bail!("producing failed ({status})");
    }
    let produce_seconds = started.elapsed().as_secs_f64();
    let places = Places { work: work.to_owned(), logs, plots: plots.clone() };
    let result = measure(args, &infra, &built, exactly_once.as_ref(), &topic, &places);
    // Free the broker's memory (Tansu keeps topics in memory) and ClickHouse's disk either way.
    if let Err(e) = delete_topic(&infra.brokers, &topic) {
        eprintln!("bench: could not delete topic {topic}: {e:#}");
    }
    let tables = built.iter().chain(&exactly_once).map(|v| v.table.clone());
    for table in tables.chain([RAW_TABLE.to_owned()]) {
        for url in &infra.clickhouse {
            let _ = http::clickhouse(url, &format!("DROP TABLE IF EXISTS default.`{table}` SYNC"));
            let _ = http::clickhouse(url, &format!("DROP TABLE IF EXISTS default.`{table}_etl_batches` SYNC"));
        }
    }
    let measured = result?;
    let report = report(args, &measured, &built, memory_bound, produce_seconds, &memory_text);
    fs::write(work.join("report.md"), &report)?;
    println!("{report}");
    eprintln!("bench: report in {}, plots in {}", work.join("report.md").display(), plots.display());
    Ok(())
}

/// The label of the exactly-once variant.
const EXACTLY_ONCE: &str = "eo";

/// A variant's text with `exactly_once: true` added under `sink.clickhouse` (next to `table:`).
fn exactly_once_text(text: &str) -> anyhow::Result<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let i = lines.iter().position(|l| l.trim_start().starts_with("table:")).context("no `table:` line")?;
    let indent = lines[i].len() - lines[i].trim_start().len();
    lines.insert(i + 1, format!("{}exactly_once: true", " ".repeat(indent)));
    Ok(lines.join("\n") + "\n")
}

/// The raw inserter's table: the pipeline's columns, under another name.
const RAW_TABLE: &str = "bench_orders_raw";

/// Where a run's files go.
struct Places {
    /// Pipeline variants, the rows read back, the report.
    work: PathBuf,
    logs: PathBuf,
    plots: PathBuf,
}

/// Everything one run measured.
struct Measured {
    consume: Raw,
    insert: Raw,
    pipeline: Run,
    /// The runs of the sizing comparison, in the order of the variants after the first.
    sizing: Vec<Run>,
    /// The exactly-once run, with its variant's budget.
    exactly_once: Option<(Run, u64)>,
}

fn measure(
    args: &BenchArgs,
    infra: &Infra,
    variants: &[Variant],
    exactly_once: Option<&Variant>,
    topic: &str,
    places: &Places,
) -> anyhow::Result<Measured> {
    let Places { work, logs, plots } = places;
    let main = &variants[0];
    // 2. The raw source limit.
    eprintln!("bench: raw consumer");
    let raw = || {
        let mut command = xtask();
        command.arg("bench-raw");
        command
    };
    let consume = run_raw(
        infra,
        raw().args(["consume", "--brokers", &infra.brokers, "--topic", topic]).args([
            "--partitions",
            &args.partitions.to_string(),
            "--records",
            &args.records.to_string(),
            "--threads",
            // Unset means one per core at run time, as the pipeline would have.
            &main.validated.model.pipeline.threads.map_or_else(cores, u64::from).to_string(),
        ]),
        args.records,
    )?;
    eprintln!("bench: raw consumer: {:.0} records/s", consume.records_per_second());

    // 3. The pipeline.
    let pipeline = run_pipeline(main, infra, topic, args.records, logs)?;
    eprintln!("bench: pipeline: {:.0} records/s", pipeline.records_per_second());

    // 4. The raw sink limit, on the rows the pipeline wrote.
    let ddl = etl_gen::ddl::create_table(&main.validated).map_err(anyhow::Error::msg)?;
    let raw_ddl = ddl.replace(&format!("`default`.`{}`", main.table), &format!("`default`.`{RAW_TABLE}`"));
    let mut insert = raw();
    insert.args(["insert", "--table", RAW_TABLE]);
    for (shard, url) in infra.clickhouse.iter().enumerate() {
        recreate_table(url, RAW_TABLE, &raw_ddl)?;
        let rows = http::clickhouse(url, &format!("SELECT * FROM default.`{}` FORMAT RowBinary", main.table))?;
        let file = work.join(format!("rows-{shard}.bin"));
        fs::write(&file, rows)?;
        insert.arg("--url").arg(url).arg("--data").arg(&file);
    }
    let flow = main.validated.model.sink.flow();
    insert.args([
        "--batch-bytes",
        &flow.batch.max_bytes.bytes().to_string(),
        "--batch-rows",
        &flow.batch.max_rows.to_string(),
        "--inflight",
        &flow.inflight.max_per_shard.to_string(),
    ]);
    eprintln!("bench: raw inserter");
    let insert = run_raw(infra, &mut insert, args.records)?;
    if insert.values["rows"] != pipeline.rows_out {
        bail!("the raw inserter wrote {} rows, the pipeline {}", insert.values["rows"], pipeline.rows_out);
    }
    eprintln!("bench: raw inserter: {:.0} records/s", insert.records_per_second());
    for shard in 0..infra.clickhouse.len() {
        let _ = fs::remove_file(work.join(format!("rows-{shard}.bin")));
    }

    let plot_path = plots.join("end_to_end.svg");
    let (high, low) = main.watermarks();
    plot::write_svg(
        &plot_path,
        &format!("cargo xtask bench --records {}: the flagship pipeline", args.records),
        "seconds since the first record",
        &[
            plot::Panel {
                y_desc: "records/s".into(),
                series: vec![
                    plot::Series {
                        label: "taken from Kafka".into(),
                        points: pipeline.rate(|s| s.records_in),
                        color: plot::COLORS[0],
                    },
                    plot::Series {
                        label: "done (written or filtered)".into(),
                        points: pipeline.rate(|s| s.done),
                        color: plot::COLORS[1],
                    },
                ],
                references: vec![],
            },
            plot::Panel {
                y_desc: "in-flight MiB".into(),
                series: vec![plot::Series {
                    label: "etl_backpressure_inflight_bytes".into(),
                    points: pipeline.series(|s| s.inflight / MIB),
                    color: plot::COLORS[2],
                }],
                references: vec![("high watermark".into(), high / MIB), ("low watermark".into(), low / MIB)],
            },
        ],
    )?;

    // 5. The sizing rule: the same saturated run, fitting and breaking it.
    let mut sizing = Vec::new();
    for v in variants.iter().skip(1) {
        sizing.push(run_pipeline(v, infra, topic, args.records, logs)?);
    }
    if !sizing.is_empty() {
        let label = |v: &Variant| {
            let rule = if v.label == "fit" { "fits the rule" } else { "breaks it" };
            format!("budget {} MiB ({rule})", v.budget() >> 20)
        };
        let runs = || variants.iter().skip(1).zip(&sizing).zip(plot::COLORS.iter().cycle());
        plot::write_svg(
            &plots.join("sizing.svg"),
            &format!("The sizing rule: the same {} records, the smallest budget it allows and smaller", args.records),
            "seconds since the first record",
            &[
                plot::Panel {
                    y_desc: "records/s (done)".into(),
                    series: runs()
                        .map(|((v, run), color)| plot::Series {
                            label: label(v),
                            points: run.rate(|s| s.done),
                            color: *color,
                        })
                        .collect(),
                    references: vec![],
                },
                plot::Panel {
                    y_desc: "in-flight MiB".into(),
                    series: runs()
                        .map(|((v, run), color)| plot::Series {
                            label: label(v),
                            points: run.series(|s| s.inflight / MIB),
                            color: *color,
                        })
                        .collect(),
                    references: vec![],
                },
            ],
        )?;
    }
    // 6. The cost of exactly-once.
    let exactly_once = match exactly_once {
        Some(v) => Some((run_pipeline(v, infra, topic, args.records, logs)?, v.budget())),
        None => None,
    };
    Ok(Measured { consume, insert, pipeline, sizing, exactly_once })
}

const MIB: f64 = 1024.0 * 1024.0;

// ---------------------------------------------------------------------------------------------
// Infrastructure, building, tables

/// xtask built with `--release`, which runs every child of the bench: a debug librdkafka or lz4
/// would understate the raw limits several times over, and a copy of its own keeps the bench
/// going when someone rebuilds `target/debug/xtask` under it.
fn release_xtask() -> anyhow::Result<PathBuf> {
    let root = crate::workspace_root();
    let status = Command::new(crate::test::cargo())
        .current_dir(&root)
        .args(["build", "--release", "--quiet", "--package", "xtask"])
        .status()?;
    if !status.success() {
        bail!("cargo build --release --package xtask failed ({status})");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let copy = target.join(format!("etl-bench-e2e/xtask-{}", std::process::id()));
    fs::create_dir_all(copy.parent().expect("a directory"))?;
    fs::copy(target.join("release/xtask"), &copy)?;
    Ok(copy)
}

static XTASK: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// The release xtask of this run, in the workspace root.
fn xtask() -> Command {
    let mut command = Command::new(XTASK.get().expect("release_xtask ran first"));
    command.current_dir(crate::workspace_root());
    command
}

/// `cargo xtask infra up` (idempotent): the addresses it prints and the pids it recorded.
fn infra_up() -> anyhow::Result<Infra> {
    let output = xtask().args(["infra", "up"]).stderr(Stdio::inherit()).output()?;
    if !output.status.success() {
        bail!("cargo xtask infra up failed ({})", output.status);
    }
    let stdout = String::from_utf8(output.stdout)?;
    let value = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.trim_start_matches("export ").strip_prefix(key)?.strip_prefix('='))
            .map(str::to_owned)
            .with_context(|| format!("no {key}= in the output of infra up:\n{stdout}"))
    };
    let server_pids = ["kafka", "clickhouse", "clickhouse-2"]
        .iter()
        .filter_map(|name| fs::read_to_string(crate::infra::state_dir().join(format!("{name}.pid"))).ok())
        .filter_map(|pid| pid.trim().parse().ok())
        .collect();
    Ok(Infra {
        brokers: value("KAFKA_BROKERS")?,
        clickhouse: vec![value("CLICKHOUSE_URL")?, value("CLICKHOUSE_URL_2")?],
        server_pids,
    })
}

fn validate(path: &Path, allow_unsafe_sizing: bool) -> anyhow::Result<Validated> {
    let outcome = etl_gen::validate_file(path, &etl_gen::Options { allow_unsafe_sizing })?;
    outcome.pipeline.with_context(|| outcome.report.render())
}

/// The smallest budget the sizing rule allows for `v`'s sink, in whole MiB (rounded up).
fn min_budget_mib(v: &Validated) -> u64 {
    let bytes = Sizing::of(&v.model).evaluate().min_inflight_bytes;
    u64::try_from(bytes.div_ceil(1 << 20)).unwrap_or(u64::MAX)
}

/// The flagship's text with `pipeline.name`, `sink.clickhouse.table` and (if given)
/// `backpressure.max_inflight_bytes` replaced; comments and everything else kept.
fn variant_text(flagship: &str, name: &str, table: &str, budget: Option<&str>) -> anyhow::Result<String> {
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

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        fs::copy(entry.path(), to.join(entry.file_name()))?;
    }
    Ok(())
}

/// `cargo xtask build` (a release build in the shared target directory); returns the binary.
fn build(yaml: &Path, allow_unsafe_sizing: bool) -> anyhow::Result<PathBuf> {
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

/// Drops `table` (and an exactly-once ledger next to it) and runs each statement of `ddl`.
fn recreate_table(url: &str, table: &str, ddl: &str) -> anyhow::Result<()> {
    http::clickhouse(url, &format!("DROP TABLE IF EXISTS default.`{table}` SYNC"))?;
    http::clickhouse(url, &format!("DROP TABLE IF EXISTS default.`{table}_etl_batches` SYNC"))?;
    for statement in etl_gen::ddl::statements(ddl) {
        http::clickhouse(url, statement)?;
    }
    Ok(())
}

fn delete_topic(brokers: &str, topic: &str) -> anyhow::Result<()> {
    use rdkafka::admin::{AdminClient, AdminOptions};
    let admin: AdminClient<_> = rdkafka::ClientConfig::new().set("bootstrap.servers", brokers).create()?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in runtime.block_on(admin.delete_topics(&[topic], &options))? {
        if let Err((name, code)) = result {
            bail!("deleting {name}: {code}");
        }
    }
    Ok(())
}

/// The commit measured, and whether the work tree had changes on top of it (what was built).
fn git_state() -> String {
    let output =
        Command::new("git").current_dir(crate::workspace_root()).args(["describe", "--always", "--dirty"]).output();
    output
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or("an unknown commit".into(), |s| format!("commit {}", s.trim()))
}

fn cores() -> u64 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u64)
}

fn nanos() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() % 1_000_000_000)
}

// ---------------------------------------------------------------------------------------------
// Load: what else used the cores during a phase

/// CPU seconds during one phase: the whole machine, the servers, the measured client, this
/// driver; the rest is other work on the machine (another engineer's build, say).
#[derive(Debug, Clone, Copy, Default)]
struct Load {
    wall: f64,
    busy: f64,
    servers: f64,
    client: f64,
    driver: f64,
}

impl Load {
    /// Cores' worth of CPU that went to nothing this benchmark runs.
    fn other_cores(&self) -> f64 {
        ((self.busy - self.servers - self.client - self.driver) / self.wall).max(0.0)
    }

    fn server_cores(&self) -> f64 {
        self.servers / self.wall
    }
}

struct LoadMeter {
    started: Instant,
    busy: f64,
    servers: f64,
    driver: f64,
    pids: Vec<u32>,
}

impl LoadMeter {
    fn start(infra: &Infra) -> LoadMeter {
        let pids = infra.server_pids.clone();
        LoadMeter {
            started: Instant::now(),
            busy: procfs::machine_busy_seconds(),
            servers: pids.iter().filter_map(|p| procfs::cpu_seconds(*p)).sum(),
            driver: procfs::own_cpu_seconds(),
            pids,
        }
    }

    /// Ends the phase; `client` is the measured process's CPU seconds in it.
    fn finish(&self, client: f64) -> Load {
        Load {
            wall: self.started.elapsed().as_secs_f64(),
            busy: procfs::machine_busy_seconds() - self.busy,
            servers: self.pids.iter().filter_map(|p| procfs::cpu_seconds(*p)).sum::<f64>() - self.servers,
            client,
            driver: procfs::own_cpu_seconds() - self.driver,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The raw children

/// A raw measurement: the child's `bench-result` values and the phase's load.
struct Raw {
    records: u64,
    values: std::collections::BTreeMap<String, f64>,
    load: Load,
}

impl Raw {
    fn records_per_second(&self) -> f64 {
        per_second(self.records as f64, self.values["seconds"])
    }

    fn cpu_per_million(&self) -> f64 {
        per_million(self.values["cpu_seconds"], self.records)
    }
}

fn run_raw(infra: &Infra, command: &mut Command, records: u64) -> anyhow::Result<Raw> {
    let meter = LoadMeter::start(infra);
    let output = command.stderr(Stdio::inherit()).output()?;
    if !output.status.success() {
        bail!("{command:?} failed ({})", output.status);
    }
    let values = raw::parse_result(&String::from_utf8_lossy(&output.stdout))?;
    let client = values.get("cpu_total_seconds").or(values.get("cpu_seconds")).copied().unwrap_or(0.0);
    Ok(Raw { records, values, load: meter.finish(client) })
}

// ---------------------------------------------------------------------------------------------
// A pipeline run

/// One scrape of the pipeline's /metrics, at `t` seconds after it was started.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    t: f64,
    records_in: f64,
    /// Records finished: rows durably written plus records that made no row.
    done: f64,
    rows_out: f64,
    inflight: f64,
    pauses: f64,
}

impl Sample {
    fn of(t: f64, s: &prom::Scrape) -> Sample {
        let rows_out = s.sum("etl_records_out_total");
        Sample {
            t,
            records_in: s.sum("etl_records_in_total"),
            done: rows_out + s.sum("etl_records_dropped_total"),
            rows_out,
            inflight: s.sum("etl_backpressure_inflight_bytes"),
            pauses: s.sum("etl_backpressure_pause_events_total"),
        }
    }
}

struct Run {
    records: u64,
    samples: Vec<Sample>,
    /// Seconds after the start when the first record was in, and when the last was done.
    first_in: f64,
    done_at: f64,
    rows_out: f64,
    pauses: f64,
    batch_rows_mean: f64,
    cpu_seconds: f64,
    peak_rss: u64,
    exit: String,
    load: Load,
}

impl Run {
    fn seconds(&self) -> f64 {
        self.done_at - self.first_in
    }

    fn records_per_second(&self) -> f64 {
        per_second(self.records as f64, self.seconds())
    }

    fn cpu_per_million(&self) -> f64 {
        per_million(self.cpu_seconds, self.records)
    }

    /// Records done per second between 10% and 90% of them: without the start and the tail (the
    /// last batches wait for their linger).
    fn steady_records_per_second(&self) -> f64 {
        steady_rate(&self.series(|s| s.done), self.records as f64)
    }

    /// Records taken from Kafka per second, from the first to the last.
    fn intake_records_per_second(&self) -> f64 {
        let end = self.samples.iter().find(|s| s.records_in >= self.records as f64).map_or(self.done_at, |s| s.t);
        per_second(self.records as f64, end - self.first_in)
    }

    fn pauses_per_second(&self) -> f64 {
        per_second(self.pauses, self.seconds())
    }

    /// `f` of the samples, against seconds since the first record.
    fn series(&self, f: impl Fn(&Sample) -> f64) -> Vec<(f64, f64)> {
        self.samples.iter().filter(|s| s.t >= self.first_in).map(|s| (s.t - self.first_in, f(s))).collect()
    }

    /// The rate of counter `f` between consecutive samples.
    fn rate(&self, f: impl Fn(&Sample) -> f64) -> Vec<(f64, f64)> {
        rates(&self.series(f))
    }
}

/// Kills the child if the bench stops early, so no pipeline outlives it.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn run_pipeline(v: &Variant, infra: &Infra, topic: &str, records: u64, logs: &Path) -> anyhow::Result<Run> {
    let ddl = etl_gen::ddl::create_table(&v.validated).map_err(anyhow::Error::msg)?;
    for url in &infra.clickhouse {
        recreate_table(url, &v.table, &ddl)?;
    }
    let admin = TcpListener::bind("127.0.0.1:0")?.local_addr()?.to_string();
    let log = logs.join(format!("{}.log", v.label));
    let file = fs::File::create(&log)?;
    let group = format!("bench-{}-{}-{}", v.label, std::process::id(), nanos());
    eprintln!("bench: {} ({}), log {}", v.label, v.binary.display(), log.display());
    let meter = LoadMeter::start(infra);
    let spawned = Instant::now();
    let mut child = KillOnDrop(
        Command::new(&v.binary)
            .env("KAFKA_BROKERS", &infra.brokers)
            .env("CLICKHOUSE_URL", &infra.clickhouse[0])
            .env("CLICKHOUSE_URL_2", &infra.clickhouse[1])
            .env("ORDERS_TOPIC", topic)
            .env("ORDERS_GROUP", &group)
            .env("ADMIN_LISTEN", &admin)
            .env("RUST_LOG", "info")
            .env_remove("SCHEMA_REGISTRY_URL")
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {}", v.binary.display()))?,
    );
    let pid = child.0.id();
    let tail = || {
        let text = fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    };
    let (mut samples, mut first_in, mut kept_at) = (Vec::new(), None, f64::NEG_INFINITY);
    let (mut progress, mut progress_at) = (0.0, Instant::now());
    let (last, cpu_seconds, peak_rss) = loop {
        if let Some(status) = child.0.try_wait()? {
            bail!("{} exited ({status}) before the end:\n{}", v.label, tail());
        }
        let t = spawned.elapsed().as_secs_f64();
        if let Some(scrape) = scrape(&admin) {
            let sample = Sample::of(t, &scrape);
            if first_in.is_none() && sample.records_in > 0.0 {
                first_in = Some(t);
            }
            let finished = sample.done >= records as f64;
            // Scrapes every 50 ms time the ends closely; the plot needs only every 250 ms.
            if t - kept_at >= 0.25 || finished {
                samples.push(sample);
                kept_at = t;
            }
            if sample.done > progress {
                (progress, progress_at) = (sample.done, Instant::now());
            }
            if finished {
                // Before SIGTERM: the shutdown is not part of the work.
                let cpu = procfs::cpu_seconds(pid).unwrap_or(0.0);
                break (scrape, cpu, procfs::peak_rss(pid));
            }
        }
        if progress_at.elapsed() > Duration::from_secs(120) {
            bail!("{}: no record done for 120 s ({progress} of {records}):\n{}", v.label, tail());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let load = meter.finish(cpu_seconds);
    let end = *samples.last().expect("the last sample is kept");
    let first_in = first_in.unwrap_or(0.0);
    let pauses_before = samples.iter().find(|s| s.t >= first_in).map_or(0.0, |s| s.pauses);
    let batch_rows_mean = last.sum("etl_sink_batch_rows_sum") / last.sum("etl_sink_batch_rows_count").max(1.0);
    let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(60);
    let exit = loop {
        if let Some(status) = child.0.try_wait()? {
            break status.to_string();
        }
        if Instant::now() > deadline {
            break "still running 60 s after SIGTERM (killed)".to_owned();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stored = 0.0;
    for url in &infra.clickhouse {
        let count = http::clickhouse_text(url, &format!("SELECT count() FROM default.`{}`", v.table))?;
        stored += count.trim().parse::<f64>()?;
    }
    if stored != end.rows_out {
        bail!("{}: {stored} rows in ClickHouse, the pipeline counted {}", v.label, end.rows_out);
    }
    Ok(Run {
        records,
        first_in,
        done_at: end.t,
        rows_out: end.rows_out,
        pauses: end.pauses - pauses_before,
        batch_rows_mean,
        cpu_seconds,
        peak_rss,
        exit,
        load,
        samples,
    })
}

fn scrape(admin: &str) -> Option<prom::Scrape> {
    match http::request(admin, "GET", "/metrics", b"") {
        Ok((200, body)) => Some(prom::Scrape::parse(&String::from_utf8_lossy(&body))),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Arithmetic and the report

fn per_second(count: f64, seconds: f64) -> f64 {
    if seconds > 0.0 { count / seconds } else { 0.0 }
}

/// CPU seconds per million records.
fn per_million(cpu_seconds: f64, records: u64) -> f64 {
    cpu_seconds / (records as f64 / 1e6)
}

/// The rate of a counter between consecutive points, at the end of each interval.
fn rates(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    points.windows(2).filter(|w| w[1].0 > w[0].0).map(|w| (w[1].0, (w[1].1 - w[0].1) / (w[1].0 - w[0].0))).collect()
}

/// The rate between the first points at or past 10% and 90% of `total`.
fn steady_rate(points: &[(f64, f64)], total: f64) -> f64 {
    let at = |share: f64| points.iter().find(|(_, y)| *y >= share * total).copied();
    match (at(0.1), at(0.9)) {
        (Some((t1, y1)), Some((t2, y2))) if t2 > t1 => (y2 - y1) / (t2 - t1),
        _ => 0.0,
    }
}

/// The pipeline against the slower of the two raw limits.
fn ratio_to_limit(pipeline: f64, source: f64, sink: f64) -> f64 {
    pipeline / source.min(sink)
}

/// The issue's CPU target: 1.25 × (raw consumer + raw inserter), per million records.
fn cpu_target(consumer: f64, inserter: f64) -> f64 {
    1.25 * (consumer + inserter)
}

fn report(
    args: &BenchArgs,
    m: &Measured,
    variants: &[Variant],
    memory_bound: u64,
    produce_seconds: f64,
    memory_text: &str,
) -> String {
    let mib = |b: f64| b / MIB;
    let mut out = String::new();
    let (c, i, p) = (&m.consume, &m.insert, &m.pipeline);
    let _ = writeln!(
        out,
        "cargo xtask bench --records {} --partitions {}{}\n",
        args.records,
        args.partitions,
        if args.no_sizing {
            " --no-sizing".to_owned()
        } else {
            args.unsafe_budget.iter().map(|b| format!(" --unsafe-budget {b}")).collect()
        }
    );
    let _ = writeln!(out, "at {}\n", git_state());
    let _ = writeln!(
        out,
        "{} records ({} partitions) produced in {produce_seconds:.1} s; {} rows written ({:.1}% of the records passed \
         the filter).\n",
        args.records,
        args.partitions,
        p.rows_out,
        100.0 * p.rows_out / args.records as f64
    );
    let _ = writeln!(out, "| case | records/s | seconds | CPU s / M records | peak RSS | other load |");
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    let row = |out: &mut String, name: &str, rate: f64, secs: f64, cpu: f64, rss: f64, load: &Load| {
        let _ = writeln!(
            out,
            "| {name} | {rate:.0} | {secs:.2} | {cpu:.2} | {:.0} MiB | {:.2} cores (servers {:.2}) |",
            mib(rss),
            load.other_cores(),
            load.server_cores()
        );
    };
    row(
        &mut out,
        "(a) raw source: librdkafka consume-and-discard",
        c.records_per_second(),
        c.values["seconds"],
        c.cpu_per_million(),
        c.values["peak_rss"],
        &c.load,
    );
    row(
        &mut out,
        "(b) raw sink: clickhouse crate, RowBinary inserts",
        i.records_per_second(),
        i.values["seconds"],
        i.cpu_per_million(),
        i.values["peak_rss"],
        &i.load,
    );
    row(
        &mut out,
        "(c) the pipeline (flagship)",
        p.records_per_second(),
        p.seconds(),
        p.cpu_per_million(),
        p.peak_rss as f64,
        &p.load,
    );
    let limit = c.records_per_second().min(i.records_per_second());
    let ratio = ratio_to_limit(p.records_per_second(), c.records_per_second(), i.records_per_second());
    let target = cpu_target(c.cpu_per_million(), i.cpu_per_million());
    let _ = writeln!(out);
    let _ = writeln!(out, "- pipeline / min(a, b) = {:.0} / {limit:.0} = **{ratio:.2}**", p.records_per_second());
    let _ = writeln!(
        out,
        "- CPU: pipeline {:.2} s/M records vs target 1.25 × ({:.2} + {:.2}) = {target:.2} s/M: **{}** ({:.2}×)",
        p.cpu_per_million(),
        c.cpu_per_million(),
        i.cpu_per_million(),
        if p.cpu_per_million() <= target { "met" } else { "missed" },
        p.cpu_per_million() / target
    );
    let _ = writeln!(
        out,
        "- peak RSS (VmHWM before SIGTERM) {:.0} MiB vs `gen --memory --partitions {}` bound {:.0} MiB ({:.0}%)",
        mib(p.peak_rss as f64),
        args.partitions,
        mib(memory_bound as f64),
        100.0 * p.peak_rss as f64 / memory_bound as f64
    );
    let _ = writeln!(
        out,
        "- pipeline: steady (10% to 90% of the records done) {:.0} records/s; taken from Kafka at {:.0} records/s; \
         first record {:.2} s after start (joining the group), {:.0} records/s counting that; mean batch {:.0} rows \
         (raw inserter: {:.0} rows in {} batches); {:.1} pause events/s; exit {}",
        p.steady_records_per_second(),
        p.intake_records_per_second(),
        p.first_in,
        per_second(p.records as f64, p.done_at),
        p.batch_rows_mean,
        i.values["rows"],
        i.values["batches"],
        p.pauses_per_second(),
        p.exit
    );
    let _ = writeln!(
        out,
        "- raw consumer: first message {:.2} s after assign; messages of {:.1} payload bytes on average",
        c.values["startup_seconds"],
        c.values["payload_bytes"] / c.records as f64
    );
    let _ = writeln!(
        out,
        "- raw inserter: {:.1} MB of RowBinary ({:.1} bytes per row), {:.1} MB/s; its peak RSS holds all of it",
        i.values["bytes"] / 1e6,
        i.values["bytes"] / i.values["rows"],
        i.values["bytes"] / 1e6 / i.values["seconds"]
    );
    if let Some((eo, budget)) = &m.exactly_once {
        let _ =
            writeln!(out, "\nExactly-once (the same records, `exactly_once: true`, budget {} MiB):\n", budget >> 20);
        let _ =
            writeln!(out, "| mode | records/s | steady records/s | CPU s / M records | mean batch rows | peak RSS |");
        let _ = writeln!(out, "|---|---|---|---|---|---|");
        for (name, run) in [("at-least-once", p), ("exactly-once", eo)] {
            let _ = writeln!(
                out,
                "| {name} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} MiB |",
                run.records_per_second(),
                run.steady_records_per_second(),
                run.cpu_per_million(),
                run.batch_rows_mean,
                mib(run.peak_rss as f64)
            );
        }
        let _ = writeln!(
            out,
            "\n- exactly-once / at-least-once: **{:.2}×** records/s, {:.2}× CPU per record",
            eo.records_per_second() / p.records_per_second(),
            eo.cpu_per_million() / p.cpu_per_million()
        );
    }
    if let Some(fit) = m.sizing.first() {
        let _ = writeln!(out, "\nSizing rule (the same saturated run, {} records):\n", args.records);
        let _ = writeln!(
            out,
            "| budget | rule | records/s | steady records/s | vs the minimum | pause events/s | CPU s / M records | \
             peak RSS | exit |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
        for (run, v) in m.sizing.iter().zip(variants.iter().skip(1)) {
            let _ = writeln!(
                out,
                "| {} MiB | {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} | {:.0} MiB | {} |",
                v.budget() >> 20,
                if v.label == "fit" { "holds (its minimum)" } else { "broken" },
                run.records_per_second(),
                run.steady_records_per_second(),
                run.records_per_second() / fit.records_per_second(),
                run.pauses_per_second(),
                run.cpu_per_million(),
                mib(run.peak_rss as f64),
                run.exit
            );
        }
        let loads: Vec<String> = m.sizing.iter().map(|r| format!("{:.2}", r.load.other_cores())).collect();
        let _ = writeln!(out, "\n- other load during these runs: {} cores", loads.join(" / "));
    }
    let _ = writeln!(
        out,
        "\n`gen --memory --partitions {}` of the pipeline:\n\n```text\n{memory_text}```",
        args.partitions
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_and_the_cpu_target() {
        // A pipeline at 400k records/s against a source at 1.6M/s and a sink at 800k/s: half the
        // slower limit.
        assert_eq!(ratio_to_limit(400_000.0, 1_600_000.0, 800_000.0), 0.5);
        assert_eq!(per_second(10_000_000.0, 12.5), 800_000.0);
        assert_eq!(per_second(5.0, 0.0), 0.0);
        assert_eq!(per_million(3.0, 10_000_000), 0.3);
        assert_eq!(cpu_target(0.5, 0.3), 1.0);
    }

    #[test]
    fn rates_between_samples() {
        let points = [(0.0, 0.0), (0.25, 100_000.0), (0.5, 300_000.0), (0.5, 300_000.0), (1.0, 300_000.0)];
        assert_eq!(rates(&points), vec![(0.25, 400_000.0), (0.5, 800_000.0), (1.0, 0.0)]);
    }

    #[test]
    fn the_steady_rate_leaves_out_start_and_tail() {
        let done = [(0.0, 0.0), (1.0, 50.0), (2.0, 150.0), (3.0, 550.0), (4.0, 950.0), (9.0, 1000.0)];
        // 10% (100) is first reached at 2 s with 150, 90% (900) at 4 s with 950.
        assert_eq!(steady_rate(&done, 1000.0), 400.0);
        assert_eq!(steady_rate(&done[..3], 1000.0), 0.0, "never reaches 90%");
    }

    #[test]
    fn the_flagship_minimum_budget_is_its_comment_s() {
        // pipeline.yaml: 256MiB ≥ 2 × (2 × 2 × 16MiB + 2 × 8 × 256KiB) = 136MiB at low_ratio 0.5.
        let flagship = crate::workspace_root().join("examples/kafka_avro_to_clickhouse/pipeline.yaml");
        assert_eq!(min_budget_mib(&validate(&flagship, false).unwrap()), 272);
    }

    /// The flagship's text, and a scratch directory with its schemas to validate variants in.
    struct Scratch {
        flagship: String,
        dir: PathBuf,
    }

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let root = crate::workspace_root();
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
        assert_eq!(sink.table, "bench_x");
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
