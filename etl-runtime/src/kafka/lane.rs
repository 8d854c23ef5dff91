//! One assigned Kafka partition as a lane: its split queue, its pause state at the consumer, and the
//! offsets it stores.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message as _;
use rdkafka::{Offset, TopicPartitionList};

use crate::engine::errors::SourceError;
use crate::engine::lane::{Lane, Record};

/// How far a lane got, shared with the rebalance callback so a revocation can tell how many handed-out
/// records a drain timeout abandoned.
#[derive(Debug)]
pub(crate) struct LaneProgress {
    /// The offset of the first record handed out, or -1.
    first: AtomicI64,
    /// The offset after the last record handed out, or -1.
    next: AtomicI64,
    /// The last stored next offset, or -1.
    stored: AtomicI64,
}

impl LaneProgress {
    pub(crate) fn new() -> Self {
        LaneProgress { first: AtomicI64::new(-1), next: AtomicI64::new(-1), stored: AtomicI64::new(-1) }
    }

    fn handed(&self, offset: i64) {
        if self.first.load(Ordering::Relaxed) < 0 {
            self.first.store(offset, Ordering::Relaxed);
        }
        self.next.store(offset + 1, Ordering::Release);
    }

    /// Records handed out to the pipeline but not covered by the last stored offset: after a drain,
    /// what its timeout abandoned.
    pub(crate) fn abandoned(&self) -> i64 {
        let next = self.next.load(Ordering::Acquire);
        if next < 0 {
            return 0;
        }
        let stored = self.stored.load(Ordering::Acquire);
        let base = if stored >= 0 { stored } else { self.first.load(Ordering::Relaxed) };
        (next - base).max(0)
    }

    /// The last stored next offset, if any.
    pub(crate) fn stored(&self) -> Option<i64> {
        let stored = self.stored.load(Ordering::Acquire);
        (stored >= 0).then_some(stored)
    }
}

/// A lane over one partition's split queue.
///
/// It copies each message's payload and key into buffers it reuses before handing the record over:
/// a `BorrowedMessage` borrows the queue the lane owns, and keeping both in one struct would need
/// unsafe code. The copy is one `memcpy` per message, with no allocation once the buffers have grown.
///
/// Generic over the consumer's context so that the lane does not depend on the source's context
/// (which creates lanes); the source uses one context type.
pub(crate) struct KafkaLane<C: ConsumerContext + 'static> {
    queue: PartitionQueue<C>,
    consumer: Arc<BaseConsumer<C>>,
    partition: i32,
    /// The one-partition list used for pause and resume.
    this: TopicPartitionList,
    /// The one-partition list used to store offsets; its offset is set before each store.
    store: TopicPartitionList,
    topic: Arc<str>,
    /// The partition is paused at the consumer since the assignment; the first `next` resumes it
    /// unless the runtime paused the lane first (then its `resume` does).
    resume_on_first_poll: bool,
    payload: Vec<u8>,
    key: Vec<u8>,
    progress: Arc<LaneProgress>,
}

impl<C: ConsumerContext + 'static> KafkaLane<C> {
    pub(crate) fn new(
        consumer: Arc<BaseConsumer<C>>,
        queue: PartitionQueue<C>,
        topic: Arc<str>,
        partition: i32,
        progress: Arc<LaneProgress>,
    ) -> Self {
        let mut this = TopicPartitionList::with_capacity(1);
        this.add_partition(&topic, partition);
        let mut store = TopicPartitionList::with_capacity(1);
        store.add_partition(&topic, partition);
        KafkaLane {
            queue,
            consumer,
            partition,
            this,
            store,
            topic,
            resume_on_first_poll: true,
            payload: Vec::new(),
            key: Vec::new(),
            progress,
        }
    }

    fn set_paused(&self, paused: bool) {
        let result = if paused { self.consumer.pause(&self.this) } else { self.consumer.resume(&self.this) };
        if let Err(error) = result {
            // A partition being revoked can no longer be paused; its lane is about to be dropped.
            tracing::warn!(topic = %self.topic, partition = self.partition, paused, %error, "pause/resume failed");
        }
    }
}

impl<C: ConsumerContext + 'static> Lane for KafkaLane<C> {
    fn partition(&self) -> i32 {
        self.partition
    }

    fn next(&mut self) -> Option<Result<Record<'_>, SourceError>> {
        if self.resume_on_first_poll {
            self.resume_on_first_poll = false;
            self.set_paused(false);
        }
        let message = match self.queue.poll(Duration::ZERO)? {
            Ok(message) => message,
            Err(error) => return Some(Err(lane_error(self.partition, error))),
        };
        let offset = message.offset();
        let timestamp_ms = message.timestamp().to_millis();
        let has_payload = message.payload().map(|p| {
            self.payload.clear();
            self.payload.extend_from_slice(p);
        });
        let has_key = message.key().map(|k| {
            self.key.clear();
            self.key.extend_from_slice(k);
        });
        debug_assert_eq!(message.partition(), self.partition);
        drop(message);
        self.progress.handed(offset);
        Some(Ok(Record {
            payload: has_payload.map(|()| self.payload.as_slice()),
            key: has_key.map(|()| self.key.as_slice()),
            partition: self.partition,
            offset,
            timestamp_ms,
        }))
    }

    fn pause(&mut self) {
        // From the hand-over on, the runtime alone decides: it paused first, so there is nothing left
        // to resume on the first poll and the partition is already paused at the consumer.
        if std::mem::take(&mut self.resume_on_first_poll) {
            return;
        }
        self.set_paused(true);
    }

    fn resume(&mut self) {
        self.resume_on_first_poll = false;
        self.set_paused(false);
    }

    /// Stores `next_offset` with the list form of `rd_kafka_offsets_store`, which takes the next
    /// offset to consume, unlike `store_offset(topic, partition, offset)` which adds one.
    fn store_offset(&mut self, next_offset: i64) -> Result<(), SourceError> {
        self.store
            .set_partition_offset(&self.topic, self.partition, Offset::Offset(next_offset))
            .map_err(|e| SourceError::transient(format!("partition {}: {e}", self.partition)))?;
        self.consumer.store_offsets(&self.store).map_err(|e| {
            SourceError::transient(format!("storing offset {next_offset} of partition {}: {e}", self.partition))
        })?;
        self.progress.stored.store(next_offset, Ordering::Release);
        Ok(())
    }
}

fn lane_error(partition: i32, error: KafkaError) -> SourceError {
    match error {
        KafkaError::MessageConsumptionFatal(code) => {
            SourceError::fatal(format!("partition {partition}: fatal consumer error: {code}"))
        }
        other => SourceError::transient(format!("partition {partition}: {other}")),
    }
}
