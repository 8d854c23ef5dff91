//! What the end-to-end tests share: the broker and ClickHouse of `cargo xtask infra up`, the pipeline
//! binaries of `cargo xtask build`, a producer that keeps its delivery reports, ClickHouse checks,
//! a running pipeline process (signals, /metrics, peak RSS, log) and a throttling TCP proxy.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::ClientContext;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{DeliveryResult, Headers, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

/// Partitions of every topic the scenarios create (except the poison ones).
pub const PARTITIONS: i32 = 4;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_owned()
}

/// The scenarios share one broker and two ClickHouse servers and each measures time and memory:
/// they run one at a time (on 2 cores parallel runs would only add noise).
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where the services are.
#[derive(Debug, Clone)]
pub struct Infra {
    pub brokers: String,
    pub clickhouse: [String; 2],
    /// The TLS services (`KAFKA_TLS_BROKERS`, `CLICKHOUSE_HTTPS_URL`, `ETL_INFRA_CA_FILE`), as
    /// `infra up` prints them; empty when the services came from the environment.
    pub tls: Vec<(String, String)>,
}

/// `$KAFKA_BROKERS`, `$CLICKHOUSE_URL` and `$CLICKHOUSE_URL_2` if all are set; otherwise what
/// `cargo xtask infra up` (idempotent) prints. Once per test binary.
pub fn infra() -> &'static Infra {
    static INFRA: OnceLock<Infra> = OnceLock::new();
    INFRA.get_or_init(|| {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        if let (Some(b), Some(c1), Some(c2)) = (env("KAFKA_BROKERS"), env("CLICKHOUSE_URL"), env("CLICKHOUSE_URL_2")) {
            return Infra { brokers: b, clickhouse: [c1, c2], tls: Vec::new() };
        }
        let output = xtask().args(["infra", "up"]).output().expect("running cargo xtask infra up");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "cargo xtask infra up failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let value = |key: &str| {
            stdout
                .lines()
                .find_map(|l| l.trim_start_matches("export ").strip_prefix(key)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("no {key}= in the output of infra up:\n{stdout}"))
                .to_owned()
        };
        let tls = ["KAFKA_TLS_BROKERS", "CLICKHOUSE_HTTPS_URL", "ETL_INFRA_CA_FILE"]
            .into_iter()
            .map(|key| (key.to_owned(), value(key)))
            .collect();
        Infra { brokers: value("KAFKA_BROKERS"), clickhouse: [value("CLICKHOUSE_URL"), value("CLICKHOUSE_URL_2")], tls }
    })
}

impl Infra {
    fn tls_value(&self, key: &str) -> &str {
        let found = self.tls.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        found.unwrap_or_else(|| panic!("the TLS scenario needs the services of `cargo xtask infra up` ({key})"))
    }
}

/// While a scenario holds the guard of [`use_tls_broker`], the helpers' Kafka clients talk to the
/// broker behind the TLS front. Scenarios run one at a time (`serial`), so one flag suffices.
static TLS_BROKER: AtomicBool = AtomicBool::new(false);

/// Points the helpers at the TLS broker until the guard is dropped.
pub fn use_tls_broker() -> TlsBrokerGuard {
    TLS_BROKER.store(true, Ordering::SeqCst);
    TlsBrokerGuard
}

pub struct TlsBrokerGuard;

impl Drop for TlsBrokerGuard {
    fn drop(&mut self) {
        TLS_BROKER.store(false, Ordering::SeqCst);
    }
}

/// A client configuration for the broker the scenario uses.
fn kafka_config() -> ClientConfig {
    let infra = infra();
    let mut config = ClientConfig::new();
    if TLS_BROKER.load(Ordering::SeqCst) {
        config
            .set("bootstrap.servers", infra.tls_value("KAFKA_TLS_BROKERS"))
            .set("security.protocol", "ssl")
            .set("ssl.ca.location", infra.tls_value("ETL_INFRA_CA_FILE"));
    } else {
        config.set("bootstrap.servers", &infra.brokers);
    }
    config
}

/// `cargo xtask` as built for this test binary (the same program `cargo xtask` runs, without a
/// nested `cargo run`), in the workspace root.
fn xtask() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_xtask"));
    command.current_dir(root());
    command
}

/// The pipelines of `xtask/tests/e2e/`, one binary each (errors.policy, errors.tombstones and the
/// sizing knobs are compiled in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// `pipeline.yaml`: errors.policy skip, tombstones skip.
    Skip,
    /// `pipeline-dlq.yaml`: errors.policy dlq (`$DLQ_TOPIC`), tombstones skip.
    Dlq,
    /// `pipeline-fail.yaml`: errors.policy fail, tombstones fail.
    Fail,
    /// `pipeline-tls.yaml`: `pipeline.yaml` over TLS (the broker and shard 0).
    Tls,
    /// `pipeline-eo.yaml`: `pipeline.yaml` with `exactly_once: true`.
    Exactly,
    /// `pipeline-bounded.yaml`: `pipeline.yaml` with a small budget and prefetch, so that its
    /// memory bound is small enough for the memory scenarios to put several bounds in the topic.
    Bounded,
}

impl Variant {
    pub fn yaml(self) -> PathBuf {
        let file = match self {
            Variant::Skip => "pipeline.yaml",
            Variant::Dlq => "pipeline-dlq.yaml",
            Variant::Fail => "pipeline-fail.yaml",
            Variant::Tls => "pipeline-tls.yaml",
            Variant::Exactly => "pipeline-eo.yaml",
            Variant::Bounded => "pipeline-bounded.yaml",
        };
        root().join("xtask/tests/e2e").join(file)
    }

    pub fn table(self) -> &'static str {
        match self {
            Variant::Skip => "e2e_orders",
            Variant::Dlq => "e2e_orders_dlq",
            Variant::Fail => "e2e_orders_fail",
            Variant::Tls => "e2e_orders_tls",
            Variant::Exactly => "e2e_orders_eo",
            Variant::Bounded => "e2e_orders_bounded",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// The binary, built once per test binary with `cargo xtask build`; its table is (re)created
    /// on both shards from `cargo xtask gen --ddl` at the same time.
    pub fn binary(self) -> PathBuf {
        static BINARIES: [OnceLock<PathBuf>; 6] = [const { OnceLock::new() }; 6];
        BINARIES[self.index()]
            .get_or_init(|| {
                let started = Instant::now();
                // The fault points (`ETL_FAULT`) are compiled in only on request; every e2e binary
                // gets them, so all variants share one build of the runtime.
                let output = xtask()
                    .arg("build")
                    .arg(self.yaml())
                    .arg("--fault-injection")
                    .output()
                    .expect("running cargo xtask build");
                let stdout = String::from_utf8_lossy(&output.stdout);
                assert!(
                    output.status.success(),
                    "cargo xtask build {} failed:\n{stdout}\n{}",
                    self.yaml().display(),
                    String::from_utf8_lossy(&output.stderr)
                );
                let binary = PathBuf::from(stdout.lines().last().expect("build prints the binary").trim());
                assert!(binary.is_absolute() && binary.exists(), "{} is the built binary", binary.display());
                eprintln!("built {} in {:.1}s", binary.display(), started.elapsed().as_secs_f64());
                // The counterpart of the image test's check that a shipped binary has no hook.
                let bytes = std::fs::read(&binary).expect("reading the built binary");
                assert!(bytes.windows(9).any(|w| w == b"ETL_FAULT"), "--fault-injection compiles the fault points in");

                let ddl = xtask().args(["gen", "--ddl"]).arg(self.yaml()).output().expect("running gen --ddl");
                assert!(ddl.status.success(), "gen --ddl: {}", String::from_utf8_lossy(&ddl.stderr));
                let ddl = String::from_utf8(ddl.stdout).unwrap();
                for url in &infra().clickhouse {
                    ch_exec(url, &format!("DROP TABLE IF EXISTS default.{} SYNC", self.table()));
                    // The exactly-once variant's DDL also creates its ledger table.
                    ch_exec(url, &format!("DROP TABLE IF EXISTS default.{}_etl_batches SYNC", self.table()));
                    for statement in etl_gen::ddl::statements(&ddl) {
                        ch_exec(url, statement);
                    }
                }
                binary
            })
            .clone()
    }
}

// ---------------------------------------------------------------------------------------------
// Records

/// The Confluent wire header: magic byte 0 and schema id 1 (no registry: the reader schema is
/// compiled in, the id is not looked up).
const CONFLUENT_HEADER: [u8; 5] = [0, 0, 0, 0, 1];

fn zigzag(buf: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        buf.push((z as u8) | 0x80);
        z >>= 7;
    }
    buf.push(z as u8);
}

/// The fields of order `id` (deterministic, so ClickHouse's content can be checked per key).
pub fn customer_id(id: i64) -> i64 {
    (id * 7919) % 10007
}

pub fn total_cents(id: i64) -> i64 {
    100 + id % 9000
}

/// The Avro datum (schemas/order.avsc) of order `id`, without framing. `coupon_len` > 0 adds a
/// coupon of that many pseudo-random alphanumerics (LZ4 hardly compresses them, so the sink's
/// bytes on the wire are about the rows' bytes).
pub fn order_datum(id: i64, coupon_len: usize) -> Vec<u8> {
    let mut buf = Vec::with_capacity(40 + coupon_len);
    zigzag(&mut buf, id);
    zigzag(&mut buf, customer_id(id));
    zigzag(&mut buf, id % 3); // region: EMEA, AMER, APAC
    zigzag(&mut buf, total_cents(id));
    if coupon_len == 0 {
        zigzag(&mut buf, 0); // union branch null
    } else {
        zigzag(&mut buf, 1);
        zigzag(&mut buf, coupon_len as i64);
        let mut x = (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        for _ in 0..coupon_len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf.push(ALPHABET[(x % ALPHABET.len() as u64) as usize]);
        }
    }
    zigzag(&mut buf, 1_700_000_000_000 + id); // created_at, timestamp-millis
    buf
}

/// Order `id` in the Confluent wire format.
pub fn order(id: i64, coupon_len: usize) -> Vec<u8> {
    let mut payload = CONFLUENT_HEADER.to_vec();
    payload.extend(order_datum(id, coupon_len));
    payload
}

/// The bytes [`Producer::send_orders`] puts in the topic for orders `ids`: keys and payloads.
pub fn orders_bytes(ids: std::ops::Range<i64>, coupon_len: usize) -> u64 {
    ids.map(|id| (id.to_string().len() + CONFLUENT_HEADER.len() + order_datum(id, coupon_len).len()) as u64).sum()
}

/// The per-key checksum of a set of distinct order ids, as `ChStats::checksum` computes it in
/// ClickHouse from the stored columns.
pub fn checksum(ids: impl IntoIterator<Item = i64>) -> i64 {
    ids.into_iter().map(|id| id * 3 + customer_id(id) * 7 + total_cents(id)).sum()
}

// ---------------------------------------------------------------------------------------------
// Kafka

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(future)
}

/// A name no other run uses (topics and groups live as long as the broker).
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() % 1_000_000_000;
    format!("{prefix}-{}-{nanos}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

pub fn create_topic(topic: &str, partitions: i32) {
    let admin: AdminClient<_> = kafka_config().create().expect("admin client");
    let results = block_on(admin.create_topics(
        &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
    ))
    .expect("create_topics");
    for result in results {
        if let Err((name, code)) = result {
            assert_eq!(code, RDKafkaErrorCode::TopicAlreadyExists, "creating topic {name}");
        }
    }
}

/// Delivery reports: (tag, partition, offset) of every delivered message, and the failures.
#[derive(Default)]
pub struct Reports {
    delivered: Mutex<Vec<(usize, i32, i64)>>,
    failed: Mutex<Vec<String>>,
}

impl ClientContext for Reports {}

impl ProducerContext for Reports {
    type DeliveryOpaque = Box<usize>;

    fn delivery(&self, result: &DeliveryResult<'_>, tag: Box<usize>) {
        match result {
            Ok(m) => self.delivered.lock().unwrap().push((*tag, m.partition(), m.offset())),
            Err((e, m)) => self.failed.lock().unwrap().push(format!("{}[{}]: {e}", m.topic(), m.partition())),
        }
    }
}

/// A producer that keeps every delivery report: the end offsets come from them, because Tansu's
/// ListOffsets(latest) is wrong (Tansu answers the last batch's base offset + 1).
pub struct Producer {
    inner: BaseProducer<Reports>,
    topic: String,
    /// Messages handed to the producer so far (an upper bound of what the broker has).
    pub sent: Arc<AtomicU64>,
}

impl Producer {
    pub fn new(topic: &str) -> Self {
        let inner = kafka_config()
            .set("linger.ms", "20")
            .set("batch.num.messages", "10000")
            .set("queue.buffering.max.messages", "1000000")
            .create_with_context(Reports::default())
            .expect("producer");
        Producer { inner, topic: topic.to_owned(), sent: Arc::default() }
    }

    /// Sends one message; `tag` identifies it in [`Produced::offsets`].
    pub fn send(&self, tag: usize, partition: i32, key: &[u8], payload: Option<&[u8]>) {
        let mut record: BaseRecord<'_, [u8], [u8], Box<usize>> =
            BaseRecord::with_opaque_to(&self.topic, Box::new(tag)).partition(partition).key(key);
        if let Some(payload) = payload {
            record = record.payload(payload);
        }
        loop {
            match self.inner.send(record) {
                Ok(()) => break,
                Err((rdkafka::error::KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    self.inner.poll(Duration::from_millis(5));
                }
                Err((e, _)) => panic!("producing to {}: {e}", self.topic),
            }
        }
        self.sent.fetch_add(1, Ordering::Relaxed);
        self.inner.poll(Duration::ZERO);
    }

    /// Sends orders `ids` (key = id, partition = id mod PARTITIONS), at most `rate` per second
    /// if given.
    pub fn send_orders(&self, ids: std::ops::Range<i64>, coupon_len: usize, rate: Option<u64>) {
        let started = Instant::now();
        let first = ids.start;
        for id in ids {
            if let Some(rate) = rate {
                let due = started + Duration::from_secs_f64((id - first) as f64 / rate as f64);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
            let payload = order(id, coupon_len);
            self.send(id as usize, (id % PARTITIONS as i64) as i32, id.to_string().as_bytes(), Some(&payload));
        }
    }

    /// Waits for every delivery report; panics on a failed delivery.
    pub fn finish(self) -> Produced {
        self.inner.flush(Duration::from_secs(120)).expect("flushing the producer");
        let failed = std::mem::take(&mut *self.inner.context().failed.lock().unwrap());
        assert!(failed.is_empty(), "failed deliveries: {failed:?}");
        let delivered = std::mem::take(&mut *self.inner.context().delivered.lock().unwrap());
        assert_eq!(delivered.len() as u64, self.sent.load(Ordering::Relaxed), "one delivery report per message");
        let mut produced = Produced::default();
        for (tag, partition, offset) in delivered {
            let end = produced.end_offsets.entry(partition).or_insert(0);
            *end = (*end).max(offset + 1);
            produced.offsets.insert(tag, (partition, offset));
        }
        produced
    }
}

/// What a producer delivered.
#[derive(Debug, Default)]
pub struct Produced {
    /// Per partition: the last delivered offset + 1.
    pub end_offsets: BTreeMap<i32, i64>,
    /// Per tag: where it landed.
    pub offsets: BTreeMap<usize, (i32, i64)>,
}

impl Produced {
    pub fn count(&self) -> i64 {
        self.offsets.len() as i64
    }
}

/// Produces orders `ids` on a thread at `rate` per second; join it for the delivery reports.
pub fn produce_in_background(
    topic: &str,
    ids: std::ops::Range<i64>,
    coupon_len: usize,
    rate: u64,
) -> (Arc<AtomicU64>, std::thread::JoinHandle<Produced>) {
    let producer = Producer::new(topic);
    let sent = producer.sent.clone();
    let thread = std::thread::spawn(move || {
        producer.send_orders(ids, coupon_len, Some(rate));
        producer.finish()
    });
    (sent, thread)
}

/// The committed offsets of `group` on `topic`, read by a client that does not join the group;
/// a partition without a commit is absent.
pub fn committed(group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    let consumer: BaseConsumer = kafka_config().set("group.id", group).create().expect("consumer");
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

/// Records committed: the sum of committed offsets (the topics are fresh, so offsets start at 0).
pub fn committed_total(group: &str, topic: &str, partitions: i32) -> i64 {
    committed(group, topic, partitions).values().sum()
}

/// Waits until the group's committed offsets equal `end`; panics with both maps if they do not
/// within `timeout` (a caller that forgot to compare would otherwise pass on a timeout).
pub fn await_committed(group: &str, topic: &str, end: &BTreeMap<i32, i64>, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let now = committed(group, topic, end.len() as i32);
        if &now == end {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "group {group} on {topic}: committed offsets did not reach the end offsets within {timeout:?}\n  \
             expected  {end:?}\n  committed {now:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A message read back from a topic.
#[derive(Debug)]
pub struct ReadMessage {
    pub partition: i32,
    pub offset: i64,
    pub payload: Option<Vec<u8>>,
    pub headers: BTreeMap<String, String>,
}

/// Reads `topic` from the beginning until `count` messages or `timeout`.
pub fn read_topic(topic: &str, partitions: i32, count: usize, timeout: Duration) -> Vec<ReadMessage> {
    let consumer: BaseConsumer = kafka_config()
        .set("group.id", unique("e2e-reader"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).expect("assign");
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    while out.len() < count && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let headers = m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| {
                                (h.key.to_owned(), String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned())
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                out.push(ReadMessage {
                    partition: m.partition(),
                    offset: m.offset(),
                    payload: m.payload().map(<[u8]>::to_vec),
                    headers,
                });
            }
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {}
        }
    }
    // Anything beyond `count` would be a surplus dead letter: look a little longer.
    let grace = Instant::now() + Duration::from_secs(1);
    while Instant::now() < grace {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            out.push(ReadMessage {
                partition: m.partition(),
                offset: m.offset(),
                payload: m.payload().map(<[u8]>::to_vec),
                headers: BTreeMap::new(),
            });
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// HTTP (ClickHouse and the admin server), over a plain socket: HTTP/1.0 keeps responses unchunked.

/// Sends an HTTP/1.0 request; returns (status, body).
fn http(addr: &str, method: &str, path: &str, body: &[u8]) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(stream, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n", body.len())?;
    stream.write_all(body)?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok((status, body.to_owned()))
}

fn host_port(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap()
}

/// Runs a statement on the server at `url`; panics with ClickHouse's message if it fails.
pub fn ch_query(url: &str, sql: &str) -> String {
    let (status, body) = http(host_port(url), "POST", "/", sql.as_bytes()).unwrap_or_else(|e| panic!("{url}: {e}"));
    assert_eq!(status, 200, "{sql}: {body}");
    body
}

pub fn ch_exec(url: &str, sql: &str) {
    ch_query(url, sql);
}

/// Numbers of a one-row TabSeparated result.
fn ch_numbers(url: &str, sql: &str) -> Vec<i64> {
    ch_query(url, sql).split_whitespace().map(|v| v.parse().unwrap_or_else(|_| panic!("{sql}: {v}"))).collect()
}

/// What a table holds, summed over both shards (rows of one key always go to the same shard:
/// the pipeline routes by customer_id, a function of the key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChStats {
    pub count: i64,
    pub uniq: i64,
}

impl ChStats {
    pub fn duplicates(&self) -> i64 {
        self.count - self.uniq
    }
}

pub fn ch_stats(table: &str) -> ChStats {
    let mut stats = ChStats::default();
    for url in &infra().clickhouse {
        let n = ch_numbers(url, &format!("SELECT count(), uniqExact(order_id) FROM default.{table}"));
        stats.count += n[0];
        stats.uniq += n[1];
    }
    stats
}

/// Rows per shard.
pub fn ch_counts(table: &str) -> [i64; 2] {
    let c = |i: usize| ch_numbers(&infra().clickhouse[i], &format!("SELECT count() FROM default.{table}"))[0];
    [c(0), c(1)]
}

/// The per-key checksum over distinct order ids (see [`checksum`]), from the stored columns.
pub fn ch_checksum(table: &str, where_: &str) -> i64 {
    infra()
        .clickhouse
        .iter()
        .map(|url| {
            ch_numbers(
                url,
                &format!(
                    "SELECT sum(order_id * 3 + customer_id * 7 + total_cents) FROM (SELECT order_id, customer_id, \
                     total_cents FROM default.{table} WHERE {where_} LIMIT 1 BY order_id)"
                ),
            )[0]
        })
        .sum()
}

/// Empties `table` on both shards.
pub fn truncate(table: &str) {
    for url in &infra().clickhouse {
        ch_exec(url, &format!("TRUNCATE TABLE default.{table}"));
    }
}

/// Waits until `table` holds `n` distinct orders; returns the last stats.
pub fn await_rows(table: &str, n: i64, timeout: Duration) -> ChStats {
    let deadline = Instant::now() + timeout;
    loop {
        let stats = ch_stats(table);
        if stats.uniq >= n || Instant::now() > deadline {
            return stats;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

// ---------------------------------------------------------------------------------------------
// A pipeline process

/// /metrics, parsed: `name{labels}` → value.
#[derive(Debug, Default, Clone)]
pub struct Metrics(pub BTreeMap<String, f64>);

impl Metrics {
    /// The sum of every series of `name`.
    pub fn sum(&self, name: &str) -> f64 {
        self.0
            .iter()
            .filter(|(k, _)| k.as_str() == name || k.strip_prefix(name).is_some_and(|r| r.starts_with('{')))
            .map(|(_, v)| v)
            .sum()
    }

    /// The value of one series, e.g. `etl_records_dropped_total{reason="error"}`; 0 if absent.
    pub fn get(&self, series: &str) -> f64 {
        self.0.get(series).copied().unwrap_or(0.0)
    }
}

/// A running pipeline binary. Dropping it SIGKILLs the process if it still runs.
pub struct Process {
    pub label: String,
    child: Child,
    pub admin: SocketAddr,
    pub log: PathBuf,
    pub exit: Option<ExitStatus>,
}

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// Environment of a run: topic, group and anything extra (e.g. shard URLs of a proxy).
pub fn spawn(variant: Variant, label: &str, topic: &str, group: &str, extra: &[(&str, &str)]) -> Process {
    let binary = variant.binary();
    let infra = infra();
    let admin = free_port();
    let dir = root().join("target/e2e-logs");
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join(format!("{label}.log"));
    let file = std::fs::File::create(&log).unwrap();
    let mut command = Command::new(&binary);
    command
        .env("KAFKA_BROKERS", &infra.brokers)
        .env("CLICKHOUSE_URL", &infra.clickhouse[0])
        .env("CLICKHOUSE_URL_2", &infra.clickhouse[1])
        .envs(infra.tls.iter().map(|(k, v)| (k, v)))
        .env("ORDERS_TOPIC", topic)
        .env("ORDERS_GROUP", group)
        .env("ADMIN_LISTEN", admin.to_string())
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file);
    for (k, v) in extra {
        command.env(k, v);
    }
    let child = command.spawn().unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
    eprintln!("[{label}] started pid {} (admin {admin}, log {})", child.id(), log.display());
    Process { label: label.to_owned(), child, admin, log, exit: None }
}

impl Process {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// /metrics, or `None` while the admin server is not up (or the process is gone).
    pub fn metrics(&self) -> Option<Metrics> {
        let (status, body) = http(&self.admin.to_string(), "GET", "/metrics", b"").ok()?;
        if status != 200 {
            return None;
        }
        let mut out = BTreeMap::new();
        for line in body.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
            if let Some((series, Ok(v))) = line.rsplit_once(' ').map(|(s, v)| (s, v.parse::<f64>())) {
                out.insert(series.to_owned(), v);
            }
        }
        Some(Metrics(out))
    }

    /// Polls /metrics until `pred` holds; panics after `timeout` (with the log's tail).
    pub fn await_metrics(&mut self, what: &str, timeout: Duration, pred: impl Fn(&Metrics) -> bool) -> Metrics {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(m) = self.metrics().filter(|m| pred(m)) {
                return m;
            }
            if let Some(status) = self.try_exit() {
                panic!("[{}] exited ({status}) while waiting for {what}:\n{}", self.label, self.log_tail());
            }
            assert!(Instant::now() < deadline, "[{}] no {what} within {timeout:?}:\n{}", self.label, self.log_tail());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Peak resident set size so far (VmHWM), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }

    pub fn signal(&self, name: &str) {
        let status = Command::new("kill").arg(format!("-{name}")).arg(self.pid().to_string()).status().unwrap();
        assert!(status.success(), "kill -{name} {}", self.pid());
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        self.exit = Some(self.child.wait().unwrap());
    }

    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().unwrap();
        }
        self.exit
    }

    /// Waits for the process to exit, at most `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.try_exit() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// SIGTERM; returns the exit status and how long the exit took (panics past `timeout`).
    pub fn terminate(&mut self, timeout: Duration) -> (ExitStatus, Duration) {
        let started = Instant::now();
        self.signal("TERM");
        let status = self.wait_exit(timeout).unwrap_or_else(|| {
            panic!("[{}] still running {timeout:?} after SIGTERM:\n{}", self.label, self.log_tail())
        });
        (status, started.elapsed())
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_tail(&self) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Lines of the log that contain `needle`.
    pub fn log_lines(&self, needle: &str) -> Vec<String> {
        self.log_text().lines().filter(|l| l.contains(needle)).map(str::to_owned).collect()
    }

    /// The pipeline never panics, whatever happened to it.
    /// SIGTERM, then: it exits 0 within 60 s and never panicked.
    pub fn stop_cleanly(&mut self) {
        let (status, _) = self.terminate(Duration::from_secs(60));
        assert!(status.success(), "[{}] SIGTERM exits 0: {status}", self.label);
        self.assert_no_panic();
    }

    pub fn assert_no_panic(&self) {
        let panics = self.log_lines("panicked");
        assert!(panics.is_empty(), "[{}] panicked:\n{}", self.label, panics.join("\n"));
    }

    /// The sum of the integer field `field=N` over the log's lines (the logs are plain text: the
    /// runtime colours them only on a terminal).
    pub fn log_field_sum(&self, field: &str) -> i64 {
        self.log_text().lines().filter_map(|l| field_value(l, field)).sum()
    }

    /// Records a revocation's drain left undurable (logged with `abandoned=N`).
    pub fn abandoned(&self) -> i64 {
        self.log_field_sum("abandoned")
    }

    /// Recorded batches the exactly-once replay plans of this process replay: the sum of
    /// `replayed_batches=N` over its "exactly-once replay plan" lines (one per assigned partition,
    /// most of them 0).
    pub fn replayed_batches(&self) -> i64 {
        self.log_lines("exactly-once replay plan").iter().filter_map(|l| field_value(l, "replayed_batches")).sum()
    }
}

/// The integer of `field=N` in a log line.
fn field_value(line: &str, field: &str) -> Option<i64> {
    let rest = line.split(&format!("{field}=")).nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.try_exit().is_none() {
            self.kill();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Faults

/// The local processes that listen on the TCP port of `url` (a loopback address), found the way
/// `ss -ltnp` finds them: the listening sockets' inodes in /proc/net/tcp{,6}, then the processes
/// holding `socket:[inode]` among their file descriptors. What matters is which process serves the
/// URL the pipeline uses, not what `cargo xtask infra` started: with `$CLICKHOUSE_URL` pointing
/// elsewhere the infra's pid files name servers nobody talks to. Panics when no local process
/// listens there, since freezing nothing would make the outage scenarios pass without an outage.
pub fn listening_pids(url: &str) -> Vec<u32> {
    let addr = host_port(url);
    let (host, port) = addr.rsplit_once(':').unwrap_or_else(|| panic!("{url}: no port to freeze the server of"));
    let port: u16 = port.parse().unwrap_or_else(|_| panic!("{url}: bad port"));
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    assert!(
        loopback,
        "cannot freeze the server of {url}: {host} is not a loopback address, so it is no process of this machine \
         (the outage scenarios need local servers)"
    );
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let (Some(local), Some(&"0A"), Some(inode)) = (fields.get(1), fields.get(3), fields.get(9)) else {
                continue; // not LISTEN
            };
            let Some((ip, p)) = local.split_once(':') else { continue };
            if u16::from_str_radix(p, 16) != Ok(port) || !accepts_loopback(ip) {
                continue;
            }
            inodes.push(format!("socket:[{inode}]"));
        }
    }
    assert!(
        !inodes.is_empty(),
        "cannot freeze the server of {url}: no process listens on loopback port {port} (is it up? the outage \
         scenarios need its server to run on this machine)"
    );
    let me = std::process::id();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else { continue };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|target| inodes.iter().any(|i| target.as_os_str() == i.as_str()))
        });
        if holds {
            pids.push(pid);
        }
    }
    assert!(
        !pids.contains(&me),
        "the server of {url} is this test process (a proxy?): freezing it would freeze the test"
    );
    assert!(
        !pids.is_empty(),
        "cannot freeze the server of {url}: port {port} listens ({inodes:?}) but no process of ours holds the socket \
         (another user's or a container's server cannot be frozen from here)"
    );
    pids
}

/// Whether a listening socket's local address from /proc/net/tcp{,6} (hex, 32-bit words in host
/// order) takes connections to loopback: a loopback address or the wildcard.
fn accepts_loopback(hex: &str) -> bool {
    let words: Vec<u32> =
        (0..hex.len() / 8).filter_map(|i| u32::from_str_radix(&hex[i * 8..i * 8 + 8], 16).ok()).collect();
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    match bytes.len() {
        4 => {
            let ip = std::net::Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]);
            ip.is_loopback() || ip.is_unspecified()
        }
        16 => {
            let ip = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(bytes).unwrap());
            ip.is_loopback()
                || ip.is_unspecified()
                || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback() || v4.is_unspecified())
        }
        _ => false,
    }
}

/// The state letter of /proc/PID/stat (`T` = stopped), `None` once the process is gone.
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ...: comm may hold spaces and parentheses, the state follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Both ClickHouse servers of the scenarios (the processes listening on the ports of
/// `infra().clickhouse`) SIGSTOPped: they accept connections into the backlog and answer nothing,
/// like hung servers. Dropping the guard SIGCONTs them, also when the test fails.
pub struct FrozenClickhouse(Vec<u32>);

pub fn freeze_clickhouse() -> FrozenClickhouse {
    let mut frozen = FrozenClickhouse(Vec::new());
    for url in &infra().clickhouse {
        for pid in listening_pids(url) {
            if frozen.0.contains(&pid) {
                continue;
            }
            let ok = Command::new("kill").args(["-STOP", &pid.to_string()]).status().unwrap().success();
            assert!(ok, "kill -STOP {pid} (the server of {url})");
            // Pushed before the check, so that the guard thaws it whatever happens next.
            frozen.0.push(pid);
            let deadline = Instant::now() + Duration::from_secs(2);
            while process_state(pid) != Some('T') {
                assert!(
                    Instant::now() < deadline,
                    "pid {pid} (the server of {url}) did not stop: {:?}",
                    process_state(pid)
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            eprintln!("froze pid {pid}, the server of {url}");
        }
    }
    frozen
}

impl Drop for FrozenClickhouse {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = Command::new("kill").args(["-CONT", &pid.to_string()]).status();
        }
    }
}

/// A TCP proxy on loopback whose client-to-server direction (the inserts' bodies) is limited to
/// `bytes_per_sec` while throttled. The limit is shared by all connections through the proxy.
pub struct ThrottledProxy {
    pub addr: SocketAddr,
    throttled: Arc<AtomicBool>,
    /// Bytes forwarded client to server.
    pub forwarded: Arc<AtomicU64>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl ThrottledProxy {
    pub fn start(target: &str, bytes_per_sec: u64) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let throttled = Arc::new(AtomicBool::new(true));
        let forwarded = Arc::new(AtomicU64::new(0));
        let next_free = Arc::new(tokio::sync::Mutex::new(tokio::time::Instant::now()));
        let target = host_port(target).to_owned();
        {
            let (throttled, forwarded) = (throttled.clone(), forwarded.clone());
            runtime.spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(server) = tokio::net::TcpStream::connect(&target).await else { continue };
                    let _ = client.set_nodelay(true);
                    let (mut client_read, mut client_write) = client.into_split();
                    let (mut server_read, mut server_write) = server.into_split();
                    let (throttled, forwarded, next_free) = (throttled.clone(), forwarded.clone(), next_free.clone());
                    tokio::spawn(async move {
                        use tokio::io::{AsyncReadExt, AsyncWriteExt};
                        let mut buf = vec![0u8; 8192];
                        loop {
                            let n = match client_read.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            if throttled.load(Ordering::Relaxed) {
                                // A token bucket without burst: each chunk waits for its share of
                                // the rate after the previous chunk of any connection.
                                let due = {
                                    let mut next = next_free.lock().await;
                                    let now = tokio::time::Instant::now();
                                    *next = (*next).max(now) + Duration::from_secs_f64(n as f64 / bytes_per_sec as f64);
                                    *next
                                };
                                tokio::time::sleep_until(due).await;
                            }
                            if server_write.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                            forwarded.fetch_add(n as u64, Ordering::Relaxed);
                        }
                        let _ = server_write.shutdown().await;
                    });
                    tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                    });
                }
            });
        }
        ThrottledProxy { addr, throttled, forwarded, runtime: Some(runtime) }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Forwards at full speed from now on.
    pub fn unthrottle(&self) {
        self.throttled.store(false, Ordering::Relaxed);
    }
}

impl Drop for ThrottledProxy {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A small deterministic generator for the random moments of the crash test (the seed is
/// printed, so a failing run can be replayed).
pub struct Rng(u64);

impl Rng {
    pub fn from_time() -> Self {
        let seed = std::env::var("E2E_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
        });
        eprintln!("random seed {seed} (E2E_SEED={seed} replays it)");
        Rng(seed | 1)
    }

    /// Uniform in [lo, hi).
    pub fn between(&mut self, lo: f64, hi: f64) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        lo + (hi - lo) * ((self.0 >> 11) as f64 / (1u64 << 53) as f64)
    }
}

/// MiB, for messages.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The numbers of a variant's pipeline.yaml that the tests' bounds derive from, read with etl-gen
/// so the bounds follow the file.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    variant: Variant,
    pub max_inflight_bytes: u64,
    pub min_pause: Duration,
    pub drain_timeout: Duration,
    pub commit_interval: Duration,
    pub max_message_bytes: u64,
    /// What one lane may hold over the budget (Invariant 7): `chunk.target_bytes`, or under
    /// exactly-once (where a lane's chunk is a whole batch) `batch.max_bytes`, as in
    /// `etl_gen::memory`.
    pub chunk_bytes: u64,
}

impl Config {
    pub fn of(variant: Variant) -> Config {
        let outcome = etl_gen::validate_file(&variant.yaml(), &etl_gen::Options::default()).unwrap();
        let v = outcome.pipeline.unwrap_or_else(|| panic!("{}", outcome.report.render()));
        let etl_gen::model::Source::Kafka(kafka) = &v.model.source else { panic!("the e2e pipelines read Kafka") };
        Config {
            variant,
            max_inflight_bytes: v.model.backpressure.max_inflight_bytes.bytes(),
            min_pause: v.model.backpressure.min_pause.to_std(),
            drain_timeout: v.model.checkpoint.drain_timeout.to_std(),
            commit_interval: kafka.commit_interval.to_std(),
            max_message_bytes: v.model.format.max_message_bytes.bytes(),
            chunk_bytes: match &v.model.sink {
                etl_gen::model::Sink::Clickhouse(c) if c.exactly_once => c.batch.max_bytes.bytes(),
                sink => sink.flow().chunk.target_bytes.bytes(),
            },
        }
    }

    /// The most in-flight bytes `lanes` lanes may hold (Invariant 7): the budget plus one chunk per
    /// lane. (A chunk is sealed at its target plus one row; the room between the high watermark,
    /// where lanes pause, and the budget covers that row.)
    pub fn inflight_bound(&self, lanes: u64) -> u64 {
        self.max_inflight_bytes + lanes * self.chunk_bytes
    }

    /// The process's memory bound with `partitions` owned partitions (Invariant 7): exactly what
    /// `gen X --memory --partitions N` prints as its total, the figure users size their
    /// containers with.
    pub fn memory_bound(&self, partitions: u64) -> u64 {
        let outcome = etl_gen::validate_file(&self.variant.yaml(), &etl_gen::Options::default()).unwrap();
        let v = outcome.pipeline.unwrap_or_else(|| panic!("{}", outcome.report.render()));
        etl_gen::memory::total(&v, partitions)
    }
}

/// A stub Confluent-API schema registry on loopback that knows only schema id 1, the e2e
/// reader schema; every other id is 404. Returns its URL.
pub fn stub_registry() -> String {
    let schema = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/schemas/order.avsc"))
        .expect("the e2e schema");
    let escaped = schema.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n").replace('\r', "");
    let known = format!("{{\"schema\":\"{escaped}\"}}");
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let addr = listener.local_addr().expect("bound");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 1024];
            let n = stream.read(&mut request).unwrap_or(0);
            let line = String::from_utf8_lossy(&request[..n]);
            let (status, body) = if line.starts_with("GET /schemas/ids/1 ") {
                ("200 OK", known.as_str())
            } else {
                ("404 Not Found", "{}")
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://{addr}")
}
