//! The soak's steady load: orders 0, 1, 2, … produced at `--rate` per second by a thread of its
//! own, Confluent-framed Avro built by hand (deterministic fields, so the check knows which
//! orders the flagship's filter keeps), with every delivery report counted. Production can be
//! paused around a broker fault: stop sending, flush, and only then fault.
//!
//! Why pause rather than `enable.idempotence`: librdkafka retries a produce request whose answer
//! it did not get, and without idempotence a broker that stored the first attempt stores the
//! retry too, which the exactly-once check would count as a pipeline duplicate. Whether Tansu
//! honours idempotent producers (producer ids and sequence numbers) is not something this
//! repository shows, so production stops while the broker is faulted, as the e2e scenarios do.
//! The records in Kafka that no delivery report accounts for are counted anyway
//! ([`Produced::unreported`]), so a copy written by a retry would not pass for the pipeline's.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rdkafka::ClientContext;
use rdkafka::error::KafkaError;
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;

use super::setup::PARTITIONS;

/// Whether order `id` passes the flagship's filter (`total_cents > 0 && region != 'APAC'`):
/// region is `id % 3` (2 is APAC) and total_cents is at least 100.
pub(super) fn kept(id: u64) -> bool {
    id % 3 != 2
}

fn zigzag(buf: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        buf.push((z as u8) | 0x80);
        z >>= 7;
    }
    buf.push(z as u8);
}

/// Order `id` in the Confluent wire format: magic 0, schema id 1 (big-endian; the flagship has no
/// registry and reads with its compiled-in schema), then the Avro datum of schemas/order.avsc.
pub(super) fn order(id: u64) -> Vec<u8> {
    let id = id as i64;
    let mut buf = Vec::with_capacity(32);
    buf.push(0);
    buf.extend(1u32.to_be_bytes());
    zigzag(&mut buf, id); // order_id
    zigzag(&mut buf, (id * 7919) % 10007); // customer_id: the shard key, spread over both shards
    zigzag(&mut buf, id % 3); // region: EMEA, AMER, APAC
    zigzag(&mut buf, 100 + id % 9000); // total_cents
    zigzag(&mut buf, 0); // coupon: the union's null branch
    zigzag(&mut buf, 1_700_000_000_000 + id); // created_at, timestamp-millis
    buf
}

/// What the delivery reports said so far, shared with the sampler.
#[derive(Default)]
pub(super) struct Counters {
    /// Orders handed to librdkafka.
    pub(super) sent: AtomicU64,
    pub(super) delivered: AtomicU64,
    /// Delivered orders the filter keeps: what ClickHouse must hold.
    kept: AtomicU64,
    failed: AtomicU64,
    /// The first failures, as text.
    failures: Mutex<Vec<String>>,
    /// Per partition, the last delivered offset + 1 (the end offsets the commits must reach: Tansu's
    /// ListOffsets(latest) is not reliable, see the e2e producer).
    end_offsets: Mutex<BTreeMap<i32, i64>>,
}

impl Counters {
    fn fail(&self, what: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        if failures.len() < 20 {
            failures.push(what);
        }
    }
}

struct Reports(Arc<Counters>);

impl ClientContext for Reports {}

impl ProducerContext for Reports {
    /// The order id.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, id: usize) {
        match result {
            Ok(m) => {
                self.0.delivered.fetch_add(1, Ordering::Relaxed);
                if kept(id as u64) {
                    self.0.kept.fetch_add(1, Ordering::Relaxed);
                }
                let mut ends = self.0.end_offsets.lock().unwrap_or_else(PoisonError::into_inner);
                let end = ends.entry(m.partition()).or_insert(0);
                *end = (*end).max(m.offset() + 1);
            }
            Err((e, m)) => self.0.fail(format!("order {id} to partition {}: {e}", m.partition())),
        }
    }
}

/// The producer thread's controls.
#[derive(Default)]
struct Control {
    stop: AtomicBool,
    /// Asked for by [`Load::pause`].
    pause: AtomicBool,
    /// Set by the thread once it stopped sending and flushed, cleared when it sends again.
    paused: AtomicBool,
    /// Whether that flush delivered everything.
    flushed: AtomicBool,
}

/// The running producer.
pub(super) struct Load {
    control: Arc<Control>,
    counters: Arc<Counters>,
    thread: Option<JoinHandle<Option<String>>>,
}

impl Load {
    pub(super) fn start(broker: &str, topic: &str, rate: u64) -> anyhow::Result<Load> {
        let counters = Arc::new(Counters::default());
        let producer: BaseProducer<Reports> = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", broker)
            .set("enable.idempotence", "false")
            // Fewer, larger produce requests: each is an object in the durable broker's bucket.
            .set("linger.ms", "100")
            .set("batch.num.messages", "10000")
            .set("queue.buffering.max.messages", "1000000")
            .create_with_context(Reports(counters.clone()))
            .context("creating the producer")?;
        let control = Arc::new(Control::default());
        let thread = {
            let (control, counters, topic) = (control.clone(), counters.clone(), topic.to_owned());
            std::thread::spawn(move || produce(&producer, &topic, rate, &control, &counters))
        };
        eprintln!("soak: producing {rate} orders/s to {topic}");
        Ok(Load { control, counters, thread: Some(thread) })
    }

    pub(super) fn counters(&self) -> Arc<Counters> {
        self.counters.clone()
    }

    /// Stops sending and waits until the producer flushed; sending resumes when the guard drops.
    /// An error (the flush did not deliver everything) resumes at once: the caller skips its fault.
    pub(super) fn pause(&self) -> anyhow::Result<Paused<'_>> {
        let wait = |what: &str, done: &dyn Fn() -> bool| -> anyhow::Result<()> {
            let deadline = Instant::now() + Duration::from_secs(90);
            while !done() {
                if Instant::now() > deadline || self.thread.as_ref().is_none_or(JoinHandle::is_finished) {
                    bail!("the producer did not {what}");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(())
        };
        // The thread may not have left the previous pause yet.
        wait("resume after the previous pause", &|| !self.control.paused.load(Ordering::SeqCst))?;
        self.control.pause.store(true, Ordering::SeqCst);
        let guard = Paused(&self.control);
        wait("pause within 90 s", &|| self.control.paused.load(Ordering::SeqCst))?;
        if !self.control.flushed.load(Ordering::SeqCst) {
            bail!("the producer's flush before the fault did not deliver everything within 60 s");
        }
        Ok(guard)
    }

    /// Stops producing and flushes; what was produced.
    pub(super) fn finish(mut self) -> Produced {
        self.control.stop.store(true, Ordering::SeqCst);
        let flush_error = match self.thread.take().map(JoinHandle::join) {
            Some(Ok(error)) => error,
            Some(Err(_)) => Some("the producer thread panicked".to_owned()),
            None => None,
        };
        let c = &self.counters;
        Produced {
            sent: c.sent.load(Ordering::SeqCst),
            delivered: c.delivered.load(Ordering::SeqCst),
            expected: c.kept.load(Ordering::SeqCst),
            failed: c.failed.load(Ordering::SeqCst),
            failures: c.failures.lock().unwrap_or_else(PoisonError::into_inner).clone(),
            end_offsets: c.end_offsets.lock().unwrap_or_else(PoisonError::into_inner).clone(),
            flush_error,
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        // An early return: the thread flushes and ends by itself.
        self.control.stop.store(true, Ordering::SeqCst);
    }
}

/// Production paused until dropped.
pub(super) struct Paused<'a>(&'a Control);

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        self.0.pause.store(false, Ordering::SeqCst);
    }
}

/// The producer thread: orders at `rate` per second until stopped; the flush error at the end.
fn produce(
    producer: &BaseProducer<Reports>,
    topic: &str,
    rate: u64,
    control: &Control,
    c: &Counters,
) -> Option<String> {
    let mut id: u64 = 0;
    // The schedule restarts after a pause: what was not sent then is not sent in a burst later.
    let (mut since, mut since_id) = (Instant::now(), 0u64);
    while !control.stop.load(Ordering::SeqCst) {
        if control.pause.load(Ordering::SeqCst) {
            // Flushed before the pause is acknowledged: librdkafka has nothing left to retry into
            // the fault.
            let flushed = producer.flush(Duration::from_secs(60)).is_ok();
            control.flushed.store(flushed, Ordering::SeqCst);
            control.paused.store(true, Ordering::SeqCst);
            while control.pause.load(Ordering::SeqCst) && !control.stop.load(Ordering::SeqCst) {
                producer.poll(Duration::from_millis(50));
            }
            control.paused.store(false, Ordering::SeqCst);
            (since, since_id) = (Instant::now(), id);
            continue;
        }
        let due = since + Duration::from_secs_f64((id - since_id) as f64 / rate as f64);
        let now = Instant::now();
        if now < due {
            producer.poll((due - now).min(Duration::from_millis(20)));
            continue;
        }
        send(producer, topic, id, control, c);
        id += 1;
        producer.poll(Duration::ZERO);
    }
    match producer.flush(Duration::from_secs(120)) {
        Ok(()) => None,
        Err(e) => Some(format!("{e} ({} messages not delivered)", producer.in_flight_count())),
    }
}

/// Hands order `id` to librdkafka (key = id, partition = id mod [`PARTITIONS`]), waiting while
/// its queue is full. An order it refuses is a failure, never counted as sent.
fn send(producer: &BaseProducer<Reports>, topic: &str, id: u64, control: &Control, c: &Counters) {
    let (key, payload) = (id.to_string(), order(id));
    let mut record: BaseRecord<'_, str, [u8], usize> = BaseRecord::with_opaque_to(topic, id as usize)
        .partition((id % PARTITIONS as u64) as i32)
        .key(key.as_str())
        .payload(payload.as_slice());
    loop {
        match producer.send(record) {
            Ok(()) => {
                c.sent.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                if control.stop.load(Ordering::SeqCst) {
                    c.fail(format!("order {id}: not sent (the queue was full at the end)"));
                    return;
                }
                record = back;
                producer.poll(Duration::from_millis(5));
            }
            Err((e, _)) => {
                c.fail(format!("order {id}: not sent: {e}"));
                return;
            }
        }
    }
}

/// What the producer delivered.
pub(super) struct Produced {
    pub(super) sent: u64,
    pub(super) delivered: u64,
    /// Delivered orders the flagship's filter keeps.
    pub(super) expected: u64,
    /// Orders not sent or not delivered, and the first reasons.
    pub(super) failed: u64,
    pub(super) failures: Vec<String>,
    pub(super) end_offsets: BTreeMap<i32, i64>,
    pub(super) flush_error: Option<String>,
}

impl Produced {
    /// Records in Kafka: the topic is fresh, so each partition's offsets count from 0.
    pub(super) fn in_kafka(&self) -> i64 {
        self.end_offsets.values().sum()
    }

    /// Records in Kafka no delivery report accounts for: a retry's second copy of a message, or a
    /// message reported failed that was stored anyway (0 when production is clean).
    pub(super) fn unreported(&self) -> i64 {
        self.in_kafka() - self.delivered as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_are_confluent_framed_avro_of_the_flagship_schema() {
        let root = crate::workspace::root();
        let text = std::fs::read_to_string(root.join("examples/kafka_avro_to_clickhouse/schemas/order.avsc")).unwrap();
        let schema = apache_avro::Schema::parse_str(&text).unwrap();
        for id in [0u64, 2, 12_345, 9_999_999] {
            let bytes = order(id);
            assert_eq!(bytes[..5], [0, 0, 0, 0, 1], "magic byte and schema id 1");
            let mut datum = &bytes[5..];
            let value = apache_avro::from_avro_datum(&schema, &mut datum, None).unwrap();
            assert!(datum.is_empty(), "the datum is read whole");
            let apache_avro::types::Value::Record(fields) = value else { panic!("a record") };
            let field = |name: &str| fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()).unwrap();
            use apache_avro::types::Value;
            assert_eq!(field("order_id"), Value::Long(id as i64));
            assert_eq!(field("total_cents"), Value::Long(100 + (id % 9000) as i64));
            let region = ["EMEA", "AMER", "APAC"][(id % 3) as usize];
            assert_eq!(field("region"), Value::Enum((id % 3) as u32, region.to_owned()));
            assert_eq!(kept(id), region != "APAC");
            assert_eq!(field("coupon"), Value::Union(0, Box::new(Value::Null)));
        }
    }
}
