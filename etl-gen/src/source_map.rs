//! Where each key and value of pipeline.yaml sits in the file.
//!
//! serde_yaml keeps no positions once a document is deserialized, so the file is read a
//! second time with yaml-rust2's event parser, which reports a marker for every event.
//! Paths are written the way diagnostics name keys: `sink.clickhouse.shards[0].replicas[1]`.

use std::collections::HashMap;
use std::ops::Range;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

/// Byte ranges of keys and values by path.
#[derive(Debug, Default)]
pub struct SourceMap {
    keys: HashMap<String, Range<usize>>,
    values: HashMap<String, Range<usize>>,
}

impl SourceMap {
    /// Maps `text`; a document yaml-rust2 cannot parse gives an empty map (serde_yaml
    /// reports the syntax error itself).
    pub fn new(text: &str) -> Self {
        let mut builder = Builder { text, line_starts: line_starts(text), map: Self::default(), stack: Vec::new() };
        let mut parser = Parser::new_from_str(text);
        if parser.load(&mut builder, false).is_err() {
            return Self::default();
        }
        builder.map
    }

    /// The range of the key at `path` (the key itself, e.g. `group.id`).
    pub fn key(&self, path: &str) -> Option<Range<usize>> {
        self.keys.get(path).cloned()
    }

    /// The range of the value at `path` (for a mapping or sequence, its first token).
    pub fn value(&self, path: &str) -> Option<Range<usize>> {
        self.values.get(path).cloned()
    }

    /// The best place to point at for `path`: its value if the value is a scalar on the
    /// key's line, else the key; for a path that does not exist, its nearest ancestor.
    pub fn locate(&self, path: &str) -> Option<Range<usize>> {
        let mut path = path;
        loop {
            if let Some(r) = self.key(path).or_else(|| self.value(path)) {
                return Some(r);
            }
            path = parent(path)?;
        }
    }
}

/// The path one level up: `a.b[2]` -> `a.b`, `a.b` -> `a`, `a` -> none.
pub(crate) fn parent(path: &str) -> Option<&str> {
    if path.ends_with(']') {
        return path.rfind('[').map(|i| &path[..i]);
    }
    path.rfind('.').map(|i| &path[..i])
}

/// Joins a key onto a path.
pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}

enum Frame {
    Map { path: String, key: Option<String> },
    Seq { path: String, index: usize },
}

struct Builder<'a> {
    text: &'a str,
    line_starts: Vec<usize>,
    map: SourceMap,
    stack: Vec<Frame>,
}

impl Builder<'_> {
    /// Byte offset of a marker. yaml-rust2's index counts characters in some versions and
    /// bytes in others; line and column are unambiguous.
    fn offset(&self, mark: &Marker) -> usize {
        let line_start = self.line_starts.get(mark.line().saturating_sub(1)).copied().unwrap_or(self.text.len());
        let line = &self.text[line_start..];
        // Columns are zero-based characters in yaml-rust2.
        let in_line: usize = line.chars().take(mark.col()).map(char::len_utf8).sum();
        line_start + in_line
    }

    /// The range of a scalar starting at `start`: to the end of its token on that line.
    fn scalar_range(&self, start: usize, value: &str) -> Range<usize> {
        let line_end = self.text[start..].find('\n').map_or(self.text.len(), |i| start + i);
        let quoted = matches!(self.text[start..].chars().next(), Some('"' | '\''));
        let len = value.len() + if quoted { 2 } else { 0 };
        start..(start + len.max(1)).min(line_end).max(start + 1).min(self.text.len().max(start + 1))
    }

    /// The path of the value about to be read, and whether it is a key.
    fn next_slot(&mut self) -> Option<(String, bool)> {
        match self.stack.last_mut()? {
            Frame::Map { path, key: None } => Some((path.clone(), true)),
            Frame::Map { path, key: Some(k) } => Some((join(path, k), false)),
            Frame::Seq { path, index } => Some((format!("{path}[{index}]"), false)),
        }
    }

    /// After a value is complete, the parent expects its next key or element.
    fn value_done(&mut self) {
        match self.stack.last_mut() {
            Some(Frame::Map { key, .. }) => *key = None,
            Some(Frame::Seq { index, .. }) => *index += 1,
            None => {}
        }
    }
}

impl MarkedEventReceiver for Builder<'_> {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let start = self.offset(&mark);
        match ev {
            Event::Scalar(value, ..) => match self.next_slot() {
                Some((parent_path, true)) => {
                    let range = self.scalar_range(start, &value);
                    self.map.keys.insert(join(&parent_path, &value), range);
                    if let Some(Frame::Map { key, .. }) = self.stack.last_mut() {
                        *key = Some(value);
                    }
                }
                Some((path, false)) => {
                    let range = self.scalar_range(start, &value);
                    self.map.values.insert(path, range);
                    self.value_done();
                }
                None => {}
            },
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                let path = match self.next_slot() {
                    Some((path, false)) => path,
                    // A mapping used as a key is not something pipeline.yaml has; give it
                    // a path that matches nothing.
                    Some((path, true)) => format!("{path}.?"),
                    None => String::new(),
                };
                // A list element has no key to point at, so its first token stands in.
                if path.ends_with(']') {
                    self.map.values.insert(path.clone(), start..start + 1);
                }
                self.stack.push(if matches!(ev, Event::MappingStart(..)) {
                    Frame::Map { path, key: None }
                } else {
                    Frame::Seq { path, index: 0 }
                });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
                self.value_done();
            }
            Event::Alias(_) => self.value_done(),
            _ => {}
        }
    }
}

fn line_starts(text: &str) -> Vec<usize> {
    std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "pipeline:\n  name: orders\nsource:\n  kafka:\n    rdkafka:\n      group.id: x\nsink:\n  clickhouse:\n    shards:\n      - replicas: [\"http://a\", 'http://b']\n";

    fn text_at(r: Range<usize>) -> &'static str {
        &DOC[r]
    }

    #[test]
    fn locates_keys_and_values() {
        let map = SourceMap::new(DOC);
        assert_eq!(text_at(map.key("pipeline.name").unwrap()), "name");
        assert_eq!(text_at(map.value("pipeline.name").unwrap()), "orders");
        assert_eq!(text_at(map.key("source.kafka.rdkafka.group.id").unwrap()), "group.id");
        assert_eq!(text_at(map.value("sink.clickhouse.shards[0].replicas[1]").unwrap()), "'http://b'");
        assert_eq!(text_at(map.locate("source.kafka.rdkafka.nope").unwrap()), "rdkafka");
        assert_eq!(parent("a.b[2]"), Some("a.b"));
        assert_eq!(parent("a"), None);
    }
}
