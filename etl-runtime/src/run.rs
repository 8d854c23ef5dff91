//! The entry point the generated `main` calls: start, serve admin, run the source, stop on signals.

use std::sync::Arc;
use std::time::Duration;

use crate::config::RuntimeConfig;
use crate::engine::chain::Chain;
use crate::engine::sink::{DeadLetter, Sink};
use crate::engine::source::Source;
use crate::engine::start::{Pipeline, Wake};
use crate::entry::Command;

/// How a run ended; [`RunOutcome::exit_code`] gives the process exit code (0 clean, 1 fatal, 2 start-up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// A signal, a shutdown request or the end of a finite source; drained and stored. Exit code 0.
    Clean,
    /// A fatal runtime error; no offset passes unwritten data. Exit code 1.
    Fatal(String),
    /// A configuration or environment error at start-up. Exit code 2.
    Startup(String),
}

impl RunOutcome {
    /// 0, 1 or 2.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunOutcome::Clean => 0,
            RunOutcome::Fatal(_) => 1,
            RunOutcome::Startup(_) => 2,
        }
    }
}

impl From<RunOutcome> for std::process::ExitCode {
    fn from(outcome: RunOutcome) -> Self {
        std::process::ExitCode::from(outcome.exit_code())
    }
}

/// Does what the command line asked ([`Command`]): runs the pipeline ([`run`]), or an `offsets`
/// command against the source's group and the sink's exactly-once ledger.
pub fn run_command<S, C, F, K>(
    command: Command,
    config: RuntimeConfig,
    source: S,
    chains: F,
    sink: K,
    dead_letter: Option<Arc<dyn DeadLetter>>,
) -> RunOutcome
where
    S: Source + 'static,
    C: Chain,
    F: Fn() -> C,
    K: Sink,
{
    match command {
        Command::Run => run(config, source, chains, sink, dead_letter),
        #[cfg(feature = "kafka")]
        Command::Offsets(command) => offsets(&command, &source as &dyn std::any::Any, sink.ledger()),
        #[cfg(feature = "kafka")]
        Command::DlqReplay(command) => {
            let Some(dlq) = dead_letter.as_ref().and_then(|d| d.topic()).map(str::to_owned) else {
                return RunOutcome::Startup(
                    "`dlq replay` reads the dead-letter topic, and this pipeline has none (errors.policy: dlq with \
                     errors.dlq_topic)"
                        .into(),
                );
            };
            let Some(source) = (&source as &dyn std::any::Any).downcast_ref::<crate::kafka::KafkaSource>() else {
                return RunOutcome::Startup("`dlq replay` needs a Kafka source (source.kafka)".into());
            };
            let replay = match crate::kafka::replay::source(source, &dlq, &command) {
                Ok(replay) => replay,
                Err(message) => return RunOutcome::Fatal(format!("dlq replay: {message}")),
            };
            let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
            crate::kafka::replay::report_progress(&replay, done.clone());
            let summary = crate::kafka::replay::Summary::of(&replay);
            let outcome = run(config, replay, chains, sink, dead_letter);
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            let unfinished = summary.unfinished();
            match outcome {
                RunOutcome::Clean if !unfinished.is_empty() => RunOutcome::Fatal(format!(
                    "dlq replay ended before partitions {} reached their stop offsets (under exactly-once: their \
                     ledger could not be read, see the log); what was replayed is committed, run it again",
                    unfinished.join(", ")
                )),
                RunOutcome::Clean => {
                    println!("{}", summary.line());
                    RunOutcome::Clean
                }
                other => other,
            }
        }
    }
}

/// An `offsets` command; the source must be Kafka's.
#[cfg(feature = "kafka")]
fn offsets(
    command: &crate::kafka::OffsetsCommand,
    source: &dyn std::any::Any,
    ledger: Option<Arc<dyn crate::engine::ledger::Ledger>>,
) -> RunOutcome {
    let Some(source) = source.downcast_ref::<crate::kafka::KafkaSource>() else {
        return RunOutcome::Startup("`offsets` needs a Kafka source (source.kafka); this pipeline has none".into());
    };
    let outcome = crate::kafka::offsets::execute(command, source, ledger);
    // The command's own words are its interface (logs default to warnings only here).
    if let Some(message) = &outcome.message {
        eprintln!("error: {message}");
    }
    match (outcome.code, outcome.message) {
        (0, _) => RunOutcome::Clean,
        (1, message) => RunOutcome::Fatal(message.unwrap_or_default()),
        (_, message) => RunOutcome::Startup(message.unwrap_or_default()),
    }
}

/// Runs a pipeline until SIGTERM/SIGINT, a fatal error, or the end of a finite source.
///
/// It starts the pipeline (threads, shard workers, the sink's tokio runtime), the admin server on
/// `config.admin_listen`, the signal handlers, then the source. On a signal it drains every lane
/// within `drain_timeout`, stores the final offsets, calls [`Source::shutdown`] and returns
/// [`RunOutcome::Clean`]. On a fatal error each lane stores only its safe watermark.
pub fn run<S, C, F, K>(
    config: RuntimeConfig,
    mut source: S,
    chains: F,
    sink: K,
    dead_letter: Option<Arc<dyn DeadLetter>>,
) -> RunOutcome
where
    S: Source,
    C: Chain,
    F: Fn() -> C,
    K: Sink,
{
    let drain_timeout = config.drain_timeout;
    let admin = config.admin_listen;
    // `gen` refuses this for literal values (E0204); a variable can still resolve to it.
    if let Some(dlq) = dead_letter.as_ref().and_then(|d| d.topic())
        && source.reads_topic(dlq)
    {
        return RunOutcome::Startup(format!(
            "errors.dlq_topic `{dlq}` is a topic the source reads: every dead letter would be read again, fail \
             again and be written again; name a dead-letter topic the source does not subscribe to"
        ));
    }
    let pipeline = match Pipeline::start(config, chains, sink, dead_letter) {
        Ok(pipeline) => pipeline,
        Err(error) => return RunOutcome::Startup(error.to_string()),
    };
    if let Err(outcome) = serve_admin(&pipeline, admin) {
        return outcome;
    }
    let handle = pipeline.handle();
    if let Err(outcome) = stop_on_signals(&pipeline) {
        return outcome;
    }

    // Nothing is consumed before the sink is known to accept what the pipeline writes.
    if let Err(error) = pipeline.await_sink_check(Duration::from_secs(10)) {
        pipeline.abort();
        return RunOutcome::Startup(error.to_string());
    }
    if let Err(error) = source.start(handle.clone()) {
        pipeline.abort();
        return RunOutcome::Startup(error.to_string());
    }
    let finite = source.is_finite();
    loop {
        match pipeline.wait(Duration::from_millis(50)) {
            Wake::Stop => break,
            Wake::Fatal(message) => {
                pipeline.abort();
                if let Err(error) = source.shutdown() {
                    tracing::warn!(%error, "source shutdown failed");
                }
                return RunOutcome::Fatal(message);
            }
            Wake::Timeout => {
                if finite && handle.live_lanes() == 0 {
                    tracing::info!("the source has ended");
                    break;
                }
            }
        }
    }
    let report = pipeline.shutdown(drain_timeout);
    if !report.complete {
        tracing::warn!("the drain did not complete within drain_timeout; stored the safe offsets");
    }
    if let Err(error) = source.shutdown() {
        tracing::warn!(%error, "source shutdown failed");
    }
    match report.fatal {
        Some(message) => RunOutcome::Fatal(message),
        None => RunOutcome::Clean,
    }
}

// What `run` does that does not depend on its type parameters lives in the non-generic
// functions below: `run` is compiled in every generated pipeline crate, and these once.

/// Starts the admin server (`/metrics`, `/healthz`, `/readyz`) on `addr`, if one is configured.
fn serve_admin(pipeline: &Pipeline, addr: Option<std::net::SocketAddr>) -> Result<(), RunOutcome> {
    let Some(addr) = addr else { return Ok(()) };
    let listener = pipeline
        .runtime()
        .block_on(tokio::net::TcpListener::bind(addr))
        .map_err(|error| RunOutcome::Startup(format!("admin.listen {addr}: {error}")))?;
    tracing::info!(%addr, "admin server listening");
    let shared = pipeline.shared().clone();
    pipeline.runtime().spawn(async move {
        if let Err(error) = crate::admin::serve(listener, shared).await {
            tracing::error!(%error, "admin server failed");
        }
    });
    Ok(())
}

/// Turns SIGTERM and SIGINT into a graceful shutdown request.
fn stop_on_signals(pipeline: &Pipeline) -> Result<(), RunOutcome> {
    let handle = pipeline.handle();
    let _guard = pipeline.runtime().enter();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|error| RunOutcome::Startup(format!("installing the SIGTERM handler: {error}")))?;
    pipeline.runtime().spawn(async move {
        tokio::select! {
            _ = terminate.recv() => tracing::info!(signal = "SIGTERM", "shutting down"),
            _ = tokio::signal::ctrl_c() => tracing::info!(signal = "SIGINT", "shutting down"),
        }
        handle.request_shutdown();
    });
    Ok(())
}

/// Installs a `tracing` subscriber that logs to stderr, filtered by `RUST_LOG` (default `info`,
/// `warn` for the `offsets` commands). Calling it twice is harmless.
pub fn init_logging() {
    let default = if crate::entry::quiet() { "warn" } else { "info" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colours only on a terminal: logs collected by a container runtime stay plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr).try_init();
}
