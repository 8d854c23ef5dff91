//! serde's errors read as the structural rules: which rule a deserialization error breaks
//! (E0102 unknown key, E0103 missing key, E0104 invalid value), where the user wrote the node,
//! and which node the loader removes before it deserializes again (`load/model_reader.rs`).
//!
//! serde says what is wrong only in its message (`` unknown field `x`, expected one of ... ``),
//! so this is the one place that reads those messages; the rules' own modules word the
//! diagnostics.

use super::{invalid_value, unknown_key};
use crate::diag::{Diagnostic, Rule};
use crate::source_map::join;

/// What a serde error breaks.
pub(crate) enum Structural<'m> {
    /// A required key is absent (E0103): serde names the field, under the error's path.
    Missing {
        /// The key, as serde names it.
        field: &'m str,
    },
    /// A node breaks `rule` (E0102 or E0104).
    Node {
        /// The rule.
        rule: &'static Rule,
        /// Where to report it, in the user's coordinates.
        target: String,
        /// What to remove, in the coordinates of the document serde read.
        remove: String,
    },
}

/// Reads serde's `message` for an error at `path` (in the user's coordinates; `current` is the
/// same path in the document serde read, after earlier removals).
pub(crate) fn read<'m>(message: &'m str, path: &str, current: &str) -> Structural<'m> {
    if let Some(field) = between(message, "missing field `", "`") {
        return Structural::Missing { field };
    }
    let (rule, target, remove) = if let Some(key) = between(message, "unknown field `", "`") {
        // serde_path_to_error names the unknown key itself as the last segment.
        if path == key || path.ends_with(&format!(".{key}")) {
            (&unknown_key::RULE, path.to_owned(), current.to_owned())
        } else {
            (&unknown_key::RULE, join(path, key), join(current, key))
        }
    } else if let Some(variant) = between(message, "unknown variant `", "`") {
        match (
            path.strip_suffix(variant).and_then(|p| p.strip_suffix('.')),
            current.strip_suffix(variant).and_then(|p| p.strip_suffix('.')),
        ) {
            // A kind written as a key (`source: { kafak: ... }`, `- where: ...`): the
            // path ends with it. Report the key; remove the whole one-key mapping.
            (Some(_), Some(current_parent)) => (&unknown_key::RULE, path.to_owned(), current_parent.to_owned()),
            // An enumerated value such as `wire: avro`.
            _ => (&invalid_value::RULE, path.to_owned(), current.to_owned()),
        }
    } else {
        (&invalid_value::RULE, path.to_owned(), current.to_owned())
    };
    Structural::Node { rule, target, remove }
}

/// The diagnostic for a node that [`read`] found breaking `rule` at `path`, from serde's
/// `message`, with a fix where one is known.
pub(crate) fn describe(rule: &'static Rule, path: &str, message: &str) -> Diagnostic {
    let expected = message.split_once(", expected ").map(|(_, expected)| expected);
    if rule.code == unknown_key::RULE.code {
        let key = path.rsplit('.').next().unwrap_or(path);
        let suggestion = expected.and_then(|expected| closest(key, expected));
        return unknown_key::diagnostic(path, key, expected, suggestion.as_deref());
    }
    if let Some(variant) = between(message, "unknown variant `", "`") {
        let expected = expected.unwrap_or_default();
        return invalid_value::unknown_variant(path, variant, expected, closest(variant, expected).as_deref());
    }
    if message.contains("expected map with a single key") {
        return invalid_value::not_one_key(path);
    }
    invalid_value::other(path, message)
}

/// Finds the allowed name nearest to `key` in serde's "expected ..." list.
fn closest(key: &str, expected: &str) -> Option<String> {
    crate::diag::nearest(key, expected.split('`').skip(1).step_by(2)).map(str::to_owned)
}

/// The text of `s` between the first `start` and the `end` after it.
fn between<'a>(s: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = s.find(start)? + start.len();
    let len = s[from..].find(end)?;
    Some(&s[from..from + len])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_near_keys() {
        assert_eq!(closest("topics", "one of `brokers`, `topic`, `group_id`"), Some("topic".into()));
        assert_eq!(closest("zzzzzzzz", "one of `brokers`, `topic`"), None);
    }
}
