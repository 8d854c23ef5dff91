//! E0204: `source.kafka` subscribes to exactly one of `topic`, `topics` and `topic_pattern`, each
//! a name Kafka accepts or a regular expression, and never to its own dead-letter topic.

use super::Context;
use crate::diag::{Diagnostic, Rule};
use crate::model::{ErrorPolicy, KafkaSource, Source, Subscription};
use crate::template::Template;

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0204",
    name: "topic-choice",
    summary: "`source.kafka` names no topic, more than one of `topic`, `topics` and `topic_pattern`, \
or a topic or pattern Kafka cannot subscribe to",
    doc: "A Kafka source reads one topic (`topic`), several (`topics: [a, b]`) or every topic \
whose name matches a regular expression (`topic_pattern: \"^orders-.*\"`): exactly one of the \
three. A topic name is 1 to 249 of `a-z`, `A-Z`, `0-9`, `.`, `_` and `-`; `topics` lists each \
name once; a pattern starts with `^` (librdkafka's pattern subscription) and must compile. The \
dead-letter topic (`errors.dlq_topic`) must not be one the source reads: every dead letter would \
be read again, fail again and be written again. Names and patterns that use `${VAR}` are \
checked once resolved, by the binary at start-up (an entry of `topics` must stay one name, a \
pattern must start with `^`), and so is the dead-letter topic (the binary exits 2 when the \
source would read it).",
};

/// The longest topic name Kafka accepts.
const MAX_TOPIC_NAME: usize = 249;

/// Reports a source without a topic or with several kinds of them, bad names and patterns, and a
/// dead-letter topic the source would read again.
pub(crate) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let Source::Kafka(k) = &cx.model.source else { return };
    let Some(subscription) = k.subscription() else {
        out.push(choice(k));
        return;
    };
    match subscription {
        Subscription::Topic(topic) => {
            if topic.is_literal() && topic.as_str().contains(',') {
                out.push(
                    Diagnostic::error(&RULE, "source.kafka.topic", "`source.kafka.topic` names several topics")
                        .on_value()
                        .help("list them under `topics:` instead: `topics: [a, b]`"),
                );
            } else {
                name(out, "source.kafka.topic", topic);
            }
        }
        Subscription::Topics(topics) => {
            for (i, topic) in topics.iter().enumerate() {
                let path = format!("source.kafka.topics[{i}]");
                name(out, &path, topic);
                if topics[..i].iter().any(|t| t.as_str() == topic.as_str()) {
                    out.push(
                        Diagnostic::error(&RULE, &path, format!("`{}` is listed twice in `topics`", topic.as_str()))
                            .on_value()
                            .help("list each topic once"),
                    );
                }
            }
        }
        Subscription::Pattern(pattern) => pattern_rule(out, pattern),
    }
    dead_letter_loop(cx, subscription, out);
}

/// The diagnostic of a source that names no topic, or more than one kind of them.
fn choice(k: &KafkaSource) -> Diagnostic {
    let named: Vec<&str> = [
        k.topic.as_ref().map(|_| "topic"),
        (!k.topics.is_empty()).then_some("topics"),
        k.topic_pattern.as_ref().map(|_| "topic_pattern"),
    ]
    .into_iter()
    .flatten()
    .collect();
    match named.as_slice() {
        [] => Diagnostic::error(&RULE, "source.kafka", "`source.kafka` names no topic").help(
            "add `topic: orders` under `source.kafka:` (or `topics: [a, b]`, or `topic_pattern: \"^orders-.*\"`)",
        ),
        [.., last] => Diagnostic::error(
            &RULE,
            format!("source.kafka.{last}"),
            format!(
                "`source.kafka` names {}; it reads one of them",
                named.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(" and ")
            ),
        )
        .help("keep one: `topic` for one topic, `topics` for several, `topic_pattern` for every match"),
    }
}

/// Checks a literal topic name against Kafka's rule.
fn name(out: &mut Vec<Diagnostic>, path: &str, topic: &Template) {
    if !topic.is_literal() {
        return;
    }
    let text = topic.as_str();
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    let why = if text.trim().is_empty() {
        // value_range (E0202) reports an empty `topic`; an empty entry of `topics` is this rule's.
        if path == "source.kafka.topic" {
            return;
        }
        "is empty".to_owned()
    } else if text.len() > MAX_TOPIC_NAME {
        format!("is {} characters long; Kafka allows {MAX_TOPIC_NAME}", text.len())
    } else if text == "." || text == ".." || !text.chars().all(legal) {
        "is not a topic name Kafka accepts (a-z, A-Z, 0-9, `.`, `_`, `-`)".to_owned()
    } else {
        return;
    };
    let help =
        if text.starts_with('^') { "a pattern goes under `topic_pattern:`" } else { "use the topic's exact name" };
    out.push(Diagnostic::error(&RULE, path, format!("`{path}` `{text}` {why}")).on_value().help(help));
}

/// Checks a literal pattern: it starts with `^` and compiles.
fn pattern_rule(out: &mut Vec<Diagnostic>, pattern: &Template) {
    const PATH: &str = "source.kafka.topic_pattern";
    if !pattern.is_literal() {
        return;
    }
    let text = pattern.as_str();
    if !text.starts_with('^') {
        out.push(Diagnostic::error(&RULE, PATH, format!("`{PATH}` `{text}` does not start with `^`")).on_value().help(
            format!("librdkafka reads a subscription as a pattern only when it starts with `^`: write `\"^{text}\"`"),
        ));
    } else if let Err(error) = regex::Regex::new(text) {
        let error = error.to_string();
        let reason = error.lines().last().unwrap_or("invalid").trim().trim_start_matches("error: ");
        out.push(
            Diagnostic::error(&RULE, PATH, format!("`{PATH}` is not a regular expression: {reason}"))
                .on_value()
                .help("fix the expression; `\"^orders-.*\"` reads every topic whose name starts with `orders-`"),
        );
    }
}

/// An error when the (literal) dead-letter topic is one the source reads.
fn dead_letter_loop(cx: &Context<'_>, subscription: Subscription<'_>, out: &mut Vec<Diagnostic>) {
    let errors = &cx.model.errors;
    let (ErrorPolicy::Dlq, Some(dlq)) = (errors.policy, &errors.dlq_topic) else { return };
    if !dlq.is_literal() {
        return;
    }
    let dlq = dlq.as_str();
    let read = match subscription {
        Subscription::Topic(topic) => topic.as_str() == dlq,
        Subscription::Topics(topics) => topics.iter().any(|t| t.as_str() == dlq),
        Subscription::Pattern(pattern) => regex::Regex::new(pattern.as_str()).is_ok_and(|re| re.is_match(dlq)),
    };
    if read {
        out.push(
            Diagnostic::error(&RULE, "errors.dlq_topic", format!("the source reads its own dead-letter topic `{dlq}`"))
                .on_value()
                .help(
                    "name a dead-letter topic the source does not subscribe to (e.g. one without the pattern's prefix)",
                ),
        );
    }
}
