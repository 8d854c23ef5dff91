//! One pipeline run of `cargo xtask bench`: the variant's binary started on the topic, /metrics
//! scraped until every record is done, its CPU time (from the last scrape before the first
//! record) and peak RSS read before SIGTERM, and the rows in ClickHouse checked against what it
//! counted.

use std::fs;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::cpu_time::{Load, LoadMeter};
use super::rates::{per_million, per_second, rates, steady_rate};
use super::servers::Servers;
use super::variants::Variant;
use crate::lab::flagship::flagship_command;
use crate::lab::nanos;
use crate::lab::services::recreate_tables;
use crate::lab::{http, procfs, prom};

/// One scrape of the pipeline's /metrics, at `t` seconds after it was started.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sample {
    pub(crate) t: f64,
    pub(crate) records_in: f64,
    /// Records finished: rows durably written plus records that made no row.
    pub(crate) done: f64,
    pub(crate) rows_out: f64,
    pub(crate) inflight: f64,
    pub(crate) pauses: f64,
}

impl Sample {
    fn of(t: f64, s: &prom::Scrape) -> Sample {
        let rows_out = s.sum("etl_records_out_total");
        Sample {
            t,
            records_in: s.sum("etl_records_in_total"),
            done: rows_out + s.sum("etl_records_dropped_total"),
            rows_out,
            inflight: s.sum("etl_backpressure_inflight_bytes"),
            pauses: s.sum("etl_backpressure_pause_events_total"),
        }
    }
}

/// What one pipeline run measured.
pub(crate) struct Run {
    pub(crate) records: u64,
    pub(crate) samples: Vec<Sample>,
    /// Seconds after the start when the first record was in, and when the last was done.
    pub(crate) first_in: f64,
    pub(crate) done_at: f64,
    pub(crate) rows_out: f64,
    pub(crate) pauses: f64,
    pub(crate) batch_rows_mean: f64,
    /// CPU seconds from the last scrape before the first record to the last record done.
    pub(crate) cpu_seconds: f64,
    /// CPU seconds from the start to the last scrape before the first record (joining the
    /// group: idle cost, not counted per record), and how long that took.
    pub(crate) join_cpu_seconds: f64,
    pub(crate) join_seconds: f64,
    /// Each live thread's name and CPU seconds over the same interval as `cpu_seconds`.
    pub(crate) threads: Vec<(String, f64)>,
    pub(crate) peak_rss: u64,
    pub(crate) exit: String,
    pub(crate) load: Load,
}

impl Run {
    pub(crate) fn seconds(&self) -> f64 {
        self.done_at - self.first_in
    }

    pub(crate) fn records_per_second(&self) -> f64 {
        per_second(self.records as f64, self.seconds())
    }

    pub(crate) fn cpu_per_million(&self) -> f64 {
        per_million(self.cpu_seconds, self.records)
    }

    /// Records done per second between 10% and 90% of them: without the start and the tail (the
    /// last batches wait for their linger).
    pub(crate) fn steady_records_per_second(&self) -> f64 {
        steady_rate(&self.series(|s| s.done), self.records as f64)
    }

    /// Records taken from Kafka per second, from the first to the last.
    pub(crate) fn intake_records_per_second(&self) -> f64 {
        let end = self.samples.iter().find(|s| s.records_in >= self.records as f64).map_or(self.done_at, |s| s.t);
        per_second(self.records as f64, end - self.first_in)
    }

    pub(crate) fn pauses_per_second(&self) -> f64 {
        per_second(self.pauses, self.seconds())
    }

    /// `f` of the samples, against seconds since the first record.
    pub(crate) fn series(&self, f: impl Fn(&Sample) -> f64) -> Vec<(f64, f64)> {
        self.samples.iter().filter(|s| s.t >= self.first_in).map(|s| (s.t - self.first_in, f(s))).collect()
    }

    /// The rate of counter `f` between consecutive samples.
    pub(crate) fn rate(&self, f: impl Fn(&Sample) -> f64) -> Vec<(f64, f64)> {
        rates(&self.series(f))
    }
}

pub(crate) fn run_pipeline(
    v: &Variant,
    infra: &Servers,
    topic: &str,
    records: u64,
    logs: &Path,
) -> anyhow::Result<Run> {
    let ddl = etl_gen::ddl::create_table(&v.validated).map_err(anyhow::Error::msg)?;
    let tables = v.tables();
    for url in &infra.clickhouse {
        recreate_tables(url, &tables, &ddl)?;
    }
    let admin = TcpListener::bind("127.0.0.1:0")?.local_addr()?.to_string();
    let log = logs.join(format!("{}.log", v.label));
    let file = fs::File::create(&log)?;
    let group = format!("bench-{}-{}-{}", v.label, std::process::id(), nanos());
    eprintln!("bench: {} ({}), log {}", v.label, v.binary.display(), log.display());
    let spawned = Instant::now();
    let mut child = KillOnDrop(
        flagship_command(&v.binary, &infra.brokers, &infra.clickhouse, (topic, &group), &admin, file)?
            .spawn()
            .with_context(|| format!("starting {}", v.binary.display()))?,
    );
    let pid = child.0.id();
    let tail = || {
        let text = fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    };
    let (mut samples, mut first_in, mut kept_at) = (Vec::new(), None, f64::NEG_INFINITY);
    let (mut progress, mut progress_at) = (0.0, Instant::now());
    let shown = crate::progress::Progress::records(&format!("bench: {}", v.label), records);
    // Until the first record is in, the consumer joins its group (Tansu holds the first JoinGroup
    // for half of `session.timeout.ms`, 23 s at the flagship's default; a raw consumer with its own
    // assignment never waits). What the pipeline and the
    // servers spend meanwhile is idle cost, not cost per record: it is measured apart, and the
    // per-record figures start at the last scrape before the first record, like records/s.
    let mut joined = Joined::now(pid, infra);
    let (last, cpu_seconds, threads, peak_rss) = loop {
        if let Some(status) = child.0.try_wait()? {
            bail!("{} exited ({status}) before the end:\n{}", v.label, tail());
        }
        let t = spawned.elapsed().as_secs_f64();
        if let Some(scrape) = scrape(&admin) {
            let sample = Sample::of(t, &scrape);
            if first_in.is_none() && sample.records_in > 0.0 {
                first_in = Some(t);
            } else if first_in.is_none() {
                joined = Joined::now(pid, infra);
            }
            let finished = sample.done >= records as f64;
            // Scrapes every 50 ms time the ends closely; the plot needs only every 250 ms.
            if t - kept_at >= 0.25 || finished {
                samples.push(sample);
                kept_at = t;
            }
            if sample.done > progress {
                (progress, progress_at) = (sample.done, Instant::now());
                shown.set(sample.done as u64);
            }
            if finished {
                // Before SIGTERM: the shutdown is not part of the work.
                let cpu = procfs::cpu_seconds(pid).unwrap_or(0.0) - joined.cpu_seconds;
                break (scrape, cpu, joined.threads_since(pid), procfs::peak_rss(pid));
            }
        }
        if progress_at.elapsed() > Duration::from_secs(120) {
            bail!("{}: no record done for 120 s ({progress} of {records}):\n{}", v.label, tail());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    shown.finish();
    let load = joined.meter.finish(cpu_seconds);
    let end = *samples.last().expect("the last sample is kept");
    let first_in = first_in.unwrap_or(0.0);
    let pauses_before = samples.iter().find(|s| s.t >= first_in).map_or(0.0, |s| s.pauses);
    let batch_rows_mean = last.sum("etl_sink_batch_rows_sum") / last.sum("etl_sink_batch_rows_count").max(1.0);
    let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(60);
    let exit = loop {
        if let Some(status) = child.0.try_wait()? {
            break status.to_string();
        }
        if Instant::now() > deadline {
            break "still running 60 s after SIGTERM (killed)".to_owned();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stored = 0.0;
    for url in &infra.clickhouse {
        for table in &tables {
            let count = http::clickhouse_text(url, &format!("SELECT count() FROM default.`{table}`"))?;
            stored += count.trim().parse::<f64>()?;
        }
    }
    if stored != end.rows_out {
        bail!("{}: {stored} rows in ClickHouse, the pipeline counted {}", v.label, end.rows_out);
    }
    Ok(Run {
        records,
        first_in,
        done_at: end.t,
        rows_out: end.rows_out,
        pauses: end.pauses - pauses_before,
        batch_rows_mean,
        cpu_seconds,
        join_cpu_seconds: joined.cpu_seconds,
        join_seconds: joined.at.duration_since(spawned).as_secs_f64(),
        threads,
        peak_rss,
        exit,
        load,
        samples,
    })
}

/// The pipeline's and the servers' CPU at the last scrape before its first record: where its
/// per-record figures start.
struct Joined {
    at: Instant,
    cpu_seconds: f64,
    threads: std::collections::BTreeMap<u32, (String, f64)>,
    meter: LoadMeter,
}

impl Joined {
    fn now(pid: u32, infra: &Servers) -> Joined {
        Joined {
            at: Instant::now(),
            cpu_seconds: procfs::cpu_seconds(pid).unwrap_or(0.0),
            threads: procfs::thread_cpu_seconds_by_id(pid),
            meter: LoadMeter::start(infra),
        }
    }

    /// Each live thread's CPU seconds since then (all of it for threads started since).
    fn threads_since(&self, pid: u32) -> Vec<(String, f64)> {
        cpu_since(&self.threads, procfs::thread_cpu_seconds_by_id(pid))
    }
}

/// Each thread of `now` with the CPU seconds it used since `before`, matched by thread id (names
/// repeat); a thread started since counts whole, one that ended since is gone from both sums.
fn cpu_since(
    before: &std::collections::BTreeMap<u32, (String, f64)>,
    now: std::collections::BTreeMap<u32, (String, f64)>,
) -> Vec<(String, f64)> {
    now.into_iter()
        .map(|(tid, (name, seconds))| {
            let earlier = before.get(&tid).map_or(0.0, |(_, s)| *s);
            (name, seconds - earlier)
        })
        .collect()
}

fn scrape(admin: &str) -> Option<prom::Scrape> {
    match http::request(admin, "GET", "/metrics", b"") {
        Ok((200, body)) => Some(prom::Scrape::parse(&String::from_utf8_lossy(&body))),
        _ => None,
    }
}

/// Kills the child if the bench stops early, so no pipeline outlives it.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::cpu_since;

    #[test]
    fn thread_cpu_is_counted_since_the_join_by_thread_id() {
        let at = |threads: &[(u32, &str, f64)]| threads.iter().map(|&(t, n, s)| (t, (n.to_owned(), s))).collect();
        // Two librdkafka broker threads share a name; one pipeline thread starts after the join.
        let before = at(&[(10, "rdk:broker-1", 0.5), (11, "rdk:broker-1", 0.25), (12, "etl-sink", 0.75)]);
        let now = at(&[
            (10, "rdk:broker-1", 2.0),
            (11, "rdk:broker-1", 0.25),
            (12, "etl-sink", 1.0),
            (13, "etl-pipeline-0", 3.0),
        ]);
        let mut since = cpu_since(&before, now);
        since.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        assert_eq!(
            since,
            [
                ("etl-pipeline-0".to_owned(), 3.0),
                ("etl-sink".into(), 0.25),
                ("rdk:broker-1".into(), 0.0),
                ("rdk:broker-1".into(), 1.5)
            ]
        );
    }
}
