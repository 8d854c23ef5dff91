//! The soak's faults, one at a time: the main instance SIGKILLed and started again at once; both
//! ClickHouse servers SIGSTOPped for 10–40 s; a second member joining for 20–60 s and leaving
//! (SIGTERM, exit 0 within drain_timeout + 30 s); the durable broker SIGSTOPped for 5–15 s or
//! restarted (SIGTERM, then `infra up --durable --only-kafka`), with production paused around it.
//! Whatever a fault stopped is started or thawed again by a guard, also when the soak returns
//! early.

use std::time::{Duration, Instant};

use anyhow::bail;

use super::instances::Members;
use super::producer::Load;
use super::setup::{self, Infra};
use super::{process_state, running, signal};

/// A fault the soak injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Kill,
    ClickhouseFreeze,
    SecondMember,
    BrokerFreeze,
    BrokerRestart,
}

impl Kind {
    pub(super) const ALL: [Kind; 5] =
        [Kind::Kill, Kind::ClickhouseFreeze, Kind::SecondMember, Kind::BrokerFreeze, Kind::BrokerRestart];

    pub(super) fn label(self) -> &'static str {
        match self {
            Kind::Kill => "SIGKILL of the main instance",
            Kind::ClickhouseFreeze => "ClickHouse frozen",
            Kind::SecondMember => "a second member joins and leaves",
            Kind::BrokerFreeze => "broker frozen",
            Kind::BrokerRestart => "broker restarted",
        }
    }
}

/// How a fault went.
#[derive(Debug, Clone)]
pub(super) enum Outcome {
    Done,
    /// Injected and undone, but something misbehaved (a member that did not leave cleanly).
    Problem(String),
    /// Not injected (the producer did not flush before a broker fault, a pid file is missing).
    Skipped(String),
    /// It could not be injected or undone: the load phase ends there.
    Failed(String),
}

/// One fault of the run.
#[derive(Debug, Clone)]
pub(super) struct Fault {
    pub(super) kind: Kind,
    /// Seconds since the start of the load.
    pub(super) start: f64,
    pub(super) end: f64,
    pub(super) detail: String,
    pub(super) outcome: Outcome,
}

/// The kinds of fault to choose from, in families of equal weight: the broker faults share one,
/// and it is left out when the broker's pid file names no running process. The in-memory broker
/// can only be frozen (a restart would lose the topic). The durable one is restarted, and frozen
/// too only with `broker_freeze`: the pinned Tansu over moto stopped serving fetches after a
/// SIGSTOP and SIGCONT in the first soak (producing went on; no member, not even a new one,
/// fetched another record), which is the broker's fault, not the pipeline's.
pub(super) fn available(infra: &Infra, broker_freeze: bool) -> Vec<Vec<Kind>> {
    let mut families = vec![vec![Kind::Kill], vec![Kind::ClickhouseFreeze], vec![Kind::SecondMember]];
    if setup::server_pid(infra.broker_service).is_some() {
        families.push(match (infra.durable, broker_freeze) {
            (false, _) => vec![Kind::BrokerFreeze],
            (true, true) => vec![Kind::BrokerFreeze, Kind::BrokerRestart],
            (true, false) => vec![Kind::BrokerRestart],
        });
    } else {
        eprintln!("soak: no running {} in the infra's pid files: no broker faults", infra.broker_service);
    }
    families
}

/// xorshift64*: the fault schedule, reproducible from `--seed`.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        // splitmix64 of the seed: seeds 0, 1, 2 give unrelated streams, and the state is never 0.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub(super) fn between(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }

    /// Exponential with mean `mean`: the time to the next fault of a Poisson process.
    pub(super) fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.uniform()).ln()
    }

    fn below(&mut self, n: usize) -> usize {
        ((self.uniform() * n as f64) as usize).min(n - 1)
    }

    /// A family at random, then a kind of it.
    pub(super) fn pick_kind(&mut self, families: &[Vec<Kind>]) -> Kind {
        let family = &families[self.below(families.len())];
        family[self.below(family.len())]
    }
}

/// What a fault acts on.
pub(super) struct Ctx<'a> {
    pub(super) members: &'a mut Members,
    pub(super) load: &'a Load,
    pub(super) infra: &'a Infra,
    pub(super) rng: &'a mut Rng,
    /// Whether the soak was interrupted: a fault's wait ends early then.
    pub(super) stop: &'a dyn Fn() -> bool,
    pub(super) epoch: Instant,
    /// What a SIGTERMed member gets to exit: drain_timeout + slack.
    pub(super) exit_timeout: Duration,
}

impl Ctx<'_> {
    /// Supervises the members for `seconds` (less if interrupted).
    fn hold(&mut self, seconds: f64) -> anyhow::Result<()> {
        let stop = self.stop;
        self.members.supervise_until(Instant::now() + Duration::from_secs_f64(seconds), stop)?;
        Ok(())
    }
}

/// Injects a fault of `kind` and undoes it; logged to stderr as it starts and ends.
pub(super) fn inject(kind: Kind, ctx: &mut Ctx<'_>) -> Fault {
    let start = ctx.epoch.elapsed().as_secs_f64();
    eprintln!("soak: {start:.0}s: fault: {}", kind.label());
    let result = match kind {
        Kind::Kill => kill(ctx),
        Kind::ClickhouseFreeze => freeze_clickhouse(ctx),
        Kind::SecondMember => second_member(ctx),
        Kind::BrokerFreeze => freeze_broker(ctx),
        Kind::BrokerRestart => restart_broker(ctx),
    };
    let (detail, outcome) = result.unwrap_or_else(|e| (String::new(), Outcome::Failed(format!("{e:#}"))));
    let end = ctx.epoch.elapsed().as_secs_f64();
    eprintln!("soak: {end:.0}s: fault over ({:.0}s): {}: {detail} {outcome:?}", end - start, kind.label());
    Fault { kind, start, end, detail, outcome }
}

type Applied = anyhow::Result<(String, Outcome)>;

fn kill(ctx: &mut Ctx<'_>) -> Applied {
    let (old, new) = ctx.members.kill_main()?;
    Ok((format!("SIGKILL to pid {old}, started again as pid {new}"), Outcome::Done))
}

fn freeze_clickhouse(ctx: &mut Ctx<'_>) -> Applied {
    let seconds = ctx.rng.between(10.0, 40.0);
    let pids: Vec<u32> = ["clickhouse", "clickhouse-2"].into_iter().filter_map(setup::server_pid).collect();
    if pids.len() < ctx.infra.clickhouse.len() {
        let why = format!("the infra's pid files name {} running ClickHouse servers, not 2", pids.len());
        return Ok((String::new(), Outcome::Skipped(why)));
    }
    let frozen = Frozen::stop(&pids)?;
    ctx.hold(seconds)?;
    drop(frozen);
    Ok((format!("SIGSTOP to pids {pids:?} for up to {seconds:.0}s, then SIGCONT"), Outcome::Done))
}

fn second_member(ctx: &mut Ctx<'_>) -> Applied {
    let seconds = ctx.rng.between(20.0, 60.0);
    let pid = ctx.members.join()?;
    ctx.hold(seconds)?;
    let (read, problem) = ctx.members.leave(ctx.exit_timeout)?;
    let detail = format!("pid {pid} in the group for up to {seconds:.0}s, then SIGTERM; {read}");
    Ok((detail, problem.map_or(Outcome::Done, Outcome::Problem)))
}

/// The broker's pid, and production paused; `Err` with the reason to skip the fault.
fn broker_and_pause<'a>(ctx: &Ctx<'a>) -> Result<(u32, super::producer::Paused<'a>), String> {
    let service = ctx.infra.broker_service;
    let Some(pid) = setup::server_pid(service) else {
        return Err(format!("no running {service} in the infra's pid files"));
    };
    let load: &'a Load = ctx.load;
    let paused = load.pause().map_err(|e| format!("{e:#}"))?;
    Ok((pid, paused))
}

fn freeze_broker(ctx: &mut Ctx<'_>) -> Applied {
    let seconds = ctx.rng.between(5.0, 15.0);
    let (pid, paused) = match broker_and_pause(ctx) {
        Ok(found) => found,
        Err(why) => return Ok((String::new(), Outcome::Skipped(why))),
    };
    let frozen = Frozen::stop(&[pid])?;
    ctx.hold(seconds)?;
    drop(frozen);
    drop(paused);
    Ok((format!("production paused and flushed; SIGSTOP to pid {pid} for up to {seconds:.0}s"), Outcome::Done))
}

fn restart_broker(ctx: &mut Ctx<'_>) -> Applied {
    let (pid, paused) = match broker_and_pause(ctx) {
        Ok(found) => found,
        Err(why) => return Ok((String::new(), Outcome::Skipped(why))),
    };
    let mut down = Down { restarted: false };
    signal("TERM", pid)?;
    let mut how = "SIGTERM".to_owned();
    if !await_gone(pid, Duration::from_secs(15)) {
        signal("KILL", pid)?;
        how.push_str(", SIGKILL 15 s later");
        if !await_gone(pid, Duration::from_secs(10)) {
            bail!("the broker (pid {pid}) is still there after SIGKILL");
        }
    }
    setup::start_durable_brokers()?;
    down.restarted = true;
    drop(paused);
    let new = setup::server_pid(ctx.infra.broker_service).map_or_else(|| "?".to_owned(), |p| p.to_string());
    Ok((format!("production paused and flushed; {how} to pid {pid}, started again as pid {new}"), Outcome::Done))
}

/// Waits until `pid` is gone (or a zombie: its sockets are closed then).
fn await_gone(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while running(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Processes SIGSTOPped; dropping the guard SIGCONTs them, also on an early return.
struct Frozen(Vec<u32>);

impl Frozen {
    fn stop(pids: &[u32]) -> anyhow::Result<Frozen> {
        let mut frozen = Frozen(Vec::new());
        for &pid in pids {
            // Kept before the signal, so that the guard thaws it whatever happens next.
            frozen.0.push(pid);
            signal("STOP", pid)?;
            let deadline = Instant::now() + Duration::from_secs(2);
            while process_state(pid) != Some('T') {
                if Instant::now() > deadline {
                    bail!("pid {pid} did not stop: {:?}", process_state(pid));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(frozen)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if let Err(e) = signal("CONT", pid) {
                eprintln!("soak: could not thaw pid {pid}: {e:#}");
            }
        }
    }
}

/// The durable broker stopped by the soak; dropped before it was started again (an early
/// return), it starts it.
struct Down {
    restarted: bool,
}

impl Drop for Down {
    fn drop(&mut self) {
        if !self.restarted
            && let Err(e) = setup::start_durable_brokers()
        {
            eprintln!("soak: could not start the durable broker again: {e:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_is_seeded_and_its_intervals_have_the_mean() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let n = 20_000;
        let sum: f64 = (0..n).map(|_| a.exponential(90.0)).sum();
        let mean = sum / n as f64;
        assert!((mean - 90.0).abs() < 90.0 * 0.05, "mean interval {mean}");
        let mut c = Rng::new(7);
        assert_eq!((0..n).map(|_| c.exponential(90.0)).sum::<f64>(), sum, "the same seed, the same schedule");
        let families = [vec![Kind::Kill], vec![Kind::BrokerFreeze, Kind::BrokerRestart]];
        let picks: Vec<Kind> = (0..1000).map(|_| b.pick_kind(&families)).collect();
        let kills = picks.iter().filter(|k| **k == Kind::Kill).count();
        assert!((400..600).contains(&kills), "families weigh the same: {kills} of 1000");
        assert!(picks.contains(&Kind::BrokerRestart) && picks.contains(&Kind::BrokerFreeze));
        let x = b.between(10.0, 40.0);
        assert!((10.0..40.0).contains(&x));
    }
}
