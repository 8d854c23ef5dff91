//! pipeline.yaml's text to the typed model, reporting every structural problem of the file at
//! once.
//!
//! serde stops at the first error, but a user wants every problem of a file at once. So the
//! document is read into a `serde_yaml::Value`, deserialized, and on each error the offending
//! node is reported and removed before trying again. Defaulted keys then fall back to their
//! defaults; a removed required key ends the structural pass silently, since its error is
//! already reported. What each error means is the structural rules' to say (`rules::structure`
//! reads serde's messages); this module keeps the loop and the document's coordinates.

use std::collections::HashSet;

use serde_yaml::Value;

use crate::diag::Diagnostic;
use crate::model::PipelineFile;
use crate::rules::structure::{self, Structural};
use crate::rules::{literal_required, missing_key, yaml_syntax};
use crate::source_map::join;

/// Parses and deserializes, reporting every structural problem it can reach.
pub(super) fn read_model(text: &str, out: &mut Vec<Diagnostic>) -> Option<PipelineFile> {
    let mut value = yaml_syntax::parse(text, out)?;
    if value.is_null() {
        out.push(missing_key::empty_file());
        return None;
    }
    let mut removed = HashSet::new();
    let mut shifts = Shifts::default();
    literal_required::check(&mut value, out, &mut removed);
    // Each round reports one error and removes its node, so the number of rounds is
    // bounded by the number of nodes; the cap only guards against a serde surprise.
    for _ in 0..256 {
        let err = match serde_path_to_error::deserialize::<_, PipelineFile>(value.clone()) {
            Ok(model) => return if out.is_empty() { Some(model) } else { None },
            Err(err) => err,
        };
        let current = normalize(&err.path().to_string());
        let path = shifts.original(&current);
        let message = err.into_inner().to_string();
        let message = message.split(" at line ").next().unwrap_or(&message).to_owned();
        // What to report (in the user's coordinates) and what to remove (in the current
        // document's coordinates).
        let (rule, target, current_target) = match structure::read(&message, &path, &current) {
            Structural::Missing { field } => {
                let full = join(&path, field);
                if !removed.iter().any(|r: &String| r == &full || full.starts_with(&format!("{r}."))) {
                    out.push(missing_key::missing(&path, field));
                }
                return None;
            }
            Structural::Node { rule, target, remove } => (rule, target, remove),
        };
        if !removed.insert(target.clone()) || !remove(&mut value, &current_target) {
            // Nothing left to remove: report it and stop rather than loop.
            out.push(Diagnostic::error(rule, &target, message));
            return None;
        }
        // A later "missing field" for the removed node is a consequence, not a new error.
        removed.insert(shifts.original(&current_target));
        shifts.record(&target);
        out.push(structure::describe(rule, &target, &message));
    }
    None
}

/// List elements removed so far, so that later errors are reported at the index the user
/// wrote rather than the index after earlier removals.
#[derive(Default)]
struct Shifts {
    /// Original list path -> original indexes removed from it.
    removed: Vec<(String, usize)>,
}

impl Shifts {
    /// Notes that the node at `original` (the user's coordinates) was removed: when it is a
    /// list element, the later elements of its list have moved up by one.
    fn record(&mut self, original: &str) {
        // A key may itself contain `[` (a user typo such as `wire[`): only a trailing `[digits]`
        // is an index, and the slice is taken only once the closing `]` is known to follow.
        if let Some(inner) = original.strip_suffix(']')
            && let Some(open) = inner.rfind('[')
            && let Ok(index) = inner[open + 1..].parse()
        {
            self.removed.push((original[..open].to_owned(), index));
        }
    }

    /// Rewrites every `[j]` of a current path into its original index.
    fn original(&self, current: &str) -> String {
        let mut out = String::new();
        let mut rest = current;
        while let Some(open) = rest.find('[') {
            out.push_str(&rest[..open]);
            let Some(close) = rest[open..].find(']') else { break };
            let index: usize = rest[open + 1..open + close].parse().unwrap_or(0);
            let mut gone: Vec<usize> = self.removed.iter().filter(|(p, _)| *p == out).map(|(_, i)| *i).collect();
            gone.sort_unstable();
            let mut original = index;
            for g in gone {
                if g <= original {
                    original += 1;
                }
            }
            out.push_str(&format!("[{original}]"));
            rest = &rest[open + close + 1..];
        }
        out.push_str(rest);
        out
    }
}

/// serde_path_to_error writes the root as `.` and list indexes as `[i]`.
fn normalize(path: &str) -> String {
    if path == "." { String::new() } else { path.to_owned() }
}

/// Removes the node at `path` (a dotted path with `[i]` indexes); false if absent.
/// Keys of `rdkafka` and `settings` contain dots, so every split point is tried.
fn remove(value: &mut Value, path: &str) -> bool {
    let splits: Vec<usize> = path.char_indices().filter(|(_, c)| *c == '.' || *c == '[').map(|(i, _)| i).collect();
    for &at in splits.iter().rev().chain(std::iter::once(&0)) {
        let (parent_path, last) =
            if at == 0 && !path.starts_with('[') { ("", path) } else { (&path[..at], &path[at..]) };
        let Some(parent_value) = walk(value, parent_path) else { continue };
        if let Some(index) =
            last.strip_prefix('[').and_then(|l| l.strip_suffix(']')).and_then(|i| i.parse::<usize>().ok())
        {
            if let Value::Sequence(items) = parent_value
                && index < items.len()
            {
                items.remove(index);
                return true;
            }
            continue;
        }
        let key = last.strip_prefix('.').unwrap_or(last);
        if let Value::Mapping(map) = parent_value
            && map.remove(key).is_some()
        {
            return true;
        }
    }
    false
}

/// The node at `path`, matching the longest map key at each level.
fn walk<'v>(value: &'v mut Value, path: &str) -> Option<&'v mut Value> {
    let value = if let Value::Tagged(t) = value { &mut t.value } else { value };
    if path.is_empty() {
        return Some(value);
    }
    if let Some(rest) = path.strip_prefix('[') {
        let close = rest.find(']')?;
        let index: usize = rest[..close].parse().ok()?;
        let tail = &rest[close + 1..];
        let tail = tail.strip_prefix('.').unwrap_or(tail);
        return match value {
            Value::Sequence(items) => walk(items.get_mut(index)?, tail),
            _ => None,
        };
    }
    let Value::Mapping(map) = value else { return None };
    let key = map
        .keys()
        .filter_map(Value::as_str)
        .filter(|k| path == *k || path.strip_prefix(*k).is_some_and(|r| r.starts_with('.') || r.starts_with('[')))
        .max_by_key(|k| k.len())?
        .to_owned();
    let tail = &path[key.len()..];
    let tail = tail.strip_prefix('.').unwrap_or(tail);
    walk(map.get_mut(key.as_str())?, tail)
}
