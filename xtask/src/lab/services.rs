//! The services and processes `bench` and `soak` run on: the release xtask that runs each child,
//! `cargo xtask infra up` run by it and the addresses it prints, and the tables and topics a run
//! creates and drops on the servers.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

use super::http;

/// xtask built with `--release`, which runs every child of `bench` and `soak`: a debug librdkafka
/// or lz4 would understate the bench's raw limits several times over, and a copy of its own keeps
/// a run going when someone rebuilds `target/debug/xtask` under it.
pub(crate) fn release_xtask() -> anyhow::Result<PathBuf> {
    let root = crate::workspace::root();
    let status = Command::new(crate::workspace::cargo())
        .current_dir(&root)
        .args(["build", "--release", "--quiet", "--package", "xtask"])
        .status()?;
    if !status.success() {
        bail!("cargo build --release --package xtask failed ({status})");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let copy = target.join(format!("etl-bench-e2e/xtask-{}", std::process::id()));
    fs::create_dir_all(copy.parent().expect("a directory"))?;
    fs::copy(target.join("release/xtask"), &copy)?;
    Ok(copy)
}

pub(crate) static XTASK: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// The release xtask of this run, in the workspace root.
pub(crate) fn xtask() -> Command {
    let mut command = Command::new(XTASK.get().expect("release_xtask ran first"));
    command.current_dir(crate::workspace::root());
    command
}

/// What `cargo xtask infra up` printed: its `KEY=value` lines.
pub(crate) struct InfraOutput(String);

impl InfraOutput {
    pub(crate) fn value(&self, key: &str) -> anyhow::Result<String> {
        let stdout = &self.0;
        stdout
            .lines()
            .find_map(|l| l.trim_start_matches("export ").strip_prefix(key)?.strip_prefix('='))
            .map(str::to_owned)
            .with_context(|| format!("no {key}= in the output of infra up:\n{stdout}"))
    }
}

/// `cargo xtask infra up` with `extra` arguments (idempotent), run by the release xtask.
pub(crate) fn run_infra_up(extra: &[&str]) -> anyhow::Result<InfraOutput> {
    let output = xtask().args(["infra", "up"]).args(extra).stderr(Stdio::inherit()).output()?;
    if !output.status.success() {
        bail!("cargo xtask infra up {} failed ({})", extra.join(" "), output.status);
    }
    Ok(InfraOutput(String::from_utf8(output.stdout)?))
}

/// Drops `table` (and an exactly-once ledger next to it) and runs each statement of `ddl`.
pub(crate) fn recreate_table(url: &str, table: &str, ddl: &str) -> anyhow::Result<()> {
    recreate_tables(url, &[table.to_owned()], ddl)
}

/// [`recreate_table`] for a pipeline of several outputs: every table (and ledger) dropped, then
/// `ddl`, which creates them all.
pub(crate) fn recreate_tables(url: &str, tables: &[String], ddl: &str) -> anyhow::Result<()> {
    for table in tables {
        http::clickhouse(url, &format!("DROP TABLE IF EXISTS default.`{table}` SYNC"))?;
        http::clickhouse(url, &format!("DROP TABLE IF EXISTS default.`{table}_etl_batches` SYNC"))?;
    }
    for statement in etl_gen::ddl::statements(ddl) {
        http::clickhouse(url, statement)?;
    }
    Ok(())
}

pub(crate) fn delete_topic(brokers: &str, topic: &str) -> anyhow::Result<()> {
    use rdkafka::admin::{AdminClient, AdminOptions};
    let admin: AdminClient<_> = rdkafka::ClientConfig::new().set("bootstrap.servers", brokers).create()?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in runtime.block_on(admin.delete_topics(&[topic], &options))? {
        if let Err((name, code)) = result {
            bail!("deleting {name}: {code}");
        }
    }
    Ok(())
}
