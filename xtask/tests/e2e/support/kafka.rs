//! Kafka without producing: fresh topic and group names, topics, a group's committed offsets, and
//! reading a topic back (the dead letters).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use super::infra::kafka_config;

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
    let admin: AdminClient<_> = kafka_config(topic).create().expect("admin client");
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

/// Deletes `topic` when dropped, also when the scenario fails. A durable broker (Tansu over S3)
/// keeps every batch as an object, and every listing of the store walks all of them: a store
/// that only grows makes every fetch slower, run after run.
pub struct DeletedAtEnd(pub String);

impl Drop for DeletedAtEnd {
    fn drop(&mut self) {
        let Ok(admin) = kafka_config(&self.0).create::<AdminClient<_>>() else { return };
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        if let Err(error) = block_on(admin.delete_topics(&[self.0.as_str()], &options)) {
            eprintln!("deleting topic {}: {error}", self.0);
        }
    }
}

/// The committed offsets of `group` on `topic`, read by a client that does not join the group;
/// a partition without a commit is absent.
pub fn committed(group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    try_committed(group, topic, partitions).expect("committed offsets")
}

/// [`committed`], with the broker's error instead of a panic (a broker that is restarting).
pub fn try_committed(group: &str, topic: &str, partitions: i32) -> rdkafka::error::KafkaResult<BTreeMap<i32, i64>> {
    let consumer: BaseConsumer = kafka_config(topic).set("group.id", group).create()?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let committed = consumer.committed_offsets(tpl, Duration::from_secs(10))?;
    Ok(committed
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect())
}

/// A thread that reads a group's committed offsets every 250 ms and keeps every step backwards
/// (a commit by a member that no longer owned the partition, over its new owner's progress).
pub struct CommitWatch {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(usize, Vec<String>)>,
}

pub fn watch_commits(group: &str, topic: &str, partitions: i32) -> CommitWatch {
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let (stop, group, topic) = (stop.clone(), group.to_owned(), topic.to_owned());
        std::thread::spawn(move || {
            let (mut samples, mut backwards) = (0, Vec::new());
            let mut highest: BTreeMap<i32, i64> = BTreeMap::new();
            while !stop.load(Ordering::SeqCst) {
                if let Ok(now) = try_committed(&group, &topic, partitions) {
                    samples += 1;
                    for (partition, offset) in now {
                        let high = highest.entry(partition).or_insert(offset);
                        if offset < *high {
                            backwards.push(format!("partition {partition}: {high} -> {offset}"));
                        }
                        *high = (*high).max(offset);
                    }
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            (samples, backwards)
        })
    };
    CommitWatch { stop, thread }
}

impl CommitWatch {
    /// Stops the thread; returns how many samples it took and every step backwards it saw.
    pub fn finish(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().expect("the commit watch")
    }
}

/// Records committed: the sum of committed offsets (the topics are fresh, so offsets start at 0).
pub fn committed_total(group: &str, topic: &str, partitions: i32) -> i64 {
    committed(group, topic, partitions).values().sum()
}

/// Records in the topic: the sum of its partitions' high watermarks (fresh topics start at 0).
pub fn log_end_total(topic: &str, partitions: i32) -> i64 {
    let consumer: BaseConsumer = kafka_config(topic).create().expect("a consumer");
    (0..partitions).map(|p| consumer.fetch_watermarks(topic, p, Duration::from_secs(10)).expect("watermarks").1).sum()
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
    let consumer: BaseConsumer = kafka_config(topic)
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
