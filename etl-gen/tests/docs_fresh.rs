//! The generated reference docs in docs/ match the code (run `cargo xtask codegen`).

use std::path::Path;

#[test]
fn generated_docs_are_fresh() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
    let files = [
        ("configuration.md", etl_gen::docs::configuration_markdown()),
        ("diagnostics.md", etl_gen::docs::diagnostics_markdown()),
        ("pipeline.schema.json", etl_gen::docs::json_schema()),
    ];
    for (name, expected) in files {
        let actual = std::fs::read_to_string(docs.join(name)).unwrap_or_default();
        assert!(actual == expected, "docs/{name} is stale: run `cargo xtask codegen` and commit the result");
    }
}
