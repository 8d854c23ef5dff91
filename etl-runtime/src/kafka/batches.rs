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

use crate::engine::headers::{HeaderSource, Headers, OwnedHeader};

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
    position: Position,
    partition: i32,
    /// The topic, NUL-terminated for librdkafka's per-partition calls.
    topic: CString,
    /// Kept alive while the queue and its messages are.
    consumer: Arc<BaseConsumer<C>>,
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

    /// The headers, read on demand: librdkafka parses a message's headers on first access, so a
    /// chain that reads none pays nothing for them.
    pub fn headers(&self) -> Headers<'a> {
        Headers::of(self.0)
    }
}

/// The headers of a message read through rdkafka's safe consumer API, copied (names as bytes).
pub(crate) fn owned_headers(message: &rdkafka::message::BorrowedMessage<'_>) -> Vec<OwnedHeader> {
    // SAFETY: the pointer is the live message `message` borrows, for as long as that borrow.
    let native: &rdsys::rd_kafka_message_t = unsafe { &*message.ptr() };
    Headers::of(native).to_owned_headers()
}

/// The header list of a live message, if it has one.
fn native_headers(message: &rdsys::rd_kafka_message_t) -> Option<*const rdsys::rd_kafka_headers_t> {
    let mut headers = std::ptr::null_mut();
    // SAFETY: a live message and a valid out-pointer; librdkafka parses the headers into the
    // message once and returns the same list on later calls, owned by the message.
    let err = unsafe { rdsys::rd_kafka_message_headers(message, &mut headers) };
    (err == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && !headers.is_null())
        .then_some(headers.cast_const())
}

/// rdkafka's own header accessor panics on a name that is not UTF-8 (Kafka does not check, and
/// another client's producer may send one): names are read as bytes here instead.
impl HeaderSource for rdsys::rd_kafka_message_t {
    fn count(&self) -> usize {
        // SAFETY: a header list owned by this live message.
        native_headers(self).map_or(0, |headers| unsafe { rdsys::rd_kafka_header_cnt(headers) })
    }

    fn get(&self, index: usize) -> Option<(&[u8], Option<&[u8]>)> {
        let headers = native_headers(self)?;
        let (mut name, mut value, mut size) = (std::ptr::null(), std::ptr::null(), 0);
        // SAFETY: a header list owned by this live message and valid out-pointers; an index past
        // the end is an error, not undefined behaviour.
        let err = unsafe { rdsys::rd_kafka_header_get_all(headers, index, &mut name, &mut value, &mut size) };
        if err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            return None;
        }
        // SAFETY: librdkafka keeps each name NUL-terminated and each value `size` bytes long in
        // memory owned by the message, which outlives the borrow of `self`.
        let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
        let value = (!value.is_null()).then(|| unsafe { std::slice::from_raw_parts(value.cast::<u8>(), size) });
        Some((name, value))
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
            position: Position::default(),
            partition,
            topic,
            consumer: consumer.clone(),
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
            // librdkafka 2.12 returns a count, never an error.
            self.len = taken.clamp(0, BATCH_MESSAGES as isize) as usize;
            if self.len == 0 {
                return None;
            }
            for &message in &self.messages[..self.len] {
                // SAFETY: just taken, alive and ours.
                let message = unsafe { &*message };
                if message.err == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                    self.position.message(message.offset);
                } else {
                    self.position.error(message.offset);
                }
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

    /// Where fetching must restart after the partition is resumed, when librdkafka's own restart
    /// position would skip a message: see [`Position`]. The lane seeks there after each resume
    /// while this is `Some`.
    pub fn rewind(&self) -> Option<i64> {
        self.position.rewind()
    }

    /// The partition's high watermark as the last fetch response gave it (librdkafka's cached
    /// value: no request is made), or `None` before any fetch response for it.
    pub fn high_watermark(&self) -> Option<i64> {
        let (mut low, mut high) = (-1i64, -1i64);
        // SAFETY: a live client handle, a NUL-terminated topic and two valid out-pointers.
        let err = unsafe {
            rdsys::rd_kafka_get_watermark_offsets(
                self.consumer.client().native_ptr(),
                self.topic.as_ptr(),
                self.partition,
                &mut low,
                &mut high,
            )
        };
        (err == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some(high)
    }

    /// Drops the messages taken from the queue and not handed out yet, before the lane restarts
    /// its fetch at the next offset (which fetches them again).
    pub fn discard_unread(&mut self) {
        self.release_handed();
        for &message in &self.messages[self.cursor..self.len] {
            // SAFETY: not handed out, so alive and ours.
            unsafe { rdsys::rd_kafka_message_destroy(message) };
        }
        self.cursor = 0;
        self.len = 0;
        self.position = Position::default();
    }

    fn release_handed(&mut self) {
        if std::mem::take(&mut self.handed) {
            // SAFETY: the message handed out last is alive (`handed`), and no view of it is (the
            // caller gave up its borrow to call us).
            unsafe { rdsys::rd_kafka_message_destroy(self.messages[self.cursor - 1]) };
        }
    }
}

/// What a partition's batches took, against librdkafka's application position.
///
/// A batch call sets librdkafka's application position (where a resumed partition is fetched
/// from) one past the highest offset of every message it returns, error messages included
/// (`rd_kafka_q_serve_rkmessages`), and a fetch error carries the offset not fetched yet. A batch
/// that ends with such an error leaves the position one past a message nobody has taken: pause
/// and resume the partition before that message arrives, and it would never be fetched. So the
/// lane tracks what it took, and seeks back after a resume while the position is ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    /// One past the last message taken (errors excluded), or -1 before the first.
    taken: i64,
    /// librdkafka's position, while an error message has put it past `taken`.
    ahead: Option<i64>,
}

impl Default for Position {
    fn default() -> Self {
        Position { taken: -1, ahead: None }
    }
}

impl Position {
    fn message(&mut self, offset: i64) {
        self.taken = self.taken.max(offset + 1);
        if self.ahead.is_some_and(|ahead| self.taken >= ahead) {
            self.ahead = None;
        }
    }

    fn error(&mut self, offset: i64) {
        if offset >= 0 && offset + 1 > self.taken {
            self.ahead = Some(self.ahead.map_or(offset + 1, |ahead| ahead.max(offset + 1)));
        }
    }

    /// The offset to fetch from after a resume: the next message not taken. Before any message
    /// was taken, that is the error's own offset (the one not fetched yet).
    fn rewind(&self) -> Option<i64> {
        self.ahead.map(|ahead| if self.taken >= 0 { self.taken } else { ahead - 1 })
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

/// The high watermark librdkafka last saw in a fetch answer for `topic`/`partition` (no request
/// is made; `None` before the first fetch). rdkafka wraps only the ListOffsets request, which some
/// brokers answer wrongly for the log end (Tansu, see `kafka::offsets`).
pub(crate) fn fetched_high_watermark<C: rdkafka::consumer::ConsumerContext>(
    consumer: &rdkafka::consumer::BaseConsumer<C>,
    topic: &str,
    partition: i32,
) -> Option<i64> {
    use rdkafka::consumer::Consumer as _;
    let topic = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client pointer is valid while `consumer` lives, the topic name is a C string
    // that outlives the call, and the call only writes the two integers.
    let err = unsafe {
        rdsys::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (err == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some(high)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::Position;

    /// One thing a batch can return: a message at the next offset of the partition (after a gap
    /// of `gap` offsets, as compaction or transaction markers leave), or a fetch error carrying
    /// the offset not fetched yet.
    #[derive(Debug, Clone, Copy)]
    enum Taken {
        Message { gap: i64 },
        Error,
    }

    fn taken() -> impl Strategy<Value = Taken> {
        prop_oneof![3 => (0i64..3).prop_map(|gap| Taken::Message { gap }), 1 => Just(Taken::Error)]
    }

    proptest! {
        /// Invariant 3 at the batch level: whatever messages and fetch errors the batches took,
        /// a partition paused and resumed at that moment is fetched again from an offset no
        /// higher than the next message not taken (nothing is skipped) and, once a message was
        /// taken, no lower than one past it (nothing taken is fetched twice). librdkafka's own
        /// restart position is modelled as it is computed: one past the highest offset taken,
        /// errors included.
        #[test]
        fn a_resume_never_skips_a_message_nor_refetches_one(
            start in 0i64..1000,
            sequence in proptest::collection::vec(taken(), 0..30),
        ) {
            let mut position = Position::default();
            let (mut next_fetch, mut librdkafka) = (start, -1i64);
            let mut last_taken: Option<i64> = None;
            for step in sequence {
                match step {
                    Taken::Message { gap } => {
                        let offset = next_fetch + gap;
                        next_fetch = offset + 1;
                        position.message(offset);
                        librdkafka = librdkafka.max(offset + 1);
                        last_taken = Some(offset);
                    }
                    Taken::Error => {
                        position.error(next_fetch);
                        librdkafka = librdkafka.max(next_fetch + 1);
                    }
                }
                let restart = position.rewind().unwrap_or(librdkafka);
                if librdkafka >= 0 {
                    prop_assert!(restart <= next_fetch, "restarts at {restart}, past the next message at {next_fetch}");
                }
                if let Some(last) = last_taken {
                    prop_assert!(restart > last, "restarts at {restart}, refetching {last}");
                }
            }
        }
    }
}
