//! `cargo xtask`: the etl-rs workflow (gen, codegen) from a checkout of this repository.
//!
//! Generator commands are `etl_gen::cli`; what only makes sense inside the repository
//! (regenerating docs, local infrastructure) lives in its own module here.

mod codegen;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// cargo xtask: generate, build and test etl-rs pipelines.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    #[command(flatten)]
    Gen(etl_gen::cli::Command),
    /// Regenerate the checked-in files derived from code (docs/configuration.md, ...).
    Codegen(codegen::CodegenArgs),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Gen(command) => etl_gen::cli::run(command),
        Command::Codegen(args) => match codegen::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        },
    }
}
