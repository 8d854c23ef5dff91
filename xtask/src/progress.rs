//! Progress of long commands (`produce`, `bench`, `soak`): a bar with rate and ETA on a
//! terminal, and a plain line every [`PLAIN_EVERY`] otherwise (CI logs, files), so a log shows
//! the work moving without a line per record.

use std::io::IsTerminal as _;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{FormattedDuration, HumanCount, HumanDuration, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often a log (not a terminal) gets a progress line.
const PLAIN_EVERY: Duration = Duration::from_secs(10);

/// One long piece of work: records against a total, or time against a length.
pub(crate) struct Progress {
    bar: ProgressBar,
    /// Stops the thread that prints plain lines or moves a clock's position.
    ticker: Option<(Sender<()>, JoinHandle<()>)>,
}

/// What the position counts.
#[derive(Clone, Copy)]
enum Unit {
    Records,
    Seconds,
}

impl Progress {
    /// `total` records, advanced with [`Progress::set`] or [`Progress::inc`].
    pub(crate) fn records(label: &str, total: u64) -> Progress {
        Progress::start(label, total, Unit::Records, None)
    }

    /// A phase that lasts `length`: the position follows the clock by itself.
    pub(crate) fn clock(label: &str, length: Duration) -> Progress {
        Progress::start(label, length.as_secs().max(1), Unit::Seconds, Some(Instant::now()))
    }

    fn start(label: &str, total: u64, unit: Unit, clock: Option<Instant>) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        let bar = if terminal {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let template = match unit {
                Unit::Records => "{prefix} [{bar:30}] {human_pos}/{human_len} records, {rate}, ETA {eta} {msg}",
                Unit::Seconds => "{prefix} [{bar:30}] {elapsed} of {duration} {msg}",
            };
            let style = ProgressStyle::with_template(template)
                .expect("a valid template")
                .with_key("rate", |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{}/s", HumanCount(state.per_sec() as u64));
                })
                .progress_chars("=> ");
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        } else {
            // Hidden, it still keeps the position and estimates the rate for the plain lines.
            ProgressBar::hidden()
        };
        bar.set_length(total);
        bar.set_prefix(label.to_owned());
        let every = match (terminal, clock) {
            (false, _) => Some(PLAIN_EVERY),
            (true, Some(_)) => Some(Duration::from_secs(1)),
            (true, None) => None,
        };
        let ticker = every.map(|every| {
            let (stop, stopped) = mpsc::channel::<()>();
            let (bar, label) = (bar.clone(), label.to_owned());
            let handle = std::thread::spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                    if let Some(started) = clock {
                        bar.set_position(started.elapsed().as_secs().min(total));
                    }
                    if !terminal {
                        eprintln!("{}", line(&label, &bar, unit));
                    }
                }
            });
            (stop, handle)
        });
        Progress { bar, ticker }
    }

    /// Sets the position (records done so far).
    pub(crate) fn set(&self, position: u64) {
        self.bar.set_position(position);
    }

    /// Advances the position by `n`.
    pub(crate) fn inc(&self, n: u64) {
        self.bar.inc(n);
    }

    /// A short note after the figures (e.g. faults injected so far).
    pub(crate) fn note(&self, message: String) {
        self.bar.set_message(message);
    }

    /// Ends the display: the bar stays on the terminal as it is; a log gets no further line.
    pub(crate) fn finish(mut self) {
        self.stop();
        self.bar.abandon();
    }

    fn stop(&mut self) {
        if let Some((stop, handle)) = self.ticker.take() {
            let _ = stop.send(());
            let _ = handle.join();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The plain line: `label: 1,200,000/3,000,000 records (40%), 512,000/s, ETA 4s (note)`.
fn line(label: &str, bar: &ProgressBar, unit: Unit) -> String {
    let (position, total) = (bar.position(), bar.length().unwrap_or(0).max(1));
    let percent = position * 100 / total;
    let note = if bar.message().is_empty() { String::new() } else { format!(" ({})", bar.message()) };
    match unit {
        Unit::Records => {
            // The mean rate since the start: a log line every 10 s wants the trend, not the
            // last burst.
            let seconds = bar.elapsed().as_secs_f64();
            let rate = if seconds > 0.0 { position as f64 / seconds } else { 0.0 };
            let eta = if rate > 0.0 {
                Duration::from_secs_f64((total - position.min(total)) as f64 / rate)
            } else {
                Duration::ZERO
            };
            format!(
                "{label}: {}/{} records ({percent}%), {}/s, ETA {}{note}",
                HumanCount(position),
                HumanCount(total),
                HumanCount(rate as u64),
                HumanDuration(eta),
            )
        }
        Unit::Seconds => format!(
            "{label}: {} of {} ({percent}%){note}",
            FormattedDuration(Duration::from_secs(position)),
            FormattedDuration(Duration::from_secs(total)),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The plain line carries what an operator reads in a CI log: done, total, share, rate, ETA.
    #[test]
    fn plain_lines_say_how_far_how_fast_and_how_long() {
        let bar = ProgressBar::hidden();
        bar.set_length(3_000_000);
        bar.set_position(1_200_000);
        bar.set_message("2 faults");
        let text = line("produce", &bar, Unit::Records);
        assert!(text.starts_with("produce: 1,200,000/3,000,000 records (40%), "), "{text}");
        assert!(text.contains("/s, ETA ") && text.ends_with(" (2 faults)"), "{text}");

        let clock = ProgressBar::hidden();
        clock.set_length(600);
        clock.set_position(150);
        assert_eq!(line("soak", &clock, Unit::Seconds), "soak: 00:02:30 of 00:10:00 (25%)");
    }
}
