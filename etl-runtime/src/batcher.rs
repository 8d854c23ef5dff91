//! The shard worker: merges chunks into batches and writes them, with retries, on the tokio runtime.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use rand::Rng;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::{BatchConfig, ErrorPolicy, RetryConfig};
use crate::exactly_once::{FaultPoint, Span, fault};
use crate::handle::Shared;
use crate::pipeline::Ack;
use crate::sink::{Batch, Chunk, DeadLetterAck, Sink, SinkError, SinkErrorKind};

/// Decides where batches are cut: across partitions up to the size limits, or, under exactly-once,
/// one chunk per batch (the lane cut it at the batch limits or at a recorded span).
pub(crate) trait BatchPolicy: Send {
    /// Whether `chunk` may join the open batch; false writes the open batch first.
    fn fits(&self, open: &Batch, chunk: &Chunk) -> bool;
    /// Whether the open batch must be written now.
    fn is_full(&self, open: &Batch) -> bool;
    /// How long a non-empty batch may wait for more chunks.
    fn linger(&self) -> Duration;
}

/// `batch.max_rows`, `batch.max_bytes`, `batch.linger`, across partitions.
pub(crate) struct SizePolicy(pub(crate) BatchConfig);

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

/// Exactly-once: every chunk is a batch of its own. The lane already cut it where a batch ends
/// (the batch limits, the linger, or a span an earlier owner recorded), so its span is the batch's.
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

/// One shard's worker thread.
pub(crate) struct ShardWorker<K> {
    pub(crate) shard: usize,
    pub(crate) rx: Receiver<Chunk>,
    pub(crate) sink: Arc<K>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) permits: Arc<Semaphore>,
    pub(crate) acks: Arc<Vec<Sender<Ack>>>,
    pub(crate) token_prefix: String,
}

impl<K: Sink> ShardWorker<K> {
    /// Receives chunks until every pipeline thread has dropped its sender, writing a batch when it is
    /// full, when its linger expires, or when a drain sealed one of its chunks.
    pub(crate) fn run(self) {
        let policy: Box<dyn BatchPolicy> = if self.shared.config.exactly_once {
            Box::new(ChunkPolicy)
        } else {
            Box::new(SizePolicy(self.shared.config.batch))
        };
        let mut open: Option<(Batch, Instant)> = None;
        let mut sequence = 0u64;
        loop {
            let received = match &open {
                None => self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some((_, started)) => self.rx.recv_deadline(*started + policy.linger()),
            };
            match received {
                Ok(chunk) if chunk.rows == 0 => {
                    // A drain's marker: write what is open now, and drop the marker itself.
                    if let Some((batch, _)) = open.take()
                        && !self.write(batch, &mut sequence)
                    {
                        return;
                    }
                }
                Ok(chunk) => {
                    if let Some((batch, _)) = &open
                        && !policy.fits(batch, &chunk)
                    {
                        let (batch, _) = open.take().expect("checked above");
                        if !self.write(batch, &mut sequence) {
                            return;
                        }
                    }
                    let urgent = chunk.urgent;
                    let (batch, _) = open.get_or_insert_with(|| (self.empty_batch(), Instant::now()));
                    batch.rows += u64::from(chunk.rows);
                    batch.bytes += chunk.bytes.len() as u64;
                    batch.held += chunk.held_bytes();
                    batch.chunks.push(chunk);
                    if urgent || policy.is_full(batch) {
                        let (batch, _) = open.take().expect("just inserted");
                        if !self.write(batch, &mut sequence) {
                            return;
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    if let Some((batch, _)) = open.take()
                        && !self.write(batch, &mut sequence)
                    {
                        return;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    if let Some((batch, _)) = open.take() {
                        self.write(batch, &mut sequence);
                    }
                    return;
                }
            }
        }
    }

    fn empty_batch(&self) -> Batch {
        Batch { shard: self.shard, token: String::new(), chunks: Vec::new(), rows: 0, bytes: 0, held: 0, span: None }
    }

    /// Waits for a write slot — while it waits it does not receive, so the shard queue fills and the
    /// pipeline threads see rejections: that is the backpressure — then spawns the write. Returns
    /// false when the pipeline is closing and the worker must end.
    fn write(&self, mut batch: Batch, sequence: &mut u64) -> bool {
        match (&self.shared.ledger, batch.chunks.as_slice()) {
            (Some(ledger), [chunk]) => {
                let (first, last) = chunk.recorded.unwrap_or((chunk.origin.first_offset, chunk.origin.last_offset));
                let span = Span { partition: chunk.origin.partition, shard: self.shard, first, last };
                batch.token = ledger.token(&span);
                batch.span = Some(span);
            }
            _ => {
                *sequence += 1;
                batch.token = format!("{}-{}-{}", self.token_prefix, self.shard, sequence);
            }
        }
        if handed_over(&batch) {
            // Not worth a write slot: it would be given up (see `record_span`).
            give_up(&self.shared, &self.acks, &batch);
            return true;
        }
        let permit = match self.runtime.block_on(self.permits.clone().acquire_owned()) {
            Ok(permit) => permit,
            Err(_) => return false,
        };
        let task = write_batch(self.sink.clone(), batch, self.shared.clone(), self.acks.clone(), permit);
        self.runtime.spawn(task);
        true
    }
}

/// Dead-letters the records whose rows the sink refused (each record once, however many of its
/// rows were refused) and waits until every one is durable; returns how many records went.
async fn dead_letter_refused(shared: &Shared, batch: &Batch, rows: &[u64], message: &str) -> Result<u64, String> {
    let dead_letter = shared.dead_letter.as_ref().ok_or("no dead-letter sink")?;
    let mut records = std::collections::BTreeSet::new();
    for &row in rows {
        let source =
            batch.row_source(row).ok_or_else(|| format!("row {row} of the batch has no known source record"))?;
        records.insert(source);
    }
    let mut pending = Vec::with_capacity(records.len());
    for &(partition, offset) in &records {
        let (ack, done) = DeadLetterAck::for_batch();
        dead_letter.send_refused(partition, offset, format!("Sink error: {message}"), ack);
        pending.push((partition, offset, done));
    }
    for (partition, offset, done) in pending {
        match done.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(format!("partition {partition} offset {offset}: {error}")),
            Err(_) => return Err(format!("partition {partition} offset {offset}: the dead-letter sink dropped it")),
        }
    }
    Ok(records.len() as u64)
}

/// Writes one batch, retrying retryable errors with exponential backoff and full jitter under the
/// same token. Success releases the bytes and acks every chunk to its pipeline thread; exhaustion
/// or a fatal error stops the pipeline and never acks, so those offsets are never stored.
async fn write_batch<K: Sink>(
    sink: Arc<K>,
    batch: Batch,
    shared: Arc<Shared>,
    acks: Arc<Vec<Sender<Ack>>>,
    permit: OwnedSemaphorePermit,
) {
    let retry = shared.config.retry;
    let shard = batch.shard;
    let metrics = &shared.metrics;
    if let Some(span) = batch.span
        && !record_span(&shared, &acks, &batch, &span).await
    {
        return;
    }
    let mut attempt = 1u32;
    loop {
        let started = Instant::now();
        let refused = match sink.write(shard, &batch).await {
            Ok(()) => 0,
            // The sink wrote every other row (`errors.policy` applies to the rows a
            // sink refuses, not to the whole batch, so one bad row cannot crash-loop the
            // pipeline). Under `skip` the batch is complete; otherwise the pipeline stops.
            Err(SinkError { kind: SinkErrorKind::Data { rows }, message })
                if shared.config.error_policy == ErrorPolicy::Skip =>
            {
                tracing::warn!(shard, token = %batch.token, refused = rows.len(), error = %message, "the sink refused rows; errors.policy is skip");
                metrics.sink_errors[shard].inc();
                metrics.dropped_sink_refused.inc_by(rows.len() as u64);
                rows.len() as u64
            }
            // Under `dlq` the records behind the refused rows go to the dead-letter sink, and the
            // batch completes only once they are there: their offsets are stored with the batch's.
            Err(SinkError { kind: SinkErrorKind::Data { rows }, message }) if shared.track_row_sources => {
                metrics.sink_errors[shard].inc();
                match dead_letter_refused(&shared, &batch, &rows, &message).await {
                    Ok(records) => {
                        tracing::warn!(shard, token = %batch.token, refused = rows.len(), records, error = %message, "the sink refused rows; their records were dead-lettered");
                        metrics.dropped_dead_letter.inc_by(records);
                        rows.len() as u64
                    }
                    Err(error) => {
                        shared.fatal.report(format!(
                            "writing batch {} to shard {shard}: the sink refused {} row(s) ({message}) and dead-lettering \
                             them failed: {error}",
                            batch.token,
                            rows.len()
                        ));
                        return;
                    }
                }
            }
            Err(error) => {
                metrics.sink_errors[shard].inc();
                if handed_over(&batch) {
                    // Exactly-once: the next owner of the partition replays this batch under the
                    // same span (it was recorded before the hand-over); retrying here could land
                    // after ClickHouse forgot the token.
                    tracing::info!(shard, token = %batch.token, %error, "the partition was handed over; its next owner writes this batch");
                    give_up(&shared, &acks, &batch);
                    return;
                }
                if error.is_retryable() && attempt < retry.max_attempts {
                    let backoff = backoff(&retry, attempt);
                    tracing::warn!(shard, token = %batch.token, attempt, ?backoff, %error, "sink write failed; retrying");
                    metrics.sink_retries[shard].inc();
                    tokio::time::sleep(backoff).await;
                    attempt += 1;
                    continue;
                }
                shared.fatal.report(format!(
                    "writing batch {} to shard {shard} failed after {attempt} attempt(s): {error}",
                    batch.token
                ));
                return;
            }
        };
        metrics.insert_duration[shard].observe(started.elapsed().as_secs_f64());
        metrics.batch_rows[shard].observe(batch.rows as f64);
        metrics.batch_bytes[shard].observe(batch.bytes as f64);
        metrics.records_out.inc_by(batch.rows.saturating_sub(refused));
        fault(FaultPoint::InsertAcked);
        shared.budget.release(batch.held);
        drop(permit);
        send_acks(&acks, &batch, Ack::Chunks);
        tracing::trace!(shard, token = %batch.token, rows = batch.rows, bytes = batch.bytes, "batch written");
        return;
    }
}

/// Sends each chunk's `(lane_id, first_offset)` to its pipeline thread, wrapped by `ack`.
fn send_acks(acks: &[Sender<Ack>], batch: &Batch, ack: fn(Vec<(u64, i64)>) -> Ack) {
    let mut per_thread: Vec<Vec<(u64, i64)>> = vec![Vec::new(); acks.len()];
    for chunk in &batch.chunks {
        per_thread[chunk.origin.thread].push((chunk.origin.lane_id, chunk.origin.first_offset));
    }
    for (thread, chunks) in per_thread.into_iter().enumerate() {
        if !chunks.is_empty() {
            // A closed channel means the thread has exited; its lanes are gone.
            let _ = acks[thread].send(ack(chunks));
        }
    }
}

/// Exactly-once: true once the batch's lane was handed over (its fence is closed).
fn handed_over(batch: &Batch) -> bool {
    batch.chunks.first().and_then(|c| c.fence.as_ref()).is_some_and(|f| f.is_closed())
}

/// Exactly-once: drops a batch whose partition was handed over. Its bytes go back to the budget
/// and its chunks are reported abandoned, so a drain still waiting for them can finish (the
/// watermark stays below them; the next owner replays their records).
fn give_up(shared: &Shared, acks: &[Sender<Ack>], batch: &Batch) {
    shared.budget.release(batch.held);
    send_acks(acks, batch, Ack::Abandoned);
}

/// Exactly-once: makes the batch's span durable in the ledger before its insert, retrying like an
/// insert. Returns false when the batch must not be written: the lane was handed over (its fence
/// is closed; the next owner replays the rows), or recording failed for good (fatal).
async fn record_span(shared: &Shared, acks: &[Sender<Ack>], batch: &Batch, span: &Span) -> bool {
    let Some(ledger) = shared.ledger.as_ref() else { return true };
    let fence = batch.chunks.first().and_then(|c| c.fence.clone());
    if let Some(fence) = &fence
        && !fence.enter()
    {
        tracing::info!(?span, "the partition was handed over before its batch was recorded; the next owner replays it");
        give_up(shared, acks, batch);
        return false;
    }
    let retry = shared.config.retry;
    let mut attempt = 1u32;
    let recorded = loop {
        match ledger.record(span, fence.as_ref().map_or(0, |f| f.epoch)).await {
            Ok(()) => break true,
            // Recording after the hand-over is useless (the batch would not be inserted) and
            // only leaves a stray span behind.
            Err(_) if handed_over(batch) => break false,
            Err(error) if error.is_retryable() && attempt < retry.max_attempts => {
                let backoff = backoff(&retry, attempt);
                tracing::warn!(?span, attempt, ?backoff, %error, "recording the batch span failed; retrying");
                shared.metrics.sink_retries[span.shard].inc();
                tokio::time::sleep(backoff).await;
                attempt += 1;
            }
            Err(error) => {
                shared.fatal.report(format!(
                    "recording the span of batch {} (partition {}, offsets {}..={}) on shard {} failed after {attempt} \
                     attempt(s): {error}",
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
        give_up(shared, acks, batch);
        return false;
    }
    if recorded {
        shared.metrics.spans_recorded[span.shard].inc();
        tracing::trace!(?span, token = %batch.token, "batch span recorded");
        fault(FaultPoint::SpanRecorded);
    }
    recorded
}

/// Full jitter: a uniform wait in `[0, min(max_backoff, initial_backoff × 2^(attempt-1))]`.
pub(crate) fn backoff(retry: &RetryConfig, attempt: u32) -> Duration {
    let factor = 1u32.checked_shl(attempt.saturating_sub(1).min(31)).unwrap_or(u32::MAX);
    let cap = retry.initial_backoff.saturating_mul(factor).min(retry.max_backoff);
    let nanos = cap.as_nanos().min(u128::from(u64::MAX)) as u64;
    Duration::from_nanos(rand::rng().random_range(0..=nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The backoff stays within its exponential cap and never exceeds max_backoff.
    #[test]
    fn backoff_is_bounded_by_exponential_cap() {
        let retry = RetryConfig {
            max_attempts: 10,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        };
        for attempt in 1..40 {
            let cap = Duration::from_millis(100).saturating_mul(1 << (attempt - 1).min(20)).min(Duration::from_secs(1));
            for _ in 0..50 {
                assert!(backoff(&retry, attempt) <= cap);
            }
        }
    }
}
