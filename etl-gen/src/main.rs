//! The `etl-gen` binary: the generator for teams that keep pipelines outside this
//! repository (`cargo install --path etl-gen`). Same sub-commands as `cargo xtask`.

use std::process::ExitCode;

use clap::Parser;

/// etl-rs: generate, build and package Kafka → ClickHouse pipelines.
#[derive(Debug, Parser)]
#[command(name = "etl-gen", version)]
struct Cli {
    #[command(subcommand)]
    command: etl_gen::cli::Command,
}

fn main() -> ExitCode {
    etl_gen::cli::run(Cli::parse().command)
}
