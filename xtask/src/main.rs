//! `cargo xtask`: the etl-rs workflow.
fn main() {}
