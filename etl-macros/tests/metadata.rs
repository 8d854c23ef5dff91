//! The Kafka metadata fields in a generated chain: `_topic`, `_partition` and `_offset` read by a
//! filter and copied by `map`, fed records of several topics.

use etl_runtime::__private as rt;
use serde_json::{Value, json};

#[allow(dead_code, clippy::all)]
mod sink {
    etl_macros::pipeline!("metadata/pipeline.yaml");
}

/// The rows one record of `topic` produces, as JSON.
// The chain is a unit struct here only because this format keeps no state; `default()` is how
// every generated chain is made.
#[allow(clippy::default_constructed_unit_structs)]
fn rows(topic: &str, partition: i32, offset: i64) -> Vec<Value> {
    let mut chain = sink::Chain::default();
    let mut harness = rt::ChainHarness::new(1);
    let payload = format!(r#"{{"id": {offset}}}"#);
    let record =
        rt::Record { payload: Some(payload.as_bytes()), key: None, topic, partition, offset, timestamp_ms: Some(0) };
    let n = harness.process(&mut chain, &record).expect("the record is processed");
    let out = harness.take_output();
    let rows: Vec<Value> =
        out.split(|&b| b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).unwrap()).collect();
    assert_eq!(rows.len(), n as usize, "one NDJSON line per row");
    rows
}

#[test]
fn topic_is_read_by_expressions_and_copied_by_map() {
    assert_eq!(
        rows("orders-eu", 3, 41),
        [json!({"id": 41, "src": "orders-eu", "eu": true, "src_len": 9, "src_up": "ORDERS-EU", "part": 3, "off": 41})]
    );
    assert_eq!(
        rows("orders-us", 0, 7),
        [json!({"id": 7, "src": "orders-us", "eu": false, "src_len": 9, "src_up": "ORDERS-US", "part": 0, "off": 7})]
    );
}

#[test]
fn a_filter_on_topic_drops_its_records() {
    assert_eq!(rows("orders-skip", 0, 1), Vec::<Value>::new());
}
