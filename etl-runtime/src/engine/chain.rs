//! The chain: the contract of the generated decode → operators → encode function (the `Chain`
//! trait, which etl-gen's `emit/chain_impl.rs` writes an impl of), and the row buffers it fills.

use crate::engine::errors::RecordError;
use crate::engine::lane::Record;

/// The generated per-record function: decode the payload, apply the operators, and for each output
/// row choose a shard and append the encoded row to that shard's buffer through [`RowOut`].
///
/// One chain instance runs on each pipeline thread (hence `&mut self` and no `Sync`). Emitting no
/// row means the record was filtered; its offset still counts as done. Rows pushed before an error is
/// returned are discarded by the runtime, so a failing record never leaves half its rows behind.
pub trait Chain: Send + 'static {
    /// Processes one record. Tombstones never reach the chain: the runtime applies
    /// `errors.tombstones` to them first.
    fn process(&mut self, record: &Record<'_>, out: &mut RowOut<'_>) -> Result<(), RecordError>;
}

/// The encoded-row buffers of the lane being processed, one per shard.
///
/// Shard choice is the generated code's job: it hashes the shard key (with the hash ClickHouse's
/// Distributed engine would use) and maps the hash with [`RowOut::shard_for_key_hash`], which is
/// `hash % shards`; without a shard key it uses [`RowOut::round_robin`].
pub struct RowOut<'a> {
    pub(crate) buffers: &'a mut [OpenBuffer],
    pub(crate) round_robin: &'a mut usize,
    pub(crate) rows: u32,
}

impl RowOut<'_> {
    /// The number of shards.
    pub fn shards(&self) -> usize {
        self.buffers.len()
    }

    /// The shard of a row whose shard-key hash is `hash`: `hash % shards`.
    pub fn shard_for_key_hash(&self, hash: u64) -> usize {
        (hash % self.buffers.len() as u64) as usize
    }

    /// The next shard in this lane's round-robin order, for pipelines without a shard key.
    pub fn round_robin(&mut self) -> usize {
        let shard = *self.round_robin % self.buffers.len();
        *self.round_robin = self.round_robin.wrapping_add(1);
        shard
    }

    /// The sink slot of a row of output `output` (of `shards` shards, slots `output × shards`
    /// onwards) whose shard-key hash is `hash`: the output's shard `hash % shards`.
    pub fn output_slot_for_key_hash(&self, output: usize, shards: usize, hash: u64) -> usize {
        output * shards + (hash % shards as u64) as usize
    }

    /// The next shard of output `output` (of `shards` shards) in this lane's round-robin order.
    pub fn output_round_robin(&mut self, output: usize, shards: usize) -> usize {
        let shard = *self.round_robin % shards;
        *self.round_robin = self.round_robin.wrapping_add(1);
        output * shards + shard
    }

    /// Appends one row to `shard`'s buffer: `encode` writes the row's bytes (RowBinary for
    /// ClickHouse, one NDJSON line for the file sink) at the end of the buffer it is given.
    ///
    /// # Panics
    /// If `shard` is not below [`RowOut::shards`].
    #[inline(always)]
    pub fn push_row<R>(&mut self, shard: usize, encode: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        let buffer = &mut self.buffers[shard];
        buffer.rows += 1;
        self.rows += 1;
        encode(&mut buffer.bytes)
    }
}

/// The open (not yet sealed) buffer of one lane for one shard.
#[derive(Debug, Default)]
pub(crate) struct OpenBuffer {
    pub(crate) bytes: Vec<u8>,
    pub(crate) rows: u32,
    /// The offset of the record whose row first entered the buffer; meaningful when `rows > 0`.
    pub(crate) first_offset: i64,
    /// The offset of the record whose row last entered the buffer.
    pub(crate) last_offset: i64,
    /// Each row's source offset, under `errors.policy: dlq` only (see `Chunk::row_offsets`).
    pub(crate) row_offsets: Vec<i64>,
    /// Set by the exactly-once delivery only: the recorded span whose rows the buffer holds
    /// (`None`: a new batch).
    pub(crate) recorded: Option<(i64, i64)>,
    /// The Kafka timestamp of the first record with a timestamp whose rows entered the buffer,
    /// for `etl_end_to_end_latency_seconds`.
    pub(crate) first_timestamp_ms: Option<i64>,
    /// Set by the exactly-once delivery only: when the buffer's first row came, for `batch.linger`.
    pub(crate) opened_at: Option<std::time::Instant>,
}
