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
//!    /proc before SIGTERM; its CPU (and the servers') counts from the last scrape before the
//!    first record, like its records/s: the group join before it is reported apart;
//! 4. the raw sink limit: the rows the pipeline wrote, read back per shard as RowBinary and
//!    inserted by `bench-raw insert` (a child process) into a table of the same columns; before
//!    its clock starts, the child measures the Native transposition and the lz4 compression of
//!    those rows alone; then the generated decoder and chain alone, on the topic's first million
//!    payloads (`bench-raw dump`, then the generated crate's `benches/parts.rs`): the parts whose
//!    sum the pipeline's CPU is compared with (`parts`), by thread too;
//! 5. the sizing rule's reason: the same saturated run with the smallest budget the rule allows,
//!    then with one that breaks it (`--unsafe-budget`, built with `--allow-unsafe-sizing`);
//! 6. the cost of exactly-once: the flagship with `exactly_once: true` (and the budget the sizing
//!    rule then needs), the same records, compared with (3);
//! 7. every other insert format and compression: the flagship with `format: native|rowbinary`
//!    and `compression: lz4|zstd|none` (the flagship has the defaults, native and lz4), for the
//!    whole box's CPU of each;
//! 8. several outputs: the flagship's table split into three `outputs` by `customer_id % 3` (the
//!    same rows, routed to three tables, with the budget the sizing rule then needs), compared
//!    with (3).
//!
//! Each child's CPU time is its whole process's (every thread), so the three figures compare.
//! The servers' CPU and the machine's other load are reported per phase, since on two cores
//! anything else running moves the numbers.
//!
//! This file runs the phases in that order; each job has its own module: `servers` (the addresses
//! and pids of `infra up`), `variants` (the pipelines built), `limits` (the raw children's side
//! here; `raw` is the children), `pipeline` (one pipeline run), `cpu_time` (what else used the cores),
//! `rates`, and the output: `report` (Markdown), `parts` (the sum of the parts, the CPU by
//! thread and report.json) and `figures` (the SVG plots). What `soak` needs
//! too (the release xtask, `infra up`, tables and topic, the flagship built and started, HTTP,
//! /metrics, /proc and the plotting) is in `crate::lab`.

mod cpu_time;
mod figures;
mod limits;
mod parts;
mod pipeline;
mod rates;
pub(crate) mod raw;
mod report;
mod rowbinary;
mod servers;
mod variants;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::bail;
use etl_gen::rules::sizing::Sizing;

use self::limits::Raw;
use self::pipeline::{Run, run_pipeline};
use self::servers::{Servers, start_servers};
use self::variants::{
    COMPRESSIONS, EXACTLY_ONCE, FORMATS, OUTPUTS, Variant, outputs_text, sink_label, sink_of, sink_text,
};
use crate::lab::flagship::{build, copy_dir, exactly_once_text, min_budget_mib, validate, variant_text};
use crate::lab::services::{XTASK, delete_topic, release_xtask, xtask};
use crate::lab::{http, nanos};

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
    /// Skip the runs with the other insert formats and compressions (five more pipeline runs).
    #[arg(long)]
    no_compressions: bool,
    /// Skip the run with three outputs.
    #[arg(long)]
    no_outputs: bool,
    /// Where the SVG plots go (default: docs/bench/).
    #[arg(long)]
    plots: Option<PathBuf>,
}

pub(crate) fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let root = crate::workspace::root();
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
    let infra = start_servers()?;

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
    // A variant whose sizing needs more than the flagship's budget (exactly-once queues whole
    // batches; outputs multiply the slots) runs with the smallest budget the rule then allows.
    let budget_for = |yaml: &str, probe: &str| -> anyhow::Result<Option<String>> {
        let probe = work.join(probe);
        fs::write(&probe, yaml)?;
        let budget = min_budget_mib(&validate(&probe, true)?).max(flagship_budget);
        Ok(Some(format!("{budget}MiB")))
    };
    if !args.no_exactly_once {
        let eo = exactly_once_text(&variant_text(&text, "bench-orders-eo", "bench_orders_eo", None)?)?;
        variants.push((EXACTLY_ONCE.to_owned(), budget_for(&eo, "bench-orders-eo-probe.yaml")?, false));
    }
    if !args.no_outputs {
        let split = outputs_text(&variant_text(&text, "bench-orders-outputs-3", "bench_orders_outputs_3", None)?)?;
        variants.push((OUTPUTS.to_owned(), budget_for(&split, "bench-orders-outputs-probe.yaml")?, false));
    }
    if !args.no_compressions {
        let flagship_sink = match &flagship_validated.model.sink {
            etl_gen::model::Sink::Clickhouse(c) => sink_label(c.format.key(), c.compression.key()),
            etl_gen::model::Sink::File(_) => String::new(),
        };
        for format in FORMATS {
            for codec in COMPRESSIONS {
                let label = sink_label(format, codec);
                if label != flagship_sink {
                    variants.push((label, None, false));
                }
            }
        }
    }
    let mut built = Vec::new();
    for (label, budget, unsafe_sizing) in variants {
        let name = if label == "pipeline" {
            "bench-orders".to_owned()
        } else {
            format!("bench-orders-{}", label.replace('+', "-"))
        };
        let table = name.replace('-', "_");
        let yaml = work.join(format!("{name}.yaml"));
        let mut yaml_text = variant_text(&text, &name, &table, budget.as_deref())?;
        if label == EXACTLY_ONCE {
            yaml_text = exactly_once_text(&yaml_text)?;
        }
        if label == OUTPUTS {
            yaml_text = outputs_text(&yaml_text)?;
        }
        if let Some((format, codec)) = sink_of(&label) {
            yaml_text = sink_text(&yaml_text, format, codec)?;
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
    let outputs = built.iter().position(|v| v.label == OUTPUTS).map(|i| built.remove(i));
    let compressions: Vec<Variant> = {
        let (codecs, rest) = built.into_iter().partition(|v| sink_of(&v.label).is_some());
        built = rest;
        codecs
    };
    let main = &built[0];
    let parts_crate = limits::build_parts(main)?;
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
    let cases = Cases {
        exactly_once: exactly_once.as_ref(),
        outputs: outputs.as_ref(),
        compressions: &compressions,
        parts_crate: &parts_crate,
    };
    let result = measure(args, &infra, &built, &cases, &topic, &places);
    // Free the broker's memory (Tansu keeps topics in memory) and ClickHouse's disk either way.
    if let Err(e) = delete_topic(&infra.brokers, &topic) {
        eprintln!("bench: could not delete topic {topic}: {e:#}");
    }
    let tables = built.iter().chain(&exactly_once).chain(&outputs).chain(&compressions).flat_map(Variant::tables);
    for table in tables.chain([RAW_TABLE.to_owned()]) {
        for url in &infra.clickhouse {
            let _ = http::clickhouse(url, &format!("DROP TABLE IF EXISTS default.`{table}` SYNC"));
            let _ = http::clickhouse(url, &format!("DROP TABLE IF EXISTS default.`{table}_etl_batches` SYNC"));
        }
    }
    let measured = result?;
    let report = report::report(args, &measured, &built, memory_bound, produce_seconds, &memory_text);
    fs::write(work.join("report.md"), &report)?;
    let json = parts::json(&measured, args.records, args.partitions, &report::git_state());
    fs::write(work.join("report.json"), serde_json::to_string_pretty(&json)? + "\n")?;
    println!("{report}");
    eprintln!("bench: report in {}, plots in {}", work.join("report.md").display(), plots.display());
    Ok(())
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

/// The runs besides the flagship and the sizing comparison.
struct Cases<'a> {
    exactly_once: Option<&'a Variant>,
    outputs: Option<&'a Variant>,
    compressions: &'a [Variant],
    /// The generated crate whose `benches/parts.rs` measures the decoder and chain alone.
    parts_crate: &'a Path,
}

/// Everything one run measured.
struct Measured {
    consume: Raw,
    insert: Raw,
    /// `benches/parts.rs`'s values: the decoder and the chain alone on the topic's payloads.
    chain_parts: Option<std::collections::BTreeMap<String, f64>>,
    pipeline: Run,
    /// The runs of the sizing comparison, in the order of the variants after the first.
    sizing: Vec<Run>,
    /// The exactly-once run, with its variant's budget.
    exactly_once: Option<(Run, u64)>,
    /// The runs with the other insert formats and compressions: (`format+codec`, run).
    compressions: Vec<(String, Run)>,
    /// The run with three outputs, with its variant's budget.
    outputs: Option<(Run, u64)>,
}

fn measure(
    args: &BenchArgs,
    infra: &Servers,
    variants: &[Variant],
    cases: &Cases<'_>,
    topic: &str,
    places: &Places,
) -> anyhow::Result<Measured> {
    let Cases { exactly_once, outputs, compressions, parts_crate } = *cases;
    let Places { work, logs, plots } = places;
    let main = &variants[0];
    // 2. The raw source limit.
    eprintln!("bench: raw consumer");
    let consume = limits::consume(args, infra, main, topic)?;
    eprintln!("bench: raw consumer: {:.0} records/s", consume.records_per_second());

    // 3. The pipeline.
    let pipeline = run_pipeline(main, infra, topic, args.records, logs)?;
    eprintln!("bench: pipeline: {:.0} records/s", pipeline.records_per_second());

    // 4. The raw sink limit, on the rows the pipeline wrote.
    let insert = limits::insert(args, infra, main, work)?;
    if insert.values["rows"] != pipeline.rows_out {
        bail!("the raw inserter wrote {} rows, the pipeline {}", insert.values["rows"], pipeline.rows_out);
    }
    eprintln!("bench: raw inserter: {:.0} records/s", insert.records_per_second());
    for shard in 0..infra.clickhouse.len() {
        let _ = fs::remove_file(work.join(format!("rows-{shard}.bin")));
    }
    eprintln!("bench: the decoder and the chain alone");
    let chain_parts = Some(limits::chain_parts(args, infra, parts_crate, topic, work)?);

    figures::end_to_end(args, plots, main, &pipeline)?;

    // 5. The sizing rule: the same saturated run, fitting and breaking it.
    let mut sizing = Vec::new();
    for v in variants.iter().skip(1) {
        sizing.push(run_pipeline(v, infra, topic, args.records, logs)?);
    }
    if !sizing.is_empty() {
        figures::sizing(args, plots, variants, &sizing)?;
    }
    // 6. The cost of exactly-once.
    let exactly_once = match exactly_once {
        Some(v) => Some((run_pipeline(v, infra, topic, args.records, logs)?, v.budget())),
        None => None,
    };
    // 7. The other insert formats and compressions (the pipeline above has the defaults).
    let mut compressed = Vec::new();
    for v in compressions {
        compressed.push((v.label.clone(), run_pipeline(v, infra, topic, args.records, logs)?));
    }
    // 8. Three outputs.
    let outputs = match outputs {
        Some(v) => Some((run_pipeline(v, infra, topic, args.records, logs)?, v.budget())),
        None => None,
    };
    Ok(Measured { consume, insert, chain_parts, pipeline, sizing, exactly_once, compressions: compressed, outputs })
}

fn cores() -> u64 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u64)
}
