//! The command line shared by `cargo xtask` and the `etl-gen` binary.
//!
//! Exit codes (DESIGN §6): 0 ok; 1 invalid configuration (including YAML syntax errors and
//! a missing or invalid schema); 2 usage error or an unreadable pipeline.yaml.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::load::validate_file;
use crate::rules::Options;

/// The generator's sub-commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate pipeline.yaml and emit the pipeline crate.
    Gen(GenArgs),
}

/// `gen` arguments.
#[derive(Debug, Args)]
pub struct GenArgs {
    /// The pipeline file.
    pub path: PathBuf,
    /// Validate only; write nothing.
    #[arg(long)]
    pub check: bool,
    /// Print the CREATE TABLE that fits the pipeline.
    #[arg(long)]
    pub ddl: bool,
    /// Where to write the crate (default: <target dir>/etl/<name>/).
    #[arg(short = 'o', long = "out")]
    pub out: Option<PathBuf>,
    /// Report a broken sizing rule as a warning. For benchmarks that measure the collapse
    /// the rule prevents; never for production.
    #[arg(long)]
    pub allow_unsafe_sizing: bool,
}

/// Runs a sub-command; returns the process exit code.
pub fn run(command: Command) -> ExitCode {
    match command {
        Command::Gen(args) => gen_command(&args),
    }
}

fn gen_command(args: &GenArgs) -> ExitCode {
    let options = Options { allow_unsafe_sizing: args.allow_unsafe_sizing };
    let outcome = match validate_file(&args.path, &options) {
        Ok(outcome) => outcome,
        Err(e) => {
            eprintln!("error: {e}");
            eprintln!(
                "help: pass the path of a pipeline.yaml, e.g. `cargo xtask gen examples/quickstart/pipeline.yaml --check`"
            );
            return ExitCode::from(2);
        }
    };
    let rendered = outcome.report.render();
    if !rendered.is_empty() {
        let _ = std::io::stderr().write_all(rendered.as_bytes());
    }
    let Some(pipeline) = outcome.pipeline else {
        return ExitCode::from(1);
    };
    if args.check {
        println!(
            "ok: {} is valid (pipeline `{}`, {} source, {} sink with {} shard{})",
            args.path.display(),
            pipeline.model.pipeline.name,
            match pipeline.model.source {
                crate::model::Source::Kafka(_) => "kafka",
                crate::model::Source::Datagen(_) => "datagen",
            },
            pipeline.model.sink.kind(),
            pipeline.model.sink.shard_count(),
            if pipeline.model.sink.shard_count() == 1 { "" } else { "s" },
        );
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "error: code generation is not implemented yet; only `gen --check` works in this version (see README.md, \"Missing\")"
    );
    ExitCode::from(1)
}
