//! The command line shared by `cargo xtask` and the `etl-gen` binary.
//!
//! Exit codes (docs/diagnostics.md): 0 ok; 1 invalid configuration (including YAML syntax errors and
//! a missing or invalid schema) or a failed build; 2 usage error or an unreadable
//! pipeline.yaml.

pub mod image;
mod migrate;
pub mod msk_token;
mod registry;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, ExitCode};

use clap::{Args, Subcommand};

use crate::emit::{self, GenOptions, GeneratedFile, RuntimeDep};
use crate::load::{Validated, read_lockfile, validate_file};
use crate::rules::Options;

/// The generator's sub-commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate pipeline.yaml and emit the pipeline crate.
    Gen(GenArgs),
    /// `gen`, then `cargo build --release`; prints the binary's path last.
    Build(BuildArgs),
    /// `build` statically linked, then write a minimal OCI image archive (no Docker
    /// daemon); prints `binary: <path>` (the static binary the image holds, to test before
    /// pushing), `image: <path>` and `digest: sha256:<hex>` last.
    Image(ImageArgs),
    /// Print a first pipeline.yaml for a schema (.avsc, .json or .proto): every key at its
    /// default, the sizing rule worked out beside its knobs; it passes `gen --check` as it is.
    Init(InitArgs),
    /// Print the AWS MSK IAM token a pipeline with `source.kafka.auth.aws_msk_iam` would send
    /// now (or `--at` a fixed time), from the same credential chain, for debugging an IAM setup.
    MskToken(msk_token::MskTokenArgs),
}

/// `init` arguments.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// The schema: Avro (.avsc), JSON Schema (.json) or Protobuf (.proto), relative to the
    /// directory the pipeline will be saved in (run `init` there).
    pub schema: String,
    /// The Kafka topic.
    #[arg(long)]
    pub topic: String,
    /// The ClickHouse table (the pipeline's name is made from it).
    #[arg(long)]
    pub table: String,
    /// ClickHouse shards (one replica URL each, from `CLICKHOUSE_URL`, `CLICKHOUSE_URL_2`, ...).
    #[arg(long, default_value_t = 1)]
    pub shards: u32,
    /// The Protobuf message each Kafka message holds (needed when the file declares several).
    #[arg(long)]
    pub message: Option<String>,
}

/// `gen` arguments.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("cluster_for").args(["replicated", "migrate"]).multiple(true)))]
pub struct GenArgs {
    /// The pipeline file.
    pub path: PathBuf,
    /// Validate only; write nothing.
    #[arg(long)]
    pub check: bool,
    /// Print the CREATE TABLE that fits the pipeline (and write nothing).
    #[arg(long)]
    pub ddl: bool,
    /// With --ddl: ReplicatedMergeTree tables for a cluster with Keeper or ZooKeeper, each created
    /// on every replica by one ON CLUSTER statement, instead of a MergeTree to create on each shard.
    #[arg(long, requires = "ddl")]
    pub replicated: bool,
    /// With --replicated: the cluster ON CLUSTER names (default: each server's `{cluster}` macro).
    /// With --migrate: add ON CLUSTER to the statements.
    #[arg(long, value_name = "NAME", requires = "cluster_for")]
    #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub cluster: Option<String>,
    /// Compare the live table with the columns the pipeline writes, on each shard (the replica
    /// URLs resolved from the environment) or on the server --against names, and print the
    /// statements that bring it to the pipeline; nothing when it fits. Exit 1 when a change is
    /// unsafe (a type change, a computed column, a column without a default the pipeline does not
    /// write). Writes nothing.
    #[arg(long, conflicts_with_all = ["ddl", "memory"])]
    pub migrate: bool,
    /// With --check: a Confluent-API schema registry (`${VAR}` resolved from the environment,
    /// credentials in the URL's user info); fails when any registered version of the subject
    /// cannot be read by the reader schema under Avro's schema resolution.
    #[arg(long, value_name = "URL", requires = "check")]
    pub registry: Option<String>,
    /// With --registry: the subject (default: `<topic>-value`).
    #[arg(long, value_name = "SUBJECT", requires = "registry")]
    pub subject: Option<String>,
    /// With --migrate: the one ClickHouse server (`http://host:8123`) to compare.
    #[arg(long, value_name = "URL", requires = "migrate")]
    pub against: Option<String>,
    /// Print the bound on the pipeline's memory (and write nothing); needs --partitions.
    #[arg(long, requires = "partitions")]
    pub memory: bool,
    /// The number of partitions one instance owns, for --memory.
    #[arg(long)]
    pub partitions: Option<u64>,
    /// Where to write the crate (default: <target dir>/etl/<name>/).
    #[arg(short = 'o', long = "out")]
    pub out: Option<PathBuf>,
    /// Report a broken sizing rule as a warning. For benchmarks that measure the collapse
    /// the rule prevents; never for production.
    #[arg(long)]
    pub allow_unsafe_sizing: bool,
    /// Use etl-runtime from this git repository instead of a local checkout.
    #[arg(long)]
    pub runtime_git: Option<String>,
    /// The git revision for --runtime-git.
    #[arg(long, requires = "runtime_git")]
    pub runtime_rev: Option<String>,
    /// Compile the runtime's `ETL_FAULT` kill points into the binary. For the project's own
    /// fault-injection tests; a binary built with it kills itself on request. `image` refuses it.
    #[arg(long, hide = true)]
    pub fault_injection: bool,
}

/// `build` arguments.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The `gen` arguments.
    #[command(flatten)]
    pub gen_args: GenArgs,
    /// Link the binary statically for this machine's `<arch>-unknown-linux-gnu`: the binary
    /// `image` packs, built the same way (and so sharing its compiled dependencies).
    #[arg(long = "static")]
    pub static_link: bool,
}

/// `image` arguments.
#[derive(Debug, Args)]
pub struct ImageArgs {
    /// The `gen` arguments (`-o/--out` is the crate directory, as for `gen`).
    #[command(flatten)]
    pub gen_args: GenArgs,
    /// The image tag, or a full reference (`registry/repo:tag`); default: the config hash.
    /// A bare tag names the image `localhost/<name>:<tag>`.
    #[arg(long)]
    pub tag: Option<String>,
    /// Where to write the archive (default: <target dir>/etl/<name>.oci.tar).
    #[arg(long)]
    pub archive: Option<PathBuf>,
}

/// Runs a sub-command; returns the process exit code.
pub fn run(command: Command) -> ExitCode {
    match command {
        Command::Gen(args) => match gen_command(&args) {
            Ok(_) => ExitCode::SUCCESS,
            Err(code) => code,
        },
        Command::Build(args) => build_command(&args),
        Command::Init(args) => init_command(&args),
        Command::MskToken(args) => msk_token::run(&args),
        Command::Image(args) => match image(&args) {
            Ok(Imaged { archive: path, digest, binary }) => {
                println!("binary: {}", binary.display());
                println!("image: {}", path.display());
                println!("digest: {digest}");
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
    }
}

/// `init`: the pipeline on stdout, or why there is none on stderr (exit 1; 2 for a schema file
/// `init` cannot place).
fn init_command(args: &InitArgs) -> ExitCode {
    let request = crate::init::InitRequest {
        schema: &args.schema,
        topic: &args.topic,
        table: &args.table,
        shards: args.shards,
        message: args.message.as_deref(),
        base_dir: Path::new("."),
    };
    match crate::init::init(&request) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            match error {
                crate::init::InitError::UnknownExtension(_) | crate::init::InitError::Read { .. } => ExitCode::from(2),
                _ => ExitCode::from(1),
            }
        }
    }
}

/// Validates; on success returns the pipeline, else prints diagnostics and the exit code.
fn validate(args: &GenArgs) -> Result<Validated, ExitCode> {
    let options = Options { allow_unsafe_sizing: args.allow_unsafe_sizing };
    let outcome = validate_file(&args.path, &options).map_err(|e| {
        eprintln!("error: {e}");
        eprintln!(
            "help: pass the path of a pipeline.yaml, e.g. `cargo xtask gen examples/quickstart/pipeline.yaml --check`"
        );
        ExitCode::from(2)
    })?;
    let rendered = outcome.report.render();
    if !rendered.is_empty() {
        let _ = std::io::stderr().write_all(rendered.as_bytes());
    }
    outcome.pipeline.ok_or(ExitCode::from(1))
}

/// Where the crate goes and how it reaches etl-runtime.
struct Layout {
    crate_dir: PathBuf,
    target_dir: PathBuf,
    runtime: RuntimeDep,
    lockfile: PathBuf,
}

fn layout(args: &GenArgs, name: &str) -> Result<Layout, String> {
    // Inside a checkout of this repository (or any workspace with etl-runtime), the crate
    // uses that etl-runtime by path and that workspace's target directory.
    let metadata = cargo_metadata::MetadataCommand::new().no_deps().exec().ok();
    let in_workspace = metadata.as_ref().and_then(|m| {
        m.packages.iter().find(|p| p.name.as_str() == "etl-runtime").map(|p| {
            let dir = p.manifest_path.parent().expect("a manifest has a directory").as_std_path().to_owned();
            (dir, m.target_directory.as_std_path().to_owned(), m.workspace_root.as_std_path().join("Cargo.lock"))
        })
    });
    // Otherwise (an installed etl-gen), the checkout it was installed from.
    let installed_from = Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_owned);
    let (runtime_dir, target_dir, lockfile) = match in_workspace {
        Some(found) => found,
        None => {
            let root = installed_from.ok_or("cannot locate etl-runtime")?;
            let target = metadata
                .map(|m| m.target_directory.as_std_path().to_owned())
                .unwrap_or_else(|| PathBuf::from("target"));
            (root.join("etl-runtime"), absolute(&target), root.join("Cargo.lock"))
        }
    };
    let runtime = match &args.runtime_git {
        Some(url) => RuntimeDep::Git { url: url.clone(), rev: args.runtime_rev.clone() },
        None if runtime_dir.join("Cargo.toml").exists() => RuntimeDep::Path(runtime_dir),
        None => {
            return Err(format!(
                "etl-runtime is not at {}; pass --runtime-git URL (and --runtime-rev REV)",
                runtime_dir.display()
            ));
        }
    };
    let crate_dir = args.out.clone().map(|o| absolute(&o)).unwrap_or_else(|| target_dir.join("etl").join(name));
    Ok(Layout { crate_dir, target_dir, runtime, lockfile })
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_owned())
}

fn gen_command(args: &GenArgs) -> Result<(Validated, Layout), ExitCode> {
    let pipeline = validate(args)?;
    let m = &pipeline.model;
    if args.check {
        // With `outputs`, the tables too: `3 outputs (orders, lines, refunds) of 2 shards`.
        let outputs = match m.outputs.len() {
            0 => String::new(),
            n => format!(
                ", {n} output{} ({})",
                if n == 1 { "" } else { "s" },
                m.outputs.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        };
        println!(
            "ok: {} is valid (pipeline `{}`, {} source, {} sink with {} shard{}{outputs})",
            args.path.display(),
            m.pipeline.name,
            match m.source {
                crate::model::Source::Kafka(_) => "kafka",
                crate::model::Source::Datagen(_) => "datagen",
            },
            m.sink.kind(),
            m.sink.shard_count(),
            if m.sink.shard_count() == 1 { "" } else { "s" },
        );
    }
    if let Some(url) = &args.registry {
        let code = registry::run(&pipeline, url, args.subject.as_deref());
        if code != ExitCode::SUCCESS {
            return Err(code);
        }
    }
    if args.migrate {
        let code = migrate::run(&pipeline, args.against.as_deref(), args.cluster.as_deref());
        if code != ExitCode::SUCCESS {
            return Err(code);
        }
    }
    if args.ddl {
        let replication = if args.replicated {
            crate::ddl::Replication::Replicated { cluster: args.cluster.clone() }
        } else {
            crate::ddl::Replication::PerShard
        };
        match crate::ddl::create_tables(&pipeline, &replication) {
            Ok(sql) => print!("{sql}"),
            Err(e) => {
                eprintln!("error: {e}");
                return Err(ExitCode::from(1));
            }
        }
    }
    if let (true, Some(partitions)) = (args.memory, args.partitions) {
        print!("{}", crate::memory::render(&pipeline, partitions));
    }
    let layout = layout(args, &m.pipeline.name).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(1)
    })?;
    if args.check || args.ddl || args.memory || args.migrate {
        return Ok((pipeline, layout));
    }
    let lockfile = read_lockfile(&layout.lockfile).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(1)
    })?;
    let options = GenOptions {
        source_name: args.path.display().to_string(),
        crate_dir: layout.crate_dir.clone(),
        target_dir: layout.target_dir.clone(),
        runtime: layout.runtime.clone(),
        lockfile,
        bench: false,
        fault_injection: args.fault_injection,
    };
    let files = emit::generate(&pipeline, &options).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(1)
    })?;
    write(&layout.crate_dir, &files).map_err(|e| {
        eprintln!("error: writing {}: {e}", layout.crate_dir.display());
        ExitCode::from(1)
    })?;
    eprintln!("generated {} (config {})", layout.crate_dir.display(), pipeline.config_hash);
    Ok((pipeline, layout))
}

/// Writes `files` under `dir`, replacing what a previous generation wrote.
///
/// A file whose contents did not change keeps its modification time, so cargo does not
/// rebuild an unchanged crate (`build` of an unchanged pipeline is then a no-op); files a
/// previous generation wrote under `src/` and `benches/` that this one does not are removed.
pub fn write(dir: &Path, files: &[GeneratedFile]) -> std::io::Result<()> {
    let keep: std::collections::HashSet<PathBuf> = files.iter().map(|f| dir.join(&f.path)).collect();
    for owned in ["src", "benches"] {
        let owned = dir.join(owned);
        remove_stale(&owned, &keep)?;
        if std::fs::read_dir(&owned).is_ok_and(|mut entries| entries.next().is_none()) {
            std::fs::remove_dir(&owned)?;
        }
    }
    for f in files {
        let path = dir.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        if std::fs::read(&path).ok().as_deref() != Some(&f.contents[..]) {
            std::fs::write(&path, &f.contents)?;
        }
    }
    Ok(())
}

/// Removes every file under `dir` that is not in `keep` (and directories left empty).
fn remove_stale(dir: &Path, keep: &std::collections::HashSet<PathBuf>) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let path = entry?.path();
        if path.is_dir() {
            remove_stale(&path, keep)?;
            if std::fs::read_dir(&path)?.next().is_none() {
                std::fs::remove_dir(&path)?;
            }
        } else if !keep.contains(&path) {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// What `image` made.
#[derive(Debug)]
pub struct Imaged {
    /// The OCI archive.
    pub archive: PathBuf,
    /// Its manifest digest, `sha256:<hex>`.
    pub digest: String,
    /// The statically linked binary the image holds.
    pub binary: PathBuf,
}

/// `image`: a static build and its OCI archive.
pub fn image(args: &ImageArgs) -> Result<Imaged, ExitCode> {
    if args.gen_args.fault_injection {
        eprintln!("error: --fault-injection is for the project's own tests; an image never carries fault hooks");
        return Err(ExitCode::from(2));
    }
    let fail = |message: String| {
        eprintln!("error: {message}");
        ExitCode::from(1)
    };
    if std::env::consts::OS != "linux" {
        return Err(fail("`image` builds a Linux binary and must run on Linux".into()));
    }
    // Read before the (long) build, so a machine without CA certificates fails at once.
    let ca_path = Path::new("/").join(image::CA_BUNDLE_PATH);
    let ca_bundle = std::fs::read(&ca_path).map_err(|e| {
        fail(format!(
            "reading the CA bundle {}: {e} (install it: `apt-get install ca-certificates`)",
            ca_path.display()
        ))
    })?;
    let (pipeline, layout, binary_path) = cargo_build(&args.gen_args, Some(&static_target()))?;
    let name = &pipeline.model.pipeline.name;
    let binary = std::fs::read(&binary_path).map_err(|e| fail(format!("reading {}: {e}", binary_path.display())))?;
    let hash = pipeline.config_hash.clone();
    let reference = image::reference(name, args.tag.as_deref().unwrap_or(&hash));
    // The admin port as deployed by default (`${ADMIN_LISTEN:-0.0.0.0:9464}` → 9464); a
    // port chosen at run time (0, or a variable without default) is not declared.
    let admin_port = pipeline
        .model
        .admin
        .listen
        .resolve(|_| None)
        .ok()
        .and_then(|listen| listen.rsplit(':').next().and_then(|p| p.parse::<u16>().ok()))
        .filter(|&port| port != 0);
    let labels = [
        ("org.opencontainers.image.title", name.clone()),
        ("org.opencontainers.image.version", hash.clone()),
        ("io.etl-rs.pipeline", name.clone()),
        ("io.etl-rs.config-hash", hash.clone()),
        ("io.etl-rs.version", emit::VERSION.to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    // SOURCE_DATE_EPOCH (reproducible-builds.org) when set, else 1970: never the clock.
    let epoch = std::env::var("SOURCE_DATE_EPOCH").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    let spec = image::ImageSpec {
        binary: &binary,
        name,
        reference: &reference,
        ca_bundle: &ca_bundle,
        admin_port,
        labels,
        epoch,
    };
    let image = image::write(&spec).map_err(|e| fail(e.to_string()))?;
    let out = args
        .archive
        .as_ref()
        .map(|p| absolute(p))
        .unwrap_or_else(|| layout.target_dir.join("etl").join(format!("{name}.oci.tar")));
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).map_err(|e| fail(format!("creating {}: {e}", dir.display())))?;
    }
    std::fs::write(&out, &image.archive).map_err(|e| fail(format!("writing {}: {e}", out.display())))?;
    eprintln!("image {reference} ({} bytes, config {})", image.archive.len(), image.config_digest);
    Ok(Imaged { archive: out, digest: image.manifest_digest, binary: binary_path })
}

fn build_command(args: &BuildArgs) -> ExitCode {
    let built = if args.static_link {
        if std::env::consts::OS != "linux" {
            eprintln!("error: `build --static` builds a Linux binary and must run on Linux");
            return ExitCode::from(1);
        }
        cargo_build(&args.gen_args, Some(&static_target())).map(|(_, _, binary)| binary)
    } else {
        build(&args.gen_args)
    };
    match built {
        Ok(binary) => {
            println!("{}", binary.display());
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// `gen`, then `cargo build --release` in the shared target directory; returns the binary.
pub fn build(args: &GenArgs) -> Result<PathBuf, ExitCode> {
    cargo_build(args, None).map(|(_, _, binary)| binary)
}

/// The target a static binary is built for: this machine's architecture with glibc.
fn static_target() -> String {
    format!("{}-unknown-linux-gnu", std::env::consts::ARCH)
}

/// The cargo that runs us, without the variables `cargo run` set for this process.
///
/// `cargo xtask build` runs inside `cargo run`, which exports `CARGO_MANIFEST_DIR`,
/// `CARGO_PKG_*` and the like; passed on, they enter the fingerprints of dependencies' build
/// scripts (ring's, for one), so a build by `cargo xtask build` and one by plain `cargo build`
/// in the same target directory would rebuild each other's dependencies.
fn cargo_command() -> Process {
    let mut command = Process::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_MANIFEST_")
            || matches!(name, "CARGO_BIN_NAME" | "CARGO_CRATE_NAME" | "CARGO_PRIMARY_PACKAGE")
        {
            command.env_remove(name);
        }
    }
    command
}

/// `build` with `static_target` = Some(triple): a statically linked binary for that target.
fn cargo_build(args: &GenArgs, static_target: Option<&str>) -> Result<(Validated, Layout, PathBuf), ExitCode> {
    if args.check || args.ddl || args.memory || args.migrate {
        eprintln!("error: `build` and `image` do not take --check, --ddl, --memory or --migrate; use `gen`");
        return Err(ExitCode::from(2));
    }
    let (pipeline, layout) = gen_command(args)?;
    let mut command = cargo_command();
    command
        .args(["build", "--release", "--manifest-path"])
        .arg(layout.crate_dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &layout.target_dir);
    let mut out_dir = layout.target_dir.clone();
    if let Some(target) = static_target {
        // An explicit --target keeps build scripts and proc macros dynamically linked
        // (RUSTFLAGS then applies to the target only); glibc's static NSS needs the
        // /etc/nsswitch.conf and /etc/hosts the image ships.
        let rustflags = std::env::var("RUSTFLAGS").unwrap_or_default();
        // librdkafka's TLS comes from the system OpenSSL: link its static archives too.
        command
            .args(["--target", target])
            .env("RUSTFLAGS", format!("{rustflags} -C target-feature=+crt-static").trim_start())
            .env("OPENSSL_STATIC", "1");
        out_dir = out_dir.join(target);
    }
    match command.status() {
        Ok(s) if s.success() => {
            let binary = out_dir.join("release").join(&pipeline.model.pipeline.name);
            Ok((pipeline, layout, binary))
        }
        Ok(s) => {
            eprintln!("error: cargo build of {} failed ({s})", layout.crate_dir.display());
            Err(ExitCode::from(1))
        }
        Err(e) => {
            eprintln!("error: starting cargo: {e}");
            Err(ExitCode::from(1))
        }
    }
}
