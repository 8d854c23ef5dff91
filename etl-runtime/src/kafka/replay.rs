//! `<binary> dlq replay`: the pipeline's dead-letter topic read back through the same chain and
//! sink, after the pipeline or its schema was fixed.
//!
//! The replay is the pipeline itself with another source: the Kafka source subscribed to
//! `errors.dlq_topic` in a consumer group of its own (`<group_id>.dlq-replay` unless `--group`
//! names one), started at that group's committed offsets (the topic's start for a new group), and
//! *finite*: at start-up it takes every partition's log end as its stop offset, and a lane that
//! reaches it finishes, drains and stores its offset, so the run ends by itself once everything
//! that was in the topic when it started is written or dead-lettered again. A record that fails
//! again goes back to the same topic (after the stop offsets, so this run never reads it again)
//! with its error headers replaced, its original `etl.source.*` kept and `etl.replay.count`
//! raised by one. Everything else is the pipeline's: batches, backpressure, the checkpointer and,
//! under `exactly_once`, the ledger, whose spans name the dead-letter topic's partitions, so a
//! replay killed and started again inserts every row once.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::offsets::Tool;
use super::{KafkaSource, KafkaSourceConfig};
use crate::engine::lane::LaneKey;

/// `dlq replay [--group G]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DlqReplay {
    /// `--group`: the replay's consumer group; `<group_id>.dlq-replay` by default.
    pub group: Option<String>,
}

#[derive(Debug, clap::Parser)]
#[command(about = "Read the dead-letter topic back through the pipeline, up to its end at the start")]
enum Cli {
    /// Replay every dead letter not replayed yet by this group, then exit.
    Replay {
        /// The replay's consumer group (default: the pipeline's group id + `.dlq-replay`). Its
        /// committed offsets are where a later replay starts.
        #[arg(long)]
        group: Option<String>,
    },
}

impl DlqReplay {
    /// Reads `dlq …` (`args` starts at `dlq`); clap's error or help when it cannot.
    pub fn parse(program: &str, args: &[String]) -> Result<DlqReplay, clap::Error> {
        use clap::Parser as _;
        let name = format!("{program} dlq");
        match Cli::try_parse_from(std::iter::once(name).chain(args.iter().skip(1).cloned()))? {
            Cli::Replay { group } => Ok(DlqReplay { group }),
        }
    }
}

/// Where each partition of the dead-letter topic stops, and how far the replay got.
#[derive(Debug)]
pub(crate) struct Stops {
    /// Per partition: the offset the replay starts from, the one it stops at (the log end at the
    /// start), and its slot in `reached`.
    by_lane: HashMap<LaneKey, (i64, i64, usize)>,
    /// Per partition: whether its lane handed out the last record below the stop (or had none to
    /// hand out). A run that ends with one unset ended early (see [`Summary::unfinished`]).
    reached: Vec<std::sync::atomic::AtomicBool>,
    /// Records handed to the pipeline so far.
    read: AtomicU64,
    /// Records between the starts and the stops.
    total: u64,
}

impl Stops {
    /// What the lane of `key` needs to know: its stop offset and whether it has nothing to read.
    pub(crate) fn lane(self: &Arc<Self>, key: &LaneKey) -> LaneStop {
        match self.by_lane.get(key) {
            Some(&(from, stop, slot)) => {
                LaneStop { at: stop, nothing: from >= stop, slot: Some(slot), stops: self.clone() }
            }
            // A partition created after the start: nothing of it was in the topic then.
            None => LaneStop { at: 0, nothing: true, slot: None, stops: self.clone() },
        }
    }
}

/// A replay lane's end (see [`Stops`]).
#[derive(Debug, Clone)]
pub(crate) struct LaneStop {
    /// The lane hands out no record at or above this offset.
    pub(crate) at: i64,
    /// The group had replayed the partition up to its stop already.
    pub(crate) nothing: bool,
    slot: Option<usize>,
    stops: Arc<Stops>,
}

impl LaneStop {
    pub(crate) fn count_read(&self) {
        self.stops.read.fetch_add(1, Ordering::Relaxed);
    }

    /// The lane has nothing more to hand out.
    pub(crate) fn reached(&self) {
        if let Some(slot) = self.slot {
            self.stops.reached[slot].store(true, Ordering::Relaxed);
        }
    }
}

/// The source of a replay: `source`'s brokers and client properties, subscribed to `dlq_topic` in
/// the replay's group from the earliest offset, with the stop offsets of the topic as it is now.
pub(crate) fn source(source: &KafkaSource, dlq_topic: &str, command: &DlqReplay) -> Result<KafkaSource, String> {
    let group = command.group.clone().unwrap_or_else(|| format!("{}.dlq-replay", source.config.group_id));
    let mut properties: Vec<(String, String)> =
        source.config.properties.iter().filter(|(k, _)| k != "auto.offset.reset").cloned().collect();
    // A new replay group starts at the beginning of the dead-letter topic.
    properties.push(("auto.offset.reset".into(), "earliest".into()));
    let config = KafkaSourceConfig {
        brokers: source.config.brokers.clone(),
        topic: dlq_topic.to_owned(),
        group_id: group.clone(),
        commit_interval: source.config.commit_interval,
        startup_timeout: source.config.startup_timeout,
        statistics_interval: source.config.statistics_interval,
        properties,
        auth: source.config.auth.clone(),
    };
    let mut replay = KafkaSource::new(config).map_err(|e| e.to_string())?.with_drain_timeout(source.drain_timeout);
    let tool = Tool::new(&replay)?;
    let partitions = tool.partitions(None).map_err(|o| o.message.unwrap_or_default())?;
    let views = tool.view(&partitions).map_err(|o| o.message.unwrap_or_default())?;
    let mut by_lane = HashMap::new();
    let mut total = 0u64;
    for (slot, v) in views.iter().enumerate() {
        let from = v.committed.unwrap_or(v.log_start).max(v.log_start);
        total += (v.log_end - from).max(0) as u64;
        by_lane.insert(LaneKey { topic: v.topic.as_str().into(), partition: v.partition }, (from, v.log_end, slot));
        tracing::info!(topic = %v.topic, partition = v.partition, from, stop = v.log_end, "dlq replay: partition plan");
    }
    tracing::info!(topic = dlq_topic, %group, records = total, "dlq replay: starting");
    let reached = views.iter().map(|_| AtomicBool::new(false)).collect();
    replay.replay = Some(Arc::new(Stops { by_lane, reached, read: AtomicU64::new(0), total }));
    Ok(replay)
}

/// Logs the replay's progress every few seconds until `done` is set; [`Summary`] says the last
/// word.
pub(crate) fn report_progress(source: &KafkaSource, done: Arc<AtomicBool>) {
    let Some(stops) = source.replay.clone() else { return };
    let _ = std::thread::Builder::new().name("etl-dlq-progress".into()).spawn(move || {
        while !done.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(250));
            static EVERY: AtomicU64 = AtomicU64::new(0);
            if EVERY.fetch_add(1, Ordering::Relaxed) % 20 == 19 {
                tracing::info!(read = stops.read.load(Ordering::Relaxed), of = stops.total, "dlq replay: progress");
            }
        }
    });
}

/// What the replay read, for its last line (the source itself is consumed by the run).
pub(crate) struct Summary(Option<Arc<Stops>>);

impl Summary {
    pub(crate) fn of(source: &KafkaSource) -> Summary {
        Summary(source.replay.clone())
    }

    /// The partitions whose lanes never reached their stop offsets (`topic/partition`, sorted):
    /// the run ended without them (under exactly-once, partitions whose ledger could not be read
    /// have no lane yet, and a run whose lanes all finished ends).
    pub(crate) fn unfinished(&self) -> Vec<String> {
        let Some(stops) = &self.0 else { return Vec::new() };
        let mut unfinished: Vec<String> = stops
            .by_lane
            .iter()
            .filter(|(_, (from, stop, slot))| from < stop && !stops.reached[*slot].load(Ordering::Relaxed))
            .map(|(lane, _)| format!("{}/{}", lane.topic, lane.partition))
            .collect();
        unfinished.sort();
        unfinished
    }

    pub(crate) fn line(&self) -> String {
        let Some(stops) = &self.0 else { return String::new() };
        format!(
            "dlq replay: read {} of the {} dead letters that were in the topic at the start; their rows are written, \
             and records that failed again are back in the topic with etl.replay.count raised",
            stops.read.load(Ordering::Relaxed),
            stops.total
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_is_over_when_every_partition_with_letters_reached_its_stop() {
        let key = |partition| LaneKey { topic: "orders-dlq".into(), partition };
        let stops = Arc::new(Stops {
            // Partition 1 was replayed up to its stop by an earlier run.
            by_lane: HashMap::from([(key(0), (0, 10, 0)), (key(1), (5, 5, 1)), (key(2), (3, 9, 2))]),
            reached: (0..3).map(|_| AtomicBool::new(false)).collect(),
            read: AtomicU64::new(0),
            total: 16,
        });
        let summary = Summary(Some(stops.clone()));
        assert_eq!(summary.unfinished(), ["orders-dlq/0", "orders-dlq/2"]);
        stops.lane(&key(0)).reached();
        assert_eq!(summary.unfinished(), ["orders-dlq/2"]);
        let lane = stops.lane(&key(2));
        assert_eq!((lane.at, lane.nothing), (9, false));
        lane.reached();
        assert!(summary.unfinished().is_empty());
        // Nothing to read: replayed already, or created after the start.
        assert!(stops.lane(&key(1)).nothing && stops.lane(&key(7)).nothing);
    }
}
