//! One lane's turn in its thread's loop: resend held chunks, retry a held record, resume or
//! pause, then take up to a burst of records through the chain.

use std::time::{Duration, Instant};

use crate::config::{ErrorPolicy, TombstonePolicy};
use crate::engine::chain::{Chain, RowOut};
use crate::engine::delivery::{At, Delivery};
use crate::engine::errors::{RecordError, RecordErrorKind, SourceErrorKind};
use crate::engine::pipeline::PipelineThread;
use crate::engine::pipeline::drain::SELF_DRAIN;
use crate::engine::pipeline::lane_state::{Held, LaneState};
use crate::engine::pipeline::seal::send_pending;
use crate::engine::sink::{DeadLetterAck, DeadRecord};

/// How many records one lane may process before the thread looks at acks, control messages and its
/// other lanes again. It bounds the gap between two iterations of the loop.
const BURST: usize = 256;

/// How long a lane of a delivery that holds lanes on a full queue waits before it pauses at the
/// source as well.
const HOLD_BEFORE_PAUSE: Duration = Duration::from_secs(1);

pub(super) enum Poll {
    Record,
    Idle,
    Stop,
    /// The record is held until a dependency is available again: pause the lane.
    Wait,
}

impl<C: Chain, D: Delivery> PipelineThread<C, D> {
    /// One iteration for one lane. Returns true when the lane did work and may have more.
    pub(super) fn step_lane(&mut self, i: usize, high: bool, stopped: bool) -> bool {
        if !self.lanes[i].pending.is_empty() {
            send_pending(&mut self.lanes[i], &self.queues, &self.shared);
        }
        if self.lanes[i].pending.is_empty() {
            self.lanes[i].held_since = None;
        }
        if self.lanes[i].drain.is_some() {
            if !self.lanes[i].drain_flushed {
                self.cut(i, At::Drain);
                self.lanes[i].drain_flushed = true;
            }
            return false;
        }
        if self.lanes[i].failed || stopped {
            return false;
        }
        if !D::PAUSE_WHEN_QUEUE_FULL && !self.lanes[i].pending.is_empty() {
            // A delivery that does not pause on a full queue holds the lane instead: it is not
            // polled (nor its held record retried) until the queue takes the chunk. One that
            // pauses lets the pause controller decide, below. A lane held this long has a shard
            // that is down or far behind, not a replay's short wait: it is paused at the source
            // too, so the broker keeps the backlog and `etl_backpressure_paused` shows it. The
            // pause controller resumes it once the queue took the chunk.
            let lane = &mut self.lanes[i];
            let since = *lane.held_since.get_or_insert_with(Instant::now);
            if lane.paused_since.is_none() && since.elapsed() >= HOLD_BEFORE_PAUSE {
                lane.pause(&self.shared);
            }
            return false;
        }
        if let Some(next_try) = self.lanes[i].held.as_ref().map(|h| h.next_try) {
            // The lane stays paused at the source while its held record waits for its next try.
            if Instant::now() < next_try {
                self.cut(i, At::Held { started: false });
                return false;
            }
            match self.poll_one(i) {
                Poll::Record => {
                    if self.after_record(i) {
                        return false;
                    }
                }
                Poll::Wait | Poll::Stop | Poll::Idle => return false,
            }
            // Processed at last: the lane resumes on a later turn, once the pause controller agrees.
        }
        let operator_paused = self.shared.operator_paused();
        if let Some(since) = self.lanes[i].paused_since {
            if operator_paused {
                // Paused for maintenance: what the lane read is written (and its offsets then
                // stored) while it waits, rather than when it resumes. Under exactly-once the
                // batches still end at their linger.
                let started = !std::mem::replace(&mut self.lanes[i].sealed_for_operator, true);
                self.cut(i, At::Held { started });
                return false;
            }
            let lane = &self.lanes[i];
            let ready = lane.pending.is_empty()
                && self.shared.budget.below_low()
                && since.elapsed() >= self.shared.config.backpressure.min_pause;
            if !ready {
                return false;
            }
            self.lanes[i].resume(&self.shared);
        }
        if high || operator_paused {
            // The budget is at its high watermark: every producing lane pauses (Invariant 6). Or
            // the operator paused the pipeline: the same pause, so the member stays in its group.
            self.lanes[i].pause(&self.shared);
            return false;
        }
        self.cut(i, At::Turn);
        if !self.lanes[i].pending.is_empty() {
            return false;
        }
        // The turn's last poll decides whether the lane is starved: `Poll::Idle` below sets it.
        self.lanes[i].starved = false;
        for _ in 0..BURST {
            match self.poll_one(i) {
                Poll::Record => {
                    if self.after_record(i) {
                        return false;
                    }
                }
                Poll::Wait => {
                    self.cut(i, At::Held { started: true });
                    self.lanes[i].pause(&self.shared);
                    return false;
                }
                Poll::Idle => {
                    let lane = &mut self.lanes[i];
                    lane.starved = true;
                    if lane.lane.is_finished() {
                        // A finished lane drains itself: its last chunks are written at once rather
                        // than after the batch linger, then its final offset is stored.
                        tracing::info!(topic = %lane.key.topic, partition = lane.key.partition, "lane finished; draining it");
                        lane.drain = Some((SELF_DRAIN, Instant::now() + Duration::from_secs(365 * 24 * 3600)));
                        lane.update_lag();
                        return false;
                    }
                    self.cut(i, At::Idle);
                    self.lanes[i].update_lag();
                    return false;
                }
                Poll::Stop => return false,
            }
        }
        self.lanes[i].update_lag();
        true
    }

    /// Lets the delivery cut after a processed record. Returns true when the lane must stop for
    /// now (paused, failed, or holding a chunk its queue rejected).
    fn after_record(&mut self, i: usize) -> bool {
        self.cut(i, At::Record);
        let lane = &self.lanes[i];
        lane.paused_since.is_some() || lane.failed || !lane.pending.is_empty()
    }

    /// Takes one record from the lane (or the record it holds) and runs it through the chain.
    fn poll_one(&mut self, i: usize) -> Poll {
        let PipelineThread { lanes, deliveries, chain, shared, snapshot, counts, ack_tx, .. } = self;
        let LaneState {
            id,
            lane,
            buffers,
            round_robin,
            checkpointer,
            failed,
            newest_timestamp_ms,
            key,
            held: held_slot,
            ..
        } = &mut lanes[i];
        let held = held_slot.take();
        let record = match &held {
            Some(held) => held.record(),
            None => match lane.next() {
                None => return Poll::Idle,
                Some(Err(error)) if error.kind == SourceErrorKind::Transient => {
                    tracing::warn!(topic = %key.topic, partition = key.partition, %error, "transient source error");
                    return Poll::Idle;
                }
                Some(Err(error)) => {
                    *failed = true;
                    shared.fatal.report(format!("partition {key}: {error}"));
                    return Poll::Stop;
                }
                Some(Ok(record)) => record,
            },
        };
        if held.is_none() {
            counts.records_in += 1;
        }
        let offset = record.offset;
        if record.timestamp_ms.is_some() {
            *newest_timestamp_ms = record.timestamp_ms;
        }
        if record.payload.is_none() {
            match shared.config.tombstones {
                TombstonePolicy::Skip => {
                    counts.tombstones += 1;
                    checkpointer.processed(offset);
                    return Poll::Record;
                }
                TombstonePolicy::Fail => {
                    *failed = true;
                    shared.fatal.report(format!("tombstone at partition {key} offset {offset}"));
                    return Poll::Stop;
                }
            }
        }

        snapshot.clear();
        snapshot.extend(buffers.iter().map(|b| (b.bytes.len(), b.rows)));
        // Round-robin follows the offset, not a per-lane counter, so a replay puts every row on
        // the shard it went to before (exactly-once re-cuts batches per shard).
        *round_robin = offset as usize;
        let mut out = RowOut { buffers, round_robin, rows: 0 };
        let result = chain.process(&record, &mut out);
        let rows = out.rows;
        match result {
            Ok(()) => {
                if rows == 0 {
                    counts.filtered += 1;
                }
                D::place(&mut deliveries[i], buffers, snapshot, offset, checkpointer, shared.track_row_sources);
                if rows > 0
                    && let Some(ts) = record.timestamp_ms
                {
                    // A buffer's latency starts at its first row's record (one compare per shard).
                    for buffer in buffers.iter_mut() {
                        if buffer.rows > 0 && buffer.first_timestamp_ms.is_none() {
                            buffer.first_timestamp_ms = Some(ts);
                        }
                    }
                }
                checkpointer.processed(offset);
                Poll::Record
            }
            Err(mut error) => {
                // Rows pushed before the error are discarded so the record leaves nothing behind.
                for (buffer, &(len, rows_before)) in buffers.iter_mut().zip(snapshot.iter()) {
                    buffer.bytes.truncate(len);
                    buffer.rows = rows_before;
                }
                if error.kind == RecordErrorKind::Unavailable {
                    // Not the record's fault: held and tried again until the timeout (see `Held`).
                    let now = Instant::now();
                    let timeout = shared.config.unavailable_timeout;
                    let since = held.as_ref().map_or(now, |h| h.since);
                    if now.duration_since(since) < timeout {
                        // `record` borrows the held record, so a fresh hold is made before it moves.
                        let fresh = held.is_none().then(|| Held::of(&record, now));
                        let mut waiting = match held {
                            Some(held) => held,
                            None => fresh.expect("a fresh hold for a record taken from the lane"),
                        };
                        waiting.failed_again(now, timeout);
                        tracing::warn!(
                            topic = %key.topic,
                            partition = key.partition,
                            offset,
                            attempt = waiting.attempts,
                            retry_in_ms = waiting.next_try.saturating_duration_since(now).as_millis() as u64,
                            %error,
                            "the record needs something unavailable; holding it with its lane paused"
                        );
                        shared.metrics.unavailable_retries.inc();
                        *held_slot = Some(waiting);
                        return Poll::Wait;
                    }
                    error = RecordError::new(
                        RecordErrorKind::Decode,
                        format!("{} (still failing after {timeout:?}: the format's registry_timeout)", error.message),
                    );
                }
                match (shared.config.error_policy, shared.dead_letter.as_ref()) {
                    (ErrorPolicy::Skip, _) => {
                        tracing::debug!(topic = %key.topic, partition = key.partition, offset, %error, "record skipped");
                        counts.errors += 1;
                        checkpointer.processed(offset);
                        Poll::Record
                    }
                    (ErrorPolicy::DeadLetter, Some(dead_letter)) => {
                        tracing::debug!(topic = %key.topic, partition = key.partition, offset, %error, "record sent to the dead-letter sink");
                        counts.dead_letters += 1;
                        checkpointer.register(offset);
                        checkpointer.processed(offset);
                        let ack = DeadLetterAck::for_lane(ack_tx.clone(), shared.fatal.clone(), *id, offset);
                        dead_letter.send(DeadRecord::from_record(&record, error.to_string()), ack);
                        Poll::Record
                    }
                    (ErrorPolicy::Fail, _) | (ErrorPolicy::DeadLetter, None) => {
                        *failed = true;
                        shared.fatal.report(format!("record at partition {key} offset {offset}: {error}"));
                        Poll::Stop
                    }
                }
            }
        }
    }
}
