//! `<binary> offsets show` and `<binary> offsets reset`: the pipeline's consumer-group offsets
//! per partition, and moving them while the pipeline is stopped, aware of the exactly-once ledger.
//!
//! Both read the group, topics and client properties the binary was built and configured with,
//! so an operator never types a group id or a broker address. `reset` prints its plan and changes
//! nothing without `--execute`; it refuses while the group has members, because a running
//! member's next commit would overwrite the reset (and under exactly-once its in-flight batches
//! would outlive it). Under exactly-once a partition moved back re-reads records whose batches
//! ClickHouse remembers: their replays would be dropped as repeats, so a rewind needs
//! `--reingest`, which retires the partition's recorded batches in the ledger
//! ([`Ledger::retire`]) before the offsets are committed (docs/adr/0001-exactly-once.md,
//! "Rewinds"). Moving forward needs nothing of the ledger: the next owner ignores spans below the
//! committed offset, except one that straddles it, which is replayed whole.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer as _};
use rdkafka::message::Message as _;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::KafkaSource;
use super::auth::{self, ToolContext};
use super::subscription::Subscription;
use crate::engine::lane::LaneKey;
use crate::engine::ledger::{CONCURRENT_READS, Ledger, Newest, all_in_order};

/// How long one broker request of these commands may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `show` waits for the committed records' timestamps.
const RECORD_TIMEOUT: Duration = Duration::from_secs(10);

/// What `offsets` was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetsCommand {
    /// `offsets show [--json]`.
    Show {
        /// `--json`: one JSON document instead of tables.
        json: bool,
    },
    /// `offsets reset <target> [--topic T] [--execute] [--reingest]`.
    Reset {
        /// Where each partition goes.
        target: ResetTarget,
        /// `--topic`: only this topic's partitions.
        topic: Option<String>,
        /// `--execute`: apply the plan (without it nothing changes).
        execute: bool,
        /// `--reingest`: under exactly-once, retire the recorded batches of the partitions that
        /// move back, so that their records are written again.
        reingest: bool,
    },
}

/// The target of `offsets reset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResetTarget {
    /// `--to-earliest`: the log start.
    Earliest,
    /// `--to-latest`: the log end (nothing is read again).
    Latest,
    /// `--to-timestamp`: the first record at or after this time (ms since the epoch); the log end
    /// when there is none.
    Timestamp(i64),
    /// `--to-offset P:O[,P:O…]`: these partitions to these offsets, the others unchanged.
    Offsets(Vec<(i32, i64)>),
    /// `--shift N`: the committed offset plus N (negative: back), within the log.
    Shift(i64),
}

/// The command line of `offsets`, as clap reads it.
#[derive(Debug, clap::Parser)]
#[command(about = "Show or move the pipeline's consumer-group offsets (stop the pipeline first to move them)")]
enum Cli {
    /// Per partition: the committed offset, the log end, the lag and the committed record's time;
    /// under exactly-once also the newest recorded batch per table, shard and partition.
    Show {
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
    },
    /// Move the committed offsets. Prints the plan; changes nothing without --execute.
    Reset(ResetArgs),
}

#[derive(Debug, clap::Args)]
struct ResetArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Only the partitions of this topic (needed with --to-offset when the pipeline reads several).
    #[arg(long)]
    topic: Option<String>,
    /// Apply the plan. Refused while the group has members.
    #[arg(long)]
    execute: bool,
    /// Exactly-once only: retire the recorded batches of partitions that move back, so that the
    /// next run inserts their records again (rows still in the table are then there twice).
    #[arg(long)]
    reingest: bool,
}

#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
struct TargetArgs {
    /// To the first offset still in the log.
    #[arg(long)]
    to_earliest: bool,
    /// To the log end.
    #[arg(long)]
    to_latest: bool,
    /// To the first record at or after this RFC 3339 time, e.g. 2026-12-07T04:00:00Z.
    #[arg(long, value_name = "RFC3339")]
    to_timestamp: Option<String>,
    /// To these offsets: PARTITION:OFFSET[,PARTITION:OFFSET...].
    #[arg(long, value_name = "P:O[,P:O...]")]
    to_offset: Option<String>,
    /// By N records from the committed offset (negative: back).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    shift: Option<i64>,
}

impl OffsetsCommand {
    /// Reads `offsets …` (`args` starts at `offsets`); clap's error or help when it cannot.
    pub fn parse(program: &str, args: &[String]) -> Result<OffsetsCommand, clap::Error> {
        use clap::Parser as _;
        let name = format!("{program} offsets");
        let cli = Cli::try_parse_from(std::iter::once(name.clone()).chain(args.iter().skip(1).cloned()))?;
        let invalid = |message: String| clap::Error::raw(clap::error::ErrorKind::ValueValidation, message + "\n");
        Ok(match cli {
            Cli::Show { json } => OffsetsCommand::Show { json },
            Cli::Reset(args) => {
                let t = args.target;
                let target = if t.to_earliest {
                    ResetTarget::Earliest
                } else if t.to_latest {
                    ResetTarget::Latest
                } else if let Some(text) = t.to_timestamp {
                    ResetTarget::Timestamp(parse_time(&text).map_err(invalid)?)
                } else if let Some(text) = t.to_offset {
                    ResetTarget::Offsets(parse_offsets(&text).map_err(invalid)?)
                } else if let Some(n) = t.shift {
                    ResetTarget::Shift(n)
                } else {
                    unreachable!("clap requires one target")
                };
                OffsetsCommand::Reset { target, topic: args.topic, execute: args.execute, reingest: args.reingest }
            }
        })
    }
}

/// Milliseconds since the Unix epoch of an RFC 3339 time.
fn parse_time(text: &str) -> Result<i64, String> {
    let time = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|e| format!("--to-timestamp `{text}` is not an RFC 3339 time such as 2026-12-07T04:00:00Z ({e})"))?;
    Ok((time.unix_timestamp_nanos() / 1_000_000) as i64)
}

/// An RFC 3339 time (UTC, milliseconds) of milliseconds since the Unix epoch.
fn format_time(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| format!("{ms} ms"))
}

/// `P:O[,P:O…]`.
fn parse_offsets(text: &str) -> Result<Vec<(i32, i64)>, String> {
    let mut out: Vec<(i32, i64)> = Vec::new();
    for item in text.split(',').map(str::trim) {
        let parsed = item.split_once(':').and_then(|(p, o)| Some((p.trim().parse().ok()?, o.trim().parse().ok()?)));
        match parsed {
            Some((p, o)) if p >= 0 && o >= 0 => {
                if out.iter().any(|(q, _)| *q == p) {
                    return Err(format!("--to-offset names partition {p} twice"));
                }
                out.push((p, o));
            }
            _ => return Err(format!("--to-offset: `{item}` is not PARTITION:OFFSET (two numbers, e.g. 3:1200)")),
        }
    }
    Ok(out)
}

/// One partition of the group, as `show` prints it and `reset` plans from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct PartitionView {
    pub topic: String,
    pub partition: i32,
    /// The group's committed offset (the next record to read), `None` when nothing is committed.
    pub committed: Option<i64>,
    /// The first offset still in the log.
    pub log_start: i64,
    /// The offset the next produced record gets.
    pub log_end: i64,
    /// Records between the committed offset (or the log start) and the log end.
    pub lag: i64,
    /// The time of the last record below the committed offset, RFC 3339, when it is still in the log.
    pub committed_record_time: Option<String>,
}

/// One partition's move in a reset plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Move {
    pub topic: String,
    pub partition: i32,
    pub from: Option<i64>,
    pub to: i64,
}

impl Move {
    /// Whether the next run may read again records it had read: a rewind, or a first commit.
    fn goes_back(&self) -> bool {
        self.from.is_none_or(|from| self.to < from)
    }
}

/// The plan of `reset`: where each partition goes. `at_time` holds, for `--to-timestamp`, each
/// partition's first offset at or after the time (`None`: no such record, so the log end).
pub(crate) fn plan(
    partitions: &[PartitionView],
    target: &ResetTarget,
    at_time: &BTreeMap<(String, i32), Option<i64>>,
) -> Result<Vec<Move>, String> {
    if let ResetTarget::Offsets(wanted) = target {
        let topics: std::collections::BTreeSet<&str> = partitions.iter().map(|p| p.topic.as_str()).collect();
        if topics.len() > 1 {
            return Err(format!(
                "--to-offset names partitions, and the pipeline reads {} topics ({}): add --topic",
                topics.len(),
                topics.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
        for (p, _) in wanted {
            if !partitions.iter().any(|v| v.partition == *p) {
                return Err(format!("--to-offset: the topic has no partition {p}"));
            }
        }
    }
    let mut moves = Vec::new();
    for view in partitions {
        let to = match target {
            ResetTarget::Earliest => view.log_start,
            ResetTarget::Latest => view.log_end,
            ResetTarget::Timestamp(_) => match at_time.get(&(view.topic.clone(), view.partition)) {
                Some(Some(offset)) => *offset,
                Some(None) => view.log_end,
                None => return Err(format!("no offset for the time in {}/{}", view.topic, view.partition)),
            },
            ResetTarget::Offsets(wanted) => match wanted.iter().find(|(p, _)| *p == view.partition) {
                Some((_, offset)) => {
                    if *offset < view.log_start || *offset > view.log_end {
                        return Err(format!(
                            "--to-offset {}:{offset} is outside the log of {}/{} ({}..={})",
                            view.partition, view.topic, view.partition, view.log_start, view.log_end
                        ));
                    }
                    *offset
                }
                None => continue,
            },
            ResetTarget::Shift(n) => match view.committed {
                Some(c) => c.saturating_add(*n).clamp(view.log_start, view.log_end),
                None => {
                    return Err(format!(
                        "--shift: {}/{} has no committed offset to shift; give --to-earliest, --to-timestamp or \
                         --to-offset",
                        view.topic, view.partition
                    ));
                }
            },
        };
        moves.push(Move { topic: view.topic.clone(), partition: view.partition, from: view.committed, to });
    }
    Ok(moves)
}

/// What the command leaves behind: 0 done, 1 a broker or ClickHouse failure, 2 refused or invalid.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) code: u8,
    pub(crate) message: Option<String>,
}

impl Outcome {
    fn done() -> Outcome {
        Outcome { code: 0, message: None }
    }
    fn failed(message: impl Into<String>) -> Outcome {
        Outcome { code: 1, message: Some(message.into()) }
    }
    fn refused(message: impl Into<String>) -> Outcome {
        Outcome { code: 2, message: Some(message.into()) }
    }
}

/// Runs `command` for the pipeline of `source`, with the sink's exactly-once ledger if it has one.
pub(crate) fn execute(command: &OffsetsCommand, source: &KafkaSource, ledger: Option<Arc<dyn Ledger>>) -> Outcome {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => return Outcome::failed(format!("starting the ClickHouse client's runtime: {error}")),
    };
    let tool = match Tool::new(source) {
        Ok(tool) => tool,
        Err(message) => return Outcome::failed(message),
    };
    let result = match command {
        OffsetsCommand::Show { json } => tool.show(*json, ledger.as_deref(), &runtime),
        OffsetsCommand::Reset { target, topic, execute, reingest } => {
            tool.reset(target, topic.as_deref(), *execute, *reingest, ledger.as_deref(), &runtime)
        }
    };
    result.unwrap_or_else(|outcome| outcome)
}

/// The group's client: metadata, committed offsets, watermarks and commits, never a member.
pub(crate) struct Tool {
    group: String,
    subscription: Subscription,
    config: ClientConfig,
    context: ToolContext,
    consumer: BaseConsumer<ToolContext>,
}

impl Tool {
    pub(crate) fn new(source: &KafkaSource) -> Result<Tool, String> {
        let mut config = source.client_config.clone();
        // Nothing is committed but what `reset --execute` commits itself.
        config.set("enable.auto.commit", "false");
        let context = ToolContext::new(source.tokens.clone());
        let consumer: BaseConsumer<ToolContext> = config
            .create_with_context(context.clone())
            .map_err(|e| format!("creating the Kafka client (source.kafka): {e}"))?;
        auth::await_token(&consumer);
        Ok(Tool {
            group: source.config.group_id.clone(),
            subscription: source.subscription.clone(),
            config,
            context,
            consumer,
        })
    }

    /// The pipeline's topics and their partitions, sorted.
    pub(crate) fn partitions(&self, only: Option<&str>) -> Result<Vec<(String, i32)>, Outcome> {
        let metadata = self
            .consumer
            .fetch_metadata(None, REQUEST_TIMEOUT)
            .map_err(|e| Outcome::failed(format!("reading the brokers' metadata: {e}")))?;
        let mut found = Vec::new();
        for topic in metadata.topics() {
            if self.subscription.matches(topic.name()) && only.is_none_or(|t| t == topic.name()) {
                found.extend(topic.partitions().iter().map(|p| (topic.name().to_owned(), p.id())));
            }
        }
        if let Subscription::Topics(topics) = &self.subscription {
            for topic in topics.iter().filter(|t| only.is_none_or(|o| o == t.as_str())) {
                if !found.iter().any(|(t, _)| t == topic) {
                    return Err(Outcome::failed(format!("topic `{topic}` does not exist on the brokers")));
                }
            }
        }
        if let Some(only) = only
            && !self.subscription.matches(only)
        {
            return Err(Outcome::refused(format!(
                "--topic {only}: the pipeline does not read it ({})",
                self.subscription
            )));
        }
        found.sort();
        Ok(found)
    }

    /// The committed offsets, the log bounds and the committed records' times of `partitions`.
    pub(crate) fn view(&self, partitions: &[(String, i32)]) -> Result<Vec<PartitionView>, Outcome> {
        let mut list = TopicPartitionList::new();
        for (topic, partition) in partitions {
            list.add_partition(topic, *partition);
        }
        let committed = self
            .consumer
            .committed_offsets(list, REQUEST_TIMEOUT)
            .map_err(|e| Outcome::failed(format!("reading the committed offsets of group `{}`: {e}", self.group)))?;
        let mut views = Vec::new();
        for (topic, partition) in partitions {
            let committed = match committed.find_partition(topic, *partition).map(|e| e.offset()) {
                Some(Offset::Offset(n)) if n >= 0 => Some(n),
                _ => None,
            };
            let (low, high) = self
                .consumer
                .fetch_watermarks(topic, *partition, REQUEST_TIMEOUT)
                .map_err(|e| Outcome::failed(format!("reading the log bounds of {topic}/{partition}: {e}")))?;
            views.push(PartitionView {
                topic: topic.clone(),
                partition: *partition,
                committed,
                log_start: low,
                log_end: high,
                lag: 0,
                committed_record_time: None,
            });
        }
        self.read_records(&mut views)?;
        for v in &mut views {
            v.lag = (v.log_end - v.committed.unwrap_or(v.log_start).max(v.log_start)).max(0);
        }
        Ok(views)
    }

    /// Reads one record of each non-empty partition: the last committed one where there is one
    /// (for its time), else the last one. Each fetch's answer carries the partition's high
    /// watermark, which is then the log end: some brokers answer the log-end request with the
    /// last batch's first offset (the Tansu broker of the tests does), a fetch never.
    fn read_records(&self, views: &mut [PartitionView]) -> Result<(), Outcome> {
        let mut reader_config = self.config.clone();
        reader_config.set("enable.partition.eof", "false");
        let reader: BaseConsumer<ToolContext> = reader_config
            .create_with_context(ToolContext::new(self.context.tokens.clone()))
            .map_err(|e| Outcome::failed(format!("creating the Kafka reader: {e}")))?;
        auth::await_token(&reader);
        let mut list = TopicPartitionList::new();
        let mut wanted = BTreeMap::new();
        for v in views.iter() {
            // Not bounded by the log end: that came from ListOffsets, which can be short of it.
            let committed_record = v.committed.map(|c| c - 1).filter(|o| *o >= v.log_start);
            let at = committed_record.or_else(|| (v.log_end > v.log_start).then_some(v.log_end - 1));
            if let Some(at) = at {
                list.add_partition_offset(&v.topic, v.partition, Offset::Offset(at))
                    .map_err(|e| Outcome::failed(format!("{}/{}: {e}", v.topic, v.partition)))?;
                wanted.insert((v.topic.clone(), v.partition), (at, committed_record.is_some()));
            }
        }
        if wanted.is_empty() {
            return Ok(());
        }
        reader.assign(&list).map_err(|e| Outcome::failed(format!("reading the committed records: {e}")))?;
        let deadline = Instant::now() + RECORD_TIMEOUT;
        let mut times = BTreeMap::new();
        while times.len() < wanted.len() && Instant::now() < deadline {
            match reader.poll(Duration::from_millis(200)) {
                Some(Ok(message)) => {
                    let key = (message.topic().to_owned(), message.partition());
                    if let Some((at, committed)) = wanted.get(&key)
                        && message.offset() >= *at
                    {
                        let time = message.timestamp().to_millis().filter(|_| *committed);
                        times.entry(key).or_insert(time);
                    }
                }
                Some(Err(error)) => tracing::debug!(%error, "reading a committed record"),
                None => {}
            }
        }
        for v in views.iter_mut() {
            if let Some(time) = times.get(&(v.topic.clone(), v.partition)) {
                v.committed_record_time = time.map(format_time);
            }
            if let Some(high) = super::batches::fetched_high_watermark(&reader, &v.topic, v.partition)
                && high > v.log_end
            {
                v.log_end = high;
            }
        }
        Ok(())
    }

    /// The group's members, as `member (client, host)`; empty when it has none.
    fn members(&self) -> Result<Vec<String>, Outcome> {
        let groups = self
            .consumer
            .fetch_group_list(Some(&self.group), REQUEST_TIMEOUT)
            .map_err(|e| Outcome::failed(format!("describing group `{}`: {e}", self.group)))?;
        Ok(groups
            .groups()
            .iter()
            .filter(|g| g.name() == self.group)
            .flat_map(|g| g.members())
            .map(|m| format!("{} (client {}, host {})", m.id(), m.client_id(), m.client_host()))
            .collect())
    }

    fn show(
        &self,
        json: bool,
        ledger: Option<&dyn Ledger>,
        runtime: &tokio::runtime::Runtime,
    ) -> Result<Outcome, Outcome> {
        let partitions = self.partitions(None)?;
        let views = self.view(&partitions)?;
        let mut spans: Vec<(String, i32, Newest, bool)> = Vec::new();
        if let Some(ledger) = ledger {
            // Several partitions at a time: each read is a query or two per shard.
            for group in views.chunks(CONCURRENT_READS) {
                let lanes: Vec<LaneKey> =
                    group.iter().map(|v| LaneKey { topic: v.topic.as_str().into(), partition: v.partition }).collect();
                let reads = runtime.block_on(all_in_order(lanes.iter().map(|lane| ledger.newest(lane)).collect()));
                for (v, newest) in group.iter().zip(reads) {
                    let newest =
                        newest.map_err(|e| Outcome::failed(format!("reading the exactly-once ledger: {e}")))?;
                    for n in newest {
                        // Finished: every record of the batch is below the committed offset, so
                        // no run replays it.
                        let finished = v.committed.is_some_and(|c| n.last < c);
                        spans.push((v.topic.clone(), v.partition, n, finished));
                    }
                }
            }
        }
        let mode = if ledger.is_some() { "exactly-once" } else { "at-least-once" };
        if json {
            let ledger_rows: Vec<serde_json::Value> = spans
                .iter()
                .map(|(topic, partition, n, finished)| {
                    serde_json::json!({
                        "topic": topic, "partition": partition, "table": n.table, "shard": n.shard,
                        "first": n.first, "last": n.last, "epoch": n.epoch, "finished": finished, "retired": n.retired,
                    })
                })
                .collect();
            let document = serde_json::json!({
                "group": self.group, "mode": mode, "partitions": views, "ledger": ledger_rows,
            });
            println!("{}", serde_json::to_string_pretty(&document).expect("a JSON value serializes"));
            return Ok(Outcome::done());
        }
        let mut out = format!("group {} ({mode}), topics {}\n", self.group, self.subscription);
        let rows: Vec<Vec<String>> = views
            .iter()
            .map(|v| {
                vec![
                    v.topic.clone(),
                    v.partition.to_string(),
                    v.committed.map_or("-".into(), |c| c.to_string()),
                    v.log_end.to_string(),
                    v.lag.to_string(),
                    v.committed_record_time.clone().unwrap_or_else(|| "-".into()),
                ]
            })
            .collect();
        out += &table(&["topic", "partition", "committed", "log end", "lag", "committed record time"], &rows);
        let total: i64 = views.iter().map(|v| v.lag).sum();
        let _ = writeln!(out, "total lag {total}");
        if ledger.is_some() {
            out += "\nnewest recorded batch per table, shard and partition (finished: below the committed offset)\n";
            let rows: Vec<Vec<String>> = spans
                .iter()
                .map(|(topic, partition, n, finished)| {
                    let state = match (n.retired, finished) {
                        (true, _) => "retired",
                        (false, true) => "finished",
                        (false, false) => "pending: the next run replays it",
                    };
                    vec![
                        n.table.clone(),
                        n.shard.to_string(),
                        topic.clone(),
                        partition.to_string(),
                        format!("{}..={}", n.first, n.last),
                        n.epoch.to_string(),
                        state.to_owned(),
                    ]
                })
                .collect();
            if rows.is_empty() {
                out += "(no batch recorded)\n";
            } else {
                out += &table(&["table", "shard", "topic", "partition", "offsets", "epoch", "state"], &rows);
            }
        }
        print!("{out}");
        Ok(Outcome::done())
    }

    fn reset(
        &self,
        target: &ResetTarget,
        topic: Option<&str>,
        execute: bool,
        reingest: bool,
        ledger: Option<&dyn Ledger>,
        runtime: &tokio::runtime::Runtime,
    ) -> Result<Outcome, Outcome> {
        if reingest && ledger.is_none() {
            return Err(Outcome::refused(
                "--reingest is for exactly-once pipelines; at least once, a rewind re-reads and writes the records again \
                 by itself",
            ));
        }
        let partitions = self.partitions(topic)?;
        let views = self.view(&partitions)?;
        let mut at_time = BTreeMap::new();
        if let ResetTarget::Timestamp(ms) = target {
            let mut list = TopicPartitionList::new();
            for (topic, partition) in &partitions {
                list.add_partition_offset(topic, *partition, Offset::Offset(*ms))
                    .map_err(|e| Outcome::failed(format!("{topic}/{partition}: {e}")))?;
            }
            let found = self
                .consumer
                .offsets_for_times(list, REQUEST_TIMEOUT)
                .map_err(|e| Outcome::failed(format!("looking up offsets by time: {e}")))?;
            for element in found.elements() {
                let offset = match element.offset() {
                    Offset::Offset(n) if n >= 0 => Some(n),
                    _ => None,
                };
                at_time.insert((element.topic().to_owned(), element.partition()), offset);
            }
        }
        let moves = plan(&views, target, &at_time).map_err(Outcome::refused)?;
        let back: Vec<&Move> = moves.iter().filter(|m| m.goes_back()).collect();

        let mut out = format!("reset plan for group {}{}\n", self.group, if execute { "" } else { " (dry run)" });
        let rows: Vec<Vec<String>> = moves
            .iter()
            .map(|m| {
                let change = match m.from {
                    Some(from) => format!("{:+}", m.to - from),
                    None => "first commit".to_owned(),
                };
                vec![
                    m.topic.clone(),
                    m.partition.to_string(),
                    m.from.map_or("-".into(), |f| f.to_string()),
                    m.to.to_string(),
                    change,
                ]
            })
            .collect();
        out += &table(&["topic", "partition", "from", "to", "change"], &rows);
        let exactly_once_back = ledger.is_some() && !back.is_empty();
        if exactly_once_back {
            let _ = writeln!(
                out,
                "exactly-once: {} partition(s) move back. ClickHouse remembers the tokens of their recorded batches, so \
                 replaying them would be dropped as repeats. --reingest retires those batches in the ledger: the next \
                 run inserts every record from the new offsets again, including rows the table still holds (empty or \
                 drop them first if each must be there once).",
                back.len()
            );
        }
        print!("{out}");
        if exactly_once_back && !reingest {
            return Err(Outcome::refused(
                "refused: partitions move back under exactly-once; add --reingest to insert their records again",
            ));
        }
        if !execute {
            println!("nothing changed; run again with --execute to apply the plan");
            return Ok(Outcome::done());
        }
        if moves.is_empty() {
            println!("nothing to change");
            return Ok(Outcome::done());
        }
        let members = self.members()?;
        if !members.is_empty() {
            return Err(Outcome::refused(format!(
                "refused: group `{}` has {} active member(s): {}. Stop every instance of the pipeline (a member's next \
                 commit would overwrite the reset), then run this again",
                self.group,
                members.len(),
                members.join("; ")
            )));
        }
        if let Some(ledger) = ledger.filter(|_| reingest) {
            for m in &back {
                let lane = LaneKey { topic: m.topic.as_str().into(), partition: m.partition };
                let retired = runtime.block_on(async {
                    let epoch = ledger.claim(&lane).await?;
                    ledger.retire(&lane, epoch).await.map(|()| epoch)
                });
                match retired {
                    Ok(epoch) => {
                        tracing::info!(topic = %m.topic, partition = m.partition, epoch, "retired the recorded batches");
                    }
                    Err(error) => {
                        return Err(Outcome::failed(format!(
                            "retiring the recorded batches of {}/{} failed: {error}. No offset was committed; run the \
                             same command again before the pipeline starts",
                            m.topic, m.partition
                        )));
                    }
                }
            }
        }
        let mut list = TopicPartitionList::new();
        for m in &moves {
            list.add_partition_offset(&m.topic, m.partition, Offset::Offset(m.to))
                .map_err(|e| Outcome::failed(format!("{}/{}: {e}", m.topic, m.partition)))?;
        }
        self.consumer.commit(&list, CommitMode::Sync).map_err(|e| {
            Outcome::failed(format!(
                "committing the new offsets failed: {e}{}",
                if reingest { " (the recorded batches are retired already: run the same command again)" } else { "" }
            ))
        })?;
        // Read back, so that "done" means the broker holds them.
        let partitions: Vec<(String, i32)> = moves.iter().map(|m| (m.topic.clone(), m.partition)).collect();
        let after = self.view(&partitions)?;
        let wrong: Vec<String> = moves
            .iter()
            .zip(&after)
            .filter(|(m, v)| v.committed != Some(m.to))
            .map(|(m, v)| format!("{}/{}: {:?} instead of {}", m.topic, m.partition, v.committed, m.to))
            .collect();
        if !wrong.is_empty() {
            return Err(Outcome::failed(format!("the committed offsets read back differ: {}", wrong.join(", "))));
        }
        println!(
            "done: {} partition(s) committed{}",
            moves.len(),
            if reingest { ", their earlier batches retired" } else { "" }
        );
        Ok(Outcome::done())
    }
}

/// Left-aligned columns under a header.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                let _ = write!(s, "{cell:<w$}  ");
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out += &line(row.iter().map(String::as_str).collect());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(partition: i32, committed: Option<i64>, start: i64, end: i64) -> PartitionView {
        PartitionView {
            topic: "orders".into(),
            partition,
            committed,
            log_start: start,
            log_end: end,
            lag: 0,
            committed_record_time: None,
        }
    }

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn the_command_line_is_read_with_its_targets() {
        let parse = |text: &str| OffsetsCommand::parse("p", &args(text));
        assert_eq!(parse("offsets show --json").unwrap(), OffsetsCommand::Show { json: true });
        assert_eq!(
            parse("offsets reset --shift -100 --execute").unwrap(),
            OffsetsCommand::Reset { target: ResetTarget::Shift(-100), topic: None, execute: true, reingest: false }
        );
        assert_eq!(
            parse("offsets reset --to-timestamp 2026-12-07T04:00:00.250Z --reingest").unwrap(),
            OffsetsCommand::Reset {
                target: ResetTarget::Timestamp(1_796_616_000_250),
                topic: None,
                execute: false,
                reingest: true
            }
        );
        assert_eq!(
            parse("offsets reset --to-offset 0:10,3:7 --topic t").unwrap(),
            OffsetsCommand::Reset {
                target: ResetTarget::Offsets(vec![(0, 10), (3, 7)]),
                topic: Some("t".into()),
                execute: false,
                reingest: false
            }
        );
        // One target, exactly.
        assert!(parse("offsets reset --execute").is_err());
        assert!(parse("offsets reset --to-earliest --to-latest").is_err());
        let bad = parse("offsets reset --to-offset 0:x").unwrap_err().to_string();
        assert!(bad.contains("not PARTITION:OFFSET"), "{bad}");
        let bad = parse("offsets reset --to-timestamp yesterday").unwrap_err().to_string();
        assert!(bad.contains("RFC 3339"), "{bad}");
    }

    #[test]
    fn plans_move_each_partition_within_its_log() {
        let views = [view(0, Some(50), 10, 100), view(1, None, 0, 40)];
        let none = BTreeMap::new();
        let to = |target: ResetTarget| -> Vec<(i32, Option<i64>, i64)> {
            plan(&views, &target, &none).unwrap().into_iter().map(|m| (m.partition, m.from, m.to)).collect()
        };
        assert_eq!(to(ResetTarget::Earliest), [(0, Some(50), 10), (1, None, 0)]);
        assert_eq!(to(ResetTarget::Latest), [(0, Some(50), 100), (1, None, 40)]);
        assert_eq!(to(ResetTarget::Offsets(vec![(0, 70)])), [(0, Some(50), 70)]);
        let err = plan(&views, &ResetTarget::Offsets(vec![(0, 101)]), &none).unwrap_err();
        assert!(err.contains("outside the log"), "{err}");
        // A shift stays inside the log, and needs a committed offset.
        let err = plan(&views, &ResetTarget::Shift(-5), &none).unwrap_err();
        assert!(err.contains("no committed offset"), "{err}");
        let shifted = plan(&views[..1], &ResetTarget::Shift(-500), &none).unwrap();
        assert_eq!(shifted[0].to, 10);
        let shifted = plan(&views[..1], &ResetTarget::Shift(500), &none).unwrap();
        assert_eq!(shifted[0].to, 100);
        // A time past every record goes to the log end.
        let at_time = BTreeMap::from([(("orders".to_owned(), 0), Some(42)), (("orders".to_owned(), 1), None)]);
        let timed = plan(&views, &ResetTarget::Timestamp(0), &at_time).unwrap();
        assert_eq!(timed.iter().map(|m| m.to).collect::<Vec<_>>(), [42, 40]);
        // Back means: below the committed offset, or nothing committed at all.
        assert!(timed[0].goes_back() && timed[1].goes_back());
        assert!(!to_move(50, 60).goes_back() && !to_move(50, 50).goes_back() && to_move(50, 49).goes_back());
    }

    fn to_move(from: i64, to: i64) -> Move {
        Move { topic: "orders".into(), partition: 0, from: Some(from), to }
    }

    #[test]
    fn offsets_of_several_topics_need_a_topic() {
        let mut views = vec![view(0, Some(1), 0, 10)];
        views.push(PartitionView { topic: "refunds".into(), ..view(0, Some(1), 0, 10) });
        let err = plan(&views, &ResetTarget::Offsets(vec![(0, 5)]), &BTreeMap::new()).unwrap_err();
        assert!(err.contains("add --topic"), "{err}");
    }

    #[test]
    fn times_are_rfc3339_both_ways() {
        let ms = parse_time("2026-12-07T05:06:07.089+01:00").unwrap();
        assert_eq!(format_time(ms), "2026-12-07T04:06:07.089Z");
    }
}
