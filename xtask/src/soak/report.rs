//! The soak's output: every sample as samples.csv, the summary (Markdown, printed and written as
//! summary.md) with the verdict, and soak.svg: RSS against the memory bound, in-flight bytes, lag
//! and when each fault ran, over one time axis (drawn by `lab::plot`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use plotters::style::RGBColor;

use super::Results;
use super::faults::{Kind, Outcome};
use super::sampling::Sample;
use crate::lab::MIB;
use crate::lab::plot;

/// Leaving out each lifetime's first seconds from the RSS slope (see [`rss_growth`]).
const WARM_UP_SECONDS: f64 = 120.0;

/// Every sample, one line each; an empty field was not read.
pub(super) fn write_csv(path: &Path, samples: &[Sample]) -> anyhow::Result<()> {
    let opt = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
    let mut csv = String::from(
        "t_seconds,lifetime,pid,alive,rss_bytes,peak_rss_bytes,inflight_bytes,lag_records,records_out,\
         second_member,sent,delivered\n",
    );
    for s in samples {
        let _ = writeln!(
            csv,
            "{:.3},{},{},{},{},{},{},{},{},{},{},{}",
            s.t,
            s.lifetime,
            s.pid,
            s.alive,
            opt(s.rss.map(|v| v as f64)),
            opt(s.peak_rss.map(|v| v as f64)),
            opt(s.inflight),
            opt(s.lag),
            opt(s.records_out),
            s.second,
            s.sent,
            s.delivered
        );
    }
    std::fs::write(path, csv)?;
    Ok(())
}

/// The main instance's RSS growth.
#[derive(Debug, Clone, Copy)]
pub(super) struct Growth {
    pub(super) mib_per_hour: f64,
    pub(super) samples: usize,
    pub(super) lifetimes: usize,
}

/// The main instance's RSS growth: one least-squares slope of RSS over time, pooled over its
/// lifetimes (each restart begins one), each without its first [`WARM_UP_SECONDS`].
///
/// Pooled within lifetimes (every lifetime fitted around its own mean: one slope, one intercept
/// each) rather than the last lifetime alone: SIGKILLs come every few minutes on average, so the
/// last lifetime may be too short to show a slope, and one fit across restarts would read each
/// restart's reset as shrinkage. The warm-up is left out because RSS grows while an instance fills
/// its buffers and batches, which is not a leak. `None` without a minute of such samples.
pub(super) fn rss_growth(samples: &[Sample]) -> Option<Growth> {
    let mut lifetimes: BTreeMap<u32, Vec<(f64, f64)>> = BTreeMap::new();
    let mut starts: BTreeMap<u32, f64> = BTreeMap::new();
    for s in samples {
        let start = *starts.entry(s.lifetime).or_insert(s.t);
        if let (true, Some(rss)) = (s.alive, s.rss)
            && s.t - start >= WARM_UP_SECONDS
        {
            lifetimes.entry(s.lifetime).or_default().push((s.t, rss as f64));
        }
    }
    let (mut sxy, mut sxx, mut n, mut used) = (0.0, 0.0, 0, 0);
    for points in lifetimes.values().filter(|p| p.len() >= 2) {
        let len = points.len() as f64;
        let (mt, mr) = points.iter().fold((0.0, 0.0), |(a, b), (t, r)| (a + t / len, b + r / len));
        for (t, r) in points {
            sxy += (t - mt) * (r - mr);
            sxx += (t - mt) * (t - mt);
        }
        n += points.len();
        used += 1;
    }
    if n < 60 || sxx <= 0.0 {
        return None;
    }
    Some(Growth { mib_per_hour: sxy / sxx * 3600.0 / MIB, samples: n, lifetimes: used })
}

fn mib(bytes: f64) -> String {
    format!("{:.0} MiB", bytes / MIB)
}

fn max(values: impl Iterator<Item = f64>) -> Option<f64> {
    values.fold(None, |m, v| Some(m.map_or(v, |m: f64| m.max(v))))
}

/// The summary: what ran, the verdict, the numbers, every fault and every exit.
pub(super) fn summary(r: &Results) -> String {
    let mut out = String::new();
    let failures = r.failures();
    let p = &r.produced;
    let _ = writeln!(out, "# cargo xtask soak\n");
    let _ = writeln!(
        out,
        "The flagship with exactly-once on (`soak-orders-eo`, table `soak_orders_eo`) for {} min at {} \
         orders/s, a fault every {} s on average (seed {}); topic `{}`, group `{}`.\n",
        r.minutes, r.rate, r.mean_fault_interval, r.seed, r.topic, r.group
    );
    if failures.is_empty() {
        let _ = writeln!(out, "**PASS**: every delivered order is in ClickHouse exactly once.\n");
    } else {
        let _ = writeln!(out, "**FAIL**:\n");
        for f in &failures {
            let _ = writeln!(out, "- {f}");
        }
        out.push('\n');
    }
    let count = |f: fn(&(i64, i64)) -> i64| r.counts.as_ref().map_or("?".to_owned(), |c| f(c).to_string());
    let opt = |v: Option<i64>| v.map_or("?".to_owned(), |v| v.to_string());
    let landed = if r.landed.done {
        format!("everything landed {:.0} s after it", r.landed.seconds)
    } else {
        format!("{} ({:.0} s after it)", r.landed.note.as_deref().unwrap_or("not everything landed"), r.landed.seconds)
    };
    let committed = match (&r.landed.committed, r.landed.done) {
        (_, true) => "reached the end offsets of the delivery reports".to_owned(),
        (Some(c), false) => format!("{c:?}, end offsets {:?}", p.end_offsets),
        (None, false) => "not read".to_owned(),
    };
    let main_peak = max(r
        .samples
        .iter()
        .filter_map(|s| s.peak_rss)
        .chain(r.exits.iter().filter(|e| e.label.starts_with("main-")).map(|e| e.peak_rss))
        .map(|v| v as f64));
    let second_peak = max(r.exits.iter().filter(|e| e.label.starts_with("second-")).map(|e| e.peak_rss as f64));
    let bound = r.memory_bound as f64;
    let peak_text = |peak: Option<f64>| {
        peak.filter(|p| *p > 0.0).map_or("not read".to_owned(), |p| {
            let above = if p > bound { ": **above the bound**" } else { "" };
            format!("{} of the {} bound ({:.0}%){above}", mib(p), mib(bound), 100.0 * p / bound)
        })
    };
    let growth = match rss_growth(&r.samples) {
        Some(g) => format!(
            "{:+.1} MiB/h (least squares within {} lifetimes, each after its first {:.0} s; {} samples)",
            g.mib_per_hour, g.lifetimes, WARM_UP_SECONDS, g.samples
        ),
        None => format!("not measured: less than a minute of samples past a lifetime's first {WARM_UP_SECONDS:.0} s"),
    };
    let inflight = max(r.samples.iter().filter_map(|s| s.inflight)).map_or("not read".to_owned(), mib);
    let lag = max(r.samples.iter().filter_map(|s| s.lag)).map_or("not read".to_owned(), |v| format!("{v:.0} records"));
    let runs = r.samples.iter().map(|s| s.lifetime).max().map_or(1, |l| l + 1);
    let rows = [
        ("load phase", format!("{:.1} min; {landed}", r.load_seconds / 60.0)),
        ("whole run", format!("{:.1} min from the first order", r.total_seconds / 60.0)),
        ("orders sent / delivered", format!("{} / {} ({} failed)", p.sent, p.delivered, p.failed)),
        ("records in Kafka", format!("{} ({} without a delivery report)", p.in_kafka(), p.unreported())),
        ("expected in ClickHouse", format!("{} (the delivered orders that are not APAC)", p.expected)),
        ("rows / distinct order_id", format!("{} / {}", count(|c| c.0), count(|c| c.1))),
        ("duplicates", opt(r.duplicates())),
        ("missing", opt(r.missing())),
        ("ledger spans", r.spans.as_ref().map_or_else(|e| e.clone(), |s| s.to_string())),
        ("committed offsets", committed),
        ("peak RSS, main instance", peak_text(main_peak)),
        ("peak RSS, second member", peak_text(second_peak)),
        ("RSS growth, main instance", growth),
        ("max in-flight, main instance", format!("{inflight} (budget {})", mib(r.budget as f64))),
        ("max lag, the group", lag),
        ("runs of the main instance", runs.to_string()),
    ];
    let _ = writeln!(out, "| | |\n|---|---|");
    for (what, value) in rows {
        let _ = writeln!(out, "| {what} | {} |", value.replace('|', "\\|"));
    }
    if p.unreported() > 0 {
        let _ = writeln!(
            out,
            "\nKafka holds {} records no delivery report accounts for (a producer retry's second copy, or a \
             delivery reported failed that was stored): up to that many duplicates may be the producer's.",
            p.unreported()
        );
    }

    let _ = writeln!(out, "\n## Faults\n\n| fault | done | with a problem | skipped | failed |\n|---|---|---|---|---|");
    for kind in Kind::ALL {
        let of_kind: Vec<_> = r.faults.iter().filter(|f| f.kind == kind).collect();
        let n = |m: fn(&Outcome) -> bool| of_kind.iter().filter(|f| m(&f.outcome)).count();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            kind.label(),
            n(|o| matches!(o, Outcome::Done)),
            n(|o| matches!(o, Outcome::Problem(_))),
            n(|o| matches!(o, Outcome::Skipped(_))),
            n(|o| matches!(o, Outcome::Failed(_))),
        );
    }
    if !r.faults.is_empty() {
        let _ = writeln!(out, "\n| start (s) | end (s) | fault | what | outcome |\n|---|---|---|---|---|");
        for f in &r.faults {
            let outcome = match &f.outcome {
                Outcome::Done => "done".to_owned(),
                Outcome::Problem(p) => format!("problem: {p}"),
                Outcome::Skipped(p) => format!("skipped: {p}"),
                Outcome::Failed(p) => format!("failed: {p}"),
            };
            let _ = writeln!(
                out,
                "| {:.0} | {:.0} | {} | {} | {} |",
                f.start,
                f.end,
                f.kind.label(),
                f.detail.replace('|', "\\|"),
                outcome.replace('|', "\\|")
            );
        }
    }

    let _ = writeln!(
        out,
        "\n## Process exits\n\n| t (s) | instance | status | peak RSS | problem |\n|---|---|---|---|---|"
    );
    for e in &r.exits {
        let peak = if e.peak_rss > 0 { mib(e.peak_rss as f64) } else { "-".to_owned() };
        let problem = e.problem.as_deref().unwrap_or("-");
        let _ = writeln!(out, "| {:.0} | {} | {} | {peak} | {problem} |", e.t, e.label, e.status);
    }
    if !p.failures.is_empty() {
        let _ = writeln!(out, "\n## Failed deliveries (the first {})\n", p.failures.len());
        for f in &p.failures {
            let _ = writeln!(out, "- {f}");
        }
    }
    if !r.panics.is_empty() {
        let _ = writeln!(out, "\n## Panics\n\n```");
        for line in r.panics.iter().take(20) {
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(out, "```");
    }
    let _ = writeln!(out, "\n## The memory bound (`gen --memory --partitions 4`)\n\n```\n{}```", r.memory_text);
    out
}

/// The heights of the fault markers in the faults panel, and their colors: `plot`'s four and one
/// more of the same palette (Okabe-Ito).
const MARKS: [(Kind, f64, RGBColor); 5] = [
    (Kind::Kill, 1.0, plot::COLORS[0]),
    (Kind::ClickhouseFreeze, 2.0, plot::COLORS[1]),
    (Kind::SecondMember, 3.0, plot::COLORS[2]),
    (Kind::BrokerFreeze, 4.0, plot::COLORS[3]),
    (Kind::BrokerRestart, 5.0, RGBColor(230, 159, 0)),
];

/// soak.svg: RSS with the memory bound, in-flight bytes with the high watermark, lag, and the
/// faults (a step up while each one runs; a SIGKILL is a line), against minutes.
pub(super) fn plot(path: &Path, r: &Results) -> anyhow::Result<()> {
    let minutes = |t: f64| t / 60.0;
    let series = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<(f64, f64)> {
        r.samples.iter().filter_map(|s| Some((minutes(s.t), f(s)?))).collect()
    };
    let end = minutes(r.total_seconds);
    let marks = MARKS
        .iter()
        .map(|&(kind, height, color)| {
            let faults: Vec<_> =
                r.faults.iter().filter(|f| f.kind == kind && !matches!(f.outcome, Outcome::Skipped(_))).collect();
            let mut points = vec![(0.0, 0.0)];
            for f in &faults {
                let (s, e) = (minutes(f.start), minutes(f.end));
                points.extend([(s, 0.0), (s, height), (e, height), (e, 0.0)]);
            }
            points.push((end, 0.0));
            plot::Series { label: format!("{} ({})", kind.label(), faults.len()), points, color }
        })
        .collect();
    let title = format!(
        "cargo xtask soak --minutes {} --rate {} --seed {}: the flagship, exactly-once, under faults",
        r.minutes, r.rate, r.seed
    );
    plot::write_svg(
        path,
        &title,
        "minutes since the first order",
        &[
            plot::Panel {
                y_desc: "RSS MiB (main instance)".into(),
                series: vec![plot::Series {
                    label: "VmRSS".into(),
                    points: series(&|s| s.rss.map(|v| v as f64 / MIB)),
                    color: plot::COLORS[0],
                }],
                references: vec![("memory bound (gen --memory --partitions 4)".into(), r.memory_bound as f64 / MIB)],
            },
            plot::Panel {
                y_desc: "in-flight MiB (main instance)".into(),
                series: vec![plot::Series {
                    label: "etl_backpressure_inflight_bytes".into(),
                    points: series(&|s| s.inflight.map(|v| v / MIB)),
                    color: plot::COLORS[2],
                }],
                references: vec![("high watermark".into(), r.high_watermark / MIB)],
            },
            plot::Panel {
                y_desc: "lag, records (the group)".into(),
                series: vec![plot::Series {
                    label: "sum(etl_source_lag_records)".into(),
                    points: series(&|s| s.lag),
                    color: plot::COLORS[1],
                }],
                references: vec![],
            },
            plot::Panel { y_desc: "faults (while each runs)".into(), series: marks, references: vec![] },
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: f64, lifetime: u32, rss_mib: f64) -> Sample {
        Sample {
            t,
            lifetime,
            pid: 1,
            alive: true,
            rss: Some((rss_mib * MIB) as u64),
            peak_rss: None,
            inflight: None,
            lag: None,
            records_out: None,
            second: false,
            sent: 0,
            delivered: 0,
        }
    }

    #[test]
    fn growth_is_pooled_within_lifetimes_after_their_warm_up() {
        // Two lifetimes of 10 minutes, each growing 6 MiB/h after a warm-up that climbs fast, the
        // second starting lower (a restart): the pooled slope is the lifetimes' own.
        let mut samples = Vec::new();
        for (lifetime, base) in [(0u32, 500.0), (1, 200.0)] {
            let t0 = f64::from(lifetime) * 600.0;
            for i in 0..600 {
                let rss = if i < 120 { base * f64::from(i) / 120.0 } else { base + 6.0 * f64::from(i) / 3600.0 };
                samples.push(sample(t0 + f64::from(i), lifetime, rss));
            }
        }
        let growth = rss_growth(&samples).unwrap();
        assert!((growth.mib_per_hour - 6.0).abs() < 0.1, "{growth:?}");
        assert_eq!((growth.lifetimes, growth.samples), (2, 2 * 480));
        assert!(rss_growth(&samples[..150]).is_none(), "30 s past the warm-up is not enough");
    }
}
