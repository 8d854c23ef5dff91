//! The `etl-gen` command line.
fn main() {}
