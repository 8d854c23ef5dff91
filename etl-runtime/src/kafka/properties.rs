//! The librdkafka properties of the Kafka clients: the framework-owned ones, the prefetch defaults,
//! the passthrough checks, and masking secrets before anything is logged; and where the clients'
//! own log lines go.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;

use crate::engine::errors::SourceError;
use crate::secret::{MASK, is_secret_property, mask_userinfo, redact_message};

/// Default `queued.max.messages.kbytes`: 8 MiB. With split partition queues librdkafka applies it
/// per partition queue, so it is the prefetch bound per owned partition (see the module docs). A
/// lane's batch, taken from the queue, can hold as much again while the queue refills: 8 MiB keeps
/// the two together near the 17 MiB per partition of the 16 MiB cap before batches.
pub(crate) const DEFAULT_QUEUED_MAX_KBYTES: u64 = 8 * 1024;

/// Default `queued.min.messages`: librdkafka fetches ahead until a partition queue holds this many
/// messages or the kbytes cap is reached, whichever comes first. librdkafka's own default, so that
/// the kbytes cap is what bounds the prefetch for messages of about 84 bytes or more. It was 10 000:
/// with the flagship's 50-byte messages that kept about 20 ms of a saturated partition queued, less
/// than a fetch takes to come back, and the lanes waited for it. 100 000 took a 3M topic of 4
/// partitions at 2.3 to 2.4 M records/s instead of 1.6 to 1.9 at the same CPU per record, and
/// changed nothing on 64 partitions (docs/BENCHMARKS.md, "The prefetch in messages").
pub(crate) const DEFAULT_QUEUED_MIN_MESSAGES: u64 = 100_000;

/// Default `fetch.queue.backoff.ms`: how long a partition waits before fetching again once its queue
/// is at the cap. librdkafka's 1000 ms collapses consumption about 40-fold when the cap is small
/// (measured against the local broker); 10 ms keeps the fetcher busy.
pub(crate) const DEFAULT_FETCH_QUEUE_BACKOFF_MS: u64 = 10;

/// Default `fetch.wait.max.ms`: how long the broker may take to answer a fetch, librdkafka's own
/// default. Kafka answers as soon as data is there, but a broker that keeps its log in object
/// storage may spend the wait reading it: Tansu over S3 lists a partition's batch objects for at
/// most this long and answers with what it listed by then, so with 100 ms (the default once)
/// a partition of a thousand small batches was fetched at a few records a second, or
/// not at all (docs/INVARIANTS.md, Invariant 9). The price of the longer wait is latency, not
/// throughput: a partition resumed while the fetch in flight waits for data that is not there
/// (every other fetchable partition caught up) joins the next fetch up to this much later.
pub(crate) const DEFAULT_FETCH_WAIT_MAX_MS: u64 = 500;

/// Default `auto.offset.reset`: where a partition without a committed offset starts. The framework
/// default is the beginning, so no record already in the topic is skipped; `rdkafka:` may say
/// `latest`. The generator shows the same default in `--check` (`contract/owned_properties.rs`).
pub(crate) const DEFAULT_AUTO_OFFSET_RESET: &str = crate::contract::owned_properties::AUTO_OFFSET_RESET;

/// `key=value` pairs for a log line, secret values masked.
pub(crate) fn describe(properties: &[(String, String)]) -> String {
    properties
        .iter()
        .map(|(k, v)| if is_secret_property(k) { format!("{k}={MASK}") } else { format!("{k}={}", mask_userinfo(v)) })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Replaces every secret value that occurs in `message` by the mask: librdkafka quotes values in
/// some of its configuration errors.
pub(crate) fn redact(message: &str, properties: &[(String, String)]) -> String {
    redact_message(message, properties.iter().filter(|(k, _)| is_secret_property(k)).map(|(_, v)| v.as_str()))
}

/// Rejects the passthrough properties the framework owns (with their aliases: setting them through
/// `rdkafka:` would break the offset protocol or the threading model), and cooperative assignment
/// strategies. `gen` rejects them already, from the same table (`contract/owned_properties.rs`);
/// the runtime checks again so a hand-written caller gets the same guarantee.
pub(crate) fn check_passthrough(properties: &[(String, String)]) -> Result<(), SourceError> {
    for (key, value) in properties {
        if let Some(owned) = crate::contract::owned_properties::lookup(key) {
            let alias = owned.alias_of.map(|canonical| format!(" (an alias of `{canonical}`)")).unwrap_or_default();
            return Err(SourceError::fatal(format!(
                "rdkafka property `{key}`{alias} is owned by the framework: {}; {}",
                owned.reason, owned.fix
            )));
        }
        if key == "partition.assignment.strategy" && value.to_ascii_lowercase().contains("cooperative") {
            return Err(SourceError::fatal(format!(
                "rdkafka property `partition.assignment.strategy` = `{value}`: cooperative strategies are not \
                 supported (the source relies on eager rebalancing)"
            )));
        }
    }
    Ok(())
}

/// What the consumer's configuration is made of.
pub(crate) struct ConsumerProperties<'a> {
    pub(crate) brokers: &'a str,
    pub(crate) group_id: &'a str,
    pub(crate) commit_interval: Duration,
    pub(crate) statistics_interval: Duration,
    pub(crate) passthrough: &'a [(String, String)],
}

/// The prefetch defaults: how far librdkafka reads ahead per partition queue and how it waits.
/// Also what `cargo xtask bench`'s raw consumer reads with, so that it stays the same kind of limit.
pub fn prefetch_properties() -> Vec<(String, String)> {
    vec![
        ("queued.max.messages.kbytes".into(), DEFAULT_QUEUED_MAX_KBYTES.to_string()),
        ("queued.min.messages".into(), DEFAULT_QUEUED_MIN_MESSAGES.to_string()),
        ("fetch.queue.backoff.ms".into(), DEFAULT_FETCH_QUEUE_BACKOFF_MS.to_string()),
        ("fetch.wait.max.ms".into(), DEFAULT_FETCH_WAIT_MAX_MS.to_string()),
    ]
}

/// The consumer's properties in the order they are applied: prefetch defaults, then the passthrough
/// (which may override the defaults), then the framework-owned ones (which nothing overrides).
pub(crate) fn consumer_properties(p: &ConsumerProperties<'_>) -> Vec<(String, String)> {
    let mut out = prefetch_properties();
    // librdkafka's `latest` would make a new group (or one whose committed offsets expired)
    // silently skip everything already in the topic.
    out.push(("auto.offset.reset".into(), DEFAULT_AUTO_OFFSET_RESET.into()));
    out.extend(p.passthrough.iter().cloned());
    out.extend([
        ("bootstrap.servers".into(), p.brokers.to_owned()),
        ("group.id".into(), p.group_id.to_owned()),
        ("enable.auto.offset.store".into(), "false".into()),
        ("enable.auto.commit".into(), "true".into()),
        ("auto.commit.interval.ms".into(), p.commit_interval.as_millis().to_string()),
        ("statistics.interval.ms".into(), p.statistics_interval.as_millis().to_string()),
        ("enable.partition.eof".into(), "false".into()),
    ]);
    out
}

/// Forwards a librdkafka log line to `tracing`.
pub(crate) fn log_to_tracing(level: RDKafkaLogLevel, fac: &str, message: &str) {
    match level {
        RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical | RDKafkaLogLevel::Error => {
            tracing::error!(target: "librdkafka", fac, "{message}")
        }
        RDKafkaLogLevel::Warning => tracing::warn!(target: "librdkafka", fac, "{message}"),
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => tracing::info!(target: "librdkafka", fac, "{message}"),
        RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", fac, "{message}"),
    }
}

/// Builds a `ClientConfig` (later entries win) and checks it with librdkafka's own parser, so a
/// misspelt or ill-typed property fails at construction, with secrets redacted from the error.
pub(crate) fn client_config(properties: &[(String, String)], what: &str) -> Result<ClientConfig, SourceError> {
    let mut config = ClientConfig::new();
    for (key, value) in properties {
        config.set(key, value);
    }
    // Warnings and errors reach `tracing` through the contexts' `log` callbacks; debug output only
    // when asked for with the `debug` property.
    config.set_log_level(RDKafkaLogLevel::Warning);
    if let Err(error) = config.create_native_config() {
        let message = match error {
            KafkaError::ClientConfig(_, description, key, _) => format!("rdkafka property `{key}`: {description}"),
            other => other.to_string(),
        };
        return Err(SourceError::fatal(format!("invalid {what} configuration: {}", redact(&message, properties))));
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn secrets_are_masked_and_redacted() {
        let p = props(&[
            ("sasl.password", "hunter2"),
            ("ssl.key.password", "k3y"),
            ("sasl.username", "bob"),
            ("client.id", "etl"),
        ]);
        let text = describe(&p);
        assert!(!text.contains("hunter2") && !text.contains("k3y"), "{text}");
        // librdkafka counts the user name among the sensitive values too.
        assert!(text.contains("sasl.username=********") && text.contains("client.id=etl"), "{text}");
        assert_eq!(redact("bad value \"hunter2\" for x", &p), "bad value \"********\" for x");
    }

    #[test]
    fn owned_properties_and_cooperative_strategies_are_rejected() {
        for key in ["group.id", "auto.commit.enable", "metadata.broker.list", "group.protocol"] {
            let error = check_passthrough(&props(&[(key, "x")])).unwrap_err();
            assert!(error.message.contains(key), "{error}");
        }
        let error = check_passthrough(&props(&[("partition.assignment.strategy", "range,cooperative-sticky")]));
        assert!(error.unwrap_err().message.contains("cooperative"));
        assert!(check_passthrough(&props(&[("partition.assignment.strategy", "roundrobin")])).is_ok());
    }

    #[test]
    fn forced_properties_win_and_defaults_can_be_overridden() {
        let passthrough = props(&[("queued.max.messages.kbytes", "1024"), ("auto.offset.reset", "earliest")]);
        let all = consumer_properties(&ConsumerProperties {
            brokers: "b:1",
            group_id: "g",
            commit_interval: Duration::from_secs(5),
            statistics_interval: Duration::ZERO,
            passthrough: &passthrough,
        });
        let last = |key: &str| all.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        assert_eq!(last("queued.max.messages.kbytes"), Some("1024"));
        assert_eq!(last("fetch.queue.backoff.ms"), Some("10"));
        assert_eq!(last("queued.min.messages"), Some("100000"));
        assert_eq!(last("enable.auto.offset.store"), Some("false"));
        assert_eq!(last("enable.auto.commit"), Some("true"));
        assert_eq!(last("auto.commit.interval.ms"), Some("5000"));
        assert_eq!(last("statistics.interval.ms"), Some("0"));
        assert_eq!(last("auto.offset.reset"), Some("earliest"));
        let latest = props(&[("auto.offset.reset", "latest")]);
        let all = consumer_properties(&ConsumerProperties {
            brokers: "b:1",
            group_id: "g",
            commit_interval: Duration::from_secs(5),
            statistics_interval: Duration::ZERO,
            passthrough: &latest,
        });
        assert_eq!(all.iter().rev().find(|(k, _)| k == "auto.offset.reset").map(|(_, v)| v.as_str()), Some("latest"));
        assert!(client_config(&all, "consumer").is_ok());
    }

    #[test]
    fn librdkafka_rejects_unknown_properties_without_leaking_secrets() {
        let p = props(&[("sasl.password", "hunter2"), ("fetch.wait.max.ms", "hunter2")]);
        let error = client_config(&p, "consumer").unwrap_err();
        assert!(error.message.contains("fetch.wait.max.ms"), "{error}");
        assert!(!error.message.contains("hunter2"), "{error}");
    }
}
