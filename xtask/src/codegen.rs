//! `cargo xtask codegen`: writes the docs generated from code.

use anyhow::{Context, bail};

/// `codegen` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct CodegenArgs {
    /// Fail instead of writing when a file is stale.
    #[arg(long)]
    check: bool,
}

/// The generated files, relative to the workspace root, and their generators.
pub(crate) fn generated() -> Vec<(&'static str, String)> {
    vec![
        ("docs/configuration.md", etl_gen::docs::configuration_markdown()),
        ("docs/diagnostics.md", etl_gen::docs::diagnostics_markdown()),
        ("docs/pipeline.schema.json", etl_gen::docs::json_schema()),
        ("docs/METRICS.md", etl_runtime::metrics_markdown()),
    ]
}

pub(crate) fn run(args: &CodegenArgs) -> anyhow::Result<()> {
    let root = crate::workspace::root();
    let mut stale = Vec::new();
    for (path, text) in generated() {
        let file = root.join(path);
        let current = std::fs::read_to_string(&file).unwrap_or_default();
        if current == text {
            continue;
        }
        if args.check {
            stale.push(path);
        } else {
            std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
            println!("wrote {path}");
        }
    }
    if !stale.is_empty() {
        bail!("stale generated files: {}; run `cargo xtask codegen`", stale.join(", "));
    }
    Ok(())
}
