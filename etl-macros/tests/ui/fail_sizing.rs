// A budget that breaks the sizing rule fails a plain `cargo build`.
etl_macros::pipeline!("fail_sizing.yaml");
