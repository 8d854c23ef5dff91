//! What the Kafka source subscribes to: one topic, a list of topics, or a pattern. The generated
//! binary passes it as one text (`KafkaSourceConfig::topic`), in librdkafka's own convention: a
//! name, names separated by commas (a Kafka topic name cannot hold a comma), or a regular
//! expression that starts with `^`.

use std::fmt;

use crate::engine::errors::SourceError;

/// The longest topic name Kafka accepts.
const MAX_TOPIC_NAME: usize = 249;

/// The topics a consumer subscribes to.
#[derive(Debug, Clone)]
pub(crate) enum Subscription {
    /// These topics, by name (one, for `source.kafka.topic`).
    Topics(Vec<String>),
    /// Every topic whose name matches; librdkafka checks for new ones every
    /// `topic.metadata.refresh.interval.ms` and the group rebalances to assign them.
    Pattern { text: String, regex: regex::Regex },
}

impl Subscription {
    /// Reads `text` (see the module documentation); `key` names the setting in errors.
    pub(crate) fn parse(text: &str, key: &str) -> Result<Subscription, SourceError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(SourceError::fatal(format!("{key} is empty")));
        }
        if text.starts_with('^') {
            let regex = regex::Regex::new(text)
                .map_err(|e| SourceError::fatal(format!("{key}: `{text}` is not a valid regular expression: {e}")))?;
            return Ok(Subscription::Pattern { text: text.to_owned(), regex });
        }
        let topics: Vec<String> = text.split(',').map(|t| t.trim().to_owned()).collect();
        for topic in &topics {
            check_name(topic, key)?;
        }
        Ok(Subscription::Topics(topics))
    }

    /// What `subscribe` takes: the names, or the one pattern.
    pub(crate) fn entries(&self) -> Vec<&str> {
        match self {
            Subscription::Topics(topics) => topics.iter().map(String::as_str).collect(),
            Subscription::Pattern { text, .. } => vec![text.as_str()],
        }
    }

    /// Whether `topic` is one this subscription consumes.
    pub(crate) fn matches(&self, topic: &str) -> bool {
        match self {
            Subscription::Topics(topics) => topics.iter().any(|t| t == topic),
            Subscription::Pattern { regex, .. } => regex.is_match(topic),
        }
    }
}

impl fmt::Display for Subscription {
    /// `orders`, `orders-eu, orders-us`, or `^orders-.*`, as log lines and errors show it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subscription::Topics(topics) => f.write_str(&topics.join(", ")),
            Subscription::Pattern { text, .. } => f.write_str(text),
        }
    }
}

/// `source.kafka.topics`, resolved: the subscription text of these topics, each checked to be one
/// name (a value that resolved to `a,b` or `^x` would otherwise change what is subscribed to).
pub fn topic_list(topics: &[&str]) -> Result<String, SourceError> {
    for (i, topic) in topics.iter().enumerate() {
        let key = format!("source.kafka.topics[{i}]");
        if topic.contains(',') || topic.trim_start().starts_with('^') {
            return Err(SourceError::fatal(format!(
                "{key} resolved to `{topic}`, which is not one topic name; a pattern goes under topic_pattern"
            )));
        }
        check_name(topic.trim(), &key)?;
    }
    Ok(topics.iter().map(|t| t.trim()).collect::<Vec<_>>().join(","))
}

/// `source.kafka.topic_pattern`, resolved: it must start with `^`, or librdkafka would read it as
/// a topic name.
pub fn topic_pattern(pattern: &str) -> Result<String, SourceError> {
    let pattern = pattern.trim();
    if !pattern.starts_with('^') {
        return Err(SourceError::fatal(format!(
            "source.kafka.topic_pattern resolved to `{pattern}`, which does not start with `^`"
        )));
    }
    Subscription::parse(pattern, "source.kafka.topic_pattern").map(|_| pattern.to_owned())
}

/// Kafka's rule for a topic name: 1 to 249 of `[a-zA-Z0-9._-]`, and neither `.` nor `..`.
fn check_name(topic: &str, key: &str) -> Result<(), SourceError> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if topic.is_empty() {
        return Err(SourceError::fatal(format!("{key} names an empty topic (two commas in a row?)")));
    }
    if topic.len() > MAX_TOPIC_NAME || !topic.chars().all(legal) || topic == "." || topic == ".." {
        return Err(SourceError::fatal(format!(
            "{key}: `{topic}` is not a Kafka topic name (1 to {MAX_TOPIC_NAME} of a-z, A-Z, 0-9, `.`, `_`, `-`); \
             a pattern starts with `^`"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_topic_a_list_or_a_pattern() {
        let one = Subscription::parse("orders", "topic").unwrap();
        assert_eq!(one.entries(), ["orders"]);
        assert!(one.matches("orders") && !one.matches("orders-eu"));

        let list = Subscription::parse(" orders-eu , orders-us", "topic").unwrap();
        assert_eq!(list.entries(), ["orders-eu", "orders-us"]);
        assert!(list.matches("orders-us") && !list.matches("orders"));
        assert_eq!(list.to_string(), "orders-eu, orders-us");

        // A comma inside a pattern is the pattern's.
        let pattern = Subscription::parse("^orders-[a-z]{2,3}$", "topic").unwrap();
        assert_eq!(pattern.entries(), ["^orders-[a-z]{2,3}$"]);
        assert!(pattern.matches("orders-eu") && !pattern.matches("orders-") && !pattern.matches("x-orders-eu"));
    }

    #[test]
    fn resolved_topics_and_patterns_keep_their_kind() {
        assert_eq!(topic_list(&["orders-eu", " orders-us "]).unwrap(), "orders-eu,orders-us");
        assert!(topic_list(&["orders-eu", "a,b"]).unwrap_err().to_string().contains("topics[1]"));
        assert!(topic_list(&["^orders"]).unwrap_err().to_string().contains("topic_pattern"));
        assert_eq!(topic_pattern("^orders-.*").unwrap(), "^orders-.*");
        assert!(topic_pattern("orders").unwrap_err().to_string().contains("does not start with `^`"));
        assert!(topic_pattern("^orders-(").is_err());
    }

    #[test]
    fn bad_names_and_patterns_are_refused_with_the_key() {
        for (text, says) in [
            ("", "is empty"),
            ("orders,,refunds", "empty topic"),
            ("orders eu", "not a Kafka topic name"),
            ("..", "not a Kafka topic name"),
            ("^orders-(", "not a valid regular expression"),
        ] {
            let error = Subscription::parse(text, "source.kafka.topic").unwrap_err().to_string();
            assert!(error.contains("source.kafka.topic") && error.contains(says), "{text:?}: {error}");
        }
        assert!(Subscription::parse(&"a".repeat(250), "t").is_err());
        assert!(Subscription::parse(&"a".repeat(249), "t").is_ok());
    }
}
