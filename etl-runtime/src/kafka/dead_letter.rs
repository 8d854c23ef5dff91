//! The Kafka dead-letter sink: failed records, raw, with error headers, written by a producer whose
//! delivery reports complete the records' acks.

use std::fmt;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::{FromClientConfigAndContext, RDKafkaLogLevel};
use rdkafka::error::KafkaError;
use rdkafka::message::{DeliveryResult, Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;

use super::context::log_to_tracing;
use super::properties;
use crate::sink::{DeadLetter, DeadLetterAck, DeadRecord, SinkError};
use crate::source::SourceError;

/// How long dropping the dead-letter sink waits for outstanding deliveries.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);

/// How often the producer thread serves delivery reports while no record arrives.
const IDLE_POLL: Duration = Duration::from_millis(20);

/// `errors.policy: dlq` on Kafka: each failed record is written to `errors.dlq_topic` with its raw key
/// and payload and these headers: `etl.error` (the error text), `etl.error.kind` (`decode`,
/// `operator`, `oversize`, `encode`), `etl.source.topic` (when set with
/// [`KafkaDeadLetter::with_source_topic`]), `etl.source.partition`, `etl.source.offset`.
///
/// [`DeadLetter::send`] only hands the record to a dedicated producer thread over an unbounded channel,
/// so the pipeline thread never blocks; that thread produces it (waiting while librdkafka's queue is
/// full) and the delivery report completes the record's [`DeadLetterAck`]: its offset counts as done
/// only once the broker acknowledged the write (librdkafka's default `acks=all`). A failed delivery
/// (after librdkafka's own retries, bounded by `message.timeout.ms`) stops the pipeline.
pub struct KafkaDeadLetter {
    topic: String,
    source_topic: Option<String>,
    jobs: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

struct Job {
    record: DeadRecord,
    ack: DeadLetterAck,
    source_topic: Option<String>,
}

impl fmt::Debug for KafkaDeadLetter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaDeadLetter").field("topic", &self.topic).field("source_topic", &self.source_topic).finish()
    }
}

impl KafkaDeadLetter {
    /// A producer for `topic` on `brokers`. `properties` are raw librdkafka properties, typically the
    /// source's `rdkafka:` map so security settings carry over; consumer-only properties among them are
    /// ignored by librdkafka with a warning.
    pub fn new(brokers: &str, topic: &str, properties: &[(String, String)]) -> Result<Self, SourceError> {
        if topic.trim().is_empty() {
            return Err(SourceError::fatal("errors.dlq_topic is empty"));
        }
        let mut all: Vec<(String, String)> = properties.to_vec();
        all.push(("bootstrap.servers".into(), brokers.to_owned()));
        let config = properties::client_config(&all, "dead-letter producer")?;
        tracing::info!(topic, properties = %properties::describe(&all), "kafka dead-letter producer configured");
        let producer = create_producer(&config)?;
        let (tx, rx) = crossbeam_channel::unbounded();
        let dlq_topic = topic.to_owned();
        let thread = std::thread::Builder::new()
            .name("etl-dlq".into())
            .spawn(move || produce_loop(producer, dlq_topic, rx))
            .map_err(|e| SourceError::fatal(format!("spawning the dead-letter thread: {e}")))?;
        Ok(KafkaDeadLetter { topic: topic.to_owned(), source_topic: None, jobs: Some(tx), thread: Some(thread) })
    }

    /// Adds the `etl.source.topic` header with this value to every dead-lettered record.
    pub fn with_source_topic(mut self, topic: &str) -> Self {
        self.source_topic = Some(topic.to_owned());
        self
    }
}

impl DeadLetter for KafkaDeadLetter {
    fn send(&self, record: DeadRecord, ack: DeadLetterAck) {
        let job = Job { record, ack, source_topic: self.source_topic.clone() };
        let Some(jobs) = self.jobs.as_ref() else {
            return job.ack.complete(Err(SinkError::fatal("the dead-letter producer is closed")));
        };
        if let Err(crossbeam_channel::SendError(job)) = jobs.send(job) {
            job.ack.complete(Err(SinkError::fatal("the dead-letter producer thread is gone")));
        }
    }
}

impl Drop for KafkaDeadLetter {
    fn drop(&mut self) {
        // Closing the channel ends the thread after it flushed what it holds.
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the dead-letter thread panicked");
        }
    }
}

struct DeliveryContext;

impl ClientContext for DeliveryContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_to_tracing(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, reason, "kafka dead-letter producer error");
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Box<DeadLetterAck>;

    fn delivery(&self, result: &DeliveryResult<'_>, ack: Box<DeadLetterAck>) {
        match result {
            Ok(_) => ack.complete(Ok(())),
            Err((error, _)) => ack.complete(Err(SinkError::fatal(format!("dead-letter delivery failed: {error}")))),
        }
    }
}

fn create_producer(config: &ClientConfig) -> Result<BaseProducer<DeliveryContext>, SourceError> {
    BaseProducer::from_config_and_context(config, DeliveryContext)
        .map_err(|e| SourceError::fatal(format!("creating the dead-letter producer: {e}")))
}

fn produce_loop(producer: BaseProducer<DeliveryContext>, topic: String, jobs: Receiver<Job>) {
    loop {
        match jobs.recv_timeout(IDLE_POLL) {
            Ok(job) => produce(&producer, &topic, job),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        producer.poll(Duration::ZERO);
    }
    if let Err(error) = producer.flush(FLUSH_TIMEOUT) {
        tracing::error!(%error, "dead-letter deliveries still outstanding at close; their offsets stay unstored");
    }
}

fn produce(producer: &BaseProducer<DeliveryContext>, topic: &str, job: Job) {
    let Job { record, ack, source_topic } = job;
    let kind = error_kind(&record.error);
    let partition = record.partition.to_string();
    let offset = record.offset.to_string();
    let mut headers = OwnedHeaders::new_with_capacity(5)
        .insert(Header { key: "etl.error", value: Some(record.error.as_bytes()) })
        .insert(Header { key: "etl.error.kind", value: Some(kind.as_bytes()) });
    if let Some(source_topic) = &source_topic {
        headers = headers.insert(Header { key: "etl.source.topic", value: Some(source_topic.as_bytes()) });
    }
    let headers = headers
        .insert(Header { key: "etl.source.partition", value: Some(partition.as_bytes()) })
        .insert(Header { key: "etl.source.offset", value: Some(offset.as_bytes()) });
    let mut message: BaseRecord<'_, [u8], [u8], Box<DeadLetterAck>> =
        BaseRecord::with_opaque_to(topic, Box::new(ack)).headers(headers);
    if let Some(key) = record.key.as_deref() {
        message = message.key(key);
    }
    if let Some(payload) = record.payload.as_deref() {
        message = message.payload(payload);
    }
    if let Some(ts) = record.timestamp_ms {
        message = message.timestamp(ts);
    }
    loop {
        match producer.send(message) {
            Ok(()) => return,
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                // Waiting here is fine: this is the dead-letter thread, not a pipeline thread.
                message = back;
                producer.poll(Duration::from_millis(100));
            }
            Err((error, back)) => {
                back.delivery_opaque.complete(Err(SinkError::fatal(format!("dead-letter produce failed: {error}"))));
                return;
            }
        }
    }
}

/// The stage of a [`crate::RecordError`] from its text (`"Decode error: ..."`): the dead-letter
/// record only carries the text.
fn error_kind(error: &str) -> String {
    match error.split_once(" error: ") {
        Some((kind, _)) if ["Decode", "Operator", "Oversize", "Encode"].contains(&kind) => kind.to_ascii_lowercase(),
        _ => "unknown".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::error_kind;

    #[test]
    fn error_kind_comes_from_the_record_error_text() {
        let error = crate::RecordError::new(crate::RecordErrorKind::Operator, "division by zero").to_string();
        assert_eq!(error_kind(&error), "operator");
        assert_eq!(error_kind("something else"), "unknown");
    }
}
