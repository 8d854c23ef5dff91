//! At-least-once delivery: chunks sealed at `chunk.target_bytes`, merged across partitions up to
//! the batch limits, and written under a per-process token that is the same for every retry.

use std::time::Duration;

use crossbeam_channel::Sender;

use crate::config::BatchConfig;
use crate::engine::ack::Ack;
use crate::engine::chain::OpenBuffer;
use crate::engine::checkpoint::Checkpointer;
use crate::engine::chunk::{Batch, Chunk};
use crate::engine::delivery::{At, BatchPolicy, Delivery, LaneCut, note_rows};
use crate::engine::lane::Lane;
use crate::engine::ledger::Replay;
use crate::engine::shared::Shared;

/// At-least-once: every row is written at least once; a crash replays what was not committed.
pub(crate) struct AtLeastOnce {
    batch: BatchConfig,
    /// `<pipeline>-<random>`: tokens differ between processes, so a restarted process never has a
    /// new batch deduplicated against an old one.
    token_prefix: String,
}

impl AtLeastOnce {
    pub(crate) fn new(batch: BatchConfig, pipeline: &str) -> AtLeastOnce {
        AtLeastOnce { batch, token_prefix: format!("{pipeline}-{:016x}", rand::random::<u64>()) }
    }
}

impl Delivery for AtLeastOnce {
    type Lane = ();
    type Batching = SizePolicy;
    const PAUSE_WHEN_QUEUE_FULL: bool = true;

    fn open_lane(&self, _: &mut dyn Lane, _: &mut Checkpointer, _: usize, _: Option<Replay>) {}

    #[inline]
    fn place(
        _: &mut (),
        buffers: &mut [OpenBuffer],
        before: &[(usize, u32)],
        offset: i64,
        checkpointer: &mut Checkpointer,
        track_row_sources: bool,
    ) {
        for (buffer, &(_, rows_before)) in buffers.iter_mut().zip(before) {
            if buffer.rows > rows_before {
                note_rows(buffer, rows_before, offset, checkpointer, track_row_sources);
            }
        }
    }

    fn cut(_: &mut (), at: At, lane: &mut impl LaneCut) {
        match at {
            // Full chunks go at once; a pause (a rejection, or the budget's high watermark)
            // stops the lane before it seals more, so it holds at most one chunk (Invariant 7).
            At::Record => {
                let target = lane.config().chunk_target_bytes;
                for shard in 0..lane.shards() {
                    if lane.buffer(shard).bytes.len() >= target {
                        lane.seal(shard, false);
                        if lane.is_paused() {
                            break;
                        }
                    }
                }
            }
            // Nothing more at hand: what the lane has goes to the workers, which linger for the
            // other lanes' chunks.
            At::Idle => {
                for shard in 0..lane.shards() {
                    if lane.is_paused() {
                        break;
                    }
                    lane.seal(shard, false);
                }
            }
            // The rows of the records before a held one are written now rather than after the
            // hold: their offsets can be stored meanwhile.
            At::Held { started: true } => {
                for shard in 0..lane.shards() {
                    lane.seal(shard, false);
                }
            }
            // Once per drain, every buffer is sealed urgent (an empty one sends a marker), so each
            // worker writes what it holds of this lane without lingering.
            At::Drain => {
                for shard in 0..lane.shards() {
                    lane.seal(shard, true);
                }
            }
            At::Turn | At::Held { started: false } | At::Removed => {}
        }
    }

    fn batching(&self) -> SizePolicy {
        SizePolicy(self.batch)
    }

    fn name(&self, batch: &mut Batch, shard: usize, sequence: &mut u64) {
        *sequence += 1;
        batch.token = format!("{}-{shard}-{sequence}", self.token_prefix);
    }

    fn handed_over(&self, _: &Batch) -> bool {
        false
    }

    async fn before_write(&self, _: &Shared, _: &[Sender<Ack>], _: &Batch) -> bool {
        true
    }
}

/// `batch.max_rows`, `batch.max_bytes`, `batch.linger`, across partitions.
pub(crate) struct SizePolicy(BatchConfig);

impl BatchPolicy for SizePolicy {
    fn fits(&self, open: &Batch, chunk: &Chunk) -> bool {
        open.rows + u64::from(chunk.rows) <= self.0.max_rows
            && open.bytes + chunk.bytes.len() as u64 <= self.0.max_bytes
    }

    fn is_full(&self, open: &Batch) -> bool {
        open.rows >= self.0.max_rows || open.bytes >= self.0.max_bytes
    }

    fn linger(&self) -> Duration {
        self.0.linger
    }
}
