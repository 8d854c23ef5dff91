//! E0304 (a warning): `startup_timeout` at or below `session.timeout.ms`, so a restart right after a crash
//! exits 2 before the group lets it in.

use super::Context;
use crate::diag::{Diagnostic, Rule};
use crate::model::Source;
use crate::units::Duration;

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0304",
    name: "startup-timeout",
    summary: "`startup_timeout` not above `session.timeout.ms` (a warning)",
    doc: "An instance that crashed stays a member of its consumer group until its session \
expires, `session.timeout.ms` after its last heartbeat (librdkafka's default is 45 s). A \
replacement started sooner joins a rebalance that the group coordinator holds open for the \
dead member, so its first assignment comes only once that session has expired. With \
`source.kafka.startup_timeout` (default 90 s) at or below `session.timeout.ms`, such a \
restart gives up first: exit code 2, another restart, and a crash loop for as long as the \
orchestrator's back-off keeps it inside the window. This is reported as a warning, because \
the pipeline is otherwise sound; raise `startup_timeout` above `session.timeout.ms` (or \
lower the session timeout) to clear it. A `${VAR}` session timeout is only known at run \
time and is not checked.",
};

/// The property this rule reads, and librdkafka's default for it.
const PROPERTY: &str = "session.timeout.ms";
const LIBRDKAFKA_DEFAULT_MS: u64 = 45_000;

/// Warns when `startup_timeout` is not above the session timeout (as written, or librdkafka's
/// default), suggesting twice the session.
pub(crate) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let Source::Kafka(kafka) = &cx.model.source else { return };
    let written = kafka.rdkafka.get(PROPERTY).map(|v| v.to_text());
    let session_ms = match &written {
        None => LIBRDKAFKA_DEFAULT_MS,
        // `${VAR}` or a value librdkafka rejects (E0303 reports that one).
        Some(text) => match text.trim().parse::<u64>() {
            Ok(ms) => ms,
            Err(_) => return,
        },
    };
    let startup = kafka.startup_timeout;
    if startup.as_millis() > session_ms {
        return;
    }
    let session = Duration::from_millis(session_ms);
    let (path, origin) = match written {
        Some(_) => (format!("source.kafka.rdkafka.{PROPERTY}"), "as written"),
        None => ("source.kafka.startup_timeout".to_owned(), "librdkafka's default"),
    };
    // The session has to expire, then the rebalance has to run: twice the session leaves room.
    let suggested = Duration::from_millis((2 * session_ms).div_ceil(1000) * 1000);
    out.push(
        Diagnostic::warning(
            &RULE,
            path,
            format!("`startup_timeout` {startup} is not above `{PROPERTY}` {session} ({origin})"),
        )
        .note(
            "an instance restarted within the session timeout of a crash waits that long for its first \
             assignment, then exits 2 and is restarted again",
        )
        .help(format!("set `source.kafka.startup_timeout: {suggested}` or lower `{PROPERTY}`")),
    );
}
