//! A partition's split queue read a batch of messages at a time (`rd_kafka_consume_batch_queue`),
//! the one place the Kafka source reaches past rdkafka's safe API into rdkafka-sys.
//!
//! rdkafka's `PartitionQueue::poll` returns one message per call, and each call pays librdkafka's
//! poll bookkeeping (two clock reads for `max.poll.interval.ms` and its idle-ratio telemetry), one
//! more clock read in rdkafka's `poll_queue`, and an event object plus an `Arc` allocated around
//! the message. A batch pays the bookkeeping once for up to [`BATCH_MESSAGES`] messages, and the
//! messages are handed out as borrowed views of librdkafka's own memory, so the lane no longer
//! copies payloads either. librdkafka still takes the queue's lock once per message inside the
//! batch call (uncontended: only this lane's thread and the fetcher touch the queue).

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;

use rdkafka::bindings as rdsys;
use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerContext};
use rdkafka::error::RDKafkaErrorCode;

/// The most messages one batch call takes. A lane holds at most this many messages that the
/// pipeline has not processed yet; what they can weigh is bounded by what their queue held
/// (`gen --memory`'s "batches held by lanes" term), not by this count.
pub const BATCH_MESSAGES: usize = 64;

/// One assigned partition's queue, split from the consumer's main queue so that its messages reach
/// only the thread that owns its lane, and read in batches.
///
/// Owns up to one batch of messages: those not handed out yet, and the one handed out last (alive
/// until the next call, since the view borrows it). Dropping it destroys them, then the queue
/// handle, then its reference to the consumer, which must outlive both.
pub struct PartitionBatches<C: ConsumerContext + 'static> {
    queue: NonNull<rdsys::rd_kafka_queue_t>,
    /// `messages[cursor..len]` are not handed out yet; `messages[cursor - 1]` is alive while
    /// `handed` is set; every other slot is destroyed or never filled.
    messages: Box<[*mut rdsys::rd_kafka_message_t; BATCH_MESSAGES]>,
    len: usize,
    cursor: usize,
    handed: bool,
    partition: i32,
    /// Kept alive while the queue and its messages are.
    _consumer: Arc<BaseConsumer<C>>,
}

// SAFETY: librdkafka's queue handles and messages may be used and destroyed from any thread; the
// struct is owned by one thread at a time (it is not `Sync`), and the consumer it keeps alive is
// `Send + Sync` itself.
unsafe impl<C: ConsumerContext + 'static> Send for PartitionBatches<C> {}

/// One message of a batch, borrowed from librdkafka until the next call to
/// [`PartitionBatches::poll`].
#[derive(Clone, Copy)]
pub struct BatchMessage<'a>(&'a rdsys::rd_kafka_message_t);

impl<'a> BatchMessage<'a> {
    /// The value; `None` for a tombstone.
    pub fn payload(&self) -> Option<&'a [u8]> {
        // SAFETY: librdkafka guarantees `len` readable bytes at `payload` while the message lives,
        // and the message lives as long as the borrow of its batch.
        (!self.0.payload.is_null())
            .then(|| unsafe { std::slice::from_raw_parts(self.0.payload as *const u8, self.0.len) })
    }

    /// The key, if any.
    pub fn key(&self) -> Option<&'a [u8]> {
        // SAFETY: as for `payload`.
        (!self.0.key.is_null()).then(|| unsafe { std::slice::from_raw_parts(self.0.key as *const u8, self.0.key_len) })
    }

    pub fn offset(&self) -> i64 {
        self.0.offset
    }

    pub fn partition(&self) -> i32 {
        self.0.partition
    }

    /// Create or log-append time in milliseconds since the Unix epoch, if the message has one.
    pub fn timestamp_ms(&self) -> Option<i64> {
        let mut kind = rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        // SAFETY: a live message and a valid out-pointer.
        let ms = unsafe { rdsys::rd_kafka_message_timestamp(self.0, &mut kind) };
        (kind != rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE && ms >= 0).then_some(ms)
    }
}

impl<C: ConsumerContext + 'static> PartitionBatches<C> {
    /// Splits the queue of `topic`/`partition` off the consumer's main queue. Call it before the
    /// partition is assigned: from then on the fetcher never forwards the partition's messages to
    /// the main queue. `None` when the topic name holds a NUL byte or librdkafka refuses.
    pub fn split(consumer: &Arc<BaseConsumer<C>>, topic: &str, partition: i32) -> Option<Self> {
        let topic = CString::new(topic).ok()?;
        // SAFETY: a live client handle and a NUL-terminated topic; the returned queue is ours to
        // destroy. Forwarding to null detaches it from the main queue, as rdkafka's
        // `split_partition_queue` does.
        let queue = unsafe {
            let queue = rdsys::rd_kafka_queue_get_partition(consumer.client().native_ptr(), topic.as_ptr(), partition);
            let queue = NonNull::new(queue)?;
            rdsys::rd_kafka_queue_forward(queue.as_ptr(), std::ptr::null_mut());
            queue
        };
        Some(PartitionBatches {
            queue,
            messages: Box::new([std::ptr::null_mut(); BATCH_MESSAGES]),
            len: 0,
            cursor: 0,
            handed: false,
            partition,
            _consumer: consumer.clone(),
        })
    }

    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// Messages taken from the queue and not handed out yet.
    pub fn held(&self) -> usize {
        self.len - self.cursor
    }

    /// The next message without blocking: from the batch held, or from a new batch when that one
    /// is used up. `None` when the queue is empty. The message handed out before is destroyed now.
    /// An error is a message too (a fetch error), and takes its place in the order.
    pub fn poll(&mut self) -> Option<Result<BatchMessage<'_>, RDKafkaErrorCode>> {
        self.release_handed();
        if self.cursor == self.len {
            self.cursor = 0;
            self.len = 0;
            // SAFETY: a live queue, and room for `BATCH_MESSAGES` pointers, which become ours.
            // A timeout of 0 never blocks.
            let taken = unsafe {
                rdsys::rd_kafka_consume_batch_queue(self.queue.as_ptr(), 0, self.messages.as_mut_ptr(), BATCH_MESSAGES)
            };
            if taken < 0 {
                // SAFETY: reads librdkafka's thread-local last error.
                return Some(Err(unsafe { rdsys::rd_kafka_last_error() }.into()));
            }
            self.len = (taken as usize).min(BATCH_MESSAGES);
            if self.len == 0 {
                return None;
            }
        }
        // SAFETY: `cursor < len`, so this slot holds a live message that only this struct owns.
        let message = unsafe { &*self.messages[self.cursor] };
        self.cursor += 1;
        self.handed = true;
        if message.err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Some(Err(message.err.into()));
        }
        Some(Ok(BatchMessage(message)))
    }

    fn release_handed(&mut self) {
        if std::mem::take(&mut self.handed) {
            // SAFETY: the message handed out last is alive (`handed`), and no view of it is (the
            // caller gave up its borrow to call us).
            unsafe { rdsys::rd_kafka_message_destroy(self.messages[self.cursor - 1]) };
        }
    }
}

impl<C: ConsumerContext + 'static> Drop for PartitionBatches<C> {
    fn drop(&mut self) {
        self.release_handed();
        for &message in &self.messages[self.cursor..self.len] {
            // SAFETY: not handed out, so alive and ours.
            unsafe { rdsys::rd_kafka_message_destroy(message) };
        }
        // SAFETY: every message is destroyed; the queue handle is ours and the consumer (a field,
        // dropped after this) is still alive.
        unsafe { rdsys::rd_kafka_queue_destroy(self.queue.as_ptr()) };
    }
}
