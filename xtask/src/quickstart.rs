//! `cargo xtask quickstart`: generate, build and run the quickstart pipeline (datagen →
//! NDJSON file, no servers), then show what it wrote. The README's first command.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, bail};

pub(crate) fn run() -> anyhow::Result<()> {
    let root = crate::workspace::root();
    let pipeline = root.join("examples/quickstart/pipeline.yaml");
    let args = etl_gen::cli::GenArgs {
        path: pipeline.clone(),
        check: false,
        ddl: false,
        replicated: false,
        cluster: None,
        memory: false,
        migrate: false,
        against: None,
        registry: None,
        subject: None,
        partitions: None,
        out: None,
        allow_unsafe_sizing: false,
        runtime_git: None,
        runtime_rev: None,
        fault_injection: false,
    };
    eprintln!("==> generating and building {} (the first build compiles etl-runtime)", pipeline.display());
    let binary = etl_gen::cli::build(&args).map_err(|code| anyhow::anyhow!("build failed ({code:?})"))?;
    let out: PathBuf = root.join("target/quickstart.ndjson");
    let _ = std::fs::remove_file(&out);
    eprintln!("==> running {}", binary.display());
    let status = Command::new(&binary)
        .env("QUICKSTART_OUT", &out)
        .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
        .status()
        .with_context(|| format!("starting {}", binary.display()))?;
    if !status.success() {
        bail!("the quickstart pipeline failed ({status})");
    }
    let text = std::fs::read_to_string(&out).with_context(|| format!("reading {}", out.display()))?;
    let lines: Vec<&str> = text.lines().collect();
    println!("the quickstart pipeline wrote {} rows to {}; the first three:", lines.len(), out.display());
    for line in lines.iter().take(3) {
        println!("{line}");
    }
    Ok(())
}
