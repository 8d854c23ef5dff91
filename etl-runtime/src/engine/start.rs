//! Starting and stopping a pipeline: its threads, shard workers and the sink's tokio runtime,
//! wired for the delivery the configuration asks for.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use tokio::sync::Semaphore;

use crate::config::{ErrorPolicy, RuntimeConfig};
use crate::engine::ack::{Ack, Control};
use crate::engine::budget::Budget;
use crate::engine::chain::Chain;
use crate::engine::chunk::Chunk;
use crate::engine::delivery::Delivery;
use crate::engine::delivery::at_least_once::AtLeastOnce;
use crate::engine::delivery::exactly_once::ExactlyOnce;
use crate::engine::errors::SinkErrorKind;
use crate::engine::fatal::FatalSlot;
use crate::engine::handle::{HandleInner, PipelineHandle};
use crate::engine::lane::LaneKey;
use crate::engine::ledger::Ledger;
use crate::engine::metrics::Metrics;
use crate::engine::pipeline::PipelineThread;
use crate::engine::shared::{PipelineStats, ShardHealth, Shared};
use crate::engine::sink::{DeadLetter, DynSink, ErasedSink, Sink};
use crate::engine::worker::ShardWorker;

/// A running pipeline: pipeline threads, shard workers, and the tokio runtime the sink writes on.
///
/// The crate's `run` drives one from a [`Source`](super::source::Source) and the process signals;
/// tests and benchmarks drive one directly through [`Pipeline::handle`].
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

/// What a shutdown achieved.
#[derive(Debug, Clone)]
pub struct ShutdownReport {
    /// The final stored `next_offset` of each lane drained by the shutdown (`None`: nothing stored).
    pub offsets: Vec<(LaneKey, Option<i64>)>,
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
    /// The sink's start-up check failed for good (the table does not match, bad credentials).
    #[error("{0}")]
    SinkCheck(String),
    /// The metrics registry refused a metric.
    #[error("could not register metrics: {0}")]
    Metrics(String),
}

/// The delivery [`SinkSide::start`] chose, for the lane side.
enum Chosen {
    AtLeastOnce(Arc<AtLeastOnce>),
    ExactlyOnce(Arc<ExactlyOnce>),
}

/// Everything of a starting pipeline but its threads: the shared state, the queues and channels,
/// the sink's tokio runtime with the shard workers and the start-up check running on it.
///
/// It is built by non-generic code on purpose: [`Pipeline::start`] is generic over the chain,
/// and whatever it builds inline is compiled again in every generated pipeline crate. Only the
/// pipeline threads (the chain and the lane loop around it) need that.
struct SinkSide {
    shared: Arc<Shared>,
    runtime: tokio::runtime::Runtime,
    queue_tx: Vec<Sender<Chunk>>,
    acks: Vec<(Sender<Ack>, Receiver<Ack>)>,
    controls: Vec<(Sender<Control>, Receiver<Control>)>,
    stop: (Sender<()>, Receiver<()>),
    fatal_rx: Receiver<()>,
    permits: Vec<Arc<Semaphore>>,
    workers: Vec<JoinHandle<()>>,
    ledger: Option<Arc<dyn Ledger>>,
}

impl SinkSide {
    fn start(
        config: RuntimeConfig,
        sink: ErasedSink,
        dead_letter: Option<Arc<dyn DeadLetter>>,
    ) -> Result<(SinkSide, Chosen), StartError> {
        config.validate().map_err(StartError::Config)?;
        if config.error_policy == ErrorPolicy::DeadLetter && dead_letter.is_none() {
            return Err(StartError::Config("errors.policy is dlq but no dead-letter sink was given".into()));
        }
        let sink = sink.0;
        // The one place that asks which delivery runs; everything below is generic over it.
        let (chosen, ledger) = if config.exactly_once {
            let ledger = sink.ledger().ok_or_else(|| {
                StartError::Config("exactly_once is set but the sink keeps no ledger of batch spans".into())
            })?;
            (Chosen::ExactlyOnce(Arc::new(ExactlyOnce::new(ledger.clone()))), Some(ledger))
        } else {
            (Chosen::AtLeastOnce(Arc::new(AtLeastOnce::new(config.batch, &config.pipeline))), None)
        };

        let slots: Vec<(String, usize)> = (0..config.shards).map(|slot| sink.slot_output(slot)).collect();
        let metrics = Metrics::new(&config, &slots).map_err(|e| StartError::Metrics(e.to_string()))?;
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
        let stop = crossbeam_channel::unbounded();
        let (fatal_tx, fatal_rx) = crossbeam_channel::unbounded();

        let track_row_sources = config.error_policy == ErrorPolicy::DeadLetter && dead_letter.is_some();
        let shards = config.shards;
        let shared = Arc::new(Shared {
            budget: Budget::new(&config.backpressure),
            lane_counts: (0..config.threads).map(|_| AtomicUsize::new(0)).collect(),
            config,
            metrics,
            fatal: FatalSlot::new(fatal_tx),
            paused_lanes: AtomicUsize::new(0),
            stalled_lanes: AtomicUsize::new(0),
            shutdown_requested: AtomicBool::new(false),
            operator_paused: AtomicBool::new(false),
            max_loop_gap_ns: AtomicU64::new(0),
            track_row_sources,
            dead_letter,
            queue_rx: queue_rx.clone(),
            source_ready: AtomicBool::new(false),
            sink_ready: AtomicBool::new(false),
            sink_check_failed: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            shard_health: (0..shards).map(ShardHealth::new).collect(),
        });

        let ack_senders: Arc<Vec<Sender<Ack>>> = Arc::new(acks.iter().map(|(tx, _)| tx.clone()).collect());
        let permits: Vec<Arc<Semaphore>> =
            (0..shards).map(|_| Arc::new(Semaphore::new(shared.config.inflight_per_shard))).collect();
        let workers = {
            let spawn = Workers {
                queue_rx,
                sink: &sink,
                shared: &shared,
                runtime: &runtime,
                permits: &permits,
                acks: &ack_senders,
            };
            match &chosen {
                Chosen::AtLeastOnce(delivery) => spawn.spawn(delivery)?,
                Chosen::ExactlyOnce(delivery) => spawn.spawn(delivery)?,
            }
        };
        {
            let shared = shared.clone();
            runtime.spawn(async move { check_sink(&*sink, &shared).await });
        }
        let side = SinkSide { shared, runtime, queue_tx, acks, controls, stop, fatal_rx, permits, workers, ledger };
        Ok((side, chosen))
    }

    /// Starts one pipeline thread per configured thread, each with a chain from `chains`.
    fn spawn_threads<C, F, D>(mut self, chains: F, delivery: Arc<D>) -> Result<Pipeline, StartError>
    where
        C: Chain,
        F: Fn() -> C,
        D: Delivery,
    {
        let mut threads = Vec::new();
        let acks = std::mem::take(&mut self.acks);
        for (index, ((ack_tx, ack_rx), (_, control_rx))) in
            acks.into_iter().zip(self.controls.iter().cloned()).enumerate()
        {
            let thread = PipelineThread::new(
                index,
                chains(),
                delivery.clone(),
                control_rx,
                (ack_tx, ack_rx),
                self.queue_tx.clone(),
                self.shared.clone(),
            );
            threads
                .push(std::thread::Builder::new().name(format!("etl-pipeline-{index}")).spawn(move || thread.run())?);
        }
        Ok(self.into_pipeline(threads))
    }

    /// The running pipeline, once its `threads` run. Not generic, like [`SinkSide::start`].
    fn into_pipeline(self, threads: Vec<JoinHandle<()>>) -> Pipeline {
        let SinkSide {
            shared,
            runtime,
            queue_tx,
            acks: _,
            controls,
            stop: (stop_tx, stop_rx),
            fatal_rx,
            permits,
            workers,
            ledger,
        } = self;
        // The queue senders are the pipeline threads' alone now: when they end, the workers do.
        drop(queue_tx);
        let handle = PipelineHandle {
            inner: Arc::new(HandleInner {
                control: controls.into_iter().map(|(tx, _)| tx).collect(),
                shared,
                placement: Mutex::new(HashMap::new()),
                ledger,
                fences: Mutex::new(HashMap::new()),
                next_lane_id: AtomicU64::new(1),
                stop: stop_tx,
                runtime: runtime.handle().clone(),
            }),
        };
        tracing::info!(threads = threads.len(), shards = workers.len(), "pipeline started");
        Pipeline { handle, threads, workers, permits, runtime: Some(runtime), stop_rx, fatal_rx }
    }
}

/// What spawning the shard workers needs, whichever the delivery.
struct Workers<'a> {
    queue_rx: Vec<Receiver<Chunk>>,
    sink: &'a Arc<dyn DynSink>,
    shared: &'a Arc<Shared>,
    runtime: &'a tokio::runtime::Runtime,
    permits: &'a [Arc<Semaphore>],
    acks: &'a Arc<Vec<Sender<Ack>>>,
}

impl Workers<'_> {
    fn spawn<D: Delivery>(self, delivery: &Arc<D>) -> std::io::Result<Vec<JoinHandle<()>>> {
        let mut workers = Vec::new();
        for (shard, rx) in self.queue_rx.into_iter().enumerate() {
            let worker = ShardWorker {
                shard,
                rx,
                sink: self.sink.clone(),
                shared: self.shared.clone(),
                runtime: self.runtime.handle().clone(),
                permits: self.permits[shard].clone(),
                acks: self.acks.clone(),
                delivery: delivery.clone(),
            };
            workers.push(std::thread::Builder::new().name(format!("etl-shard-{shard}")).spawn(move || worker.run())?);
        }
        Ok(workers)
    }
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
        let (side, chosen) = SinkSide::start(config, sink.erase(), dead_letter)?;
        match chosen {
            Chosen::AtLeastOnce(delivery) => side.spawn_threads(chains, delivery),
            Chosen::ExactlyOnce(delivery) => side.spawn_threads(chains, delivery),
        }
    }

    /// The handle sources use to add and drain lanes.
    pub fn handle(&self) -> PipelineHandle {
        self.handle.clone()
    }

    /// Waits up to `timeout` for the sink's first start-up check. A fatal check (the table
    /// does not match, the credentials are wrong) is a start-up error; a sink that is not
    /// reachable yet is not: its check goes on in the background and /readyz says so.
    pub fn await_sink_check(&self, timeout: Duration) -> Result<(), StartError> {
        let shared = &self.handle.inner.shared;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if shared.sink_check_failed.load(Ordering::Acquire) {
                let message = shared.fatal.message().unwrap_or_else(|| "sink start-up check failed".into());
                return Err(StartError::SinkCheck(message));
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
        let lanes: Vec<LaneKey> = self.handle.inner.placement.lock().expect("placement lock").keys().cloned().collect();
        let offsets = self.handle.drain_until(&lanes, deadline);
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

/// Runs the sink's check until it passes, then marks the sink ready for `/readyz`.
async fn check_sink(sink: &dyn DynSink, shared: &Shared) {
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
                // The message first: whoever sees the flag reads it (`await_sink_check`).
                shared.fatal.report(format!("sink start-up check failed: {error}"));
                shared.sink_check_failed.store(true, Ordering::Release);
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
