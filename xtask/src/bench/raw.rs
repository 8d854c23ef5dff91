//! The raw limits of `cargo xtask bench`, each run by the bench as its own child process
//! (`cargo xtask bench-raw consume|insert|dump`) so that its CPU time and peak RSS are its own, read
//! the same way as the pipeline's. Each prints one `bench-result key=value ...` line last.
//!
//! - `consume`: librdkafka consume-and-discard of the topic, read the way the Kafka source reads it
//!   (its prefetch settings, one split queue per partition read in batches with the source's own
//!   `PartitionBatches`, polled without blocking by as many threads as the pipeline has), from the
//!   first message to the last: what the broker and librdkafka can deliver. Its librdkafka
//!   threads' CPU is reported apart, beside the pipeline's.
//! - `insert`: the rows the pipeline wrote, read back as RowBinary, inserted with the `clickhouse`
//!   crate the way the sink inserts (lz4, `wait_end_of_query`, a deduplication token, as many
//!   inserts in flight per shard as the pipeline allows), in batches of the pipeline's maximum size.
//!   Before the clock starts it also measures two parts of the pipeline alone: the Native
//!   transposition of those batches and their lz4 compression (the clickhouse crate's framing).
//! - `dump`: the payloads of the topic's first records into a file, on which the generated crate's
//!   `benches/parts.rs` measures the decoder and the chain alone.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use etl_runtime::__private::NativeEncoder;
use etl_runtime::PartitionBatches;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::rowbinary;
use crate::lab::{http, procfs};

/// The raw measurements.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum RawCommand {
    /// Consume and discard `--records` messages of a topic from its beginning.
    Consume(ConsumeArgs),
    /// Insert RowBinary files (one per shard) into a table.
    Insert(InsertArgs),
    /// Write the payloads of a topic's first `--records` messages to a file (for the parts
    /// measured alone; not timed).
    Dump(DumpArgs),
}

/// The topic a child reads from its beginning, and how many of its records.
#[derive(Debug, clap::Args)]
pub(crate) struct TopicArgs {
    #[arg(long)]
    brokers: String,
    #[arg(long)]
    topic: String,
    #[arg(long)]
    partitions: i32,
    #[arg(long)]
    records: u64,
}

/// `bench-raw dump` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct DumpArgs {
    #[command(flatten)]
    source: TopicArgs,
    /// The file: each payload as a 4-byte little-endian length and its bytes.
    #[arg(long)]
    out: PathBuf,
}

/// `bench-raw consume` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct ConsumeArgs {
    #[command(flatten)]
    source: TopicArgs,
    /// Threads polling the partitions' queues (the pipeline's `pipeline.threads`).
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

/// `bench-raw insert` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct InsertArgs {
    /// One per shard, in order.
    #[arg(long, required = true)]
    url: Vec<String>,
    /// The RowBinary rows of each shard, in the order of `--url`.
    #[arg(long, required = true)]
    data: Vec<PathBuf>,
    /// The table (in `default`), with the columns of the data.
    #[arg(long)]
    table: String,
    #[arg(long)]
    batch_bytes: usize,
    #[arg(long)]
    batch_rows: usize,
    /// Inserts in flight per shard.
    #[arg(long)]
    inflight: usize,
    /// The insert format (`sink.clickhouse.format`). Native batches are made from the rows before
    /// the clock starts: the limit is the server's, the transposition is the pipeline's work.
    #[arg(long, default_value = "rowbinary")]
    format: String,
}

pub(crate) fn run(command: RawCommand) -> anyhow::Result<()> {
    let result = match command {
        RawCommand::Consume(args) => consume(&args)?,
        RawCommand::Insert(args) => insert(&args)?,
        RawCommand::Dump(args) => dump(&args)?,
    };
    println!("{}", result_line(&result));
    Ok(())
}

/// The line a child prints last: `bench-result k=v k=v`.
fn result_line(values: &BTreeMap<&'static str, f64>) -> String {
    let mut line = "bench-result".to_owned();
    for (k, v) in values {
        line.push_str(&format!(" {k}={v}"));
    }
    line
}

/// The values of the last `bench-result` line of a child's output.
pub(crate) fn parse_result(stdout: &str) -> anyhow::Result<BTreeMap<String, f64>> {
    let Some(line) = stdout.lines().rev().find_map(|l| l.strip_prefix("bench-result")) else {
        bail!("no bench-result line in:\n{stdout}");
    };
    line.split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').with_context(|| format!("`{kv}` is not key=value"))?;
            Ok((k.to_owned(), v.parse::<f64>().with_context(|| format!("`{kv}`"))?))
        })
        .collect()
}

fn consume(args: &ConsumeArgs) -> anyhow::Result<BTreeMap<&'static str, f64>> {
    // The Kafka source's own prefetch defaults, so both read ahead the same way; no group
    // membership or commits, which the source pays for separately.
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &args.source.brokers)
        .set("group.id", format!("bench-raw-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false");
    for (key, value) in etl_runtime::__private::prefetch_properties() {
        config.set(key, value);
    }
    let consumer: Arc<BaseConsumer> = Arc::new(config.create().context("creating the consumer")?);
    let threads = args.threads.max(1);
    let mut queues: Vec<Vec<_>> = (0..threads).map(|_| Vec::new()).collect();
    let mut assignment = TopicPartitionList::new();
    for partition in 0..args.source.partitions {
        // Split before assigning, so no message of the partition lands in the main queue.
        let queue =
            PartitionBatches::split(&consumer, &args.source.topic, partition).context("splitting a partition queue")?;
        queues[partition as usize % threads].push(queue);
        assignment.add_partition_offset(&args.source.topic, partition, Offset::Beginning)?;
    }
    consumer.assign(&assignment)?;
    let started = Instant::now();
    let count = Arc::new(AtomicU64::new(0));
    let first = Arc::new(std::sync::OnceLock::<Instant>::new());
    let bytes = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = queues
        .into_iter()
        .map(|queues| {
            let (count, first, bytes, records) = (count.clone(), first.clone(), bytes.clone(), args.source.records);
            std::thread::spawn(move || -> anyhow::Result<()> {
                // The pipeline thread's loop (etl-runtime/src/engine/pipeline/turn.rs) over the
                // lanes' batched queues: up to 256 records per lane per round without blocking, a
                // 2 ms wait when a round found nothing.
                let mut queues = queues;
                while count.load(Ordering::Relaxed) < records {
                    let (mut got, mut got_bytes) = (0u64, 0u64);
                    for queue in &mut queues {
                        for _ in 0..256 {
                            match queue.poll() {
                                Some(Ok(message)) => {
                                    got += 1;
                                    got_bytes += message.payload().map_or(0, <[u8]>::len) as u64;
                                }
                                Some(Err(e)) => bail!("consuming: {e}"),
                                None => break,
                            }
                        }
                    }
                    if got == 0 {
                        std::thread::sleep(Duration::from_millis(2));
                    } else {
                        first.get_or_init(Instant::now);
                        count.fetch_add(got, Ordering::Relaxed);
                        bytes.fetch_add(got_bytes, Ordering::Relaxed);
                    }
                }
                Ok(())
            })
        })
        .collect();
    // The main queue carries only events now, but librdkafka needs it served.
    let (mut seen, mut progress_at) = (0u64, Instant::now());
    while count.load(Ordering::Relaxed) < args.source.records {
        if let Some(Err(e)) = consumer.poll(Duration::from_millis(100)) {
            bail!("consuming {}: {e}", args.source.topic);
        }
        if workers.iter().any(|w| w.is_finished()) && count.load(Ordering::Relaxed) < args.source.records {
            break;
        }
        let now = count.load(Ordering::Relaxed);
        if now != seen {
            (seen, progress_at) = (now, Instant::now());
        } else if progress_at.elapsed() > Duration::from_secs(60) {
            bail!("no message for 60 s after {now} of {}", args.source.records);
        }
    }
    let ended = Instant::now();
    for worker in workers {
        worker.join().map_err(|_| anyhow::anyhow!("a consumer thread panicked"))??;
    }
    let first = *first.get().unwrap_or(&started);
    Ok(BTreeMap::from([
        ("records", count.load(Ordering::Relaxed) as f64),
        ("payload_bytes", bytes.load(Ordering::Relaxed) as f64),
        ("startup_seconds", (first - started).as_secs_f64()),
        ("seconds", (ended - first).as_secs_f64()),
        ("cpu_seconds", procfs::own_cpu_seconds()),
        ("peak_rss", procfs::peak_rss(std::process::id()) as f64),
        // librdkafka's threads, read while the consumer is alive (beside the pipeline's).
        ("cpu_librdkafka_seconds", librdkafka_seconds(|name| name.starts_with("rdk:"))),
        ("cpu_librdkafka_broker_seconds", librdkafka_seconds(|name| name.starts_with("rdk:broker"))),
    ]))
}

/// CPU seconds of this process's live threads whose name `matches`.
fn librdkafka_seconds(matches: impl Fn(&str) -> bool) -> f64 {
    procfs::thread_cpu_seconds(std::process::id()).iter().filter(|(name, _)| matches(name)).map(|(_, s)| s).sum()
}

fn dump(args: &DumpArgs) -> anyhow::Result<BTreeMap<&'static str, f64>> {
    use rdkafka::Message as _;
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &args.source.brokers)
        .set("group.id", format!("bench-dump-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()
        .context("creating the consumer")?;
    let mut assignment = TopicPartitionList::new();
    for partition in 0..args.source.partitions {
        assignment.add_partition_offset(&args.source.topic, partition, Offset::Beginning)?;
    }
    consumer.assign(&assignment)?;
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(&args.out).with_context(|| format!("creating {}", args.out.display()))?,
    );
    let (mut count, mut bytes, mut idle_since) = (0u64, 0u64, Instant::now());
    while count < args.source.records {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) => {
                idle_since = Instant::now();
                let Some(payload) = message.payload() else { continue };
                std::io::Write::write_all(&mut out, &(payload.len() as u32).to_le_bytes())?;
                std::io::Write::write_all(&mut out, payload)?;
                (count, bytes) = (count + 1, bytes + payload.len() as u64);
            }
            Some(Err(e)) => bail!("consuming {}: {e}", args.source.topic),
            None if idle_since.elapsed() > Duration::from_secs(60) => bail!("no message for 60 s after {count}"),
            None => {}
        }
    }
    std::io::Write::flush(&mut out)?;
    Ok(BTreeMap::from([("records", count as f64), ("payload_bytes", bytes as f64)]))
}

fn insert(args: &InsertArgs) -> anyhow::Result<BTreeMap<&'static str, f64>> {
    if args.url.len() != args.data.len() {
        bail!("one --data per --url");
    }
    let describe = http::clickhouse_text(&args.url[0], &format!("DESCRIBE TABLE default.`{}` FORMAT TSV", args.table))?;
    let (mut names, mut types, mut columns) = (Vec::new(), Vec::new(), Vec::new());
    for line in describe.lines() {
        let mut fields = line.split('\t');
        let (Some(name), Some(ty)) = (fields.next(), fields.next()) else { continue };
        names.push(format!("`{name}`"));
        types.push(rowbinary::Ty::parse(ty)?);
        // TSV escapes the quotes of `DateTime64(3, 'UTC')`.
        columns.push((name.to_owned(), ty.replace("\\'", "'")));
    }
    let native = match args.format.as_str() {
        "rowbinary" => None,
        "native" => Some(NativeEncoder::new(&columns).context("a column type the Native encoder does not know")?),
        other => bail!("--format {other}: expected rowbinary or native"),
    };
    let sql = format!(
        "INSERT INTO default.`{}` ({}) FORMAT {}",
        args.table,
        names.join(", "),
        if native.is_some() { "Native" } else { "RowBinary" }
    );
    let mut shards = Vec::new();
    let (mut rows, mut total_bytes, mut batch_count) = (0usize, 0usize, 0usize);
    // The parts the pipeline does before an insert, each measured alone on this thread before the
    // clock starts: the Native transposition (zero for RowBinary) and the compression.
    let (mut native_cpu, mut compress_cpu, mut compressed_bytes) = (0.0, 0.0, 0usize);
    for (url, path) in args.url.iter().zip(&args.data) {
        let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let batches = rowbinary::batches(&data, &types, args.batch_bytes, args.batch_rows)?;
        let cpu = etl_runtime::__private::thread_cpu_seconds();
        let (data, batches) = match native.clone() {
            None => (data, batches),
            Some(encoder) => to_native(encoder, &data, batches)?,
        };
        native_cpu += etl_runtime::__private::thread_cpu_seconds() - cpu;
        let cpu = etl_runtime::__private::thread_cpu_seconds();
        compressed_bytes += lz4_frames(&data);
        compress_cpu += etl_runtime::__private::thread_cpu_seconds() - cpu;
        rows += batches.iter().map(|(_, n)| n).sum::<usize>();
        total_bytes += data.len();
        batch_count += batches.len();
        let client = clickhouse::Client::default()
            .with_url(url.as_str())
            .with_database("default")
            .with_user("default")
            .with_compression(clickhouse::Compression::Lz4);
        shards.push(Arc::new(Shard { client, data, batches, next: AtomicUsize::new(0) }));
    }
    // As many runtime threads as the pipeline's sink uses on this machine's two cores.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let run_id = std::process::id();
    let (cpu_before, started) = (procfs::own_cpu_seconds(), Instant::now());
    runtime.block_on(async {
        let mut tasks = Vec::new();
        for (index, shard) in shards.iter().enumerate() {
            for _ in 0..args.inflight {
                let (shard, sql) = (shard.clone(), sql.clone());
                tasks.push(tokio::spawn(async move { shard.insert_all(index, &sql, run_id).await }));
            }
        }
        for task in tasks {
            task.await??;
        }
        anyhow::Ok(())
    })?;
    let seconds = started.elapsed().as_secs_f64();
    Ok(BTreeMap::from([
        ("rows", rows as f64),
        ("bytes", total_bytes as f64),
        ("batches", batch_count as f64),
        ("seconds", seconds),
        ("cpu_seconds", procfs::own_cpu_seconds() - cpu_before),
        ("native_cpu_seconds", native_cpu),
        ("compress_cpu_seconds", compress_cpu),
        ("compressed_bytes", compressed_bytes as f64),
        // Including reading and cutting the files, for the phase's load accounting.
        ("cpu_total_seconds", procfs::own_cpu_seconds()),
        ("peak_rss", procfs::peak_rss(std::process::id()) as f64),
    ]))
}

/// A batch: its bytes' range and its rows.
type Cut = (std::ops::Range<usize>, usize);

/// Each batch of `data` (RowBinary rows) as the sink sends it under `format: native`: Native blocks
/// of the sink's block size; the batches' ranges in the returned bytes.
/// Compresses `data` as the clickhouse crate does an insert body with lz4: frames of up to
/// 256 KiB (the sink's write size), each lz4-compressed behind a 9-byte header and a 16-byte
/// CityHash128 of header and data. Returns the compressed size.
fn lz4_frames(data: &[u8]) -> usize {
    const FRAME: usize = 256 * 1024;
    const META: usize = 16 + 9;
    let mut buffer = vec![0u8; META + lz4_flex::block::get_maximum_output_size(FRAME)];
    let mut total = 0;
    for frame in data.chunks(FRAME) {
        let n = lz4_flex::block::compress_into(frame, &mut buffer[META..]).expect("the buffer fits the frame");
        buffer[16] = 0x82;
        buffer[17..21].copy_from_slice(&((9 + n) as u32).to_le_bytes());
        buffer[21..25].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        let checksum = cityhash_rs::cityhash_102_128(&buffer[16..META + n]).rotate_right(64);
        buffer[..16].copy_from_slice(&checksum.to_le_bytes());
        total += std::hint::black_box(META + n);
    }
    total
}

fn to_native(mut encoder: NativeEncoder, data: &[u8], batches: Vec<Cut>) -> anyhow::Result<(Vec<u8>, Vec<Cut>)> {
    let mut out = Vec::with_capacity(data.len() + data.len() / 4);
    let mut ranges = Vec::with_capacity(batches.len());
    for (range, rows) in batches {
        let start = out.len();
        encoder
            .encode(&data[range], |bytes| out.extend_from_slice(bytes))
            .context("the rows do not decode as the table's column types")?;
        ranges.push((start..out.len(), rows));
    }
    Ok((out, ranges))
}

/// One shard's rows, cut into batches that the shard's insert slots take in turn.
struct Shard {
    client: clickhouse::Client,
    data: Vec<u8>,
    batches: Vec<(std::ops::Range<usize>, usize)>,
    next: AtomicUsize,
}

impl Shard {
    async fn insert_all(&self, index: usize, sql: &str, run_id: u32) -> anyhow::Result<()> {
        loop {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            let Some((range, _)) = self.batches.get(n) else { return Ok(()) };
            // What the sink sends with every insert (etl-runtime/src/clickhouse/mod.rs).
            let mut insert = self
                .client
                .insert_formatted_with(sql)
                .with_setting("wait_end_of_query", "1")
                .with_setting("insert_deduplication_token", format!("bench-raw-{run_id}-{index}-{n}"))
                .buffered();
            let mut rest = &self.data[range.clone()];
            while !rest.is_empty() {
                let written = insert.write(rest).await?;
                rest = &rest[written..];
            }
            insert.end().await.with_context(|| format!("inserting batch {n} of shard {index}"))?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_line_round_trips() {
        let values = BTreeMap::from([("records", 1_000_000.0), ("seconds", 2.5), ("cpu_seconds", 1.25)]);
        let line = result_line(&values);
        assert_eq!(line, "bench-result cpu_seconds=1.25 records=1000000 seconds=2.5");
        let parsed = parse_result(&format!("noise\n{line}\n")).unwrap();
        assert_eq!(parsed["records"], 1_000_000.0);
        assert_eq!(parsed["cpu_seconds"], 1.25);
        assert!(parse_result("nothing here").is_err());
    }
}
