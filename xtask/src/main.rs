//! `cargo xtask`: the etl-rs workflow (gen, codegen) from a checkout of this repository.
//!
//! Generator commands are `etl_gen::cli`; what only makes sense inside the repository
//! (regenerating docs, local infrastructure) lives in its own module here.

mod apt;
mod bench;
mod chain_criterion;
mod codegen;
mod infra;
mod lab;
mod podman;
mod produce;
mod progress;
mod quickstart;
mod soak;
mod test;
mod tls;
mod workspace;

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
    /// Benchmark the flagship end to end against the raw Kafka and ClickHouse limits (local servers).
    Bench(bench::BenchArgs),
    /// A raw limit of `bench`, as its own process.
    #[command(subcommand, hide = true)]
    BenchRaw(bench::raw::RawCommand),
    /// Benchmark a generated chain: decoder vs apache-avro's generic path, chain per record.
    BenchChain(chain_criterion::BenchChainArgs),
    /// A long run of the flagship (exactly-once) under load with random faults; checks every record landed once.
    Soak(soak::SoakArgs),
    /// Produce synthesized records of a pipeline's schema to its topic.
    Produce(produce::ProduceArgs),
    /// Generate, build and run the quickstart pipeline, and show what it wrote.
    Quickstart,
    /// Run every test, installing and starting what they need (what CI runs).
    Test(test::TestArgs),
    /// Local Kafka-protocol broker and ClickHouse on loopback.
    #[command(subcommand)]
    Infra(infra::InfraCommand),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Gen(command) => etl_gen::cli::run(command),
        Command::Codegen(args) => report(codegen::run(&args)),
        Command::Test(args) => report(test::run(&args)),
        Command::Quickstart => report(quickstart::run()),
        Command::Produce(args) => report(produce::run(&args)),
        Command::Bench(args) => report(bench::run(&args)),
        Command::BenchRaw(command) => report(bench::raw::run(command)),
        Command::BenchChain(args) => report(chain_criterion::run(&args)),
        Command::Soak(args) => report(soak::run(&args)),
        Command::Infra(command) => report(infra::run(command)),
    }
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
