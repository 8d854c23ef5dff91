//! Fuzzes the generated protobuf decoder (the protobuf/pipeline.yaml chain): any bytes are a row or a record
//! error, never a panic, a hang or an out-of-bounds read (the sanitizer's job).
#![no_main]

use etl_runtime::__private as rt;
use libfuzzer_sys::fuzz_target;

#[allow(dead_code, unused, clippy::all)]
mod sink {
    etl_macros::pipeline!("../../etl-gen/tests/pipelines/protobuf/pipeline.yaml");
}

fuzz_target!(|data: &[u8]| {
    let mut harness = rt::ChainHarness::new(1);
    let record = rt::Record { payload: Some(data), key: None, topic: "orders", partition: 0, offset: 0, timestamp_ms: Some(0) };
    let _ = harness.process(&mut sink::Chain::default(), &record);
});
