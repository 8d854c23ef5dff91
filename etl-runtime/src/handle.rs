//! Starting and stopping a pipeline, and the handle through which sources add and drain lanes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use tokio::sync::Semaphore;

use crate::batcher::ShardWorker;
use crate::budget::Budget;
use crate::chain::Chain;
use crate::config::RuntimeConfig;
use crate::exactly_once::{Fence, Ledger, Replay};
use crate::metrics::Metrics;
use crate::pipeline::{Ack, Control, PipelineThread};
use crate::sink::{Chunk, DeadLetter, Sink, SinkErrorKind};
use crate::source::Lane;

/// A running pipeline: pipeline threads, shard workers, and the tokio runtime the sink writes on.
///
/// [`crate::run`] drives one from a [`crate::Source`] and the process signals; tests and benchmarks
/// drive one directly through [`Pipeline::handle`].
pub struct Pipeline {
    handle: PipelineHandle,
    threads: Vec<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
    permits: Vec<Arc<Semaphore>>,
    runtime: Option<tokio::runtime::Runtime>,
    stop_rx: Receiver<()>,
    fatal_rx: Receiver<()>,
}

/// Why [`Pipeline::wait`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// A signal or [`PipelineHandle::request_shutdown`] asked for a graceful stop.
    Stop,
    /// A fatal error: the pipeline must stop with exit code 1.
    Fatal(String),
    /// Nothing happened within the timeout.
    Timeout,
}

/// Counters about the pipeline's own behaviour, for tests and diagnostics.
#[derive(Debug, Clone, Copy)]
pub struct PipelineStats {
    /// The in-flight bytes right now.
    pub inflight_bytes: u64,
    /// The largest in-flight byte count seen so far.
    pub peak_inflight_bytes: u64,
    /// `backpressure.max_inflight_bytes`.
    pub max_inflight_bytes: u64,
    /// The longest gap between two iterations of any pipeline thread's loop.
    pub max_loop_gap: Duration,
    /// Lane pauses so far.
    pub pause_events: u64,
    /// Lanes paused right now.
    pub paused_lanes: usize,
    /// Lanes owned right now.
    pub live_lanes: usize,
}

/// What a shutdown achieved.
#[derive(Debug, Clone)]
pub struct ShutdownReport {
    /// The final stored `next_offset` of each lane drained by the shutdown (`None`: nothing stored).
    pub offsets: Vec<(i32, Option<i64>)>,
    /// True when every lane was fully acknowledged before the drain deadline.
    pub complete: bool,
    /// The fatal error that stopped the pipeline, if any.
    pub fatal: Option<String>,
}

/// The pipeline failed to start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The runtime configuration is inconsistent.
    #[error("invalid runtime configuration: {0}")]
    Config(String),
    /// A thread or the tokio runtime could not be created.
    #[error("could not start the runtime: {0}")]
    Io(#[from] std::io::Error),
    /// The metrics registry refused a metric.
    #[error("could not register metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

impl Pipeline {
    /// Starts the pipeline threads (one chain each, from `chains`), one worker thread per shard and
    /// the sink's tokio runtime. No lane exists yet: a source adds them through [`Pipeline::handle`].
    pub fn start<C, F, K>(
        config: RuntimeConfig,
        chains: F,
        sink: K,
        dead_letter: Option<Arc<dyn DeadLetter>>,
    ) -> Result<Pipeline, StartError>
    where
        C: Chain,
        F: Fn() -> C,
        K: Sink,
    {
        config.validate().map_err(StartError::Config)?;
        if config.error_policy == crate::ErrorPolicy::DeadLetter && dead_letter.is_none() {
            return Err(StartError::Config("errors.policy is dlq but no dead-letter sink was given".into()));
        }
        let metrics = Metrics::new(config.shards, &config.pipeline, &config.config_hash, &config.version)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("etl-sink")
            .enable_all()
            .build()?;

        let (queue_tx, queue_rx): (Vec<Sender<Chunk>>, Vec<Receiver<Chunk>>) =
            (0..config.shards).map(|_| crossbeam_channel::bounded(config.queue_capacity)).unzip();
        let acks: Vec<(Sender<Ack>, Receiver<Ack>)> =
            (0..config.threads).map(|_| crossbeam_channel::unbounded()).collect();
        let controls: Vec<(Sender<Control>, Receiver<Control>)> =
            (0..config.threads).map(|_| crossbeam_channel::unbounded()).collect();
        let (stop_tx, stop_rx) = crossbeam_channel::unbounded();
        let (fatal_tx, fatal_rx) = crossbeam_channel::unbounded();

        let track_row_sources = config.error_policy == crate::ErrorPolicy::DeadLetter && dead_letter.is_some();
        let ledger = if config.exactly_once {
            Some(sink.ledger().ok_or_else(|| {
                StartError::Config("exactly_once is set but the sink keeps no ledger of batch spans".into())
            })?)
        } else {
            None
        };
        let shared = Arc::new(Shared {
            budget: Budget::new(&config.backpressure),
            lane_counts: (0..config.threads).map(|_| AtomicUsize::new(0)).collect(),
            config,
            metrics,
            fatal: FatalSlot(Arc::new(FatalInner {
                flag: AtomicBool::new(false),
                message: Mutex::new(None),
                wake: fatal_tx,
            })),
            paused_lanes: AtomicUsize::new(0),
            max_loop_gap_ns: AtomicU64::new(0),
            track_row_sources,
            dead_letter,
            ledger,
            queue_rx: queue_rx.clone(),
            source_ready: AtomicBool::new(false),
            sink_ready: AtomicBool::new(false),
            sink_check_failed: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
        });

        let sink = Arc::new(sink);
        let ack_senders: Arc<Vec<Sender<Ack>>> = Arc::new(acks.iter().map(|(tx, _)| tx.clone()).collect());
        let token_prefix = format!("{}-{:016x}", shared.config.pipeline, rand::random::<u64>());
        let permits: Vec<Arc<Semaphore>> =
            (0..shared.config.shards).map(|_| Arc::new(Semaphore::new(shared.config.inflight_per_shard))).collect();

        let mut workers = Vec::new();
        for (shard, rx) in queue_rx.into_iter().enumerate() {
            let worker = ShardWorker {
                shard,
                rx,
                sink: sink.clone(),
                shared: shared.clone(),
                runtime: runtime.handle().clone(),
                permits: permits[shard].clone(),
                acks: ack_senders.clone(),
                token_prefix: token_prefix.clone(),
            };
            workers.push(std::thread::Builder::new().name(format!("etl-shard-{shard}")).spawn(move || worker.run())?);
        }

        {
            let sink = sink.clone();
            let shared = shared.clone();
            runtime.spawn(async move { check_sink(&*sink, &shared).await });
        }

        let mut threads = Vec::new();
        for (index, ((ack_tx, ack_rx), (_, control_rx))) in acks.into_iter().zip(controls.iter().cloned()).enumerate() {
            let thread =
                PipelineThread::new(index, chains(), control_rx, (ack_tx, ack_rx), queue_tx.clone(), shared.clone());
            threads
                .push(std::thread::Builder::new().name(format!("etl-pipeline-{index}")).spawn(move || thread.run())?);
        }
        drop(queue_tx);

        let handle = PipelineHandle {
            inner: Arc::new(HandleInner {
                control: controls.into_iter().map(|(tx, _)| tx).collect(),
                shared,
                placement: Mutex::new(HashMap::new()),
                fences: Mutex::new(HashMap::new()),
                next_lane_id: AtomicU64::new(1),
                stop: stop_tx,
                runtime: runtime.handle().clone(),
            }),
        };
        tracing::info!(threads = threads.len(), shards = workers.len(), "pipeline started");
        Ok(Pipeline { handle, threads, workers, permits, runtime: Some(runtime), stop_rx, fatal_rx })
    }

    /// The handle sources use to add and drain lanes.
    pub fn handle(&self) -> PipelineHandle {
        self.handle.clone()
    }

    /// Waits up to `timeout` for the sink's first start-up check. A fatal check (the table
    /// does not match, the credentials are wrong) is a start-up error; a sink that is not
    /// reachable yet is not: its check goes on in the background and /readyz says so.
    pub fn await_sink_check(&self, timeout: Duration) -> Result<(), String> {
        let shared = &self.handle.inner.shared;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if shared.sink_check_failed.load(Ordering::Acquire) {
                return Err(shared.fatal.message().unwrap_or_else(|| "sink start-up check failed".into()));
            }
            if shared.sink_ready.load(Ordering::Acquire) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// Waits up to `timeout` for a stop request or a fatal error.
    pub fn wait(&self, timeout: Duration) -> Wake {
        if let Some(message) = self.handle.inner.shared.fatal.message() {
            return Wake::Fatal(message);
        }
        crossbeam_channel::select! {
            recv(self.fatal_rx) -> _ => Wake::Fatal(self.handle.inner.shared.fatal.message().unwrap_or_default()),
            recv(self.stop_rx) -> _ => Wake::Stop,
            default(timeout) => Wake::Timeout,
        }
    }

    /// The pipeline's counters.
    pub fn stats(&self) -> PipelineStats {
        self.handle.inner.shared.stats()
    }

    /// The metrics in the Prometheus text format.
    pub fn metrics_text(&self) -> String {
        self.handle.inner.shared.render_metrics()
    }

    pub(crate) fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime.as_ref().expect("the runtime lives until shutdown")
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.handle.inner.shared
    }

    /// Graceful stop (Invariant 4): stops intake, drains every lane within `timeout` (flushes open
    /// buffers, sends held chunks, waits for acks), stores the final offsets, then waits for the
    /// writes still running until the same deadline. Returns within `timeout` plus a small slack
    /// even if the sink never answers.
    pub fn shutdown(mut self, timeout: Duration) -> ShutdownReport {
        let deadline = Instant::now() + timeout;
        let shared = self.handle.inner.shared.clone();
        shared.stopping.store(true, Ordering::Release);
        let partitions: Vec<i32> =
            self.handle.inner.placement.lock().expect("placement lock").keys().copied().collect();
        let offsets = self.handle.drain_until(&partitions, deadline);
        let complete = shared.budget.inflight() == 0 && shared.fatal.message().is_none();
        self.stop_threads();
        // The pipeline threads dropped their queue senders, so each worker flushes and ends.
        while Instant::now() < deadline && self.workers.iter().any(|w| !w.is_finished()) {
            std::thread::sleep(Duration::from_millis(2));
        }
        let runtime = self.runtime.take().expect("the runtime lives until shutdown");
        let permits = self.permits.clone();
        let max = shared.config.inflight_per_shard as u32;
        runtime.block_on(async {
            for sem in &permits {
                let _ = tokio::time::timeout_at(deadline.into(), sem.acquire_many(max)).await;
            }
        });
        self.close(runtime);
        tracing::info!(lanes = offsets.len(), complete, "pipeline stopped");
        ShutdownReport { offsets, complete, fatal: shared.fatal.message() }
    }

    /// Immediate stop after a fatal error: every lane stores its safe watermark (which never passes
    /// unwritten data, Invariant 3) and the writes still running are abandoned.
    pub fn abort(mut self) -> ShutdownReport {
        let shared = self.handle.inner.shared.clone();
        shared.stopping.store(true, Ordering::Release);
        self.stop_threads();
        let runtime = self.runtime.take().expect("the runtime lives until shutdown");
        self.close(runtime);
        ShutdownReport { offsets: Vec::new(), complete: false, fatal: shared.fatal.message() }
    }

    fn stop_threads(&mut self) {
        for control in &self.handle.inner.control {
            let _ = control.send(Control::Exit);
        }
        for thread in self.threads.drain(..) {
            if thread.join().is_err() {
                tracing::error!("a pipeline thread panicked");
            }
        }
    }

    fn close(&mut self, runtime: tokio::runtime::Runtime) {
        // Closing the semaphores releases a worker waiting for a write slot, so it can end.
        for sem in &self.permits {
            sem.close();
        }
        runtime.shutdown_timeout(Duration::from_millis(100));
        for worker in self.workers.drain(..) {
            if worker.is_finished() {
                let _ = worker.join();
            }
        }
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            self.stop_threads();
            self.close(runtime);
        }
    }
}

/// The coordinator API sources use, cheap to clone and usable from any thread (for Kafka: from the
/// rebalance callback).
#[derive(Clone)]
pub struct PipelineHandle {
    inner: Arc<HandleInner>,
}

impl std::fmt::Debug for PipelineHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipelineHandle").field("live_lanes", &self.live_lanes()).finish()
    }
}

struct HandleInner {
    control: Vec<Sender<Control>>,
    shared: Arc<Shared>,
    /// Which pipeline thread owns each partition's lane.
    placement: Mutex<HashMap<i32, usize>>,
    /// Exactly-once: each live lane's fence, so that a hand-over closes it whatever the pipeline
    /// threads are doing (see [`Fence`]).
    fences: Mutex<HashMap<i32, Arc<Fence>>>,
    next_lane_id: AtomicU64,
    stop: Sender<()>,
    /// The sink's runtime, on which [`PipelineHandle::recover`] reads the ledger.
    runtime: tokio::runtime::Handle,
}

impl PipelineHandle {
    /// Hands a new lane to the pipeline thread with the fewest lanes (m:n placement); it is polled
    /// from then on. The runtime expects a lane that is ready to poll: a Kafka source pauses a newly
    /// assigned partition at once, splits its queue, and resumes it when it hands the lane over
    /// (Invariant 5). From then on only the runtime pauses and resumes the lane.
    pub fn add_lane(&self, lane: Box<dyn Lane>) {
        self.add_lane_replaying(lane, None);
    }

    /// [`PipelineHandle::add_lane`] for a lane that replays its partition under exactly-once: the
    /// source positioned it at [`Replay::start`] (from [`PipelineHandle::recover`]), and the lane's
    /// batches are cut at the recorded spans.
    pub fn add_lane_replaying(&self, lane: Box<dyn Lane>, replay: Option<Replay>) {
        let inner = &self.inner;
        if inner.shared.stopping.load(Ordering::Acquire) {
            tracing::warn!(partition = lane.partition(), "lane added during shutdown; ignored");
            return;
        }
        let thread =
            (0..inner.control.len()).min_by_key(|&t| inner.shared.lane_counts[t].load(Ordering::Acquire)).unwrap_or(0);
        inner.shared.lane_counts[thread].fetch_add(1, Ordering::AcqRel);
        inner.placement.lock().expect("placement lock").insert(lane.partition(), thread);
        let fence = inner.shared.ledger.is_some().then(|| {
            let fence = Arc::new(Fence::new(replay.as_ref().map_or(0, |r| r.epoch)));
            // A lane of this partition that was never drained must not write next to the new one.
            if let Some(old) = inner.fences.lock().expect("fences lock").insert(lane.partition(), fence.clone()) {
                old.close();
            }
            fence
        });
        let lane_id = inner.next_lane_id.fetch_add(1, Ordering::Relaxed);
        if inner.control[thread].send(Control::AddLane { lane_id, lane, replay, fence }).is_err() {
            inner.shared.lane_counts[thread].fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Drains the lanes of `partitions` and drops them (Invariant 4): they stop being polled, their
    /// open buffers are flushed and their held chunks sent, and acks are awaited until everything
    /// they processed is durable or `timeout` passes. Their final offsets are stored through the
    /// lanes before this returns, with each partition's final `next_offset` (`None`: none stored).
    /// It blocks the caller (for Kafka: inside the revocation callback) for at most `timeout` plus a
    /// small slack.
    pub fn drain_partitions(&self, partitions: &[i32], timeout: Duration) -> Vec<(i32, Option<i64>)> {
        self.drain_until(partitions, Instant::now() + timeout)
    }

    /// Exactly-once: stops the lanes of `partitions` from recording or inserting any more batches,
    /// now. For a source that learns it lost partitions without a clean hand-over (for Kafka: the
    /// assignment was lost): their next owner may be reading the ledger already. A drain does it
    /// by itself at its end.
    pub fn fence_partitions(&self, partitions: &[i32]) {
        let mut fences = self.inner.fences.lock().expect("fences lock");
        for partition in partitions {
            if let Some(fence) = fences.remove(partition) {
                let recording = fence.close();
                tracing::debug!(
                    partition,
                    recording,
                    "partition fenced: this member records and inserts no more of its batches"
                );
            }
        }
    }

    /// True when the pipeline runs exactly-once: a source must then position each new lane with
    /// [`PipelineHandle::recover`] and add it with [`PipelineHandle::add_lane_replaying`].
    pub fn exactly_once(&self) -> bool {
        self.inner.shared.ledger.is_some()
    }

    /// Exactly-once: reads the spans recorded for each `(partition, watermark)` (the watermark is
    /// the committed offset minus one, `None` when nothing is committed) and returns each
    /// partition's replay plan, in the same order. Blocks the caller (for Kafka: the assignment
    /// callback) while the ledger is read, retrying a sink that is unreachable for up to
    /// `checkpoint.drain_timeout`; then, or on a fatal error, it fails and the caller must stop.
    pub fn recover(&self, partitions: &[(i32, Option<i64>)]) -> Result<Vec<Replay>, String> {
        let shared = &self.inner.shared;
        let Some(ledger) = shared.ledger.as_ref() else {
            return Ok(partitions.iter().map(|_| Replay::default()).collect());
        };
        let deadline = Instant::now() + shared.config.drain_timeout;
        let mut plans = Vec::with_capacity(partitions.len());
        for &(partition, watermark) in partitions {
            let mut backoff = Duration::from_millis(100);
            let (epoch, recorded) = loop {
                let read = async {
                    let epoch = ledger.claim(partition).await?;
                    Ok::<_, crate::sink::SinkError>((epoch, ledger.recorded(partition, watermark).await?))
                };
                match self.inner.runtime.block_on(read) {
                    Ok(read) => break read,
                    Err(error) if error.kind == SinkErrorKind::Retryable && Instant::now() + backoff < deadline => {
                        tracing::warn!(partition, %error, retry_in = ?backoff, "reading the exactly-once ledger failed");
                        std::thread::sleep(backoff);
                        backoff = (backoff * 2).min(Duration::from_secs(2));
                    }
                    Err(error) => {
                        return Err(format!("reading the exactly-once ledger for partition {partition}: {error}"));
                    }
                }
            };
            let other_config = recorded.other_config_above(watermark);
            if other_config > 0 {
                tracing::warn!(
                    partition,
                    batches = other_config,
                    "batches above the committed offset were written under another config hash; their records are \
                     inserted again (at-least-once for them)"
                );
            }
            let plan = Replay::new(shared.config.shards, watermark, &recorded, epoch);
            shared.metrics.replayed_batches.inc_by(plan.pending() as u64);
            tracing::info!(partition, epoch, ?watermark, start = ?plan.start(), replayed_batches = plan.pending(), "exactly-once replay plan");
            plans.push(plan);
        }
        Ok(plans)
    }

    /// Asks the run loop for a graceful shutdown, as SIGTERM does.
    pub fn request_shutdown(&self) {
        let _ = self.inner.stop.send(());
    }

    /// Reports a fatal error: the pipeline stops with exit code 1.
    pub fn report_fatal(&self, message: impl Into<String>) {
        self.inner.shared.fatal.report(message.into());
    }

    /// Tells `/readyz` whether the source is ready (for Kafka: joined the group).
    pub fn set_source_ready(&self, ready: bool) {
        self.inner.shared.source_ready.store(ready, Ordering::Release);
    }

    /// Sets `etl_source_lag_records{partition}`.
    pub fn set_lag_records(&self, partition: i32, lag: i64) {
        self.inner.shared.metrics.lag_records.with_label_values(&[partition.to_string().as_str()]).set(lag);
    }

    /// Counts records a drain gave up on in `etl_source_abandoned_records_total`.
    pub fn record_abandoned(&self, records: u64) {
        self.inner.shared.metrics.abandoned.inc_by(records);
    }

    /// Counts a commit in `etl_source_commits_total` and sets `etl_source_committed_offset`.
    pub fn record_commit(&self, partition: i32, offset: i64) {
        let metrics = &self.inner.shared.metrics;
        metrics.commits.inc();
        metrics.committed_offset.with_label_values(&[partition.to_string().as_str()]).set(offset);
    }

    /// The number of lanes the pipeline owns right now.
    pub fn live_lanes(&self) -> usize {
        self.inner.shared.lane_counts.iter().map(|c| c.load(Ordering::Acquire)).sum()
    }

    fn drain_until(&self, partitions: &[i32], deadline: Instant) -> Vec<(i32, Option<i64>)> {
        let inner = &self.inner;
        let mut by_thread: HashMap<usize, Vec<i32>> = HashMap::new();
        let mut results = Vec::new();
        {
            let mut placement = inner.placement.lock().expect("placement lock");
            for &partition in partitions {
                match placement.remove(&partition) {
                    Some(thread) => by_thread.entry(thread).or_default().push(partition),
                    None => results.push((partition, None)),
                }
            }
        }
        let (reply_tx, reply_rx) = crossbeam_channel::unbounded();
        let mut expected = 0;
        for (thread, partitions) in by_thread {
            let msg = Control::RemoveLanes { partitions, deadline, reply: reply_tx.clone() };
            if inner.control[thread].send(msg).is_ok() {
                expected += 1;
            }
        }
        // The threads answer at the deadline at the latest; the slack covers one loop iteration.
        let give_up = deadline + Duration::from_millis(500);
        for _ in 0..expected {
            match reply_rx.recv_deadline(give_up) {
                Ok(mut offsets) => results.append(&mut offsets),
                Err(_) => {
                    tracing::error!("a pipeline thread did not answer a drain in time");
                    break;
                }
            }
        }
        // Before the caller hands the partitions over, even if a thread did not answer.
        self.fence_partitions(partitions);
        results
    }
}

/// The first fatal error, and a wake-up for the run loop. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct FatalSlot(Arc<FatalInner>);

#[derive(Debug)]
struct FatalInner {
    flag: AtomicBool,
    message: Mutex<Option<String>>,
    wake: Sender<()>,
}

impl FatalSlot {
    pub(crate) fn report(&self, message: String) {
        tracing::error!(error = %message, "fatal error; the pipeline stops");
        let mut slot = self.0.message.lock().expect("fatal slot lock");
        if slot.is_none() {
            *slot = Some(message);
        }
        self.0.flag.store(true, Ordering::Release);
        let _ = self.0.wake.send(());
    }

    pub(crate) fn is_set(&self) -> bool {
        self.0.flag.load(Ordering::Acquire)
    }

    pub(crate) fn message(&self) -> Option<String> {
        self.0.message.lock().expect("fatal slot lock").clone()
    }
}

/// State shared by the pipeline threads, the shard workers, the write tasks and the admin server.
pub(crate) struct Shared {
    pub(crate) config: RuntimeConfig,
    pub(crate) budget: Budget,
    pub(crate) metrics: Metrics,
    pub(crate) fatal: FatalSlot,
    pub(crate) paused_lanes: AtomicUsize,
    pub(crate) lane_counts: Vec<AtomicUsize>,
    pub(crate) max_loop_gap_ns: AtomicU64,
    pub(crate) dead_letter: Option<Arc<dyn DeadLetter>>,
    /// Exactly-once: where batch spans are recorded (`None` at least-once).
    pub(crate) ledger: Option<Arc<dyn Ledger>>,
    /// Chunks keep each row's source offset: only when refused rows are dead-lettered.
    pub(crate) track_row_sources: bool,
    /// Receiver clones, only to read the queue depths for the gauge.
    pub(crate) queue_rx: Vec<Receiver<Chunk>>,
    pub(crate) source_ready: AtomicBool,
    pub(crate) sink_ready: AtomicBool,
    /// The sink's start-up check failed fatally (the pipeline must not start).
    pub(crate) sink_check_failed: AtomicBool,
    pub(crate) stopping: AtomicBool,
}

impl Shared {
    pub(crate) fn stats(&self) -> PipelineStats {
        PipelineStats {
            inflight_bytes: self.budget.inflight(),
            peak_inflight_bytes: self.budget.peak(),
            max_inflight_bytes: self.budget.max(),
            max_loop_gap: Duration::from_nanos(self.max_loop_gap_ns.load(Ordering::Relaxed)),
            pause_events: self.metrics.pause_events.get(),
            paused_lanes: self.paused_lanes.load(Ordering::Acquire),
            live_lanes: self.lane_counts.iter().map(|c| c.load(Ordering::Acquire)).sum(),
        }
    }

    /// Sets the gauges that mirror atomics, then renders the registry. Gauges are set at scrape
    /// time so the hot paths only touch their atomics.
    pub(crate) fn render_metrics(&self) -> String {
        let m = &self.metrics;
        m.inflight_bytes.set(self.budget.inflight() as i64);
        m.paused.set(i64::from(self.paused_lanes.load(Ordering::Acquire) > 0));
        for (gauge, rx) in m.queue_depth.iter().zip(&self.queue_rx) {
            gauge.set(rx.len() as i64);
        }
        m.render()
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.source_ready.load(Ordering::Acquire) && self.sink_ready.load(Ordering::Acquire)
    }
}

/// Runs the sink's check until it passes, then marks the sink ready for `/readyz`.
async fn check_sink<K: Sink>(sink: &K, shared: &Shared) {
    let mut backoff = Duration::from_millis(100);
    loop {
        match sink.check().await {
            Ok(()) => {
                tracing::info!("sink check passed");
                shared.sink_ready.store(true, Ordering::Release);
                return;
            }
            // A fatal check (the table does not match, bad credentials) will not get better
            // by waiting: stop before the source starts.
            Err(error) if error.kind == SinkErrorKind::Fatal => {
                shared.sink_check_failed.store(true, Ordering::Release);
                shared.fatal.report(format!("sink start-up check failed: {error}"));
                return;
            }
            Err(error) => {
                tracing::warn!(%error, retry_in = ?backoff, "sink check failed");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}
