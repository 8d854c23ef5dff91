//! The command line shared by `cargo xtask` and the `etl-gen` binary.
//!
//! Exit codes (DESIGN §6): 0 ok; 1 invalid configuration (including YAML syntax errors and
//! a missing or invalid schema) or a failed build; 2 usage error or an unreadable
//! pipeline.yaml.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, ExitCode};

use clap::{Args, Subcommand};

use crate::emit::{self, GenOptions, RuntimeDep};
use crate::load::{Validated, validate_file};
use crate::rules::Options;

/// The generator's sub-commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate pipeline.yaml and emit the pipeline crate.
    Gen(GenArgs),
    /// `gen`, then `cargo build --release`; prints the binary's path last.
    Build(BuildArgs),
}

/// `gen` arguments.
#[derive(Debug, Args)]
pub struct GenArgs {
    /// The pipeline file.
    pub path: PathBuf,
    /// Validate only; write nothing.
    #[arg(long)]
    pub check: bool,
    /// Print the CREATE TABLE that fits the pipeline (and write nothing).
    #[arg(long)]
    pub ddl: bool,
    /// Print the bound on the pipeline's memory (and write nothing); needs --partitions.
    #[arg(long, requires = "partitions")]
    pub memory: bool,
    /// The number of partitions one instance owns, for --memory.
    #[arg(long)]
    pub partitions: Option<u64>,
    /// Where to write the crate (default: <target dir>/etl/<name>/).
    #[arg(short = 'o', long = "out")]
    pub out: Option<PathBuf>,
    /// Report a broken sizing rule as a warning. For benchmarks that measure the collapse
    /// the rule prevents; never for production.
    #[arg(long)]
    pub allow_unsafe_sizing: bool,
    /// Use etl-runtime from this git repository instead of a local checkout.
    #[arg(long)]
    pub runtime_git: Option<String>,
    /// The git revision for --runtime-git.
    #[arg(long, requires = "runtime_git")]
    pub runtime_rev: Option<String>,
}

/// `build` arguments.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The `gen` arguments.
    #[command(flatten)]
    pub gen_args: GenArgs,
}

/// Runs a sub-command; returns the process exit code.
pub fn run(command: Command) -> ExitCode {
    match command {
        Command::Gen(args) => match gen_command(&args) {
            Ok(_) => ExitCode::SUCCESS,
            Err(code) => code,
        },
        Command::Build(args) => build_command(&args.gen_args),
    }
}

/// Validates; on success returns the pipeline, else prints diagnostics and the exit code.
fn validate(args: &GenArgs) -> Result<Validated, ExitCode> {
    let options = Options { allow_unsafe_sizing: args.allow_unsafe_sizing };
    let outcome = validate_file(&args.path, &options).map_err(|e| {
        eprintln!("error: {e}");
        eprintln!(
            "help: pass the path of a pipeline.yaml, e.g. `cargo xtask gen examples/quickstart/pipeline.yaml --check`"
        );
        ExitCode::from(2)
    })?;
    let rendered = outcome.report.render();
    if !rendered.is_empty() {
        let _ = std::io::stderr().write_all(rendered.as_bytes());
    }
    outcome.pipeline.ok_or(ExitCode::from(1))
}

/// Where the crate goes and how it reaches etl-runtime.
struct Layout {
    crate_dir: PathBuf,
    target_dir: PathBuf,
    runtime: RuntimeDep,
    lockfile: Option<PathBuf>,
}

fn layout(args: &GenArgs, name: &str) -> Result<Layout, String> {
    // Inside a checkout of this repository (or any workspace with etl-runtime), the crate
    // uses that etl-runtime by path and that workspace's target directory.
    let metadata = cargo_metadata::MetadataCommand::new().no_deps().exec().ok();
    let in_workspace = metadata.as_ref().and_then(|m| {
        m.packages.iter().find(|p| p.name.as_str() == "etl-runtime").map(|p| {
            let dir = p.manifest_path.parent().expect("a manifest has a directory").as_std_path().to_owned();
            (dir, m.target_directory.as_std_path().to_owned(), m.workspace_root.as_std_path().join("Cargo.lock"))
        })
    });
    // Otherwise (an installed etl-gen), the checkout it was installed from.
    let installed_from = Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_owned);
    let (runtime_dir, target_dir, lockfile) = match in_workspace {
        Some(found) => found,
        None => {
            let root = installed_from.ok_or("cannot locate etl-runtime")?;
            let target = metadata
                .map(|m| m.target_directory.as_std_path().to_owned())
                .unwrap_or_else(|| PathBuf::from("target"));
            (root.join("etl-runtime"), absolute(&target), root.join("Cargo.lock"))
        }
    };
    let runtime = match &args.runtime_git {
        Some(url) => RuntimeDep::Git { url: url.clone(), rev: args.runtime_rev.clone() },
        None if runtime_dir.join("Cargo.toml").exists() => RuntimeDep::Path(runtime_dir),
        None => {
            return Err(format!(
                "etl-runtime is not at {}; pass --runtime-git URL (and --runtime-rev REV)",
                runtime_dir.display()
            ));
        }
    };
    let crate_dir = args.out.clone().map(|o| absolute(&o)).unwrap_or_else(|| target_dir.join("etl").join(name));
    Ok(Layout { crate_dir, target_dir, runtime, lockfile: lockfile.exists().then_some(lockfile) })
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_owned())
}

fn gen_command(args: &GenArgs) -> Result<(Validated, Layout), ExitCode> {
    let pipeline = validate(args)?;
    let m = &pipeline.model;
    if args.check {
        println!(
            "ok: {} is valid (pipeline `{}`, {} source, {} sink with {} shard{})",
            args.path.display(),
            m.pipeline.name,
            match m.source {
                crate::model::Source::Kafka(_) => "kafka",
                crate::model::Source::Datagen(_) => "datagen",
            },
            m.sink.kind(),
            m.sink.shard_count(),
            if m.sink.shard_count() == 1 { "" } else { "s" },
        );
    }
    if args.ddl {
        match crate::ddl::create_table(&pipeline) {
            Ok(sql) => print!("{sql}"),
            Err(e) => {
                eprintln!("error: {e}");
                return Err(ExitCode::from(1));
            }
        }
    }
    if let (true, Some(partitions)) = (args.memory, args.partitions) {
        print!("{}", crate::memory::render(&pipeline, partitions));
    }
    let layout = layout(args, &m.pipeline.name).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(1)
    })?;
    if args.check || args.ddl || args.memory {
        return Ok((pipeline, layout));
    }
    let options = GenOptions {
        source: args.path.clone(),
        crate_dir: layout.crate_dir.clone(),
        target_dir: layout.target_dir.clone(),
        runtime: layout.runtime.clone(),
        lockfile: layout.lockfile.clone(),
        bench: false,
    };
    let files = emit::generate(&pipeline, &options).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(1)
    })?;
    emit::write(&layout.crate_dir, &files).map_err(|e| {
        eprintln!("error: writing {}: {e}", layout.crate_dir.display());
        ExitCode::from(1)
    })?;
    eprintln!("generated {} (config {})", layout.crate_dir.display(), emit::config_hash(&pipeline));
    Ok((pipeline, layout))
}

fn build_command(args: &GenArgs) -> ExitCode {
    match build(args) {
        Ok(binary) => {
            println!("{}", binary.display());
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// `gen`, then `cargo build --release` in the shared target directory; returns the binary.
pub fn build(args: &GenArgs) -> Result<PathBuf, ExitCode> {
    if args.check || args.ddl || args.memory {
        eprintln!("error: `build` does not take --check, --ddl or --memory; use `gen`");
        return Err(ExitCode::from(2));
    }
    let (pipeline, layout) = gen_command(args)?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Process::new(cargo)
        .args(["build", "--release", "--manifest-path"])
        .arg(layout.crate_dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &layout.target_dir)
        .status();
    match status {
        Ok(s) if s.success() => Ok(layout.target_dir.join("release").join(&pipeline.model.pipeline.name)),
        Ok(s) => {
            eprintln!("error: cargo build of {} failed ({s})", layout.crate_dir.display());
            Err(ExitCode::from(1))
        }
        Err(e) => {
            eprintln!("error: starting cargo: {e}");
            Err(ExitCode::from(1))
        }
    }
}
