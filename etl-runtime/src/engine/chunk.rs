//! What travels from a lane to a shard and on to the sink: chunks of encoded rows, and the
//! batches a shard worker merges them into.

use std::sync::Arc;

use crate::engine::fence::Fence;
use crate::engine::lane::LaneKey;

/// A sealed buffer of encoded rows from one lane for one shard.
#[derive(Debug)]
pub struct Chunk {
    pub(crate) bytes: Vec<u8>,
    pub(crate) rows: u32,
    pub(crate) origin: ChunkOrigin,
    pub(crate) shard: usize,
    /// Sealed by a drain: the shard worker writes its batch at once instead of lingering.
    pub(crate) urgent: bool,
    /// The source offset of each row, in row order; kept only under `errors.policy: dlq`, where
    /// a row the sink refuses must be traced back to the record to dead-letter.
    pub(crate) row_offsets: Vec<i64>,
    /// Under exactly-once: the span this chunk's batch was recorded with by an earlier owner, so
    /// its token is the recorded one (`None`: a new batch, spanning the chunk's offsets).
    pub(crate) recorded: Option<(i64, i64)>,
    /// Under exactly-once: the lane's fence, closed when the lane is handed over.
    pub(crate) fence: Option<Arc<Fence>>,
    /// The Kafka timestamp (ms) of the chunk's first record that had one.
    pub(crate) first_timestamp_ms: Option<i64>,
}

/// Where a chunk's acknowledgement goes, and which offsets its rows come from.
#[derive(Debug, Clone)]
pub(crate) struct ChunkOrigin {
    pub(crate) thread: usize,
    pub(crate) lane_id: u64,
    pub(crate) lane: LaneKey,
    pub(crate) first_offset: i64,
    pub(crate) last_offset: i64,
}

impl Chunk {
    /// The encoded rows, back to back.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The number of rows.
    pub fn rows(&self) -> u32 {
        self.rows
    }

    /// The source topic the rows come from.
    pub fn topic(&self) -> &str {
        &self.origin.lane.topic
    }

    /// The source partition the rows come from.
    pub fn partition(&self) -> i32 {
        self.origin.lane.partition
    }

    /// The offset of the record whose row entered the chunk first.
    pub fn first_offset(&self) -> i64 {
        self.origin.first_offset
    }

    /// The offset of the record whose row entered the chunk last.
    pub fn last_offset(&self) -> i64 {
        self.origin.last_offset
    }

    /// What the chunk holds in memory, as the in-flight budget counts it: the encoded rows and,
    /// under `errors.policy: dlq`, their source offsets.
    pub(crate) fn held_bytes(&self) -> u64 {
        (self.bytes.len() + self.row_offsets.len() * size_of::<i64>()) as u64
    }
}

/// What a shard worker hands to [`Sink::write`](crate::Sink::write): chunks merged up to the batch limits.
#[derive(Debug)]
pub struct Batch {
    pub(crate) shard: usize,
    pub(crate) token: String,
    pub(crate) chunks: Vec<Chunk>,
    pub(crate) rows: u64,
    pub(crate) bytes: u64,
    /// The chunks' [`Chunk::held_bytes`]: what the budget gets back once the batch is done.
    pub(crate) held: u64,
    /// Under exactly-once, the batch's span (its token is derived from it).
    pub(crate) span: Option<crate::engine::ledger::Span>,
}

impl Batch {
    /// The oldest first-record timestamp of the batch's chunks: where its end-to-end latency
    /// starts.
    pub(crate) fn oldest_timestamp_ms(&self) -> Option<i64> {
        self.chunks.iter().filter_map(|c| c.first_timestamp_ms).min()
    }

    /// The shard this batch goes to.
    pub fn shard(&self) -> usize {
        self.shard
    }

    /// A token unique to this batch within the process, the same for every attempt to write it,
    /// so a sink can use it as a deduplication token across retries.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The chunks, in the order the shard worker received them.
    pub fn chunks(&self) -> &[Chunk] {
        &self.chunks
    }

    /// The total number of rows.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The total number of encoded bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The source lane and offset of row `index` of the batch (rows counted across the chunks in
    /// order), when the runtime kept them (`errors.policy: dlq`).
    pub fn row_source(&self, index: u64) -> Option<(LaneKey, i64)> {
        let mut first = 0u64;
        for chunk in &self.chunks {
            let rows = u64::from(chunk.rows);
            if index < first + rows {
                let offset = chunk.row_offsets.get(usize::try_from(index - first).ok()?)?;
                return Some((chunk.origin.lane.clone(), *offset));
            }
            first += rows;
        }
        None
    }
}
