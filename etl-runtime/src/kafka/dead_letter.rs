//! The Kafka dead-letter sink: failed records, raw, with error headers, written by a producer whose
//! delivery reports complete the records' acks.

use std::fmt;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::{FromClientConfigAndContext, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::{DeliveryResult, Header, Message as _, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use super::auth::{KafkaAuth, TokenSource};
use super::properties;
use super::properties::log_to_tracing;
use crate::engine::errors::SinkError;
use crate::engine::errors::SourceError;
use crate::engine::lane::LaneKey;
use crate::engine::sink::{DeadLetter, DeadLetterAck, DeadRecord};

/// How long dropping the dead-letter sink waits for outstanding deliveries.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);

/// How often the producer thread serves delivery reports while no record arrives.
const IDLE_POLL: Duration = Duration::from_millis(20);

/// `errors.policy: dlq` on Kafka: each failed record is written to `errors.dlq_topic` with its raw key
/// and payload and these headers: `etl.error` (the error text), `etl.error.kind` (`decode`,
/// `operator`, `oversize`, `encode`, or `sink` for a row the sink refused), `etl.source.topic` (when
/// set with [`KafkaDeadLetter::with_source_topic`]), `etl.source.partition`, `etl.source.offset`.
/// A record read back from this topic by `dlq replay` that fails again keeps the `etl.source.*`
/// of its first failure and gets `etl.replay.count` (1 after its first replay, then one more each).
///
/// A row the sink refused ([`DeadLetter::send_refused`]) no longer has its raw record in memory:
/// the producer thread reads it again from the source topic by partition and offset (with a
/// consumer of its own that joins no group and commits nothing), then writes it like any other.
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
    /// The record's key, payload and timestamp must first be read again from the source topic.
    refetch: bool,
}

/// How long re-reading a refused row's record from the source may take before the pipeline stops.
const REFETCH_TIMEOUT: Duration = Duration::from_secs(30);

impl fmt::Debug for KafkaDeadLetter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaDeadLetter").field("topic", &self.topic).field("source_topic", &self.source_topic).finish()
    }
}

impl KafkaDeadLetter {
    /// A producer for `topic` on `brokers`. `properties` are raw librdkafka properties, typically the
    /// source's `rdkafka:` map so security settings carry over; consumer-only properties among them are
    /// ignored by librdkafka with a warning.
    pub fn new(
        brokers: &str,
        topic: &str,
        properties: &[(String, String)],
        auth: Option<KafkaAuth>,
    ) -> Result<Self, SourceError> {
        if topic.trim().is_empty() {
            return Err(SourceError::fatal("errors.dlq_topic is empty"));
        }
        let mut all: Vec<(String, String)> = properties.to_vec();
        let context = DeliveryContext { tokens: TokenSource::new(auth.as_ref(), &mut all)? };
        all.push(("bootstrap.servers".into(), brokers.to_owned()));
        all.extend(super::auth::properties(auth.as_ref()));
        // `auto.offset.reset` (which the generated code always passes, defaulted) means nothing to
        // a producer, and librdkafka would warn about it at every start.
        let producing: Vec<(String, String)> = all.iter().filter(|(k, _)| k != "auto.offset.reset").cloned().collect();
        let config = properties::client_config(&producing, "dead-letter producer")?;
        tracing::info!(topic, properties = %properties::describe(&producing), "kafka dead-letter producer configured");
        let producer = create_producer(&config, context.clone())?;
        let (tx, rx) = crossbeam_channel::unbounded();
        let dlq_topic = topic.to_owned();
        // The consumer that re-reads refused rows' records: the same client properties (security
        // settings), no group, nothing committed. Created when first needed.
        // The source's fetch wait unless the passthrough sets one: an object-store broker answers
        // with what it could read within it (`properties::DEFAULT_FETCH_WAIT_MAX_MS`).
        let mut reader = vec![("fetch.wait.max.ms".to_owned(), properties::DEFAULT_FETCH_WAIT_MAX_MS.to_string())];
        reader.extend(all.iter().cloned());
        reader.extend([
            ("group.id".to_owned(), format!("etl-dlq-reader-{}", std::process::id())),
            ("enable.auto.commit".to_owned(), "false".to_owned()),
            ("enable.auto.offset.store".to_owned(), "false".to_owned()),
            ("enable.partition.eof".to_owned(), "false".to_owned()),
        ]);
        let reader = properties::client_config(&reader, "dead-letter reader")?;
        let thread = std::thread::Builder::new()
            .name("etl-dlq".into())
            .spawn(move || produce_loop(producer, reader, context, dlq_topic, rx))
            .map_err(|e| SourceError::fatal(format!("spawning the dead-letter thread: {e}")))?;
        Ok(KafkaDeadLetter { topic: topic.to_owned(), source_topic: None, jobs: Some(tx), thread: Some(thread) })
    }

    /// The `etl.source.topic` header of a record that does not name its topic (every record of
    /// the Kafka source does: the header is then the record's own topic).
    pub fn with_source_topic(mut self, topic: &str) -> Self {
        self.source_topic = Some(topic.to_owned());
        self
    }
}

impl KafkaDeadLetter {
    fn submit(&self, job: Job) {
        let Some(jobs) = self.jobs.as_ref() else {
            return job.ack.complete(Err(SinkError::fatal("the dead-letter producer is closed")));
        };
        if let Err(crossbeam_channel::SendError(job)) = jobs.send(job) {
            job.ack.complete(Err(SinkError::fatal("the dead-letter producer thread is gone")));
        }
    }
}

impl DeadLetter for KafkaDeadLetter {
    fn send(&self, record: DeadRecord, ack: DeadLetterAck) {
        let source_topic = Some(record.topic.clone()).filter(|t| !t.is_empty()).or_else(|| self.source_topic.clone());
        self.submit(Job { record, ack, source_topic, refetch: false });
    }

    fn topic(&self) -> Option<&str> {
        Some(&self.topic)
    }

    fn send_refused(&self, lane: &LaneKey, offset: i64, error: String, ack: DeadLetterAck) {
        let record = DeadRecord {
            payload: None,
            key: None,
            topic: lane.topic.to_string(),
            partition: lane.partition,
            offset,
            timestamp_ms: None,
            headers: Vec::new(),
            error,
        };
        self.submit(Job { record, ack, source_topic: Some(lane.topic.to_string()), refetch: true });
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

/// The dead-letter producer's and reader's context: logs, deliveries, and tokens.
#[derive(Clone)]
struct DeliveryContext {
    tokens: TokenSource,
}

impl ClientContext for DeliveryContext {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(
        &self,
        _config: Option<&str>,
    ) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
        self.tokens.token()
    }

    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_to_tracing(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, reason, "kafka dead-letter producer error");
    }
}

// The reader of refused rows' records shares the context for its logs; it never rebalances.
impl ConsumerContext for DeliveryContext {}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Box<DeadLetterAck>;

    fn delivery(&self, result: &DeliveryResult<'_>, ack: Box<DeadLetterAck>) {
        match result {
            Ok(_) => ack.complete(Ok(())),
            Err((error, _)) => ack.complete(Err(SinkError::fatal(format!("dead-letter delivery failed: {error}")))),
        }
    }
}

fn create_producer(
    config: &ClientConfig,
    context: DeliveryContext,
) -> Result<BaseProducer<DeliveryContext>, SourceError> {
    BaseProducer::from_config_and_context(config, context)
        .map_err(|e| SourceError::fatal(format!("creating the dead-letter producer: {e}")))
}

fn produce_loop(
    producer: BaseProducer<DeliveryContext>,
    reader: ClientConfig,
    context: DeliveryContext,
    topic: String,
    jobs: Receiver<Job>,
) {
    let mut reader_state: Option<Reader> = None;
    loop {
        match jobs.recv_timeout(IDLE_POLL) {
            Ok(mut job) if job.refetch => {
                let source = job.source_topic.clone().unwrap_or_default();
                match refetch(&mut reader_state, &reader, &context, &source, &mut job.record) {
                    Ok(()) => produce(&producer, &topic, job),
                    Err(error) => job.ack.complete(Err(SinkError::fatal(format!(
                        "reading partition {} offset {} of `{source}` again: {error}",
                        job.record.partition, job.record.offset
                    )))),
                }
            }
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
    let Job { record, ack, mut source_topic, .. } = job;
    let kind = error_kind(&record.error);
    let mut partition = record.partition.to_string();
    let mut offset = record.offset.to_string();
    // A dead letter that `dlq replay` read back from this very topic and that failed again: it
    // keeps the coordinates of the record it started as, and counts its replays.
    let mut replays = None;
    if source_topic.as_deref() == Some(topic) {
        let earlier = |name: &str| {
            record
                .headers
                .iter()
                .find(|(n, _)| &n[..] == name.as_bytes())
                .and_then(|(_, v)| v.as_deref())
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        if let (Some(t), Some(p), Some(o)) =
            (earlier("etl.source.topic"), earlier("etl.source.partition"), earlier("etl.source.offset"))
        {
            (source_topic, partition, offset) = (Some(t), p, o);
        }
        let count = earlier("etl.replay.count").and_then(|c| c.parse::<u64>().ok()).unwrap_or(0);
        replays = Some((count + 1).to_string());
    }
    let mut headers = OwnedHeaders::new_with_capacity(record.headers.len() + 5);
    // The record's own headers first, as it arrived (a replay reads them again); the `etl.*` ones
    // of an earlier failure are left out, replaced by this one's. rdkafka takes names as text, so
    // a name that is not UTF-8 is kept with U+FFFD for its invalid bytes.
    for (name, value) in &record.headers {
        let name = String::from_utf8_lossy(name);
        if !name.starts_with("etl.") {
            headers = headers.insert(Header { key: &name, value: value.as_deref() });
        }
    }
    let mut headers = headers
        .insert(Header { key: "etl.error", value: Some(record.error.as_bytes()) })
        .insert(Header { key: "etl.error.kind", value: Some(kind.as_bytes()) });
    if let Some(source_topic) = &source_topic {
        headers = headers.insert(Header { key: "etl.source.topic", value: Some(source_topic.as_bytes()) });
    }
    let mut headers = headers
        .insert(Header { key: "etl.source.partition", value: Some(partition.as_bytes()) })
        .insert(Header { key: "etl.source.offset", value: Some(offset.as_bytes()) });
    if let Some(replays) = &replays {
        headers = headers.insert(Header { key: "etl.replay.count", value: Some(replays.as_bytes()) });
    }
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

/// The consumer that reads refused rows' records again, and where it stands.
struct Reader {
    consumer: BaseConsumer<DeliveryContext>,
    /// The topic and partition assigned, and the offset the next message read from it will have
    /// at the earliest: the records of one batch come sorted, so most reads continue forward
    /// without a new assignment (each costs a fetch round trip). The topic is part of it: two
    /// topics of one pipeline have the same partition numbers.
    position: Option<(String, i32, i64)>,
}

/// Fills `record`'s key, payload and timestamp from the source topic at its partition and offset.
fn refetch(
    reader: &mut Option<Reader>,
    config: &ClientConfig,
    context: &DeliveryContext,
    topic: &str,
    record: &mut DeadRecord,
) -> Result<(), String> {
    if reader.is_none() {
        let consumer = BaseConsumer::from_config_and_context(config, context.clone())
            .map_err(|e| format!("creating the dead-letter reader: {e}"))?;
        *reader = Some(Reader { consumer, position: None });
    }
    let reader = reader.as_mut().expect("created above");
    let (partition, offset) = (record.partition, record.offset);
    let reuse = matches!(&reader.position, Some((t, p, next)) if t == topic && *p == partition && *next <= offset);
    if !reuse {
        let mut assignment = TopicPartitionList::new();
        assignment.add_partition_offset(topic, partition, Offset::Offset(offset)).map_err(|e| e.to_string())?;
        reader.consumer.assign(&assignment).map_err(|e| format!("assigning the partition: {e}"))?;
        reader.position = Some((topic.to_owned(), partition, offset));
    }
    let deadline = Instant::now() + REFETCH_TIMEOUT;
    let mut last_error = None;
    while Instant::now() < deadline {
        match reader.consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) if message.partition() == partition && message.topic() == topic => {
                reader.position = Some((topic.to_owned(), partition, message.offset() + 1));
                if message.offset() == offset {
                    record.key = message.key().map(<[u8]>::to_vec);
                    record.payload = message.payload().map(<[u8]>::to_vec);
                    record.timestamp_ms = message.timestamp().to_millis();
                    record.headers = super::batches::owned_headers(&message);
                    return Ok(());
                }
                if message.offset() > offset {
                    return Err(format!("the topic no longer has it (the next offset read is {})", message.offset()));
                }
            }
            Some(Ok(_)) | None => {}
            Some(Err(error)) => last_error = Some(error.to_string()),
        }
    }
    reader.position = None;
    Err(match last_error {
        Some(error) => format!("not read within {REFETCH_TIMEOUT:?}: {error}"),
        None => format!("not read within {REFETCH_TIMEOUT:?}"),
    })
}

/// The stage of a [`crate::engine::errors::RecordError`] from its text (`"Decode error: ..."`): the dead-letter
/// record only carries the text.
fn error_kind(error: &str) -> String {
    match error.split_once(" error: ") {
        Some((kind, _)) if ["Decode", "Operator", "Oversize", "Encode", "Sink"].contains(&kind) => {
            kind.to_ascii_lowercase()
        }
        _ => "unknown".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::error_kind;

    #[test]
    fn error_kind_comes_from_the_record_error_text() {
        let error = crate::engine::errors::RecordError::new(
            crate::engine::errors::RecordErrorKind::Operator,
            "division by zero",
        )
        .to_string();
        assert_eq!(error_kind(&error), "operator");
        assert_eq!(error_kind("something else"), "unknown");
    }
}
