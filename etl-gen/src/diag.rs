//! Diagnostics: what a validation rule found, where, and how to fix it.
//!
//! A diagnostic names a key path; the renderer turns the path into file:line:column with
//! the [`SourceMap`] and draws the offending line, so rules never deal with positions.

use std::fmt;
use std::ops::Range;

use codespan_reporting::diagnostic::{Diagnostic as CsDiagnostic, Label, Severity as CsSeverity};
use codespan_reporting::files::SimpleFile;
use codespan_reporting::term;

use crate::source_map::SourceMap;

/// A validation rule: a stable code, a short name and the text of docs/diagnostics.md.
#[derive(Debug)]
pub struct Rule {
    /// Stable code, e.g. `E0201`. Codes are never reused.
    pub code: &'static str,
    /// Kebab-case name, e.g. `rdkafka-owned-property`.
    pub name: &'static str,
    /// One line: what the rule rejects.
    pub summary: &'static str,
    /// Why, and how to fix it (Markdown).
    pub doc: &'static str,
}

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The configuration is invalid; `gen` exits 1.
    Error,
    /// Worth knowing; `gen` goes on.
    Warning,
}

/// Which part of a `key: value` pair to point at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anchor {
    /// The key.
    Key,
    /// The value (falls back to the key).
    Value,
}

/// One finding.
#[derive(Clone, Debug)]
pub struct Diagnostic {
    /// The rule that found it.
    pub rule: &'static Rule,
    /// Error or warning.
    pub severity: Severity,
    /// The key path, e.g. `source.kafka.rdkafka.group.id`; empty for the whole file.
    pub path: String,
    /// Key or value.
    pub anchor: Anchor,
    /// One line: what is wrong.
    pub message: String,
    /// Further facts (shown as `= note`).
    pub notes: Vec<String>,
    /// How to fix it (shown as `= help:`).
    pub help: Vec<String>,
    /// An explicit location, for findings the source map cannot place (YAML syntax).
    pub span: Option<Range<usize>>,
}

impl Diagnostic {
    /// An error of `rule` at `path`.
    pub fn error(rule: &'static Rule, path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            rule,
            severity: Severity::Error,
            path: path.into(),
            anchor: Anchor::Key,
            message: message.into(),
            notes: Vec::new(),
            help: Vec::new(),
            span: None,
        }
    }

    /// A warning of `rule` at `path`.
    pub fn warning(rule: &'static Rule, path: impl Into<String>, message: impl Into<String>) -> Self {
        Self { severity: Severity::Warning, ..Self::error(rule, path, message) }
    }

    /// Points at the value rather than the key.
    pub fn on_value(mut self) -> Self {
        self.anchor = Anchor::Value;
        self
    }

    /// Adds a note.
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// Adds a fix.
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help.push(help.into());
        self
    }

    /// Sets an explicit location.
    pub fn with_span(mut self, span: Range<usize>) -> Self {
        self.span = Some(span);
        self
    }

    fn locate(&self, map: &SourceMap, len: usize) -> Range<usize> {
        let found = self.span.clone().or_else(|| match self.anchor {
            Anchor::Value => map.value(&self.path).or_else(|| map.locate(&self.path)),
            Anchor::Key => map.locate(&self.path),
        });
        let range = found.unwrap_or(0..0);
        range.start.min(len)..range.end.min(len)
    }
}

/// The findings of one validation run over one file.
#[derive(Debug)]
pub struct Report {
    /// The file name shown in diagnostics.
    pub file_name: String,
    /// Its text.
    pub text: String,
    /// Where its keys are.
    pub source_map: SourceMap,
    /// Errors and warnings, in file order.
    pub diagnostics: Vec<Diagnostic>,
}

impl Report {
    /// True when any finding is an error.
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(|d| d.severity == Severity::Error)
    }

    /// The errors only.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| d.severity == Severity::Error)
    }

    /// Sorts findings by position so they read top to bottom.
    pub(crate) fn sort(&mut self) {
        let len = self.text.len();
        let map = &self.source_map;
        self.diagnostics.sort_by_key(|d| (d.locate(map, len).start, d.rule.code));
    }

    /// Renders every finding as plain text, rustc style, followed by a summary line.
    pub fn render(&self) -> String {
        let file = SimpleFile::new(self.file_name.as_str(), self.text.as_str());
        let config = term::Config::default();
        let mut out = String::new();
        for d in &self.diagnostics {
            let range = d.locate(&self.source_map, self.text.len());
            let label_text = if d.path.is_empty() { String::new() } else { d.path.clone() };
            let mut notes = d.notes.clone();
            notes.extend(d.help.iter().map(|h| format!("help: {h}")));
            let severity = match d.severity {
                Severity::Error => CsSeverity::Error,
                Severity::Warning => CsSeverity::Warning,
            };
            let cs = CsDiagnostic::new(severity)
                .with_code(d.rule.code)
                .with_message(&d.message)
                .with_labels(vec![Label::primary((), range).with_message(label_text)])
                .with_notes(notes);
            // Rendering into a String cannot fail for a file we hold in memory.
            let _ = term::emit_to_string(&mut out, &config, &file, &cs);
        }
        let errors = self.errors().count();
        let warnings = self.diagnostics.len() - errors;
        if errors > 0 {
            out.push_str(&format!(
                "error: {} is invalid: {errors} error{}{}\n",
                self.file_name,
                plural(errors),
                if warnings > 0 { format!(", {warnings} warning{}", plural(warnings)) } else { String::new() }
            ));
        }
        out
    }
}

/// The candidate nearest to `name` by edit distance, if it is close enough (at most 3 edits)
/// to be the name the user meant.
pub(crate) fn nearest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates.into_iter().map(|c| (edit_distance(name, c), c)).filter(|(d, _)| *d <= 3).min().map(|(_, c)| c)
}

/// Levenshtein distance; the names compared are short.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb { prev } else { 1 + prev.min(row[j]).min(row[j + 1]) };
            prev = cur;
        }
    }
    row[b.len()]
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code, self.name)
    }
}
