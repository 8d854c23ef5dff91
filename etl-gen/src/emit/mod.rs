//! Emission: from a validated pipeline to the files of its crate.
//!
//! [`generate`] is pure: a function of the [`Validated`] pipeline (which carries the text of
//! every input) and the [`GenOptions`], returning the files and their contents; writing them
//! is the caller's step (`cli::write`). Rust is emitted as tokens and formatted with
//! prettyplease; the other files come from templates/ through minijinja.
//!
//! The modules mirror the IR. Each format's decoder is one module, equals: [`avro`], [`json`],
//! [`protobuf`]; [`format`] is where the rest asks what the format decides (a new format adds a
//! module beside them and an arm in each of its functions).
//! [`encode`] writes rows (RowBinary, NDJSON) and [`rust_types`] is the one map from IR types
//! to Rust types; both are format-blind. [`expr`] compiles typed expressions. [`chain_impl`]
//! puts decoder, operators and encoder into `Chain::process`, [`main_fn`] writes `main`,
//! [`criterion`] the crate's benchmark, and [`comments`] carries the YAML steps into the code.

mod avro;
mod chain_impl;
mod comments;
mod criterion;
mod encode;
mod expr;
mod format;
mod json;
mod main_fn;
mod protobuf;
mod rust_types;

use std::path::{Path, PathBuf};

use minijinja::{Environment, context};

use crate::load::Validated;
use crate::plan::Step;

/// Why emission failed: an internal error, never a configuration error (those are
/// diagnostics, reported before emission).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A template of templates/ failed to render.
    #[error("template {template}: {message}")]
    Template {
        /// The template.
        template: String,
        /// minijinja's message.
        message: String,
    },
    /// The emitted Rust does not parse.
    #[error("internal error: generated code does not parse: {0}")]
    Parse(#[from] syn::Error),
    /// The emitted benchmark does not parse.
    #[error("internal error: the benchmark does not parse: {0}")]
    BenchParse(syn::Error),
    /// A value of the configuration is not a valid `${VAR}` template (validation lets none
    /// through; this guards the emitter's own reading of it).
    #[error("{key}: {why}")]
    Setting {
        /// The setting's key path.
        key: String,
        /// What is wrong with its template.
        why: String,
    },
    /// `main` reads a setting that `SETTINGS` does not list.
    #[error("internal error: `main` reads the setting `{0}`, which SETTINGS lacks")]
    UnknownSetting(String),
    /// The settings under a prefix are not one run of `SETTINGS`, as `resolved.group` needs.
    #[error("internal error: the settings under `{0}` are not contiguous in SETTINGS")]
    ScatteredGroup(String),
    /// A `rust` operator has no user file.
    #[error("internal error: no user file for the rust operator `transform[{0}]`")]
    MissingUserFile(usize),
}

/// Where the generated crate finds etl-runtime.
#[derive(Clone, Debug)]
pub enum RuntimeDep {
    /// A local checkout (`path = ...`).
    Path(PathBuf),
    /// A git repository (`git = ...`), optionally at a revision.
    Git {
        /// The repository URL.
        url: String,
        /// A branch, tag or commit.
        rev: Option<String>,
    },
}

/// Options of one generation.
#[derive(Clone, Debug)]
pub struct GenOptions {
    /// How generated files name the source (the path as the user gave it).
    pub source_name: String,
    /// The crate's directory (absolute, or relative to the working directory).
    pub crate_dir: PathBuf,
    /// The shared target directory.
    pub target_dir: PathBuf,
    /// How to reach etl-runtime.
    pub runtime: RuntimeDep,
    /// The text of a Cargo.lock to start from (`load::read_lockfile`), so that the crate
    /// builds with the versions etl-runtime was tested with (and reuses their build artifacts).
    pub lockfile: Option<Vec<u8>>,
    /// Add a criterion benchmark of the decoder and the chain (`cargo xtask bench-chain`).
    pub bench: bool,
    /// Compile the runtime's `ETL_FAULT` kill points in (the fault-injection tests only; never
    /// for a binary that ships).
    pub fault_injection: bool,
}

/// A generated file.
#[derive(Clone, Debug)]
pub struct GeneratedFile {
    /// Path relative to the crate directory.
    pub path: PathBuf,
    /// Contents.
    pub contents: Vec<u8>,
}

/// The etl-rs version that generates code.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The generated `src/main.rs` alone, unformatted, as `etl_macros::pipeline!` expands it:
/// the schema and the user Rust files are included by their absolute paths.
pub fn main_rs_tokens(v: &Validated) -> Result<proc_macro2::TokenStream, Error> {
    let schema = v.schema_path.display().to_string();
    let user_files: Vec<(String, String)> =
        v.user_files.iter().map(|f| (format!("user_{}", f.index), f.path.display().to_string())).collect();
    main_rs(&chain_impl::MainInputs {
        pipeline: v,
        config_hash: &v.config_hash,
        version: VERSION,
        schema_include: &schema,
        user_files: &user_files,
        bench: false,
    })
    .map(comments::strip)
}

/// Every file of the crate.
pub fn generate(v: &Validated, options: &GenOptions) -> Result<Vec<GeneratedFile>, Error> {
    let name = &v.model.pipeline.name;
    let hash = &v.config_hash;
    let source = options.source_name.clone();
    let mut files = Vec::new();
    sources(v, options, &mut files)?;
    let runtime_dep = match &options.runtime {
        RuntimeDep::Path(p) => format!("path = {}", toml_string(&p.display().to_string())),
        RuntimeDep::Git { url, rev: Some(rev) } => format!("git = {}, rev = {}", toml_string(url), toml_string(rev)),
        RuntimeDep::Git { url, rev: None } => format!("git = {}", toml_string(url)),
    };
    let env = templates();
    let render = |template: &str, ctx: minijinja::Value| -> Result<Vec<u8>, Error> {
        env.get_template(template)
            .and_then(|t| t.render(ctx))
            .map(String::into_bytes)
            .map_err(|e| Error::Template { template: template.to_owned(), message: e.to_string() })
    };
    let crate_dir_rel = options.crate_dir.display().to_string();
    let runtime_features = runtime_features(v, options);
    let base = context! {
        name => name, version => VERSION, config_hash => hash, source => &source,
        runtime_dep => runtime_dep, runtime_features => runtime_features, target_dir => options.target_dir.display().to_string(),
        crate_dir_rel => crate_dir_rel,
    };
    files.push(GeneratedFile {
        path: "Cargo.toml".into(),
        contents: render(
            "Cargo.toml.j2",
            context! {
                bench => options.bench,
                protobuf => format::benchmark_needs_prost(v),
                ..base.clone()
            },
        )?,
    });
    if options.bench {
        let bench = criterion::emit(v)?;
        files.push(GeneratedFile { path: "benches/chain.rs".into(), contents: bench.into_bytes() });
        files.push(GeneratedFile { path: "benches/parts.rs".into(), contents: criterion::parts(v)?.into_bytes() });
        files.extend(format::benchmark_files(v));
    }
    files.push(GeneratedFile {
        path: ".cargo/config.toml".into(),
        contents: render("cargo-config.toml.j2", base.clone())?,
    });
    files.push(GeneratedFile { path: "Dockerfile".into(), contents: render("Dockerfile.j2", base.clone())? });
    let (columns, settings, rows) = readme_tables(v)?;
    files.push(GeneratedFile {
        path: "README.md".into(),
        contents: render(
            "README.md.j2",
            context! { ..base, ..context! {
                columns => columns, settings => settings, rows => rows,
                kafka => matches!(v.model.source, crate::model::Source::Kafka(_)),
                dlq => v.model.errors.policy == crate::model::ErrorPolicy::Dlq,
            } },
        )?,
    });
    if let Some(lock) = &options.lockfile {
        files.push(GeneratedFile { path: "Cargo.lock".into(), contents: lock.clone() });
    }
    Ok(files)
}

/// The crate's sources and the inputs it is generated from: the user Rust files, `src/main.rs`,
/// the schema (and `schema.avsc`, the records' shape as Avro) and pipeline.yaml.
fn sources(v: &Validated, options: &GenOptions, files: &mut Vec<GeneratedFile>) -> Result<(), Error> {
    let name = &v.model.pipeline.name;
    let hash = &v.config_hash;
    let source = &options.source_name;
    // User Rust files are copied next to main.rs and included from there.
    let mut user_files = Vec::new();
    for file in &v.user_files {
        let module = format!("user_{}", file.index);
        let dest = format!("user/{module}.rs");
        files.push(GeneratedFile { path: PathBuf::from("src").join(&dest), contents: file.text.clone().into_bytes() });
        user_files.push((module, dest));
    }
    let tokens = main_rs(&chain_impl::MainInputs {
        pipeline: v,
        config_hash: hash,
        version: VERSION,
        schema_include: "../schema.avsc",
        user_files: &user_files,
        bench: options.bench,
    })?;
    let check = freshness_check(v, options);
    let tokens = quote::quote!(#check #tokens);
    let file = syn::parse2::<syn::File>(tokens)?;
    let preamble = format!(
        "//! Generated by `cargo xtask gen` from `{source}`; do not edit.\n//!\n//! Pipeline `{name}`, config hash {hash}, etl-rs {VERSION}.\n\n"
    );
    files.push(GeneratedFile {
        path: "src/main.rs".into(),
        contents: format!("{preamble}{}", comments::restore(&prettyplease::unparse(&file))).into_bytes(),
    });
    files.push(GeneratedFile { path: "schema.avsc".into(), contents: v.datagen_schema.clone().into_bytes() });
    // The format's schema itself, for the reader of the crate, when schema.avsc (the shape
    // datagen synthesizes from) is derived from it.
    let schema_copy = format::schema_copy(v);
    if schema_copy != "schema.avsc" {
        files.push(GeneratedFile { path: schema_copy.into(), contents: v.schema_text.clone().into_bytes() });
    }
    files.push(GeneratedFile { path: "pipeline.yaml".into(), contents: v.yaml_text.clone().into_bytes() });
    Ok(())
}

/// The etl-runtime features the crate enables: only what the pipeline uses (a datagen → file
/// pipeline does not link librdkafka), and the allocator.
fn runtime_features(v: &Validated, options: &GenOptions) -> String {
    let mut features = Vec::new();
    if matches!(v.model.source, crate::model::Source::Kafka(_)) {
        features.push("\"kafka\"");
    }
    if matches!(v.model.sink, crate::model::Sink::Clickhouse(_)) {
        features.push("\"clickhouse\"");
    }
    let format = v.model.format.get();
    if format.uses_registry() {
        features.push(format::registry_feature(v));
    }
    // Every binary: glibc's malloc costs librdkafka's hand-off of each message a lock.
    features.push("\"mimalloc\"");
    if options.fault_injection {
        features.push("\"fault-injection\"");
    }
    features.join(", ")
}

/// The README's tables: the output columns, the settings read from the environment (secrets
/// written literally masked), and the row each `rust` operator receives.
type ReadmeTables = (Vec<minijinja::Value>, Vec<minijinja::Value>, Vec<minijinja::Value>);

/// The tables of the README, see [`ReadmeTables`].
fn readme_tables(v: &Validated) -> Result<ReadmeTables, Error> {
    // With several outputs, each column is named with its table.
    let tables = v.model.output_tables();
    let columns: Vec<minijinja::Value> = v
        .plan
        .outputs
        .iter()
        .enumerate()
        .flat_map(|(i, o)| {
            let table = tables.get(i).filter(|t| t.name.is_some()).map(|t| t.table);
            o.output.iter().map(move |c| {
                let name = match table {
                    Some(table) => format!("{table}.{}", c.name),
                    None => c.name.clone(),
                };
                context! { name => name, ty => c.ty.clickhouse() }
            })
        })
        .collect();
    let settings: Vec<minijinja::Value> = main_fn::settings(&v.model)?
        .into_iter()
        .map(|(key, template, secret)| {
            // A secret written literally in pipeline.yaml is not repeated in the README.
            let shown = if secret && template.is_literal() {
                crate::contract::secret::shown_value(&key, template.as_str())
            } else {
                crate::contract::secret::mask_userinfo(&template.to_string())
            };
            context! { key => key, template => shown, secret => secret }
        })
        .collect();
    let rows: Vec<minijinja::Value> = v
        .plan
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Rust { function, index, row, .. } => Some(context! {
                function => function, index => index,
                fields => row.iter().map(|c| context! {
                    name => &c.name, ty => c.ty.to_string(), rust => rust_types::rust_ty_doc(&c.ty),
                }).collect::<Vec<_>>(),
            }),
            _ => None,
        })
        .collect();
    Ok((columns, settings, rows))
}

/// The whole `src/main.rs`, unformatted: the chain, `main`, then the chain's tests.
fn main_rs(inputs: &chain_impl::MainInputs<'_>) -> Result<proc_macro2::TokenStream, Error> {
    let chain_impl::ChainItems { items, tests } = chain_impl::emit(inputs)?;
    let main = main_fn::emit(inputs)?;
    Ok(quote::quote!(#items #main #tests))
}

/// Items that fail the build when a file the crate was generated from (pipeline.yaml, the
/// schema, user Rust files) has changed since: a const assertion comparing the original,
/// included by a path relative to `src/` (so the check survives moving the checkout as a
/// whole, as the Dockerfile's build does), with the copy in the crate. rustc tracks
/// `include_bytes!`, so an edit recompiles the crate and fails it.
fn freshness_check(v: &Validated, options: &GenOptions) -> proc_macro2::TokenStream {
    let src = options.crate_dir.join("src");
    let mut pairs = vec![(v.pipeline_path.clone(), "../pipeline.yaml".to_owned())];
    // The crate's copy of the schema file (`format::schema_copy`).
    pairs.push((v.schema_path.clone(), format!("../{}", format::schema_copy(v))));
    for file in &v.user_files {
        pairs.push((file.path.clone(), format!("user/user_{}.rs", file.index)));
    }
    let checks = pairs.iter().map(|(original, copy)| {
        let from = relative(&src, original).display().to_string();
        let name = original.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let message = format!(
            "{name} changed after this crate was generated from it: run `cargo xtask gen` (or `etl-gen gen`) again, which also validates it"
        );
        quote::quote!(assert!(same(include_bytes!(#from), include_bytes!(#copy)), #message);)
    });
    quote::quote! {
        /// The build fails when a file this crate was generated from has changed since.
        const _: () = {
            const fn same(a: &[u8], b: &[u8]) -> bool {
                if a.len() != b.len() {
                    return false;
                }
                let mut i = 0;
                while i < a.len() {
                    if a[i] != b[i] {
                        return false;
                    }
                    i += 1;
                }
                true
            }
            #(#checks)*
        };
    }
}

/// `p` against the working directory; no file system access.
fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_owned())
}

/// `to` relative to the directory `from`.
fn relative(from: &Path, to: &Path) -> PathBuf {
    let (from, to) = (absolute(from), absolute(to));
    let common = from.components().zip(to.components()).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in from.components().skip(common) {
        out.push("..");
    }
    for c in to.components().skip(common) {
        out.push(c);
    }
    out
}

fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn templates() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_keep_trailing_newline(true);
    let sources = [
        ("Cargo.toml.j2", include_str!("../../../templates/Cargo.toml.j2")),
        ("cargo-config.toml.j2", include_str!("../../../templates/cargo-config.toml.j2")),
        ("Dockerfile.j2", include_str!("../../../templates/Dockerfile.j2")),
        ("README.md.j2", include_str!("../../../templates/README.md.j2")),
    ];
    for (name, text) in sources {
        env.add_template(name, text).expect("templates parse");
    }
    env
}
