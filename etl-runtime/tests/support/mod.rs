//! Shared helpers of the tests that need real services: the Kafka broker (started on demand with
//! `cargo xtask infra up --only-kafka`), unique names, topics, fixtures produced with rdkafka,
//! committed offsets read back, and freezing the broker.
#![allow(dead_code, unreachable_pub)]

pub mod clickhouse;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{DeliveryResult, Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

/// The workspace root: etl-runtime's parent.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

static INFRA: OnceLock<BTreeMap<String, String>> = OnceLock::new();

/// What `cargo xtask infra up --only-kafka` prints (`KEY=value` lines), run once per test binary
/// (idempotent: it reuses running services).
fn infra() -> &'static BTreeMap<String, String> {
    INFRA.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let output = Command::new(cargo)
            .args(["xtask", "infra", "up", "--only-kafka"])
            .current_dir(workspace_root())
            .output()
            .expect("running `cargo xtask infra up --only-kafka`");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "`cargo xtask infra up --only-kafka` failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
            .lines()
            .filter_map(|line| line.trim().trim_start_matches("export ").split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    })
}

fn infra_value(key: &str) -> String {
    infra().get(key).unwrap_or_else(|| panic!("`cargo xtask infra up` printed no {key}")).clone()
}

/// `$KAFKA_BROKERS` if set; otherwise the local broker's address from `cargo xtask infra up`.
pub fn kafka_brokers() -> String {
    match std::env::var("KAFKA_BROKERS").ok().filter(|b| !b.trim().is_empty()) {
        Some(brokers) => brokers,
        None => infra_value("KAFKA_BROKERS"),
    }
}

/// The local broker reachable only through TLS, and the client properties that reach it.
pub struct TlsBroker {
    pub brokers: String,
    pub properties: Vec<(String, String)>,
}

/// The TLS broker of `cargo xtask infra up`, with the throwaway CA it prints.
pub fn kafka_tls() -> TlsBroker {
    TlsBroker {
        brokers: infra_value("KAFKA_TLS_BROKERS"),
        properties: vec![
            ("security.protocol".into(), "ssl".into()),
            ("ssl.ca.location".into(), infra_value("ETL_INFRA_CA_FILE")),
        ],
    }
}

/// A client configuration for `brokers`, with the TLS properties when they are the TLS broker's.
pub fn client_config(brokers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    // Only a test that asked for the TLS broker can be talking to it.
    if INFRA.get().and_then(|infra| infra.get("KAFKA_TLS_BROKERS")).is_some_and(|b| b == brokers) {
        for (k, v) in kafka_tls().properties {
            config.set(k, v);
        }
    }
    config
}

/// A name no other test (or earlier run against the same broker) uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}-{:08x}", std::process::id(), rand::random::<u32>())
}

/// Creates `topic` with `partitions` partitions through the admin API.
pub fn create_topic(brokers: &str, topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = client_config(brokers).create().expect("admin client");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = runtime.block_on(admin.create_topics([&new_topic], &options)).expect("create_topics");
    for result in results {
        result.unwrap_or_else(|(name, code)| panic!("creating topic {name}: {code}"));
    }
}

/// One message of a fixture: `None` payload is a tombstone.
#[derive(Debug, Clone)]
pub struct Fixture {
    pub partition: i32,
    pub key: Vec<u8>,
    pub payload: Option<Vec<u8>>,
    /// Headers in the order they are added: name and value (`None` for a null value).
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

/// What the broker acknowledged: every (partition, offset) written, and the payload-less ones.
#[derive(Debug, Clone, Default)]
pub struct Delivered {
    pub all: BTreeSet<(i32, i64)>,
    pub tombstones: BTreeSet<(i32, i64)>,
}

impl Delivered {
    /// The end offset (last + 1) of each partition, from the delivery reports (the broker's
    /// ListOffsets is unreliable on the local broker).
    pub fn end_offsets(&self) -> BTreeMap<i32, i64> {
        let mut end = BTreeMap::new();
        for &(partition, offset) in &self.all {
            let e = end.entry(partition).or_insert(0);
            *e = (*e).max(offset + 1);
        }
        end
    }

    /// The offsets that carry a payload (the ones the chain sees).
    pub fn with_payload(&self) -> BTreeSet<(i32, i64)> {
        self.all.difference(&self.tombstones).copied().collect()
    }

    pub fn extend(&mut self, other: Delivered) {
        self.all.extend(other.all);
        self.tombstones.extend(other.tombstones);
    }
}

/// One delivery report: partition, offset, whether it was a tombstone, and the error if it failed.
type Report = (i32, i64, bool, Option<String>);

struct Reports(Mutex<Vec<Report>>);

impl ClientContext for Reports {}

impl ProducerContext for Reports {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let entry = match result {
            Ok(m) => (m.partition(), m.offset(), m.payload().is_none(), None),
            Err((e, m)) => (m.partition(), m.offset(), m.payload().is_none(), Some(e.to_string())),
        };
        self.0.lock().unwrap().push(entry);
    }
}

/// Produces `messages` with rdkafka and waits for every delivery report.
pub fn produce(brokers: &str, topic: &str, messages: &[Fixture]) -> Delivered {
    let producer: BaseProducer<Reports> = client_config(brokers)
        .set("linger.ms", "5")
        .create_with_context(Reports(Mutex::new(Vec::new())))
        .expect("producer");
    for m in messages {
        let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic).partition(m.partition).key(&m.key[..]);
        if let Some(payload) = &m.payload {
            record = record.payload(&payload[..]);
        }
        if !m.headers.is_empty() {
            let headers = m
                .headers
                .iter()
                .fold(OwnedHeaders::new(), |h, (key, value)| h.insert(Header { key, value: value.as_deref() }));
            record = record.headers(headers);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((rdkafka::error::KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => panic!("produce: {e}"),
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
    let reports = std::mem::take(&mut *producer.context().0.lock().unwrap());
    assert_eq!(reports.len(), messages.len(), "delivery reports");
    let mut delivered = Delivered::default();
    for (partition, offset, tombstone, error) in reports {
        assert!(error.is_none(), "delivery failed: {error:?}");
        delivered.all.insert((partition, offset));
        if tombstone {
            delivered.tombstones.insert((partition, offset));
        }
    }
    delivered
}

/// `count` messages spread round-robin over `partitions`, keys `k{i}`, payloads `v{i}` padded to 100
/// bytes; every `tombstone_every`-th one (if not 0) has no payload.
pub fn fixtures(start: usize, count: usize, partitions: i32, tombstone_every: usize) -> Vec<Fixture> {
    (start..start + count)
        .map(|i| Fixture {
            partition: (i % partitions as usize) as i32,
            key: format!("k{i}").into_bytes(),
            payload: (tombstone_every == 0 || i % tombstone_every != 0).then(|| format!("v{i:<99}").into_bytes()),
            headers: Vec::new(),
        })
        .collect()
}

/// The committed offsets of `group` for `partitions` of `topic`, read by a consumer that does not join.
pub fn committed(brokers: &str, group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    let consumer: BaseConsumer = client_config(brokers).set("group.id", group).create().expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let committed = consumer.committed_offsets(tpl, Duration::from_secs(10)).expect("committed offsets");
    committed
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect()
}

/// The spare broker of `cargo xtask infra up` (`KAFKA_SPARE_BROKERS`): the broker a test may freeze,
/// while the main one serves the tests (and the end-to-end scenarios) that run meanwhile.
pub fn spare_brokers() -> String {
    infra_value("KAFKA_SPARE_BROKERS")
}

/// The pid of the spare broker started by `cargo xtask infra up`.
pub fn spare_broker_pid() -> u32 {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target"));
    let file = target.join("etl-infra").join("kafka-spare.pid");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| {
        panic!("{}: {e} (the freeze test needs the broker of `cargo xtask infra up`)", file.display())
    });
    text.trim().parse().expect("pid")
}

/// SIGSTOPs the broker; dropping it SIGCONTs it, even when the test fails.
pub struct Frozen(u32);

impl Frozen {
    pub fn new(pid: u32) -> Self {
        signal("STOP", pid);
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal("CONT", self.0);
    }
}

fn signal(name: &str, pid: u32) {
    let status = Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status().expect("kill");
    assert!(status.success(), "kill -{name} {pid}");
}
