//! The SVG plots of `cargo xtask bench`: what goes in each panel of the flagship's run and of
//! the sizing-rule comparison. Drawing them is `plot.rs`.

use std::path::Path;

use super::BenchArgs;
use super::pipeline::Run;
use super::variants::Variant;
use crate::lab::MIB;
use crate::lab::plot;

/// `end_to_end.svg`: the flagship's intake and done rates, and its in-flight bytes against the
/// watermarks.
pub(crate) fn end_to_end(args: &BenchArgs, plots: &Path, main: &Variant, pipeline: &Run) -> anyhow::Result<()> {
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
    )
}

/// `sizing.svg`: the done rate and in-flight bytes of each sizing-comparison run (`sizing`, in the
/// order of `variants` after the first).
pub(crate) fn sizing(args: &BenchArgs, plots: &Path, variants: &[Variant], sizing: &[Run]) -> anyhow::Result<()> {
    let label = |v: &Variant| {
        let rule = if v.label == "fit" { "fits the rule" } else { "breaks it" };
        format!("budget {} MiB ({rule})", v.budget() >> 20)
    };
    let runs = || variants.iter().skip(1).zip(sizing).zip(plot::COLORS.iter().cycle());
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
    )
}
