//! One batch's write: the sink call, retries with backoff under one token, refused rows under
//! `errors.policy`, and on success the bytes released and the chunks acknowledged (Invariant 2).

use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Sender;
use tokio::sync::OwnedSemaphorePermit;

use crate::config::ErrorPolicy;
use crate::engine::ack::{Ack, abandon, send_acks};
use crate::engine::chunk::Batch;
use crate::engine::delivery::Delivery;
use crate::engine::errors::{SinkError, SinkErrorKind};
use crate::engine::fault::{FaultPoint, fault};
use crate::engine::retry::backoff;
use crate::engine::shared::Shared;
use crate::engine::sink::{DeadLetterAck, DynSink};

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
    for (lane, offset) in &records {
        let (ack, done) = DeadLetterAck::for_batch();
        dead_letter.send_refused(lane, *offset, format!("Sink error: {message}"), ack);
        pending.push((lane, offset, done));
    }
    for (lane, offset, done) in pending {
        match done.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(format!("{lane} offset {offset}: {error}")),
            Err(_) => return Err(format!("{lane} offset {offset}: the dead-letter sink dropped it")),
        }
    }
    Ok(records.len() as u64)
}

/// Writes one batch, retrying retryable errors with exponential backoff and full jitter under the
/// same token, without limit unless `retry.max_attempts` sets one: a shard that is down keeps
/// its batches here, its write slots taken, so its queue fills and the lanes pause while the
/// consumer stays in its group. Success releases the bytes and acks every chunk to its pipeline
/// thread; exhaustion or a fatal error stops the pipeline and never acks, so those offsets are
/// never stored.
pub(crate) async fn write_batch<D: Delivery>(
    sink: Arc<dyn DynSink>,
    delivery: Arc<D>,
    batch: Batch,
    shared: Arc<Shared>,
    acks: Arc<Vec<Sender<Ack>>>,
    permit: OwnedSemaphorePermit,
) {
    let retry = shared.config.retry;
    let shard = batch.shard;
    let metrics = &shared.metrics;
    if !delivery.before_write(&shared, &acks, &batch).await {
        return;
    }
    let mut attempt = 1u32;
    // Set by the first retryable failure: the shard counts as failing while this write retries.
    let mut retrying = None;
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
                if delivery.handed_over(&batch) {
                    // The next owner of the partition replays this batch under the same span (it
                    // was recorded before the hand-over); retrying here could land after
                    // ClickHouse forgot the token.
                    tracing::info!(shard, token = %batch.token, %error, "the partition was handed over; its next owner writes this batch");
                    abandon(&shared.budget, &acks, &batch);
                    return;
                }
                if error.is_retryable() && retry.allows_after(attempt) {
                    let backoff = backoff(&retry, attempt);
                    retrying.get_or_insert_with(|| shared.shard_health[shard].retrying(&error));
                    tracing::warn!(shard, token = %batch.token, attempt, ?backoff, %error, "sink write failed; retrying");
                    metrics.sink_retries[shard].inc();
                    tokio::time::sleep(backoff).await;
                    attempt = attempt.saturating_add(1);
                    continue;
                }
                shared.fatal.report(format!(
                    "writing batch {} to shard {shard} failed after {attempt} attempt(s): {error}",
                    batch.token
                ));
                return;
            }
        };
        drop(retrying);
        metrics.insert_duration[shard].observe(started.elapsed().as_secs_f64());
        if let Some(oldest) = batch.oldest_timestamp_ms() {
            metrics.end_to_end_latency[shard].observe(seconds_since_ms(oldest));
        }
        metrics.batch_rows[shard].observe(batch.rows as f64);
        metrics.batch_bytes[shard].observe(batch.bytes as f64);
        metrics.records_out.inc_by(batch.rows.saturating_sub(refused));
        metrics.rows_written[shard].inc_by(batch.rows.saturating_sub(refused));
        fault(FaultPoint::InsertAcked);
        shared.budget.release(batch.held);
        drop(permit);
        send_acks(&acks, &batch, Ack::Chunks);
        tracing::trace!(shard, token = %batch.token, rows = batch.rows, bytes = batch.bytes, "batch written");
        return;
    }
}

/// Seconds from `timestamp_ms` (Unix epoch) to now; 0 for a timestamp ahead of this clock.
fn seconds_since_ms(timestamp_ms: i64) -> f64 {
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    (now_ms - timestamp_ms).max(0) as f64 / 1000.0
}
