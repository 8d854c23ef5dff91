//! E0105: `${VAR}` used where a build-time check needs a literal. [`check`] is its check, run
//! on the raw YAML before serde reads it.

use std::collections::HashSet;

use serde_yaml::Value;

use crate::diag::{Diagnostic, Rule};
use crate::model::TEMPLATED_KEYS;
use crate::source_map::join;

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0105",
    name: "literal-required",
    summary: "`${VAR}` in a key that the build-time checks depend on",
    doc: "Only values that are fixed at deploy time may come from the environment: broker \
addresses, the topic and group id, URLs, credentials, paths of the file sink, the DLQ \
topic, the admin address, librdkafka property values and ClickHouse settings. Everything \
else (every number in the sizing rule, the schema path, the transform, the sink's table \
and shard key) is compiled into the binary and checked by `gen`, so it must be written \
out. Generate one binary per environment if these differ.",
};

/// Reports `${VAR}` where a literal is required, and removes those nodes (a list item becomes
/// null), recording the removed keys' paths in `removed`.
///
/// It runs on the raw YAML because serde cannot tell: it would take a template in a text key
/// (`sink.clickhouse.table`) as the text, and report one in a number's place as a bad value
/// (E0104). The node is removed so that serde does not report it again; `removed` tells the
/// loader that a "missing field" for it is a consequence, not a second error.
pub(crate) fn check(value: &mut Value, out: &mut Vec<Diagnostic>, removed: &mut HashSet<String>) {
    check_node(value, "", out, removed);
}

/// [`check`] of the node at `path` and everything under it.
fn check_node(value: &mut Value, path: &str, out: &mut Vec<Diagnostic>, removed: &mut HashSet<String>) {
    match value {
        Value::Mapping(map) => {
            let mut drop_keys = Vec::new();
            for (k, v) in map.iter_mut() {
                let key = match k {
                    Value::String(s) => s.clone(),
                    other => serde_yaml::to_string(other).unwrap_or_default().trim().to_owned(),
                };
                let child = join(path, &key);
                if is_forbidden_template(v, &child) {
                    out.push(
                        Diagnostic::error(
                            &RULE,
                            &child,
                            format!("`{child}` must be a literal, not `{}`", v.as_str().unwrap_or_default()),
                        )
                        .on_value()
                        .note("build-time checks depend on this key, so it is compiled into the binary")
                        .help("write the value out; generate one binary per environment if it differs"),
                    );
                    removed.insert(child);
                    drop_keys.push(k.clone());
                } else {
                    check_node(v, &child, out, removed);
                }
            }
            for k in drop_keys {
                map.remove(&k);
            }
        }
        Value::Sequence(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let child = format!("{path}[{i}]");
                if is_forbidden_template(item, &child) {
                    out.push(
                        Diagnostic::error(&RULE, &child, format!("`{child}` must be a literal"))
                            .on_value()
                            .help("write the value out"),
                    );
                    *item = Value::Null;
                } else {
                    check_node(item, &child, out, removed);
                }
            }
        }
        Value::Tagged(tagged) => check_node(&mut tagged.value, path, out, removed),
        _ => {}
    }
}

/// A string holding `${` at a key that `TEMPLATED_KEYS` does not list.
fn is_forbidden_template(value: &Value, path: &str) -> bool {
    matches!(value, Value::String(s) if s.contains("${")) && !TEMPLATED_KEYS.iter().any(|p| matches_pattern(p, path))
}

/// Matches a path against a `TEMPLATED_KEYS` pattern.
fn matches_pattern(pattern: &str, path: &str) -> bool {
    if let Some(prefix) = pattern.strip_suffix(".*") {
        return path.len() > prefix.len() + 1 && path.starts_with(prefix) && path.as_bytes()[prefix.len()] == b'.';
    }
    let mut p = pattern.split('*');
    let mut rest = path;
    let first = p.next().unwrap_or_default();
    let Some(r) = rest.strip_prefix(first) else { return false };
    rest = r;
    for piece in p {
        // `*` stands for a run of digits (a list index).
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return false;
        }
        let Some(r) = rest[digits..].strip_prefix(piece) else { return false };
        rest = r;
    }
    rest.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_patterns() {
        assert!(matches_pattern("sink.clickhouse.shards[*].replicas[*]", "sink.clickhouse.shards[0].replicas[12]"));
        assert!(!matches_pattern("sink.clickhouse.shards[*].replicas[*]", "sink.clickhouse.shards[0].replicas"));
        assert!(matches_pattern("source.kafka.rdkafka.*", "source.kafka.rdkafka.sasl.password"));
        assert!(!matches_pattern("source.kafka.rdkafka.*", "source.kafka.rdkafka"));
        assert!(matches_pattern("admin.listen", "admin.listen"));
        assert!(!matches_pattern("admin.listen", "admin.listener"));
    }
}
