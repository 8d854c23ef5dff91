//! Producing to Kafka: a producer that keeps every delivery report, since the end offsets the
//! scenarios compare commits with come from them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;

use super::PARTITIONS;
use super::infra::kafka_config;
use super::records::{order, order_framed, order_json, order_json_framed, order_proto, order_proto_framed, shop_event};

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
    /// How an order is encoded: [`order`] (Avro, Confluent-framed), [`order_json`] or
    /// [`order_proto`].
    encode: fn(i64, usize) -> Vec<u8>,
    /// How an order is framed with a given writer schema id ([`Producer::send_orders_framed`]).
    frame: fn(i64, u32) -> Vec<u8>,
}

impl Producer {
    pub fn new(topic: &str) -> Self {
        let inner = kafka_config(topic)
            .set("linger.ms", "20")
            .set("batch.num.messages", "10000")
            .set("queue.buffering.max.messages", "1000000")
            .create_with_context(Reports::default())
            .expect("producer");
        Producer { inner, topic: topic.to_owned(), sent: Arc::default(), encode: order, frame: order_framed }
    }

    /// A producer whose batches hold at most `records` messages: a durable broker stores each batch
    /// as one object.
    pub fn with_batches(topic: &str, records: usize) -> Self {
        let inner = kafka_config(topic)
            .set("linger.ms", "5")
            .set("batch.num.messages", records.to_string())
            .set("queue.buffering.max.messages", "1000000")
            .create_with_context(Reports::default())
            .expect("producer");
        Producer { inner, ..Producer::new(topic) }
    }

    /// A producer whose orders are JSON documents ([`order_json`]).
    pub fn json(topic: &str) -> Self {
        Producer { encode: order_json, frame: order_json_framed, ..Producer::new(topic) }
    }

    /// A producer of shop events ([`shop_event`], JSON) instead of orders.
    pub fn shop_events(topic: &str) -> Self {
        Producer { encode: shop_event, ..Producer::json(topic) }
    }

    /// A producer whose orders are Protobuf messages ([`order_proto`]).
    pub fn protobuf(topic: &str) -> Self {
        Producer { encode: order_proto, frame: order_proto_framed, ..Producer::new(topic) }
    }

    /// Sends one message; `tag` identifies it in [`Produced::offsets`].
    pub fn send(&self, tag: usize, partition: i32, key: &[u8], payload: Option<&[u8]>) {
        self.send_with_headers(tag, partition, key, payload, &[]);
    }

    /// [`Producer::send`] with Kafka headers, in order (a name may repeat; a value may be null).
    pub fn send_with_headers(
        &self,
        tag: usize,
        partition: i32,
        key: &[u8],
        payload: Option<&[u8]>,
        headers: &[(&str, Option<Vec<u8>>)],
    ) {
        let mut record: BaseRecord<'_, [u8], [u8], Box<usize>> =
            BaseRecord::with_opaque_to(&self.topic, Box::new(tag)).partition(partition).key(key);
        if let Some(payload) = payload {
            record = record.payload(payload);
        }
        if !headers.is_empty() {
            let mut owned = rdkafka::message::OwnedHeaders::new_with_capacity(headers.len());
            for (key, value) in headers {
                owned = owned.insert(rdkafka::message::Header { key, value: value.as_deref() });
            }
            record = record.headers(owned);
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
        self.send_orders_over(ids, coupon_len, rate, PARTITIONS);
    }

    /// [`Producer::send_orders`] over a topic of `partitions` partitions (partition = id mod
    /// `partitions`).
    pub fn send_orders_over(&self, ids: std::ops::Range<i64>, coupon_len: usize, rate: Option<u64>, partitions: i32) {
        let started = Instant::now();
        let first = ids.start;
        for id in ids {
            if let Some(rate) = rate {
                let due = started + Duration::from_secs_f64((id - first) as f64 / rate as f64);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
            let payload = (self.encode)(id, coupon_len);
            self.send(id as usize, (id % partitions as i64) as i32, id.to_string().as_bytes(), Some(&payload));
        }
    }

    /// Sends orders `ids` as [`Producer::send_orders`] does, framed with writer schema `schema_id`.
    pub fn send_orders_framed(&self, ids: std::ops::Range<i64>, schema_id: u32) {
        self.send_orders_framed_over(ids, schema_id, PARTITIONS);
    }

    /// [`Producer::send_orders_framed`] over a topic of `partitions` partitions.
    pub fn send_orders_framed_over(&self, ids: std::ops::Range<i64>, schema_id: u32, partitions: i32) {
        for id in ids {
            let payload = (self.frame)(id, schema_id);
            self.send(id as usize, (id % partitions as i64) as i32, id.to_string().as_bytes(), Some(&payload));
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
    produce_with(Producer::new(topic), ids, coupon_len, rate)
}

/// [`produce_in_background`] with another producer (another format: [`Producer::json`],
/// [`Producer::protobuf`]).
pub fn produce_with(
    producer: Producer,
    ids: std::ops::Range<i64>,
    coupon_len: usize,
    rate: u64,
) -> (Arc<AtomicU64>, std::thread::JoinHandle<Produced>) {
    let sent = producer.sent.clone();
    let thread = std::thread::spawn(move || {
        producer.send_orders(ids, coupon_len, Some(rate));
        producer.finish()
    });
    (sent, thread)
}
