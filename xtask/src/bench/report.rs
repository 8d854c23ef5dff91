//! The Markdown report of `cargo xtask bench`: the three cases side by side, the ratios
//! docs/BENCHMARKS.md quotes, the exactly-once and sizing-rule comparisons, the sum of the parts
//! and the CPU by thread (from `parts`), and the memory bound.

use std::fmt::Write as _;
use std::process::Command;

use super::cpu_time::Load;
use super::rates::{cpu_target, per_million, per_second, ratio_to_limit};
use super::variants::Variant;
use super::{BenchArgs, Measured};
use crate::lab::MIB;

pub(crate) fn report(
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
        "(b) raw sink: clickhouse crate, inserts in the pipeline's format",
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
         first record {:.2} s after start (joining the group), {:.0} records/s counting that; CPU while joining \
         {:.2} s over {:.1} s ({:.1}% of a core; not counted per record, like the time); mean batch {:.0} rows \
         (raw inserter: {:.0} rows in {} batches); {:.1} pause events/s; exit {}",
        p.steady_records_per_second(),
        p.intake_records_per_second(),
        p.first_in,
        per_second(p.records as f64, p.done_at),
        p.join_cpu_seconds,
        p.join_seconds,
        100.0 * p.join_cpu_seconds / p.join_seconds.max(f64::MIN_POSITIVE),
        p.batch_rows_mean,
        i.values["rows"],
        i.values["batches"],
        p.pauses_per_second(),
        p.exit
    );
    let _ = writeln!(
        out,
        "- raw consumer: first message {:.2} s after assign; messages of {:.1} payload bytes on average; read {} \
         times, CPU {} s/M, the median run's figures used throughout",
        c.values["startup_seconds"],
        c.values["payload_bytes"] / c.records as f64,
        c.runs_cpu_per_million.len(),
        c.runs_cpu_per_million.iter().map(|v| format!("{v:.3}")).collect::<Vec<_>>().join(", ")
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
        pair_table(&mut out, "mode", [("at-least-once", p), ("exactly-once", eo)], "exactly-once / at-least-once");
    }
    if let Some((split, budget)) = &m.outputs {
        let _ = writeln!(
            out,
            "\nThree outputs (the same rows split into three tables by `customer_id % 3`, budget {} MiB):\n",
            budget >> 20
        );
        pair_table(
            &mut out,
            "tables",
            [("one (the flagship)", p), ("three outputs", split)],
            "three outputs / one table",
        );
    }
    whole_box(&mut out, args.records, m);
    super::parts::markdown(&mut out, m, args.records);
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

/// Two runs side by side (rates, CPU per record, batches and memory; `what` heads the first
/// column), then the second's ratios to the first under the caption `ratio`.
fn pair_table(out: &mut String, what: &str, runs: [(&str, &super::pipeline::Run); 2], ratio: &str) {
    let _ = writeln!(out, "| {what} | records/s | steady records/s | CPU s / M records | mean batch rows | peak RSS |");
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for (name, run) in runs {
        let _ = writeln!(
            out,
            "| {name} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} MiB |",
            run.records_per_second(),
            run.steady_records_per_second(),
            run.cpu_per_million(),
            run.batch_rows_mean,
            run.peak_rss as f64 / MIB
        );
    }
    let [(_, base), (_, other)] = runs;
    let _ = writeln!(
        out,
        "\n- {ratio}: **{:.2}×** records/s, {:.2}× CPU per record",
        other.records_per_second() / base.records_per_second(),
        other.cpu_per_million() / base.cpu_per_million()
    );
}

/// The whole box's CPU per million records of the topic: the measured process's, the broker's
/// and both ClickHouse servers', and their sum. On two shared cores the sum is what limits
/// throughput, so a format that moves work from the client to the server (or back) shows here.
/// Every case is divided by the topic's records (the raw sink inserts the rows they became).
fn whole_box(out: &mut String, records: u64, m: &Measured) {
    let _ = writeln!(
        out,
        "\nWhole-box CPU, s per M records of the topic (client = the measured process; sink: the flagship's format \
         and compression unless named):\n"
    );
    let _ = writeln!(out, "| case | client | broker | ClickHouse | sum |");
    let _ = writeln!(out, "|---|---|---|---|---|");
    let pm = |seconds: f64| per_million(seconds, records);
    let row = |out: &mut String, name: &str, client: f64, broker: f64, clickhouse: f64| {
        let _ = writeln!(
            out,
            "| {name} | {:.2} | {:.2} | {:.2} | **{:.2}** |",
            pm(client),
            pm(broker),
            pm(clickhouse),
            pm(client + broker + clickhouse)
        );
    };
    let (c, i, p) = (&m.consume, &m.insert, &m.pipeline);
    let raw_cpu = |r: &super::limits::Raw| r.values["cpu_seconds"];
    row(out, "(a) raw source", raw_cpu(c), c.load.broker, c.load.clickhouse);
    row(out, "(b) raw sink", raw_cpu(i), i.load.broker, i.load.clickhouse);
    row(
        out,
        "(a) + (b)",
        raw_cpu(c) + raw_cpu(i),
        c.load.broker + i.load.broker,
        c.load.clickhouse + i.load.clickhouse,
    );
    row(out, "(c) the pipeline", p.cpu_seconds, p.load.broker, p.load.clickhouse);
    if let Some((eo, _)) = &m.exactly_once {
        row(out, "(c) exactly-once", eo.cpu_seconds, eo.load.broker, eo.load.clickhouse);
    }
    for (codec, run) in &m.compressions {
        row(out, &format!("(c) sink: {codec}"), run.cpu_seconds, run.load.broker, run.load.clickhouse);
    }
    if !m.compressions.is_empty() {
        let _ = writeln!(out);
    }
    for (codec, run) in &m.compressions {
        let _ = writeln!(
            out,
            "- sink {codec}: {:.0} records/s ({:.2}× the pipeline's), mean batch {:.0} rows",
            run.records_per_second(),
            run.records_per_second() / p.records_per_second(),
            run.batch_rows_mean
        );
    }
}

/// The commit measured, and whether the work tree had changes on top of it (what was built).
pub(crate) fn git_state() -> String {
    let output =
        Command::new("git").current_dir(crate::workspace::root()).args(["describe", "--always", "--dirty"]).output();
    output
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or("an unknown commit".into(), |s| format!("commit {}", s.trim()))
}
