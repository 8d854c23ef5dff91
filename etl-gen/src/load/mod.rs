//! Loading: every input read once (pipeline.yaml, the schema file, the user Rust files) and
//! passed through the steps that check it, in stage order: pipeline.yaml's structure
//! (`model_reader.rs`), the schema through its reader, the semantic rules and the plan. The
//! result is one [`Validated`] value that carries the inputs' text and their config hash
//! (`config_hash.rs`).
//!
//! This module orchestrates: it depends on `model`, `readers`, `rules` and `plan`, and nothing
//! below it depends on it. It is the only place where the generator reads the files a pipeline
//! names; emission is a pure function of what it returns.

mod config_hash;
mod model_reader;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::diag::Report;
use crate::ir::RecordTy;
use crate::model::{Encoding, Operator, PipelineFile};
use crate::plan::{Plan, RustSource, Step};
use crate::readers::avro::AvroRecord;
use crate::rules::{self, Context, Options, avro_schema, format_choice, json_schema, proto_schema, schema_file};
use crate::source_map::SourceMap;

use self::config_hash::config_hash;
use self::model_reader::read_model;

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
    /// The schema file itself for Avro; written by the JSON and Protobuf readers
    /// (`datagen_schema`) from their own view of the schema for the others.
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

/// Validates `text`, read from `pipeline_path` (named `file_name` in messages), whose relative
/// paths are relative to `base_dir`.
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
                    Err(e) => Err(vec![schema_file::unreadable(&key, relative, &e)]),
                    Ok(text) => match format.encoding {
                        Encoding::Avro => avro_schema::convert(relative, &text).map(|avro| {
                            let record = crate::readers::avro::record_ty(&avro);
                            let datagen = crate::readers::avro::datagen_schema(&text);
                            (text, record, Input::Avro(avro), datagen)
                        }),
                        Encoding::Json => json_schema::convert(relative, &text).map(|fields| {
                            let record = crate::readers::json::record_ty(&fields);
                            let datagen = crate::readers::json::datagen_schema(&fields);
                            (text, record, Input::Json(fields), datagen)
                        }),
                        Encoding::Protobuf => {
                            let message = model.format.protobuf.as_ref().map_or("", |p| p.message.as_str());
                            proto_schema::convert(relative, &schema_file, message).map(|message| {
                                let record = crate::readers::protobuf::record_ty(&message);
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
        if let Some((schema_file, (schema_text, mut schema, input, datagen_schema))) = schema {
            if let crate::model::Sink::Clickhouse(c) = &model.sink
                && c.enum_column == crate::model::EnumType::Enum
            {
                crate::ir::with_enum_column(&mut schema, crate::ir::EnumColumn::Enum);
            }
            let sources = read_rust_sources(&model, base_dir);
            match crate::plan::plan(&model, &schema, &sources) {
                Ok(plan) => {
                    let user_files = user_files(&plan, sources);
                    // A .proto's imports shape the decoder too: the compiled set covers them.
                    let compiled = match &input {
                        Input::Protobuf(message) => &message.descriptor_set[..],
                        _ => &[],
                    };
                    let user_texts = user_files.iter().map(|file| file.text.as_str());
                    let config_hash = config_hash(&model, &schema_text, compiled, user_texts);
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

/// `p` made absolute: canonical when it exists, else against the working directory.
fn absolute(p: &Path) -> PathBuf {
    p.canonicalize().or_else(|_| std::path::absolute(p)).unwrap_or_else(|_| p.to_owned())
}
