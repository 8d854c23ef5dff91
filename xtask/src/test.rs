//! `cargo xtask test`: every check CI runs, on a fresh machine, in one command.
//!
//! It installs and starts what the tests need, then runs them. `.ci/run` calls exactly
//! this command, and README.md opens with it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};

use crate::workspace::{self, cargo};

/// `test` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct TestArgs {
    /// Extra arguments for `cargo test` (after `--`).
    #[arg(last = true)]
    cargo_test_args: Vec<String>,
}

pub(crate) fn run(args: &TestArgs) -> anyhow::Result<()> {
    let root = workspace::root();
    // The test build relinks target/debug/xtask (dev-dependencies unify features differently),
    // so what runs xtask meanwhile runs a copy of this binary.
    let xtask = root.join("target/xtask-test/xtask");
    std::fs::create_dir_all(root.join("target/xtask-test"))?;
    std::fs::copy(std::env::current_exe().context("finding the xtask executable")?, &xtask)
        .context("copying the xtask executable")?;
    step("formatting", Command::new(cargo()).current_dir(&root).args(["fmt", "--all", "--", "--check"]))?;
    step("generated files are fresh", Command::new(cargo()).current_dir(&root).args(["xtask", "codegen", "--check"]))?;
    // The run is bound by its two cores: every step is arranged so that neither idles. The
    // end-to-end scenarios (mostly waiting on outages, kills and rebalances, with bursts of
    // load) run beside the other test binaries and clippy, which run niced one after another.
    // Before them: what the tests need from
    // outside the workspace (Debian's packages, the services' downloads and start-ups: waiting)
    // is set up on one thread while the test binaries and the scenarios' static runtime compile
    // (niced beside the scenarios, the test build took 8 minutes instead of 2).
    let set_up = {
        let (root, xtask) = (root.clone(), xtask.clone());
        std::thread::spawn(move || set_up(&root, &xtask))
    };
    let built = build_tests(&root, &["--workspace", "--all-targets"]);
    // The scenarios' pipelines are static release builds of generated crates over one build of
    // the runtime and librdkafka (minutes of C and Rust). That one is made here rather than by
    // the first scenario while every other one waits for it; the scenarios' own builds of their
    // crates then take seconds each.
    if built.is_ok() {
        step(
            "the scenarios' runtime (static release)",
            Command::new(&xtask)
                .current_dir(&root)
                .args(["build", "xtask/tests/e2e/pipeline.yaml", "--fault-injection", "--static"])
                .stdout(Stdio::null()),
        )?;
    }
    let podman_env = set_up.join().map_err(|_| anyhow::anyhow!("the set-up thread panicked"))??;
    let (e2e, others): (Vec<_>, Vec<_>) = built?.into_iter().partition(|b| b.package == "xtask" && b.name == "e2e");
    let e2e = e2e.into_iter().next().context("no xtask/tests/e2e.rs binary among the tests")?;
    let log_path = root.join("target/e2e-run.log");
    let log = std::fs::File::create(&log_path).context("creating target/e2e-run.log")?;
    println!("==> end-to-end scenarios in the background (log: {})", log_path.display());
    let started = Instant::now();
    let mut background = Command::new(&e2e.executable)
        .current_dir(&e2e.dir)
        .env("CARGO", cargo())
        .envs(podman_env.iter().map(|(k, v)| (k, v)))
        .arg("--test-threads")
        .arg(E2E_THREADS.to_string())
        // Each scenario's `=== <name> took` line and what it measured go to the log as they come.
        .arg("--nocapture")
        .args(&args.cargo_test_args)
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting the end-to-end scenarios")?;
    let mut failed = run_niced(&root, others, &podman_env, &args.cargo_test_args);
    let status = background.wait().context("waiting for the end-to-end scenarios")?;
    let output = std::fs::read_to_string(&log_path).unwrap_or_default();
    println!("==> end-to-end scenarios ({}):\n{output}", e2e.executable.display());
    println!("==> end-to-end scenarios took {:.0}s ({status})", started.elapsed().as_secs_f64());
    if !status.success() {
        failed.push(format!("end-to-end scenarios failed ({status})"));
    }
    if !failed.is_empty() {
        bail!("{}", failed.join("\n"));
    }
    println!("xtask test: all steps passed");
    Ok(())
}

/// The test binaries that compile generated crates (cargo in the shared target directory, or in
/// a directory of their own) and touch none of the shared services: they run last, with clippy.
const COMPILING: [(&str, &str); 4] =
    [("etl-gen", "codegen"), ("etl-gen", "ci_workflow"), ("etl-macros", "ui"), ("etl-gen", "front_end_props")];

/// Runs `binaries` niced one after another, the others first, then the [`COMPILING`] ones and
/// clippy; returns what failed. (Two lanes at once were faster, but beside a compiling lane the
/// restarted ClickHouse of `etl-runtime/tests/clickhouse.rs::outages_are_retried_without_losing_rows`
/// came back too late in two runs of three: docs/BENCHMARKS.md, "The order of the steps".)
///
/// Clippy checks every target of the workspace with `-D warnings` (generated code passes clippy
/// too: every example, corpus and test pipeline, compiled together as the binaries of one
/// scratch crate by `etl-gen/tests/codegen.rs::every_pipeline_compiles_without_warnings`).
fn run_niced(root: &Path, binaries: Vec<TestBinary>, env: &[(&'static str, PathBuf)], args: &[String]) -> Vec<String> {
    let (compiling, waiting): (Vec<_>, Vec<_>) =
        binaries.into_iter().partition(|b| COMPILING.contains(&(b.package.as_str(), b.name.as_str())));
    let mut failed = Vec::new();
    for binary in waiting.iter().chain(&compiling) {
        let mut command = nice(&binary.dir, &binary.executable);
        command.env("CARGO", cargo()).envs(env.iter().map(|(k, v)| (k, v))).args(args);
        if let Err(error) = step(&format!("tests {}::{}", binary.package, binary.name), &mut command) {
            failed.push(error.to_string());
        }
    }
    let mut clippy = nice(root, cargo());
    clippy.args(["clippy", "--workspace", "--all-targets", "--locked", "--", "-D", "warnings"]);
    if let Err(error) = step("clippy", &mut clippy) {
        failed.push(error.to_string());
    }
    failed
}

/// What the tests need from outside the workspace, installed and started: promtool (and the
/// alert rules checked with it), podman for the image tests, and the local services. Returns the
/// environment that points podman at its configuration.
fn set_up(root: &Path, xtask: &Path) -> anyhow::Result<Vec<(&'static str, PathBuf)>> {
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
    // The services the tests share, started once up front (each test binary would start what
    // is missing, but concurrent starts of one service race). Not through `cargo xtask`: cargo
    // would wait for the build directory the e2e binary is compiling in.
    step(
        "local services",
        Command::new(xtask).current_dir(root).args(["infra", "up", "--durable"]).stdout(Stdio::null()),
    )?;
    Ok(podman_env)
}

/// `program` in `dir` under `nice -n 10`: the foreground's work, which yields the cores to the
/// end-to-end scenarios.
fn nice(dir: &Path, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new("nice");
    command.args(["-n", "10"]).arg(program).current_dir(dir);
    command
}

/// Threads of the end-to-end test binary: one per scenario, so that every scenario starts at
/// once and waits only for the locks of what it needs to itself (`xtask/tests/e2e/support/scope.rs`).
const E2E_THREADS: usize = 64;

/// A test executable cargo built.
struct TestBinary {
    package: String,
    /// The test target's name (`e2e`, `kafka`, or the crate's name for its unit tests).
    name: String,
    executable: PathBuf,
    /// The package's directory, where `cargo test` would run it.
    dir: PathBuf,
}

/// Builds the test targets `selection` names (`cargo test --no-run`) and returns
/// the executables, read from cargo's JSON messages.
fn build_tests(root: &Path, selection: &[&str]) -> anyhow::Result<Vec<TestBinary>> {
    let what = selection.join(" ");
    println!("==> build the tests ({what})");
    let started = Instant::now();
    let output = Command::new(cargo())
        .current_dir(root)
        .args(["test", "--locked", "--no-run", "--message-format=json-render-diagnostics"])
        .args(selection)
        .stderr(Stdio::inherit())
        .output()
        .context("starting cargo test --no-run")?;
    if !output.status.success() {
        bail!("building the tests failed ({})", output.status);
    }
    let mut binaries = Vec::new();
    for message in cargo_metadata::Message::parse_stream(output.stdout.as_slice()) {
        let cargo_metadata::Message::CompilerArtifact(artifact) = message.context("reading cargo's messages")? else {
            continue;
        };
        let Some(executable) = artifact.executable.filter(|_| artifact.profile.test) else { continue };
        binaries.push(TestBinary {
            package: package_name(&artifact.package_id.repr).unwrap_or_default().to_owned(),
            name: artifact.target.name.clone(),
            executable: executable.into_std_path_buf(),
            dir: artifact.manifest_path.parent().map_or_else(|| root.to_owned(), |d| d.as_std_path().to_owned()),
        });
    }
    println!("==> build the tests ({what}) took {:.0}s ({} binaries)", started.elapsed().as_secs_f64(), binaries.len());
    Ok(binaries)
}

/// The package name in a cargo package id (`path+file:///…/etl-gen#0.1.0` or
/// `path+file:///…/xtask#xtask@0.1.0`).
fn package_name(id: &str) -> Option<&str> {
    let tail = id.rsplit('/').next()?;
    let (dir, version) = tail.split_once('#')?;
    Some(version.split_once('@').map_or(dir, |(name, _)| name))
}

fn step(name: &str, command: &mut Command) -> anyhow::Result<()> {
    println!("==> {name}: {command:?}");
    let started = Instant::now();
    let status = command.status().with_context(|| format!("starting {name}"))?;
    println!("==> {name} took {:.0}s", started.elapsed().as_secs_f64());
    if !status.success() {
        bail!("{name} failed ({status})");
    }
    Ok(())
}
