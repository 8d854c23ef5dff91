//! `cargo xtask soak --minutes N`: the flagship pipeline with exactly-once on, run for N minutes
//! against the local servers (`cargo xtask infra up --durable`) under steady load, with faults at
//! random moments; at the end ClickHouse must hold every record exactly once. Not part of CI or
//! `cargo xtask test`: it takes the machine for the whole run.
//!
//! One run:
//!
//! 1. `setup`: the release xtask (as `bench` builds it), `infra up --durable`, the flagship built
//!    as the exactly-once variant `soak-orders-eo` (table `soak_orders_eo` and its ledger
//!    recreated on both servers), a fresh topic of 4 partitions and a fresh group on the
//!    in-memory broker (with `--durable`, on the durable one, whose data survives a restart);
//! 2. `producer`: an in-process producer at `--rate` orders/s, every delivery report kept; the main
//!    pipeline instance (`instances`) reads the topic;
//! 3. `faults`, at exponential intervals of mean `--mean-fault-interval` seconds, one at a time:
//!    the main instance SIGKILLed (and started again at once), both ClickHouse servers
//!    SIGSTOPped for 10–40 s, a second member joining for 20–60 s and leaving (SIGTERM), the
//!    broker SIGSTOPped for 5–15 s (with `--durable`, restarted instead, or with `--broker-freeze`
//!    either); meanwhile
//!    `sampling` reads the main instance's RSS, in-flight bytes and the group's lag every second;
//! 4. the end: production stops and is flushed; the soak waits (at most 10 minutes) until
//!    ClickHouse holds every delivered order the flagship's filter keeps and the group's
//!    committed offsets reach the delivery reports' end offsets; then SIGTERM, and the verdict,
//!    samples.csv, soak.svg and summary.md under `--out` (`report`).
//!
//! Ctrl-C (or SIGTERM, SIGHUP) once ends the load phase early and goes on to the check; a second
//! time stops waiting for it; a third thaws the servers and exits at once. The pipelines and a
//! restarted broker run in process groups of their own, so a Ctrl-C in the terminal reaches only
//! the soak, which thaws and stops them in order.

mod faults;
mod instances;
mod interrupts;
mod producer;
mod report;
mod sampling;
mod setup;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use self::faults::{Fault, Outcome};
use self::instances::{Exit, Members};
use self::interrupts::Interrupts;
use self::producer::{Load, Produced};
use self::sampling::{Sample, Sampler};
use self::setup::{Infra, Pipeline, TABLE};
use crate::lab::nanos;
use crate::lab::services::{XTASK, delete_topic, recreate_table, release_xtask};

/// `soak` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct SoakArgs {
    /// Minutes of load and faults (the check at the end comes on top).
    #[arg(long, default_value_t = 30.0)]
    minutes: f64,
    /// Orders per second the producer sends.
    #[arg(long, default_value_t = 2000)]
    rate: u64,
    /// Seed of the fault schedule (default: from the clock). It is printed; the same seed gives
    /// the same faults at the same offsets from the start, not the same interleaving with the load.
    #[arg(long)]
    seed: Option<u64>,
    /// Mean seconds between faults (the intervals are exponential).
    #[arg(long, default_value_t = 90.0)]
    mean_fault_interval: f64,
    /// Run on the durable broker (Tansu over moto's S3), which a broker fault restarts, instead
    /// of the in-memory one, which a broker fault freezes. Off by default: the pinned Tansu over
    /// moto stops serving fetches at this load (moto, one Python thread, saturates).
    #[arg(long)]
    durable: bool,
    /// With `--durable`, also freeze the broker (SIGSTOP 5–15 s), besides restarting it (see
    /// `faults::available`).
    #[arg(long, requires = "durable")]
    broker_freeze: bool,
    /// Where samples.csv, summary.md, soak.svg, the pipeline's files and the logs go (default:
    /// target/etl-soak/).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// How long the end waits for every order to land and every offset to be committed.
const LAND_TIMEOUT: Duration = Duration::from_secs(600);
/// What a SIGTERMed instance gets on top of its drain_timeout to exit.
const EXIT_SLACK: Duration = Duration::from_secs(30);

pub(crate) fn run(args: &SoakArgs) -> anyhow::Result<()> {
    if !(args.minutes > 0.0 && args.mean_fault_interval > 0.0 && args.rate > 0) {
        bail!("--minutes, --rate and --mean-fault-interval must be positive");
    }
    let root = crate::workspace::root();
    let out = args.out.clone().unwrap_or_else(|| root.join("target/etl-soak"));
    fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    // Absolute: the children (`cargo xtask build`) run in the workspace root.
    let out = out.canonicalize()?;
    // Logs of an earlier run would be scanned for panics and confused with this run's.
    let logs = out.join("logs");
    let _ = fs::remove_dir_all(&logs);
    fs::create_dir_all(&logs)?;
    eprintln!("soak: building xtask --release for the children");
    let exe = release_xtask()?;
    let _ = XTASK.set(exe.clone());
    let result = run_with(args, &root, &out, &logs);
    let _ = fs::remove_file(exe);
    result
}

fn run_with(args: &SoakArgs, root: &Path, out: &Path, logs: &Path) -> anyhow::Result<()> {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    eprintln!("soak: seed {seed} (--seed {seed} gives the same fault schedule)");
    let infra = setup::infra_up(args.durable)?;
    let pipeline = setup::build_flagship(root, out)?;
    eprint!("{}", pipeline.memory_text);
    let ddl = etl_gen::ddl::create_table(&pipeline.validated).map_err(anyhow::Error::msg)?;
    for url in &infra.clickhouse {
        recreate_table(url, TABLE, &ddl)?;
    }
    let suffix = format!("{}-{}", std::process::id(), nanos());
    let (topic, group) = (format!("soak-orders-{suffix}"), format!("soak-orders-eo-{suffix}"));
    setup::create_topic(&infra.broker, &topic)?;
    eprintln!("soak: topic {topic}, group {group}, broker {}", infra.broker);

    let interrupts = Interrupts::watch();
    let epoch = Instant::now();
    let load = Load::start(&infra.broker, &topic, args.rate)?;
    let env = instances::Env {
        binary: pipeline.binary.clone(),
        broker: infra.broker.clone(),
        clickhouse: infra.clickhouse.clone(),
        topic: topic.clone(),
        group: group.clone(),
        logs: logs.to_owned(),
    };
    let mut members = Members::start(env, epoch)?;
    let sampler = Sampler::start(epoch, members.target(), load.counters());

    let mut faults = Vec::new();
    let phase_error = load_phase(args, seed, &infra, &pipeline, &load, &mut members, &interrupts, epoch, &mut faults)
        .err()
        .map(|e| format!("{e:#}"));
    if let Some(e) = &phase_error {
        eprintln!("soak: the load phase ended early: {e}");
    }
    let load_seconds = epoch.elapsed().as_secs_f64();

    // The end: everything delivered must land once, and every offset be committed.
    eprintln!("soak: load phase over after {:.1} min; flushing the producer", load_seconds / 60.0);
    let produced = load.finish();
    let landed = await_landed(&infra, &topic, &group, &produced, &mut members, &interrupts);
    members.stop_all(pipeline.drain_timeout() + EXIT_SLACK);
    let samples = sampler.finish();
    let counts = setup::table_counts(&infra.clickhouse).map_err(|e| format!("{e:#}"));
    let spans = setup::ledger_spans(&infra.clickhouse).map_err(|e| format!("{e:#}"));
    let results = Results {
        minutes: args.minutes,
        rate: args.rate,
        seed,
        mean_fault_interval: args.mean_fault_interval,
        topic,
        group,
        load_seconds,
        total_seconds: epoch.elapsed().as_secs_f64(),
        interrupted: interrupts.count() > 0,
        phase_error,
        produced,
        landed,
        counts,
        spans,
        faults,
        exits: std::mem::take(&mut members.exits),
        panics: panics(logs),
        samples,
        memory_bound: pipeline.memory_bound,
        memory_text: pipeline.memory_text.clone(),
        budget: pipeline.budget(),
        high_watermark: pipeline.high_watermark(),
    };
    drop(members);

    // The summary first: a file that cannot be written must not hide the verdict.
    let summary = report::summary(&results);
    println!("{summary}");
    let written = [
        fs::write(out.join("summary.md"), &summary).map_err(anyhow::Error::from),
        report::write_csv(&out.join("samples.csv"), &results.samples),
        report::plot(&out.join("soak.svg"), &results),
    ];
    for e in written.into_iter().filter_map(Result::err) {
        eprintln!("soak: writing the output: {e:#}");
    }
    eprintln!("soak: summary.md, samples.csv and soak.svg in {}", out.display());

    let failures = results.failures();
    if failures.is_empty() {
        // Free moto's memory (it keeps the bucket) and ClickHouse's disk; a failed run keeps both
        // to look at.
        if let Err(e) = delete_topic(&infra.broker, &results.topic) {
            eprintln!("soak: could not delete topic {}: {e:#}", results.topic);
        }
        setup::drop_tables(&infra.clickhouse);
        return Ok(());
    }
    eprintln!("soak: kept topic {} and table default.{TABLE} to look at", results.topic);
    bail!("the soak failed:\n  {}", failures.join("\n  "))
}

/// Faults at exponential intervals until `--minutes` have passed (from the start of the load) or
/// the soak is interrupted; the faults done go to `faults`.
#[allow(clippy::too_many_arguments)]
fn load_phase(
    args: &SoakArgs,
    seed: u64,
    infra: &Infra,
    pipeline: &Pipeline,
    load: &Load,
    members: &mut Members,
    interrupts: &Interrupts,
    epoch: Instant,
    faults: &mut Vec<Fault>,
) -> anyhow::Result<()> {
    members.await_first_rows(Duration::from_secs(120), || interrupts.count() > 0)?;
    eprintln!("soak: the main instance writes rows after {:.1}s; faults begin", epoch.elapsed().as_secs_f64());
    let end = epoch + Duration::from_secs_f64(args.minutes * 60.0);
    let mut rng = faults::Rng::new(seed);
    let kinds = faults::available(infra, args.broker_freeze);
    let mean = args.mean_fault_interval;
    let mut next = Instant::now() + Duration::from_secs_f64(rng.exponential(mean));
    let progress = crate::progress::Progress::clock("soak", end.saturating_duration_since(Instant::now()));
    loop {
        let interrupted = members.supervise_until(next.min(end), || interrupts.count() > 0)?;
        if interrupted || Instant::now() >= end {
            progress.finish();
            return Ok(());
        }
        let kind = rng.pick_kind(&kinds);
        let mut ctx = faults::Ctx {
            members: &mut *members,
            load,
            infra,
            rng: &mut rng,
            stop: &|| interrupts.count() > 0,
            epoch,
            exit_timeout: pipeline.drain_timeout() + EXIT_SLACK,
        };
        let fault = faults::inject(kind, &mut ctx);
        let failed = match &fault.outcome {
            Outcome::Failed(e) => Some(e.clone()),
            _ => None,
        };
        faults.push(fault);
        progress.note(format!("{} faults injected", faults.len()));
        if let Some(e) = failed {
            bail!("a fault could not be injected or undone: {e}");
        }
        next = Instant::now() + Duration::from_secs_f64(rng.exponential(mean));
    }
}

/// How the wait for every order to land ended.
struct Landed {
    /// Every expected order is in ClickHouse and every end offset committed.
    done: bool,
    /// Seconds from the end of the load phase.
    seconds: f64,
    /// The committed offsets last read (partition → offset).
    committed: Option<std::collections::BTreeMap<i32, i64>>,
    /// Why it gave up, when it did.
    note: Option<String>,
}

/// Waits until ClickHouse holds at least the expected orders and the group's committed offsets
/// reach the end offsets of the delivery reports, at most [`LAND_TIMEOUT`] (or until a second
/// interrupt); the members are supervised meanwhile.
fn await_landed(
    infra: &Infra,
    topic: &str,
    group: &str,
    produced: &Produced,
    members: &mut Members,
    interrupts: &Interrupts,
) -> Landed {
    let started = Instant::now();
    let mut reported = Instant::now();
    let mut committed = None;
    eprintln!(
        "soak: waiting for {} orders in ClickHouse and the end offsets {:?}",
        produced.expected, produced.end_offsets
    );
    loop {
        let counts = setup::table_counts(&infra.clickhouse).ok();
        if let Ok(now) = setup::committed(&infra.broker, group, topic) {
            committed = Some(now);
        }
        let rows = counts.is_some_and(|(_, uniq)| uniq >= produced.expected as i64);
        let offsets = committed.as_ref().is_some_and(|c: &std::collections::BTreeMap<i32, i64>| {
            produced.end_offsets.iter().all(|(p, end)| c.get(p).is_some_and(|o| o >= end))
        });
        let seconds = started.elapsed().as_secs_f64();
        if rows && offsets {
            eprintln!("soak: everything landed {seconds:.1}s after the load phase");
            return Landed { done: true, seconds, committed, note: None };
        }
        if reported.elapsed() >= Duration::from_secs(30) {
            eprintln!("soak: still waiting: (rows, distinct) {counts:?}, committed {committed:?}");
            reported = Instant::now();
        }
        let note = if !members.main_running() {
            Some("the main instance is not running".to_owned())
        } else if started.elapsed() >= LAND_TIMEOUT {
            Some(format!("not everything landed within {} s", LAND_TIMEOUT.as_secs()))
        } else if interrupts.count() > 1 {
            Some("interrupted while waiting for everything to land".to_owned())
        } else {
            None
        };
        if note.is_some() {
            return Landed { done: false, seconds, committed, note };
        }
        if let Err(e) = members.supervise_until(Instant::now() + Duration::from_secs(2), || interrupts.count() > 1) {
            let note = Some(format!("supervising the instances: {e:#}"));
            return Landed { done: false, seconds, committed, note };
        }
    }
}

/// Everything a run found, for the report and the verdict.
struct Results {
    minutes: f64,
    rate: u64,
    seed: u64,
    mean_fault_interval: f64,
    topic: String,
    group: String,
    /// Seconds of the load phase and of the whole run from the start of the load.
    load_seconds: f64,
    total_seconds: f64,
    interrupted: bool,
    phase_error: Option<String>,
    produced: Produced,
    landed: Landed,
    /// `(count(), uniqExact(order_id))` over both servers after the instances stopped.
    counts: Result<(i64, i64), String>,
    /// Batch spans in the ledger (none would mean exactly-once was not on).
    spans: Result<i64, String>,
    faults: Vec<Fault>,
    exits: Vec<Exit>,
    /// Log lines that say a pipeline panicked, with their log file.
    panics: Vec<String>,
    samples: Vec<Sample>,
    memory_bound: u64,
    memory_text: String,
    budget: u64,
    high_watermark: f64,
}

impl Results {
    /// Orders missing from ClickHouse (negative: more distinct orders than were delivered).
    fn missing(&self) -> Option<i64> {
        self.counts.as_ref().ok().map(|(_, uniq)| self.produced.expected as i64 - uniq)
    }

    fn duplicates(&self) -> Option<i64> {
        self.counts.as_ref().ok().map(|(count, uniq)| count - uniq)
    }

    /// Why the run failed; empty when it passed.
    fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        match (self.missing(), self.duplicates(), &self.counts) {
            (Some(missing), Some(duplicates), _) => {
                if missing > 0 {
                    failures.push(format!("{missing} orders missing from ClickHouse"));
                }
                if missing < 0 {
                    failures.push(format!("{} distinct orders more in ClickHouse than delivered", -missing));
                }
                if duplicates > 0 {
                    failures.push(format!("{duplicates} duplicate rows in ClickHouse"));
                }
            }
            (_, _, Err(e)) => failures.push(format!("could not count the rows: {e}")),
            _ => {}
        }
        match &self.spans {
            Ok(0) => failures.push("the ledger holds no batch span: exactly-once was not on".to_owned()),
            Ok(_) => {}
            Err(e) => failures.push(format!("could not read the ledger: {e}")),
        }
        if !self.landed.done {
            failures.push(self.landed.note.clone().unwrap_or_else(|| "not everything landed".to_owned()));
        }
        if let Some(e) = &self.produced.flush_error {
            failures.push(format!("the producer did not flush: {e}"));
        }
        if let Some(e) = &self.phase_error {
            failures.push(format!("the load phase ended early: {e}"));
        }
        if self.interrupted {
            failures.push("interrupted".to_owned());
        }
        for exit in &self.exits {
            if let Some(problem) = &exit.problem {
                failures.push(format!("{} at {:.0}s: {problem}", exit.label, exit.t));
            }
        }
        for fault in &self.faults {
            if let Outcome::Problem(problem) = &fault.outcome {
                failures.push(format!("{} at {:.0}s: {problem}", fault.kind.label(), fault.start));
            }
        }
        if !self.panics.is_empty() {
            failures.push(format!("{} panic lines in the logs", self.panics.len()));
        }
        failures
    }
}

/// Lines of the instances' logs that say they panicked (`file: line`).
fn panics(logs: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir(logs) else { return found };
    for entry in entries.flatten() {
        let text = fs::read_to_string(entry.path()).unwrap_or_default();
        let name = entry.file_name().to_string_lossy().into_owned();
        found.extend(text.lines().filter(|l| l.contains("panicked")).map(|l| format!("{name}: {l}")));
    }
    found
}

/// Sends signal `name` (`STOP`, `CONT`, `TERM`, `KILL`) to `pid`.
fn signal(name: &str, pid: u32) -> anyhow::Result<()> {
    let status = Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status()?;
    if !status.success() {
        bail!("kill -{name} {pid} failed ({status})");
    }
    Ok(())
}

/// The state letter of /proc/PID/stat (`T` stopped, `Z` zombie); `None` once the process is gone.
fn process_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ...: comm may hold spaces and parentheses; the state follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Whether `pid` runs (exists and is no zombie).
fn running(pid: u32) -> bool {
    process_state(pid).is_some_and(|s| s != 'Z')
}
