//! What a source hands the runtime: records, and lanes (one per source partition): the `Lane`
//! trait a source implements (the Kafka source's is `kafka/partition_lane.rs`); what a pipeline
//! thread keeps of a lane is `engine/pipeline/lane_state.rs`.

use std::fmt;
use std::sync::Arc;

use crate::engine::errors::SourceError;
use crate::engine::headers::Headers;

/// The identity of a lane: one partition of one topic. A pipeline may read several topics, so a
/// partition number alone names no lane; everything the engine keys by lane (placement, fences,
/// drains, replay plans, ledger spans) takes this.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LaneKey {
    /// The source topic.
    pub topic: Arc<str>,
    /// The partition within the topic.
    pub partition: i32,
}

impl LaneKey {
    /// The lane of `partition` of `topic`.
    pub fn new(topic: impl Into<Arc<str>>, partition: i32) -> LaneKey {
        LaneKey { topic: topic.into(), partition }
    }
}

/// `orders[0], orders[1], refunds[0]`: lanes as log lines name them.
pub(crate) fn named(lanes: &[LaneKey]) -> String {
    lanes.iter().map(LaneKey::to_string).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for LaneKey {
    /// `topic[partition]`, as log lines and error messages name a lane.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.topic, self.partition)
    }
}

/// One record as a lane hands it to the pipeline thread; it borrows the lane's buffers.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// The message value; `None` is a tombstone.
    pub payload: Option<&'a [u8]>,
    /// The message key, if any.
    pub key: Option<&'a [u8]>,
    /// The source topic (the lane's topic; `_topic` in expressions).
    pub topic: &'a str,
    /// The source partition (the lane's partition).
    pub partition: i32,
    /// The record's offset within its partition.
    pub offset: i64,
    /// The record's timestamp in milliseconds since the Unix epoch, if the source has one.
    pub timestamp_ms: Option<i64>,
    /// The record's Kafka headers (`header()`, `_headers`); none for a source without them.
    pub headers: Headers<'a>,
}

/// What the source says of the records waiting for a lane ([`Lane::backlog`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backlog {
    /// The source cannot tell (a synthetic source): the lane is never watched.
    Untracked,
    /// The lane's source is unreachable (its broker is down): an outage, not a stall.
    SourceDown,
    /// Nothing was fetched for the lane yet, so the source does not know where its log ends.
    Unknown,
    /// Records at the source past the next record the lane hands out.
    Records(i64),
}

/// One source partition, polled by exactly one pipeline thread at a time.
///
/// The pipeline thread takes one record from [`Lane::next`] and fully processes it before it takes
/// the next, so a paused lane holds no unprocessed records inside the runtime.
pub trait Lane: Send + 'static {
    /// The topic this lane reads (a synthetic source names one of its own).
    fn topic(&self) -> &str;

    /// The partition this lane reads.
    fn partition(&self) -> i32;

    /// The lane's identity, (topic, partition).
    fn key(&self) -> LaneKey {
        LaneKey::new(self.topic(), self.partition())
    }

    /// The next record, without blocking. `None` means nothing is available right now (or a finite
    /// source has ended, see [`Lane::is_finished`]).
    fn next(&mut self) -> Option<Result<Record<'_>, SourceError>>;

    /// True once a finite lane has handed out its last record; an unbounded lane never finishes.
    fn is_finished(&self) -> bool {
        false
    }

    /// Stops fetching at the source; the pipeline thread does not call `next` while paused.
    fn pause(&mut self);

    /// Resumes fetching at the source.
    fn resume(&mut self);

    /// Stores `next_offset`, the offset of the next record to consume (last done + 1). Every record
    /// below it is durably written, intentionally dropped or dead-lettered (Invariant 3).
    fn store_offset(&mut self, next_offset: i64) -> Result<(), SourceError>;

    /// What the source holds for this lane past the next record it hands out, for the stall
    /// watchdog (Invariant 9). Called once a second; it must not block. A source that cannot tell
    /// answers [`Backlog::Untracked`] and its lanes are never watched.
    fn backlog(&self) -> Backlog {
        Backlog::Untracked
    }

    /// Restarts fetching at the next record the lane has not handed out, and resumes the lane at
    /// the source: the stall watchdog's recovery. Only called on a lane the runtime has not paused.
    fn refetch(&mut self) -> Result<(), SourceError> {
        Ok(())
    }

    /// The lane's fetch state in words (offsets, what the source knows of its fetch, its pause state
    /// at the source), for the stall watchdog's log lines.
    fn describe_fetch(&self) -> String {
        String::new()
    }
}
