//! `cargo xtask bench-chain [PIPELINE]`: the criterion benchmark of a generated chain (the
//! flagship by default): the generated decoder against apache-avro's generic path on the
//! same bytes, and decode + operators + encode per record. Results: docs/BENCHMARKS.md.
//!
//! Named for what it runs rather than for its subcommand: `bench/` is the other benchmark, the
//! whole pipeline against the local servers, and shares nothing with this one.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use etl_gen::emit::{self, GenOptions, RuntimeDep};

/// `bench-chain` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchChainArgs {
    /// The pipeline (default: the flagship example).
    pipeline: Option<PathBuf>,
}

pub(crate) fn run(args: &BenchChainArgs) -> anyhow::Result<()> {
    let root = crate::workspace::root();
    let pipeline =
        args.pipeline.clone().unwrap_or_else(|| root.join("examples/kafka_avro_to_clickhouse/pipeline.yaml"));
    let crate_dir = generate(&pipeline)?;
    let status = Command::new(crate::workspace::cargo())
        .args(["bench", "--bench", "chain", "--manifest-path"])
        .arg(crate_dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", root.join("target"))
        .status()
        .context("running cargo bench")?;
    if !status.success() {
        bail!("the benchmark failed ({status})");
    }
    Ok(())
}

/// Writes the crate of `pipeline` with its benchmarks (`benches/chain.rs`, and the
/// `benches/parts.rs` that `cargo xtask bench` runs) under target/etl-bench/; returns its
/// directory.
pub(crate) fn generate(pipeline: &Path) -> anyhow::Result<PathBuf> {
    let root = crate::workspace::root();
    let outcome = etl_gen::validate_file(pipeline, &etl_gen::Options::default())?;
    let Some(v) = outcome.pipeline else {
        bail!("{}", outcome.report.render());
    };
    let crate_dir = root.join("target/etl-bench").join(&v.model.pipeline.name);
    let options = GenOptions {
        source_name: pipeline.strip_prefix(&root).unwrap_or(pipeline).display().to_string(),
        crate_dir: crate_dir.clone(),
        target_dir: root.join("target"),
        runtime: RuntimeDep::Path(root.join("etl-runtime")),
        lockfile: etl_gen::load::read_lockfile(&root.join("Cargo.lock"))?,
        bench: true,
        fault_injection: false,
    };
    let files = emit::generate(&v, &options).map_err(anyhow::Error::msg)?;
    etl_gen::cli::write(&crate_dir, &files)?;
    Ok(crate_dir)
}
