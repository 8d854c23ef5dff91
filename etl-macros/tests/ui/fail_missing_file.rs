// A pipeline.yaml that cannot be read.
etl_macros::pipeline!("does_not_exist.yaml");
