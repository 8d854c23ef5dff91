//! Exactly-once delivery: each batch holds the rows of one partition for one shard, cut at the
//! lane where an earlier owner cut it (or at the batch limits), its span recorded in the ledger
//! before its insert, its token derived from the span (docs/adr/0001-exactly-once.md).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use crate::engine::ack::{Ack, abandon};
use crate::engine::chain::OpenBuffer;
use crate::engine::checkpoint::Checkpointer;
use crate::engine::chunk::{Batch, Chunk};
use crate::engine::delivery::{At, BatchPolicy, Delivery, LaneCut, note_rows};
use crate::engine::fault::{FaultPoint, fault};
use crate::engine::fence::Fence;
use crate::engine::lane::Lane;
use crate::engine::ledger::{Cut, Ledger, Recorded, Replay, Span};
use crate::engine::retry::backoff;
use crate::engine::shared::Shared;

/// Exactly-once over a sink's [`Ledger`].
pub(crate) struct ExactlyOnce {
    ledger: Arc<dyn Ledger>,
}

impl ExactlyOnce {
    pub(crate) fn new(ledger: Arc<dyn Ledger>) -> ExactlyOnce {
        ExactlyOnce { ledger }
    }
}

/// A lane's exactly-once state: where its replayed batches end, and the rows the last record
/// carried over to the next batch of their shard. (Its fence is the lane's, see `LaneCut::fence`.)
pub(crate) struct ExactLane {
    replay: Replay,
    /// Rows of the last record that belong to another batch than the open buffer of their shard:
    /// the buffer is sealed first, then they start the next one.
    carry: Vec<Carry>,
}

struct Carry {
    shard: usize,
    bytes: Vec<u8>,
    rows: u32,
    offset: i64,
    recorded: Option<(i64, i64)>,
}

/// Where the rows a record just added to one shard's buffer go.
enum Place {
    /// They stay in the buffer (the batch they belong to is the open one).
    Keep,
    /// They are durable already: removed.
    Drop,
    /// They belong to the next batch (`recorded` or a new one): moved out, the buffer is sealed.
    Carry(Option<(i64, i64)>),
}

impl ExactLane {
    /// Where the rows the record at `offset` added to `shard`'s buffer (which held `rows_before`
    /// rows) belong; starts the buffer's batch when it was empty.
    fn place(&mut self, shard: usize, buffer: &mut OpenBuffer, rows_before: u32, offset: i64) -> Place {
        let target = match self.replay.cut(shard, offset) {
            Cut::Durable => return Place::Drop,
            Cut::Recorded(first, last) => Some((first, last)),
            Cut::New => None,
        };
        if rows_before == 0 {
            buffer.recorded = target;
            buffer.opened_at = Some(Instant::now());
            Place::Keep
        } else if buffer.recorded == target {
            Place::Keep
        } else {
            Place::Carry(target)
        }
    }

    /// After each record: starts the next batch with the rows the record carried over (sealing
    /// the buffer they follow), then seals every buffer whose batch is complete: a recorded span
    /// whose last record was processed, or a new batch that reached the batch limits or that a
    /// recorded span starts right after.
    fn cut_after_record(&mut self, lane: &mut impl LaneCut) {
        let track = lane.tracks_row_sources();
        for carry in std::mem::take(&mut self.carry) {
            lane.seal(carry.shard, false);
            let buffer = lane.buffer(carry.shard);
            buffer.bytes.extend_from_slice(&carry.bytes);
            buffer.rows = carry.rows;
            buffer.first_offset = carry.offset;
            buffer.last_offset = carry.offset;
            buffer.recorded = carry.recorded;
            buffer.opened_at = Some(Instant::now());
            if track {
                buffer.row_offsets.extend(std::iter::repeat_n(carry.offset, carry.rows as usize));
            }
            lane.checkpointer().register(carry.offset);
        }
        let Some(offset) = lane.checkpointer().processed_through() else { return };
        let limits = lane.config().batch;
        for shard in 0..lane.shards() {
            let buffer = lane.buffer(shard);
            if buffer.rows == 0 {
                continue;
            }
            let complete = match buffer.recorded {
                Some((_, last)) => offset >= last,
                None => {
                    buffer.bytes.len() as u64 >= limits.max_bytes
                        || u64::from(buffer.rows) >= limits.max_rows
                        || self.replay.next_first(shard, offset + 1).is_some_and(|first| first <= offset + 1)
                }
            };
            if complete {
                lane.seal(shard, false);
            }
        }
    }

    /// Seals the new batches whose first row waited `batch.linger`. (Recorded batches end at their
    /// recorded last offset only.)
    fn seal_lingering(lane: &mut impl LaneCut) {
        let linger = lane.config().batch.linger;
        let now = Instant::now();
        for shard in 0..lane.shards() {
            let buffer = lane.buffer(shard);
            if buffer.rows > 0
                && buffer.recorded.is_none()
                && buffer.opened_at.is_some_and(|t| now.duration_since(t) >= linger)
            {
                lane.seal(shard, false);
            }
        }
    }

    /// At a drain: seals the new batches, and leaves a partly replayed recorded batch to the next
    /// owner. Sealing it short would insert its rows under another span (and token) than the one
    /// an earlier owner may have inserted them under; instead the watermark stays below its first
    /// offset, and the next owner replays it whole. Once the lane is fenced (its assignment was
    /// lost) nothing more is written: every open buffer is left.
    fn flush_for_drain(lane: &mut impl LaneCut) {
        let fenced = lane.fence().is_some_and(Fence::is_closed);
        let key = lane.key().clone();
        for shard in 0..lane.shards() {
            let buffer = lane.buffer(shard);
            if buffer.rows == 0 {
                continue;
            }
            let recorded = buffer.recorded.take();
            match recorded.or(fenced.then_some((buffer.first_offset, buffer.last_offset))) {
                Some((first, last)) => {
                    tracing::info!(
                        topic = %key.topic,
                        partition = key.partition,
                        shard,
                        first,
                        last,
                        fenced,
                        "drain: an unfinished batch is left to the next owner"
                    );
                    buffer.bytes.clear();
                    buffer.rows = 0;
                    buffer.row_offsets.clear();
                    buffer.opened_at = None;
                    let first_offset = buffer.first_offset;
                    lane.count_batches_left(1);
                    lane.checkpointer().abandon(first_offset);
                }
                None => lane.seal(shard, true),
            }
        }
    }
}

impl Delivery for ExactlyOnce {
    type Lane = ExactLane;
    type Batching = ChunkPolicy;
    /// Every chunk is a whole batch, so a full queue is the normal state of a lane that outruns
    /// its shard (a replay of many small recorded batches above all). The lane holds the batch
    /// and is not polled until the queue takes it, but is not paused at the source: a pause would
    /// cost `min_pause` and a refetch per batch, and librdkafka's per-partition queue cap already
    /// bounds what arrives meanwhile.
    const PAUSE_WHEN_QUEUE_FULL: bool = false;

    fn open_lane(
        &self,
        lane: &mut dyn Lane,
        checkpointer: &mut Checkpointer,
        shards: usize,
        replay: Option<Replay>,
    ) -> ExactLane {
        let replay = replay.unwrap_or_else(|| Replay::new(shards, None, &Recorded::default(), 0));
        // A replay may start below the committed offset; storing below it again would only widen
        // the next replay. Stored through the lane too (it is committed already), so the source
        // counts a drain's abandoned records from there.
        if let Some(watermark) = replay.watermark {
            if let Err(error) = lane.store_offset(watermark + 1) {
                tracing::warn!(topic = lane.topic(), partition = lane.partition(), %error, "storing the committed offset again failed");
            }
            checkpointer.mark_stored(watermark + 1);
        }
        ExactLane { replay, carry: Vec::new() }
    }

    fn place(
        lane: &mut ExactLane,
        buffers: &mut [OpenBuffer],
        before: &[(usize, u32)],
        offset: i64,
        checkpointer: &mut Checkpointer,
        track_row_sources: bool,
    ) {
        for (shard, (buffer, &(len, rows_before))) in buffers.iter_mut().zip(before).enumerate() {
            if buffer.rows <= rows_before {
                continue;
            }
            match lane.place(shard, buffer, rows_before, offset) {
                Place::Keep => note_rows(buffer, rows_before, offset, checkpointer, track_row_sources),
                Place::Drop => {
                    buffer.bytes.truncate(len);
                    buffer.rows = rows_before;
                }
                Place::Carry(recorded) => {
                    let bytes = buffer.bytes.split_off(len);
                    let rows = buffer.rows - rows_before;
                    buffer.rows = rows_before;
                    lane.carry.push(Carry { shard, bytes, rows, offset, recorded });
                }
            }
        }
    }

    fn cut(lane: &mut ExactLane, at: At, cut: &mut impl LaneCut) {
        match at {
            At::Record => lane.cut_after_record(cut),
            // Batches end at the batch limits or the linger, not whenever the source has nothing
            // at hand: every cut costs a ledger row and an insert. While a record is held, the
            // batches of the records before it still end at their linger.
            At::Turn | At::Held { .. } => ExactLane::seal_lingering(cut),
            At::Idle => {}
            At::Drain => ExactLane::flush_for_drain(cut),
            At::Removed => {
                // From here on no write task records a span of this lane (see `Fence`).
                let recording = cut.fence().map_or(0, Fence::close);
                // Counted here, when they are given up: their write tasks may outlive the
                // process (a drain that timed out at shutdown), and they find the fence closed.
                cut.count_batches_left(recording);
                if recording > 0 {
                    tracing::info!(
                        topic = %cut.key().topic,
                        partition = cut.key().partition,
                        recording,
                        "the partition is handed over while batch spans are being recorded; those batches will not \
                         be inserted by this member"
                    );
                }
            }
        }
    }

    fn batching(&self) -> ChunkPolicy {
        ChunkPolicy
    }

    fn name(&self, batch: &mut Batch, shard: usize, _sequence: &mut u64) {
        let chunk = batch.chunks.first().expect("a batch holds at least one chunk");
        debug_assert_eq!(batch.chunks.len(), 1, "exactly-once batches hold one chunk each");
        let (first, last) = chunk.recorded.unwrap_or((chunk.origin.first_offset, chunk.origin.last_offset));
        let span =
            Span { topic: chunk.origin.lane.topic.clone(), partition: chunk.origin.lane.partition, shard, first, last };
        batch.token = self.ledger.token(&span);
        batch.span = Some(span);
    }

    fn handed_over(&self, batch: &Batch) -> bool {
        batch.chunks.first().and_then(|c| c.fence.as_ref()).is_some_and(|f| f.is_closed())
    }

    async fn before_write(&self, shared: &Shared, acks: &[Sender<Ack>], batch: &Batch) -> bool {
        match &batch.span {
            Some(span) => self.record_span(shared, acks, batch, span).await,
            None => true,
        }
    }
}

impl ExactlyOnce {
    /// Makes the batch's span durable in the ledger before its insert, retrying like an insert.
    /// Returns false when the batch must not be written: the lane was handed over (its fence is
    /// closed; the next owner replays the rows), or recording failed for good (fatal).
    async fn record_span(&self, shared: &Shared, acks: &[Sender<Ack>], batch: &Batch, span: &Span) -> bool {
        let fence = batch.chunks.first().and_then(|c| c.fence.clone());
        if let Some(fence) = &fence
            && !fence.enter()
        {
            tracing::info!(
                ?span,
                "the partition was handed over before its batch was recorded; the next owner replays it"
            );
            shared.metrics.batches_left.inc();
            abandon(&shared.budget, acks, batch);
            return false;
        }
        let retry = shared.config.retry;
        let mut attempt = 1u32;
        let mut retrying = None;
        let recorded = loop {
            match self.ledger.record(span, fence.as_ref().map_or(0, |f| f.epoch)).await {
                Ok(()) => break true,
                // Recording after the hand-over is useless (the batch would not be inserted) and
                // only leaves a stray span behind.
                Err(_) if self.handed_over(batch) => break false,
                Err(error) if error.is_retryable() && retry.allows_after(attempt) => {
                    let backoff = backoff(&retry, attempt);
                    retrying.get_or_insert_with(|| shared.shard_health[span.shard].retrying(&error));
                    tracing::warn!(?span, attempt, ?backoff, %error, "recording the batch span failed; retrying");
                    shared.metrics.sink_retries[span.shard].inc();
                    tokio::time::sleep(backoff).await;
                    attempt = attempt.saturating_add(1);
                }
                Err(error) => {
                    shared.fatal.report(format!(
                        "recording the span of batch {} (partition {}, offsets {}..={}) on shard {} failed after \
                         {attempt} attempt(s): {error}",
                        batch.token, span.partition, span.first, span.last, span.shard
                    ));
                    break false;
                }
            }
        };
        if let Some(fence) = &fence
            && !fence.leave()
        {
            tracing::info!(
                ?span,
                "the partition was handed over while its batch span was recorded; the next owner replays it"
            );
            // Counted when the fence closed (`At::Removed`).
            abandon(&shared.budget, acks, batch);
            return false;
        }
        drop(retrying);
        if !recorded {
            return false;
        }
        shared.metrics.spans_recorded[span.shard].inc();
        tracing::trace!(?span, token = %batch.token, "batch span recorded");
        fault(FaultPoint::SpanRecorded);
        match &fence {
            Some(fence) => self.still_owner(shared, acks, batch, span, fence.epoch).await,
            None => true,
        }
    }

    /// Whether this member still owns the span's partition: no newer owner claimed it in the
    /// ledger. A member cut off from the group without noticing (frozen, or partitioned from the
    /// broker, past `session.timeout.ms`) learns of its loss only when it polls again, and its
    /// write tasks may run first; this check drops their batches. It runs after the span was
    /// recorded, so either it sees the newer claim, or the claim came later and the newer owner,
    /// which reads the spans after claiming, replays this span under the same token (ClickHouse
    /// drops whichever insert comes second). The cost: one small read on the partition's home
    /// shard per batch.
    async fn still_owner(&self, shared: &Shared, acks: &[Sender<Ack>], batch: &Batch, span: &Span, epoch: u64) -> bool {
        let retry = shared.config.retry;
        let mut attempt = 1u32;
        // The claims are read on the partition's home shard: that shard is the one failing.
        let home = span.partition.rem_euclid(shared.config.shards as i32) as usize;
        let mut _retrying = None;
        loop {
            match self.ledger.owner(span).await {
                Ok(owner) if owner > epoch => {
                    tracing::warn!(
                        ?span,
                        epoch,
                        owner,
                        "a newer owner took the partition over while this member was cut off from the group; \
                         the batch is dropped (the new owner replays its rows)"
                    );
                    shared.metrics.superseded_batches.inc();
                    abandon(&shared.budget, acks, batch);
                    return false;
                }
                Ok(_) => return true,
                Err(_) if self.handed_over(batch) => {
                    abandon(&shared.budget, acks, batch);
                    return false;
                }
                Err(error) if error.is_retryable() && retry.allows_after(attempt) => {
                    let backoff = backoff(&retry, attempt);
                    _retrying.get_or_insert_with(|| shared.shard_health[home].retrying(&error));
                    shared.metrics.sink_retries[home].inc();
                    tracing::warn!(?span, attempt, ?backoff, %error, "reading the partition's owner failed; retrying");
                    tokio::time::sleep(backoff).await;
                    attempt = attempt.saturating_add(1);
                }
                Err(error) => {
                    shared.fatal.report(format!(
                        "reading the owner of {}[{}] before inserting batch {} failed after {attempt} \
                         attempt(s): {error}",
                        span.topic, span.partition, batch.token
                    ));
                    return false;
                }
            }
        }
    }
}

/// Every chunk is a batch of its own. The lane already cut it where a batch ends (the batch
/// limits, the linger, or a span an earlier owner recorded), so its span is the batch's.
pub(crate) struct ChunkPolicy;

impl BatchPolicy for ChunkPolicy {
    fn fits(&self, open: &Batch, _chunk: &Chunk) -> bool {
        open.chunks.is_empty()
    }

    fn is_full(&self, _open: &Batch) -> bool {
        true
    }

    fn linger(&self) -> Duration {
        Duration::ZERO
    }
}
