//! The soak's pipeline processes: the main instance (started again at once when the soak kills it
//! or when it exits by itself) and the second member that joins the group for a while and leaves.
//! Every exit is recorded, with what was wrong with it if the soak did not cause it.

use std::fs;
use std::net::TcpListener;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::PathBuf;
use std::process::Child;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::sampling::{Target, scrape};
use crate::lab::flagship::flagship_command;
use crate::lab::procfs;

/// An instance that ends by itself sooner than this after its start is not started again.
const QUICK_EXIT: Duration = Duration::from_secs(10);

/// What every instance is started with.
pub(super) struct Env {
    pub(super) binary: PathBuf,
    pub(super) broker: String,
    pub(super) clickhouse: Vec<String>,
    pub(super) topic: String,
    pub(super) group: String,
    pub(super) logs: PathBuf,
}

/// One pipeline process; dropping it SIGKILLs it if it still runs.
struct Instance {
    label: String,
    child: Child,
    admin: String,
    started: Instant,
    /// Reaped: its pid may belong to another process now, so it must not be signalled or read.
    ended: bool,
}

impl Instance {
    fn spawn(env: &Env, label: &str) -> anyhow::Result<Instance> {
        let admin = TcpListener::bind("127.0.0.1:0")?.local_addr()?.to_string();
        let log = env.logs.join(format!("{label}.log"));
        let file = fs::File::create(&log)?;
        let child =
            flagship_command(&env.binary, &env.broker, &env.clickhouse, (&env.topic, &env.group), &admin, file)?
                // Its own process group: a Ctrl-C in the terminal goes to the soak only, which stops
                // the instances itself after thawing what it froze.
                .process_group(0)
                .spawn()
                .with_context(|| format!("starting {}", env.binary.display()))?;
        eprintln!("soak: {label} started (pid {}, admin {admin}, log {})", child.id(), log.display());
        Ok(Instance { label: label.to_owned(), child, admin, started: Instant::now(), ended: false })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then waits `timeout` for the exit (SIGKILL after it); the status as text and what
    /// was wrong: a non-zero exit, or none in time.
    fn terminate(&mut self, timeout: Duration) -> anyhow::Result<(String, Option<String>)> {
        if let Some(status) = self.child.try_wait()? {
            self.ended = true;
            return Ok((format!("{status} before SIGTERM"), Some("exited before it was asked to".to_owned())));
        }
        let started = Instant::now();
        super::signal("TERM", self.pid())?;
        loop {
            if let Some(status) = self.child.try_wait()? {
                self.ended = true;
                let took = started.elapsed().as_secs_f64();
                let problem = (!status.success()).then(|| format!("SIGTERM: {status} after {took:.1}s, not exit 0"));
                return Ok((format!("{status} {took:.1}s after SIGTERM"), problem));
            }
            if started.elapsed() > timeout {
                let _ = self.child.kill();
                let status = self.child.wait()?;
                self.ended = true;
                let secs = timeout.as_secs();
                return Ok((
                    format!("{status}: SIGKILLed, still running {secs}s after SIGTERM"),
                    Some(format!("still running {secs}s after SIGTERM (drain_timeout + 30 s)")),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One process exit.
pub(super) struct Exit {
    /// Seconds since the start of the load.
    pub(super) t: f64,
    pub(super) label: String,
    pub(super) status: String,
    /// VmHWM read just before the soak signalled it (0 when it exited by itself).
    pub(super) peak_rss: u64,
    /// What was wrong with it; `None` when it is what the soak asked for.
    pub(super) problem: Option<String>,
}

/// The group's members the soak runs.
pub(super) struct Members {
    env: Env,
    epoch: Instant,
    main: Instance,
    lifetime: u32,
    second: Option<Instance>,
    joins: u32,
    pub(super) exits: Vec<Exit>,
    target: Arc<Mutex<Target>>,
}

impl Members {
    pub(super) fn start(env: Env, epoch: Instant) -> anyhow::Result<Members> {
        let main = Instance::spawn(&env, "main-0")?;
        let target = Arc::new(Mutex::new(Target::default()));
        let members = Members { env, epoch, main, lifetime: 0, second: None, joins: 0, exits: Vec::new(), target };
        members.publish();
        Ok(members)
    }

    /// Whether the main instance runs (it is not started again after a quick exit).
    pub(super) fn main_running(&self) -> bool {
        !self.main.ended
    }

    /// What the sampler reads, kept up to date across restarts.
    pub(super) fn target(&self) -> Arc<Mutex<Target>> {
        self.target.clone()
    }

    fn publish(&self) {
        *self.target.lock().unwrap_or_else(PoisonError::into_inner) = Target {
            // pid 0 has no /proc entry: a reaped instance's pid may be another process's by now.
            pid: if self.main.ended { 0 } else { self.main.pid() },
            admin: self.main.admin.clone(),
            lifetime: self.lifetime,
            second: self.second.as_ref().map(|s| s.admin.clone()),
        };
    }

    fn t(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    fn record(&mut self, label: String, status: String, peak_rss: u64, problem: Option<String>) {
        let t = self.t();
        match &problem {
            Some(p) => eprintln!("soak: {t:.0}s: {label}: {status}: {p}"),
            None => eprintln!("soak: {t:.0}s: {label}: {status}"),
        }
        self.exits.push(Exit { t, label, status, peak_rss, problem });
    }

    fn restart_main(&mut self) -> anyhow::Result<u32> {
        self.lifetime += 1;
        self.main = Instance::spawn(&self.env, &format!("main-{}", self.lifetime))?;
        self.publish();
        Ok(self.main.pid())
    }

    /// Reaps an instance that exited by itself: recorded as a problem, and the main instance is
    /// started again so that the run goes on, unless it ended within [`QUICK_EXIT`] of its start
    /// (an error: it would only end again).
    pub(super) fn poll(&mut self) -> anyhow::Result<()> {
        if !self.main.ended
            && let Some(status) = self.main.child.try_wait()?
        {
            self.main.ended = true;
            let label = self.main.label.clone();
            let lived = self.main.started.elapsed();
            self.record(label.clone(), status.to_string(), 0, Some("exited by itself".to_owned()));
            if lived < QUICK_EXIT {
                self.publish();
                bail!(
                    "{label} exited by itself {:.1}s after it started ({status}); not starting it again",
                    lived.as_secs_f64()
                );
            }
            self.restart_main()?;
        }
        if let Some(second) = &mut self.second
            && let Some(status) = second.child.try_wait()?
        {
            second.ended = true;
            let label = second.label.clone();
            self.second = None;
            self.publish();
            self.record(label, status.to_string(), 0, Some("exited by itself".to_owned()));
        }
        Ok(())
    }

    /// Supervises ([`Members::poll`]) until `deadline`; returns early, with `true`, once `stop`
    /// says so.
    pub(super) fn supervise_until(&mut self, deadline: Instant, stop: impl Fn() -> bool) -> anyhow::Result<bool> {
        loop {
            self.poll()?;
            if stop() {
                return Ok(true);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            std::thread::sleep((deadline - now).min(Duration::from_millis(200)));
        }
    }

    /// Waits until the main instance wrote its first rows, so that the faults begin on a pipeline
    /// that runs.
    pub(super) fn await_first_rows(&mut self, timeout: Duration, stop: impl Fn() -> bool) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let admin = self.main.admin.clone();
            if scrape(&admin).is_some_and(|m| m.sum("etl_records_out_total") > 0.0) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the main instance wrote no row within {} s", timeout.as_secs());
            }
            if self.supervise_until(Instant::now() + Duration::from_millis(500), &stop)? {
                bail!("interrupted before the first rows");
            }
        }
    }

    /// SIGKILLs the main instance and starts it again at once; the old and the new pid.
    pub(super) fn kill_main(&mut self) -> anyhow::Result<(u32, u32)> {
        if self.main.ended {
            bail!("the main instance is not running");
        }
        let pid = self.main.pid();
        let peak = procfs::peak_rss(pid);
        self.main.child.kill()?;
        let status = self.main.child.wait()?;
        self.main.ended = true;
        // It may have ended by itself just before: then that is what its status says.
        let problem = (status.signal() != Some(9)).then(|| format!("ended ({status}) before the soak's SIGKILL"));
        let label = self.main.label.clone();
        self.record(label, format!("{status} (SIGKILL by the soak)"), peak, problem);
        Ok((pid, self.restart_main()?))
    }

    /// Starts a second member (same binary, group and topic, its own admin port); its pid.
    pub(super) fn join(&mut self) -> anyhow::Result<u32> {
        if self.second.is_some() {
            bail!("a second member runs already");
        }
        self.joins += 1;
        let second = Instance::spawn(&self.env, &format!("second-{}", self.joins))?;
        let pid = second.pid();
        self.second = Some(second);
        self.publish();
        Ok(pid)
    }

    /// SIGTERMs the second member; what it had read and what was wrong with its exit.
    pub(super) fn leave(&mut self, timeout: Duration) -> anyhow::Result<(String, Option<String>)> {
        let Some(mut second) = self.second.take() else {
            // poll() recorded its exit already.
            return Ok(("it had exited already".to_owned(), Some("exited before it was asked to leave".to_owned())));
        };
        self.publish();
        // With the flagship's 45 s session timeout a joiner may get its partitions late, or not
        // at all in a short visit; what it read says which.
        let read = match scrape(&second.admin) {
            Some(m) => format!("it had read {} records", m.sum("etl_records_in_total")),
            None => "its /metrics did not answer".to_owned(),
        };
        let peak = procfs::peak_rss(second.pid());
        let (status, problem) = second.terminate(timeout)?;
        let label = second.label.clone();
        self.record(label, status, peak, problem.clone());
        Ok((read, problem))
    }

    /// SIGTERMs every instance (the end of the run); their exits are recorded.
    pub(super) fn stop_all(&mut self, timeout: Duration) {
        if self.second.is_some()
            && let Err(e) = self.leave(timeout)
        {
            eprintln!("soak: stopping the second member: {e:#}");
        }
        if self.main.ended {
            return; // poll() recorded its exit
        }
        let pid = self.main.pid();
        let peak = procfs::peak_rss(pid);
        let label = self.main.label.clone();
        match self.main.terminate(timeout) {
            Ok((status, problem)) => self.record(label, status, peak, problem),
            Err(e) => self.record(label, "not stopped".to_owned(), peak, Some(format!("SIGTERM: {e:#}"))),
        }
    }
}
