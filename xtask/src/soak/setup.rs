//! The soak's setup and its view of the servers: `infra up --durable` (and starting the durable
//! broker again with it), the flagship built as an exactly-once variant, the topic, the servers'
//! pids, and what the check at the end reads: the group's committed offsets and the table's
//! counts.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use etl_gen::Validated;

use crate::lab::flagship::{build, copy_dir, exactly_once_text, min_budget_mib, validate, variant_text};
use crate::lab::http;
use crate::lab::services::{run_infra_up, xtask};

/// The soak's variant of the flagship and its table (the tests and the bench own theirs).
pub(super) const NAME: &str = "soak-orders-eo";
pub(super) const TABLE: &str = "soak_orders_eo";
/// Partitions of the topic; the memory bound is the one of an instance owning them all.
pub(super) const PARTITIONS: i32 = 4;
/// The `infra` services a broker fault may target: the in-memory broker (`KAFKA_BROKERS`) and
/// the first durable one (`KAFKA_DURABLE_BROKERS`); their pid files.
pub(super) const BROKER_SERVICES: [&str; 2] = ["kafka", "kafka-durable"];

/// Where the services are.
pub(super) struct Infra {
    /// The broker of the pipelines and of the producer.
    pub(super) broker: String,
    /// Its `infra` service (one of [`BROKER_SERVICES`]).
    pub(super) broker_service: &'static str,
    /// Whether its data survives a restart (`--durable`).
    pub(super) durable: bool,
    pub(super) clickhouse: Vec<String>,
}

/// `cargo xtask infra up --durable` (idempotent): the addresses it prints; the broker is the
/// durable one with `durable`, else the in-memory one.
pub(super) fn infra_up(durable: bool) -> anyhow::Result<Infra> {
    let output = run_infra_up(&["--durable"])?;
    let (key, broker_service) =
        if durable { ("KAFKA_DURABLE_BROKERS", BROKER_SERVICES[1]) } else { ("KAFKA_BROKERS", BROKER_SERVICES[0]) };
    Ok(Infra {
        broker: output.value(key)?,
        broker_service,
        durable,
        clickhouse: vec![output.value("CLICKHOUSE_URL")?, output.value("CLICKHOUSE_URL_2")?],
    })
}

/// `infra up --durable --only-kafka`: starts the durable brokers that do not run (over the same
/// bucket, so a restarted one serves the topic and the committed offsets again).
pub(super) fn start_durable_brokers() -> anyhow::Result<()> {
    // A process group of its own: a Ctrl-C meant for the soak must not stop it half-way.
    let output = xtask()
        .args(["infra", "up", "--durable", "--only-kafka"])
        .stdin(Stdio::null())
        .process_group(0)
        .output()
        .context("running infra up --durable --only-kafka")?;
    if !output.status.success() {
        bail!(
            "infra up --durable --only-kafka failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// The pid of the `infra` service `name` (`clickhouse`, `clickhouse-2`, [`BROKER_SERVICES`]) from
/// its pid file, if that process runs. `infra up` writes the file when it starts the service, so
/// it names the process to be read after a restart too.
pub(super) fn server_pid(name: &str) -> Option<u32> {
    let path = crate::infra::state_dir().join(format!("{name}.pid"));
    let pid: u32 = fs::read_to_string(path).ok()?.trim().parse().ok()?;
    super::running(pid).then_some(pid)
}

/// The soak's pipeline, built.
pub(super) struct Pipeline {
    pub(super) binary: PathBuf,
    pub(super) validated: Validated,
    /// `gen --memory --partitions 4`: the total in bytes, and the text with its terms.
    pub(super) memory_bound: u64,
    pub(super) memory_text: String,
}

impl Pipeline {
    pub(super) fn drain_timeout(&self) -> Duration {
        self.validated.model.checkpoint.drain_timeout.to_std()
    }

    pub(super) fn budget(&self) -> u64 {
        self.validated.model.backpressure.max_inflight_bytes.bytes()
    }

    pub(super) fn high_watermark(&self) -> f64 {
        self.budget() as f64 * self.validated.model.backpressure.high_ratio.to_f64()
    }
}

/// The flagship (examples/kafka_avro_to_clickhouse/pipeline.yaml) as `bench` builds its
/// exactly-once variant: name and table changed, `exactly_once: true`, and the budget the sizing
/// rule then needs if it is larger than the flagship's; written under `out` with the schemas next
/// to it, validated and built.
pub(super) fn build_flagship(root: &Path, out: &Path) -> anyhow::Result<Pipeline> {
    let example = root.join("examples/kafka_avro_to_clickhouse");
    let text = fs::read_to_string(example.join("pipeline.yaml"))?;
    copy_dir(&example.join("schemas"), &out.join("schemas"))?;
    let flagship_budget = validate(&example.join("pipeline.yaml"), false)?
        .model
        .backpressure
        .max_inflight_bytes
        .bytes()
        .div_ceil(1 << 20);
    let variant = |budget: Option<&str>| -> anyhow::Result<String> {
        // The flagship's startup_timeout (90 s) outlasts the dead member's 45 s session after a
        // SIGKILL (the first soak, at 30 s, saw a restarted instance exit 2; rule E0304 since).
        let text = exactly_once_text(&variant_text(&text, NAME, TABLE, budget)?)?;
        Ok(text.replacen("`cargo xtask bench`", "`cargo xtask soak`", 1))
    };
    // Exactly-once queues whole batches: the budget the sizing rule then needs, if larger.
    let probe = out.join(format!("{NAME}-probe.yaml"));
    fs::write(&probe, variant(None)?)?;
    let budget = min_budget_mib(&validate(&probe, true)?).max(flagship_budget);
    let _ = fs::remove_file(&probe);
    let yaml = out.join(format!("{NAME}.yaml"));
    fs::write(&yaml, variant(Some(&format!("{budget}MiB")))?)?;
    let validated = validate(&yaml, false)?;
    let etl_gen::model::Sink::Clickhouse(sink) = &validated.model.sink else {
        bail!("{}: the flagship's sink is no longer ClickHouse", yaml.display());
    };
    if !sink.exactly_once || sink.table.as_deref() != Some(TABLE) {
        bail!("{}: the variant is not exactly-once into {TABLE}", yaml.display());
    }
    eprintln!("soak: building {}", yaml.display());
    let binary = build(&yaml, false)?;
    let partitions = PARTITIONS as u64;
    let memory_bound = etl_gen::memory::total(&validated, partitions);
    let memory_text = etl_gen::memory::render(&validated, partitions);
    Ok(Pipeline { binary, validated, memory_bound, memory_text })
}

fn block_on<F: std::future::Future>(future: F) -> anyhow::Result<F::Output> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(future))
}

/// Creates `topic` with [`PARTITIONS`] partitions.
pub(super) fn create_topic(broker: &str, topic: &str) -> anyhow::Result<()> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<_> = rdkafka::ClientConfig::new().set("bootstrap.servers", broker).create()?;
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let topics = [NewTopic::new(topic, PARTITIONS, TopicReplication::Fixed(1))];
    for result in block_on(admin.create_topics(&topics, &options))?? {
        if let Err((name, code)) = result {
            bail!("creating topic {name}: {code}");
        }
    }
    Ok(())
}

/// The committed offsets of `group` on `topic`, read by a client that does not join the group; a
/// partition without a commit is absent.
pub(super) fn committed(broker: &str, group: &str, topic: &str) -> anyhow::Result<BTreeMap<i32, i64>> {
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()?;
    let mut partitions = rdkafka::TopicPartitionList::new();
    for p in 0..PARTITIONS {
        partitions.add_partition(topic, p);
    }
    let committed = consumer.committed_offsets(partitions, Duration::from_secs(10))?;
    Ok(committed
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            rdkafka::Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect())
}

/// The numbers of a one-row ClickHouse answer, summed over the servers.
fn sums(clickhouse: &[String], sql: &str) -> anyhow::Result<Vec<i64>> {
    let mut sums: Vec<i64> = Vec::new();
    for url in clickhouse {
        let text = http::clickhouse_text(url, sql)?;
        let numbers: Vec<i64> = text
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .with_context(|| format!("{sql}: {text}"))?;
        sums.resize(numbers.len(), 0);
        for (sum, n) in sums.iter_mut().zip(numbers) {
            *sum += n;
        }
    }
    Ok(sums)
}

/// `(count(), uniqExact(order_id))` of the table over both servers. Summing the distinct counts
/// is exact: the shard key is `customer_id`, a function of `order_id`, so every copy of an order
/// lands on the same server.
pub(super) fn table_counts(clickhouse: &[String]) -> anyhow::Result<(i64, i64)> {
    let sums = sums(clickhouse, &format!("SELECT count(), uniqExact(order_id) FROM default.`{TABLE}`"))?;
    let [count, uniq] = sums[..] else { bail!("expected two numbers from ClickHouse, got {sums:?}") };
    Ok((count, uniq))
}

/// Batch spans recorded in the exactly-once ledger, over both servers.
pub(super) fn ledger_spans(clickhouse: &[String]) -> anyhow::Result<i64> {
    let sums = sums(clickhouse, &format!("SELECT count() FROM default.`{TABLE}_etl_batches`"))?;
    let [spans] = sums[..] else { bail!("expected one number from ClickHouse, got {sums:?}") };
    Ok(spans)
}

/// Drops the table and its ledger on both servers (after a run that passed).
pub(super) fn drop_tables(clickhouse: &[String]) {
    for url in clickhouse {
        for table in [TABLE.to_owned(), format!("{TABLE}_etl_batches")] {
            if let Err(e) = http::clickhouse(url, &format!("DROP TABLE IF EXISTS default.`{table}` SYNC")) {
                eprintln!("soak: could not drop {table} on {url}: {e:#}");
            }
        }
    }
}
