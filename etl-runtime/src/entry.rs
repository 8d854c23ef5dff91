//! What a generated `main` does before the pipeline runs: the command line (`--version`,
//! `--check`, `offsets show|reset`), and resolving `${VAR}` settings from the environment.
//!
//! The generator has already parsed every template into [`Part`]s, so the binary only
//! concatenates. A missing variable is a configuration error at start-up: exit code 2.

use std::net::SocketAddr;
use std::ops::Range;
use std::process::ExitCode;

/// Identity of the binary, shown by `--version` and in `etl_build_info`.
#[derive(Debug, Clone, Copy)]
pub struct Build {
    /// `pipeline.name`.
    pub pipeline: &'static str,
    /// The etl-rs version that generated the crate.
    pub version: &'static str,
    /// The first 16 hex digits of the config hash.
    pub config_hash: &'static str,
}

/// A piece of a setting's template.
#[derive(Debug, Clone, Copy)]
pub enum Part {
    /// Literal text.
    Lit(&'static str),
    /// `${name}` or `${name:-default}`.
    Var(&'static str, Option<&'static str>),
}

/// One run-time setting: its key path and its template. Whether its value may be shown is
/// decided by the key, in [`crate::secret`].
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// The key path, e.g. `sink.clickhouse.password`.
    pub key: &'static str,
    /// The template.
    pub parts: &'static [Part],
}

/// Settings with their values from the environment, in the order of the generated `SETTINGS`.
///
/// Generated code reads a setting by its index in `SETTINGS`, through a constant the generator
/// names after the key path (`setting::SOURCE_KAFKA_BROKERS`) and derives from the same list,
/// so a setting the list lacks fails the generator, not the binary.
#[derive(Debug, Clone)]
pub struct Resolved {
    values: Vec<(Setting, String)>,
    command: Command,
}

/// What the binary was asked to do once its settings are resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Run the pipeline (no argument).
    Run,
    /// `offsets show|reset …`: the consumer group's offsets (`kafka::offsets`).
    #[cfg(feature = "kafka")]
    Offsets(crate::kafka::OffsetsCommand),
    /// `dlq replay …`: the dead-letter topic read back through the pipeline (`kafka::replay`).
    #[cfg(feature = "kafka")]
    DlqReplay(crate::kafka::DlqReplay),
}

impl Resolved {
    /// What to do with the settings: [`crate::run_command`] takes it.
    pub fn command(&self) -> Command {
        self.command.clone()
    }

    /// The value of the setting at `index` in `SETTINGS`.
    pub fn get(&self, index: usize) -> &str {
        &self.values[index].1
    }

    /// The settings at `range` in `SETTINGS` (a group such as the `rdkafka:` properties), as
    /// `(key without prefix, value)`, in declaration order.
    pub fn group<'a>(&'a self, range: Range<usize>, prefix: &'a str) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.values[range].iter().map(move |(s, v)| (s.key.strip_prefix(prefix).unwrap_or(s.key), v.as_str()))
    }

    /// The value of the setting at `index` as a socket address.
    pub fn socket_addr(&self, index: usize) -> Result<SocketAddr, String> {
        let (setting, value) = &self.values[index];
        value.parse().map_err(|e| format!("{}: `{value}` is not an address such as 0.0.0.0:9464 ({e})", setting.key))
    }

    /// `key = value` lines, secrets masked, for `--check`.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (setting, value) in &self.values {
            let shown = crate::secret::shown_value(setting.key, value);
            out.push_str(&format!("{} = {shown}\n", setting.key));
        }
        out
    }
}

/// Resolves every setting; the error names each unset variable and its key.
pub(crate) fn resolve(settings: &[Setting], env: impl Fn(&str) -> Option<String>) -> Result<Resolved, String> {
    let mut values = Vec::with_capacity(settings.len());
    let mut missing = Vec::new();
    for setting in settings {
        let mut value = String::new();
        for part in setting.parts {
            match part {
                Part::Lit(text) => value.push_str(text),
                // Shell semantics: `${VAR:-d}` uses d when VAR is unset or empty; `${VAR}` only
                // needs VAR to be set (an empty value is a value).
                Part::Var(name, default) => match (env(name), default) {
                    (Some(v), Some(d)) if v.is_empty() => value.push_str(d),
                    (Some(v), _) => value.push_str(&v),
                    (None, Some(d)) => value.push_str(d),
                    (None, None) => missing.push(format!("{name} (for {})", setting.key)),
                },
            }
        }
        values.push((*setting, value));
    }
    if missing.is_empty() {
        Ok(Resolved { values, command: Command::Run })
    } else {
        Err(format!("environment variables not set: {}", missing.join(", ")))
    }
}

/// What `main` should do after [`start`].
#[derive(Debug)]
pub enum Start {
    /// Run the pipeline with these settings.
    Run(Resolved),
    /// Exit now with this code (`--version`, `--check`, `--help`, or an error already printed).
    Exit(ExitCode),
}

/// Handles the command line: `--version` prints the version and config hash; `--check`
/// resolves the settings and prints them with secrets masked; no argument resolves them
/// for a run. Unset variables and unknown arguments exit with code 2.
pub fn start(build: &Build, settings: &[Setting]) -> Start {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let env = |name: &str| std::env::var(name).ok();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["--version"] | ["-V"] => {
            println!("{} {} (config {})", build.pipeline, build.version, build.config_hash);
            Start::Exit(ExitCode::SUCCESS)
        }
        ["--help"] | ["-h"] => {
            println!(
                "{name} {version}: an etl-rs pipeline (config {hash})\n\n\
                 Usage: {name} [--check | --version | offsets show|reset ...]\n\n\
                 With no argument it runs the pipeline until SIGTERM/SIGINT.\n  \
                 --check        resolve the configuration from the environment, print it (secrets masked), exit\n  \
                 --version      print the version and config hash\n  \
                 offsets show   the consumer group's offsets, lag and (exactly-once) recorded batches\n  \
                 offsets reset  move them (a dry run without --execute); `offsets reset --help` for the targets\n  \
                 dlq replay     read the dead-letter topic back through the pipeline, up to its end, then exit",
                name = build.pipeline,
                version = build.version,
                hash = build.config_hash
            );
            Start::Exit(ExitCode::SUCCESS)
        }
        ["--check"] => match resolve(settings, env) {
            Ok(resolved) => {
                print!("{}", resolved.describe());
                println!("ok: {} (config {}) resolves its configuration", build.pipeline, build.config_hash);
                Start::Exit(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("error: {e}");
                Start::Exit(ExitCode::from(2))
            }
        },
        ["offsets", ..] => offsets(build, settings, &args, env),
        ["dlq", ..] => dlq(build, settings, &args, env),
        [] => run_with(Command::Run, settings, env),
        other => {
            eprintln!("error: unexpected arguments {other:?}; try --help");
            Start::Exit(ExitCode::from(2))
        }
    }
}

/// Resolves the settings for `command`; an unset variable is exit code 2.
fn run_with(command: Command, settings: &[Setting], env: impl Fn(&str) -> Option<String>) -> Start {
    match resolve(settings, env) {
        Ok(resolved) => Start::Run(Resolved { command, ..resolved }),
        Err(e) => {
            eprintln!("error: {e}");
            Start::Exit(ExitCode::from(2))
        }
    }
}

/// A sub-command as clap read it: run with it, or clap's own rendering of the error (usage
/// errors exit 2, `--help` 0).
#[cfg(feature = "kafka")]
fn sub_command(
    parsed: Result<Command, clap::Error>,
    settings: &[Setting],
    env: impl Fn(&str) -> Option<String>,
) -> Start {
    match parsed {
        Ok(command) => run_with(command, settings, env),
        Err(error) => {
            let _ = error.print();
            Start::Exit(ExitCode::from(error.exit_code().clamp(0, 255) as u8))
        }
    }
}

/// `offsets …`: the command, with the settings it needs (the source's and the sink's).
#[cfg(feature = "kafka")]
fn offsets(build: &Build, settings: &[Setting], args: &[String], env: impl Fn(&str) -> Option<String>) -> Start {
    // A one-shot command's output is what it prints; the run's info lines would drown it.
    QUIET.store(true, std::sync::atomic::Ordering::Relaxed);
    sub_command(crate::kafka::OffsetsCommand::parse(build.pipeline, args).map(Command::Offsets), settings, env)
}

/// `dlq replay …`: a run of the pipeline over its dead-letter topic.
#[cfg(feature = "kafka")]
fn dlq(build: &Build, settings: &[Setting], args: &[String], env: impl Fn(&str) -> Option<String>) -> Start {
    sub_command(crate::kafka::DlqReplay::parse(build.pipeline, args).map(Command::DlqReplay), settings, env)
}

#[cfg(not(feature = "kafka"))]
fn dlq(_: &Build, _: &[Setting], _: &[String], _: impl Fn(&str) -> Option<String>) -> Start {
    eprintln!("error: `dlq replay` needs the Kafka source, and this binary was built without it");
    Start::Exit(ExitCode::from(2))
}

#[cfg(not(feature = "kafka"))]
fn offsets(_: &Build, _: &[Setting], _: &[String], _: impl Fn(&str) -> Option<String>) -> Start {
    eprintln!("error: `offsets` needs the Kafka source, and this binary was built without it");
    Start::Exit(ExitCode::from(2))
}

/// Set by a one-shot command (`offsets …`): its output is what it prints, so the logs'
/// default level is `warn` ([`crate::init_logging`]).
static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether the command line asked for a one-shot command whose logs default to warnings.
pub(crate) fn quiet() -> bool {
    QUIET.load(std::sync::atomic::Ordering::Relaxed)
}

/// Prints a start-up error and returns exit code 2.
pub fn startup_error(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    static SETTINGS: &[Setting] = &[
        Setting { key: "sink.file.path", parts: &[Part::Var("OUT", Some("out.ndjson"))] },
        Setting { key: "sink.clickhouse.password", parts: &[Part::Var("PW", None)] },
        Setting { key: "source.kafka.rdkafka.sasl.username", parts: &[Part::Lit("u-"), Part::Var("USER", None)] },
    ];

    #[test]
    fn resolves_and_masks_secrets() {
        let env = |n: &str| match n {
            "PW" => Some("hunter2".to_owned()),
            "USER" => Some("me".to_owned()),
            _ => None,
        };
        let r = resolve(SETTINGS, env).unwrap();
        assert_eq!(r.get(0), "out.ndjson");
        assert_eq!(r.get(1), "hunter2");
        assert_eq!(r.group(2..3, "source.kafka.rdkafka.").collect::<Vec<_>>(), [("sasl.username", "u-me")]);
        let shown = r.describe();
        assert!(shown.contains("sink.clickhouse.password = ********"), "{shown}");
        assert!(!shown.contains("hunter2"));
    }

    #[test]
    fn names_every_missing_variable() {
        let err = resolve(SETTINGS, |_| None).unwrap_err();
        assert!(err.contains("PW (for sink.clickhouse.password)"), "{err}");
        assert!(err.contains("USER (for source.kafka.rdkafka.sasl.username)"), "{err}");
    }
}
