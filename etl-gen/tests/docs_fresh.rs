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

/// Every test docs/INVARIANTS.md cites exists, so the document cannot point at a renamed or
/// deleted test.
#[test]
fn invariants_cite_existing_tests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join("docs/INVARIANTS.md")).unwrap();
    let mut cited = 0;
    for quoted in text.split('`').skip(1).step_by(2) {
        let Some((file, name)) = quoted.split_once("::") else { continue };
        if !file.ends_with(".rs") {
            continue;
        }
        let name = name.rsplit("::").next().unwrap();
        let source =
            std::fs::read_to_string(root.join(file)).unwrap_or_else(|_| panic!("{file} cited in INVARIANTS.md"));
        assert!(source.contains(&format!("fn {name}(")), "{file} has no test `{name}` (cited in INVARIANTS.md)");
        cited += 1;
    }
    assert!(cited > 20, "expected the invariants to cite their tests, found {cited}");
}
