//! Loading: every input read once (pipeline.yaml, the Avro schema, the user Rust files),
//! then YAML syntax, structure (serde), the semantic rules and the plan, into one
//! [`Validated`] value that carries the inputs' text and the config hash.
//!
//! This module orchestrates: it depends on `model`, `rules` and `plan`, and nothing below it
//! depends on it. It is the only place where the generator reads the files a pipeline names;
//! emission is a pure function of what it returns.
//!
//! serde stops at the first error, but a user wants every problem of a file at once. So
//! the document is read into a `serde_yaml::Value`, deserialized, and on each error the
//! offending node is reported and removed before trying again. Defaulted keys then fall
//! back to their defaults; a removed required key ends the structural pass silently,
//! since its error is already reported.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde_yaml::Value;
use sha2::{Digest as _, Sha256};

use crate::diag::{Diagnostic, Report};
use crate::ir::RecordTy;
use crate::model::{Encoding, Operator, PipelineFile, TEMPLATED_KEYS};
use crate::plan::{Plan, RustSource, Step};
use crate::readers::avro::AvroRecord;
use crate::rules::{
    self, Context, Options, avro_schema, format_choice, invalid_value, json_schema, literal_required, missing_key,
    proto_schema, unknown_key, yaml_syntax,
};
use crate::source_map::{SourceMap, join, parent};

/// A configuration that passed every rule, with what the generator needs next.
#[derive(Clone, Debug)]
pub struct Validated {
    /// The typed configuration.
    pub model: PipelineFile,
    /// The reader schema's column view: what every stage after the readers sees.
    pub(crate) schema: RecordTy,
    /// The schema file's text, compiled into the binary.
    pub schema_text: String,
    /// What the decoder is generated from: the format's own view of the schema.
    pub(crate) input: Input,
    /// The records' shape as an Avro schema: what `source.datagen`, `cargo xtask produce` and
    /// the generated fuzz test synthesize values from (and encode in the pipeline's format).
    /// The schema file itself for Avro; derived from the column view for other formats.
    pub datagen_schema: String,
    /// The schema file, absolute.
    pub schema_path: PathBuf,
    /// pipeline.yaml, absolute.
    pub pipeline_path: PathBuf,
    /// The directory of pipeline.yaml.
    pub base_dir: PathBuf,
    /// pipeline.yaml's text.
    pub yaml_text: String,
    /// The typed operator chain and the output columns.
    pub(crate) plan: Plan,
    /// The user Rust files of `rust` operators, in chain order.
    pub(crate) user_files: Vec<UserFile>,
    /// The config hash: the first 16 hex digits of sha256 over the normalized configuration,
    /// the schema and the user Rust files.
    pub config_hash: String,
}

/// The reader schema as its format's decoder walks it.
#[derive(Clone, Debug)]
pub(crate) enum Input {
    /// Avro: the record's types as the binary encoding needs them (union branch indexes, fixed
    /// sizes).
    Avro(AvroRecord),
    /// JSON: the top-level properties.
    Json(Vec<crate::readers::json::JField>),
    /// Protobuf: the message's fields and its message-index path.
    Protobuf(crate::readers::protobuf::Message),
}

/// A user Rust file a `rust` operator names, as read.
#[derive(Clone, Debug)]
pub(crate) struct UserFile {
    /// The operator's position in `transform`.
    pub(crate) index: usize,
    /// The file, canonical.
    pub(crate) path: PathBuf,
    /// Its text.
    pub(crate) text: String,
}

/// The result of validating one file: the findings and, if there was no error, the model.
#[derive(Debug)]
pub struct Outcome {
    /// Errors and warnings.
    pub report: Report,
    /// Present when the report has no errors.
    pub pipeline: Option<Validated>,
}

/// pipeline.yaml could not be read at all (exit code 2, not a configuration error).
#[derive(Debug, thiserror::Error)]
#[error("cannot read {path}: {source}")]
pub struct ReadError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

/// Validates the file at `path`.
pub fn validate_file(path: &Path, options: &Options) -> Result<Outcome, ReadError> {
    let text = std::fs::read_to_string(path).map_err(|source| ReadError { path: path.to_owned(), source })?;
    let base_dir = path.parent().map(Path::to_owned).unwrap_or_default();
    let base_dir = if base_dir.as_os_str().is_empty() { PathBuf::from(".") } else { base_dir };
    Ok(validate(&path.display().to_string(), &absolute(path), &text, &base_dir, options))
}

/// Validates `text` as if read from `file_name` in `base_dir` (`file_name` names the file in
/// messages; its last component, in `base_dir`, is the pipeline's path).
pub fn validate_str(file_name: &str, text: &str, base_dir: &Path, options: &Options) -> Outcome {
    let name = Path::new(file_name).file_name().unwrap_or_else(|| "pipeline.yaml".as_ref());
    validate(file_name, &absolute(&base_dir.join(name)), text, base_dir, options)
}

/// Reads a Cargo.lock to start a generated crate from; `None` when there is none.
pub fn read_lockfile(path: &Path) -> Result<Option<Vec<u8>>, ReadError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ReadError { path: path.to_owned(), source }),
    }
}

fn validate(file_name: &str, pipeline_path: &Path, text: &str, base_dir: &Path, options: &Options) -> Outcome {
    let source_map = SourceMap::new(text);
    let mut diagnostics = Vec::new();
    let model = read_model(text, &mut diagnostics);
    let mut pipeline = None;
    if let Some(model) = model {
        let schema = match model.format.selected() {
            None => {
                diagnostics.extend(format_choice::check(&model.format));
                None
            }
            Some(format) => {
                let relative = format.schema;
                let key = format.path("schema");
                let schema_file = base_dir.join(relative);
                let loaded = match std::fs::read_to_string(&schema_file) {
                    Err(e) => Err(vec![avro_schema::unreadable(&key, relative, &e)]),
                    Ok(text) => match format.encoding {
                        Encoding::Avro => avro_schema::convert(relative, &text).map(|avro| {
                            let record = crate::readers::avro::record_ty(&avro);
                            let datagen = text.clone();
                            (text, record, Input::Avro(avro), datagen)
                        }),
                        Encoding::Json => json_schema::convert(relative, &text).map(|fields| {
                            let record = crate::readers::json::record_ty("Message", &fields);
                            let datagen = crate::readers::json::datagen_schema(&fields);
                            (text, record, Input::Json(fields), datagen)
                        }),
                        Encoding::Protobuf => {
                            let message = model.format.protobuf.as_ref().map_or("", |p| p.message.as_str());
                            proto_schema::convert(relative, &schema_file, message).map(|message| {
                                let record = crate::readers::protobuf::record_ty("Message", &message.fields);
                                let datagen = crate::readers::protobuf::datagen_schema(&message);
                                (text, record, Input::Protobuf(message), datagen)
                            })
                        }
                    },
                };
                match loaded {
                    Ok(loaded) => Some((schema_file, loaded)),
                    Err(found) => {
                        diagnostics.extend(found);
                        None
                    }
                }
            }
        };
        let cx = Context { model: &model, source_map: &source_map, options };
        rules::check(&cx, &mut diagnostics);
        if let Some((schema_file, (schema_text, schema, input, datagen_schema))) = schema {
            let sources = read_rust_sources(&model, base_dir);
            match crate::plan::plan(&model, &schema, &sources) {
                Ok(plan) => {
                    let user_files = user_files(&plan, sources);
                    // A .proto's imports shape the decoder too: the compiled set covers them.
                    let compiled = match &input {
                        Input::Protobuf(message) => &message.descriptor_set[..],
                        _ => &[],
                    };
                    let config_hash = config_hash(&model, &schema_text, compiled, &user_files);
                    pipeline = Some(Validated {
                        model,
                        schema,
                        schema_text,
                        input,
                        datagen_schema,
                        schema_path: absolute(&schema_file),
                        pipeline_path: pipeline_path.to_owned(),
                        base_dir: base_dir.to_owned(),
                        yaml_text: text.to_owned(),
                        plan,
                        user_files,
                        config_hash,
                    });
                }
                Err(found) => diagnostics.extend(found),
            }
        }
    }
    let mut report = Report { file_name: file_name.to_owned(), text: text.to_owned(), source_map, diagnostics };
    report.sort();
    if report.has_errors() {
        pipeline = None;
    }
    Outcome { report, pipeline }
}

/// Reads the file of every `rust` operator, by its position in `transform`.
fn read_rust_sources(model: &PipelineFile, base_dir: &Path) -> BTreeMap<usize, std::io::Result<RustSource>> {
    let mut out = BTreeMap::new();
    for (index, op) in model.transform.iter().enumerate() {
        if let Operator::Rust(r) = op {
            let file = base_dir.join(&r.file);
            let read = std::fs::read_to_string(&file).map(|text| {
                let path = file.canonicalize().unwrap_or(file);
                RustSource { path, text }
            });
            out.insert(index, read);
        }
    }
    out
}

/// The user files the plan kept, in chain order.
fn user_files(plan: &Plan, mut sources: BTreeMap<usize, std::io::Result<RustSource>>) -> Vec<UserFile> {
    plan.steps
        .iter()
        .filter_map(|step| match step {
            Step::Rust { index, .. } => match sources.remove(index) {
                Some(Ok(RustSource { path, text })) => Some(UserFile { index: *index, path, text }),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The config hash: sha256 over the normalized configuration, the schema and the user Rust
/// files; the first 16 hex digits.
fn config_hash(model: &PipelineFile, schema_text: &str, compiled: &[u8], user_files: &[UserFile]) -> String {
    let mut h = Sha256::new();
    let normalized = serde_json::to_string(model).expect("the model serializes");
    h.update((normalized.len() as u64).to_le_bytes());
    h.update(normalized.as_bytes());
    h.update((schema_text.len() as u64).to_le_bytes());
    h.update(schema_text.as_bytes());
    if !compiled.is_empty() {
        h.update((compiled.len() as u64).to_le_bytes());
        h.update(compiled);
    }
    for file in user_files {
        h.update((file.text.len() as u64).to_le_bytes());
        h.update(file.text.as_bytes());
    }
    hex::encode(h.finalize())[..16].to_owned()
}

/// `p` made absolute: canonical when it exists, else against the working directory.
fn absolute(p: &Path) -> PathBuf {
    p.canonicalize().or_else(|_| std::path::absolute(p)).unwrap_or_else(|_| p.to_owned())
}

/// Parses and deserializes, reporting every structural problem it can reach.
fn read_model(text: &str, out: &mut Vec<Diagnostic>) -> Option<PipelineFile> {
    let mut value: Value = match serde_yaml::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            let span = e.location().map(|l| l.index()..l.index() + 1).unwrap_or(0..0);
            let message = e.to_string();
            // serde_yaml appends " at line L column C"; the rendered label shows that already.
            let message = message.split(" at line ").next().unwrap_or(&message).to_owned();
            out.push(
                Diagnostic::error(&yaml_syntax::RULE, "", format!("YAML syntax error: {message}"))
                    .with_span(span)
                    .help("fix the YAML at the marked position (indent with spaces, put a space after `:`)"),
            );
            return None;
        }
    };
    if let Err(e) = value.apply_merge() {
        out.push(
            Diagnostic::error(&yaml_syntax::RULE, "", format!("YAML merge key error: {e}")).help("fix the `<<` merge"),
        );
        return None;
    }
    if value.is_null() {
        out.push(Diagnostic::error(&missing_key::RULE, "", "the file is empty").help(
            "start from examples/quickstart/pipeline.yaml; `pipeline`, `source`, `format` and `sink` are required",
        ));
        return None;
    }
    let mut removed = HashSet::new();
    let mut shifts = Shifts::default();
    check_templates(&mut value, "", out, &mut removed);
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
        if let Some(field) = between(&message, "missing field `", "`") {
            let full = join(&path, field);
            if !removed.iter().any(|r: &String| r == &full || full.starts_with(&format!("{r}."))) {
                out.push(Diagnostic::error(&missing_key::RULE, &path, format!("missing required key `{full}`")).help(
                    if path.is_empty() {
                        format!("add a `{field}:` section")
                    } else {
                        format!("add `{field}:` under `{path}`")
                    },
                ));
            }
            return None;
        }
        // What to report (in the user's coordinates) and what to remove (in the current
        // document's coordinates).
        let (rule, target, current_target) = if let Some(key) = between(&message, "unknown field `", "`") {
            // serde_path_to_error names the unknown key itself as the last segment.
            if path == key || path.ends_with(&format!(".{key}")) {
                (&unknown_key::RULE, path.clone(), current.clone())
            } else {
                (&unknown_key::RULE, join(&path, key), join(&current, key))
            }
        } else if let Some(variant) = between(&message, "unknown variant `", "`") {
            match (
                path.strip_suffix(variant).and_then(|p| p.strip_suffix('.')),
                current.strip_suffix(variant).and_then(|p| p.strip_suffix('.')),
            ) {
                // A kind written as a key (`source: { kafak: ... }`, `- where: ...`): the
                // path ends with it. Report the key; remove the whole one-key mapping.
                (Some(_), Some(current_parent)) => (&unknown_key::RULE, path.clone(), current_parent.to_owned()),
                // An enumerated value such as `wire: avro`.
                _ => (&invalid_value::RULE, path.clone(), current.clone()),
            }
        } else {
            (&invalid_value::RULE, path.clone(), current.clone())
        };
        if !removed.insert(target.clone()) || !remove(&mut value, &current_target) {
            // Nothing left to remove: report it and stop rather than loop.
            out.push(Diagnostic::error(rule, &target, message));
            return None;
        }
        // A later "missing field" for the removed node is a consequence, not a new error.
        removed.insert(shifts.original(&current_target));
        shifts.record(&target);
        out.push(describe(rule, &target, &message));
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

/// Builds the diagnostic for a serde error, with a fix where one is known.
fn describe(rule: &'static crate::diag::Rule, path: &str, message: &str) -> Diagnostic {
    if rule.code == unknown_key::RULE.code {
        let key = path.rsplit('.').next().unwrap_or(path);
        let expected = message.split_once(", expected ").map(|(_, expected)| expected.to_owned());
        let mut d = Diagnostic::error(
            rule,
            path,
            format!("unknown key `{key}` in `{}`", parent(path).unwrap_or("the top level")),
        );
        if let Some(expected) = expected {
            let suggestion = closest(key, &expected);
            d = d.note(format!("expected {expected}"));
            if let Some(s) = suggestion {
                d = d.help(format!("did you mean `{s}`?"));
            } else {
                d = d.help("remove it; docs/configuration.md lists every key");
            }
        } else {
            d = d.help("remove it; docs/configuration.md lists every key");
        }
        return d;
    }
    if let Some(variant) = between(message, "unknown variant `", "`") {
        let expected = message.split_once(", expected ").map(|(_, e)| e).unwrap_or_default();
        let d = Diagnostic::error(rule, path, format!("`{variant}` is not a valid value for `{path}`"))
            .on_value()
            .note(format!("expected {expected}"));
        return match closest(variant, expected) {
            Some(s) => d.help(format!("did you mean `{s}`?")),
            None => d.help(format!("use {expected}")),
        };
    }
    if message.contains("expected map with a single key") {
        return Diagnostic::error(rule, path, format!("`{path}` must have exactly one key, naming its kind"))
            .note("a pipeline has exactly one source (`kafka` or `datagen`) and one sink (`clickhouse` or `file`); each operator is a one-key mapping")
            .help("keep one of the keys");
    }
    Diagnostic::error(rule, path, format!("invalid value for `{path}`: {message}"))
        .on_value()
        .help("see docs/configuration.md for the accepted forms of this key")
}

/// Finds the allowed name nearest to `key` in serde's "expected ..." list.
fn closest(key: &str, expected: &str) -> Option<String> {
    crate::diag::nearest(key, expected.split('`').skip(1).step_by(2)).map(str::to_owned)
}

/// Reports `${VAR}` where a literal is required, and removes those nodes.
fn check_templates(value: &mut Value, path: &str, out: &mut Vec<Diagnostic>, removed: &mut HashSet<String>) {
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
                            &literal_required::RULE,
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
                    check_templates(v, &child, out, removed);
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
                        Diagnostic::error(&literal_required::RULE, &child, format!("`{child}` must be a literal"))
                            .on_value()
                            .help("write the value out"),
                    );
                    *item = Value::Null;
                } else {
                    check_templates(item, &child, out, removed);
                }
            }
        }
        Value::Tagged(tagged) => check_templates(&mut tagged.value, path, out, removed),
        _ => {}
    }
}

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

/// serde_path_to_error writes the root as `.` and list indexes as `[i]`.
fn normalize(path: &str) -> String {
    if path == "." { String::new() } else { path.to_owned() }
}

fn between<'a>(s: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = s.find(start)? + start.len();
    let len = s[from..].find(end)?;
    Some(&s[from..from + len])
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

    #[test]
    fn suggests_near_keys() {
        assert_eq!(closest("topics", "one of `brokers`, `topic`, `group_id`"), Some("topic".into()));
        assert_eq!(closest("zzzzzzzz", "one of `brokers`, `topic`"), None);
    }
}
