//! `cargo xtask test`: every check CI runs, on a fresh machine, in one command.
//!
//! It installs and starts what the tests need, then runs them. `.ci/run` calls exactly
//! this command, and README.md opens with it.

use std::process::Command;

use anyhow::{Context, bail};

/// `test` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct TestArgs {
    /// Extra arguments for `cargo test` (after `--`).
    #[arg(last = true)]
    cargo_test_args: Vec<String>,
}

pub(crate) fn run(args: &TestArgs) -> anyhow::Result<()> {
    let root = crate::workspace_root();
    step("formatting", Command::new(cargo()).current_dir(&root).args(["fmt", "--all", "--", "--check"]))?;
    step("generated files are fresh", Command::new(cargo()).current_dir(&root).args(["xtask", "codegen", "--check"]))?;
    step(
        "clippy",
        Command::new(cargo()).current_dir(&root).args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--locked",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    // Generated code passes clippy too, with `-D warnings`: every example, corpus and test
    // pipeline, compiled together as the binaries of one scratch crate by
    // `etl-gen/tests/codegen.rs::every_pipeline_compiles_without_warnings` (in the workspace tests
    // below), which reuses the runtime the clippy step above compiled.
    // The operator's kit (examples/monitoring): the alert rules are valid and their unit tests
    // pass, by Prometheus's own tool (Debian's `prometheus` package; the server is not started).
    // tests/monitoring.rs in etl-runtime checks their metric names against the registry.
    println!("==> promtool for the alert rules");
    crate::apt::ensure("promtool", &["--no-install-recommends", "prometheus"])?;
    let monitoring = root.join("examples/monitoring");
    step(
        "promtool check rules",
        Command::new("promtool").current_dir(&monitoring).args(["check", "rules", "alerts.yaml"]),
    )?;
    step(
        "promtool test rules",
        Command::new("promtool").current_dir(&monitoring).args(["test", "rules", "alerts_test.yaml"]),
    )?;
    // The image tests (xtask/tests/image.rs) run the image in podman; they fail without it.
    println!("==> podman for the image tests");
    crate::podman::install()?;
    let podman_env = crate::podman::configure(&root.join("target")).context("writing the podman configuration")?;
    step(
        "workspace tests",
        Command::new(cargo())
            .current_dir(&root)
            .args(["test", "--workspace", "--locked", "--all-targets"])
            .envs(podman_env)
            .arg("--")
            .args(&args.cargo_test_args),
    )?;
    println!("xtask test: all steps passed");
    Ok(())
}

fn step(name: &str, command: &mut Command) -> anyhow::Result<()> {
    println!("==> {name}: {command:?}");
    let status = command.status().with_context(|| format!("starting {name}"))?;
    if !status.success() {
        bail!("{name} failed ({status})");
    }
    Ok(())
}

/// The cargo that runs this xtask, so a toolchain override applies to every step.
pub(crate) fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}
