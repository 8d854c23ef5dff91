//! docs/METRICS.md matches the metrics the runtime registers (run `cargo xtask codegen`).

#[test]
fn metrics_doc_is_fresh() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/METRICS.md");
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        actual == etl_runtime::metrics_markdown(),
        "docs/METRICS.md is stale: run `cargo xtask codegen` and commit it"
    );
    for name in ["etl_queue_depth", "etl_backpressure_paused", "etl_source_lag_records", "etl_build_info"] {
        assert!(actual.contains(&format!("`{name}`")), "docs/METRICS.md names {name}");
    }
}
