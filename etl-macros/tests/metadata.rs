//! The Kafka metadata fields in a generated chain: `_topic`, `_partition` and `_offset` read by a
//! filter and copied by `map`, fed records of several topics; `header()`, `header_str()` and
//! `_headers` fed records with repeated, null and binary headers.

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
    rows_with(topic, partition, offset, &[]).expect("the record is processed")
}

/// The rows of one record of `orders-eu` with `headers`, or its record error.
#[allow(clippy::default_constructed_unit_structs)]
fn rows_with(topic: &str, partition: i32, offset: i64, headers: &[rt::OwnedHeader]) -> Result<Vec<Value>, String> {
    let mut chain = sink::Chain::default();
    let mut harness = rt::ChainHarness::new(1);
    let payload = format!(r#"{{"id": {offset}}}"#);
    let record = rt::Record {
        payload: Some(payload.as_bytes()),
        key: None,
        topic,
        partition,
        offset,
        timestamp_ms: Some(0),
        headers: rt::Headers::owned(headers),
    };
    let n = harness.process(&mut chain, &record).map_err(|e| e.to_string())?;
    let out = harness.take_output();
    let rows: Vec<Value> =
        out.split(|&b| b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).unwrap()).collect();
    assert_eq!(rows.len(), n as usize, "one NDJSON line per row");
    Ok(rows)
}

/// `row` with the columns a record without headers gives.
fn without_headers(mut row: Value) -> Value {
    let fields = row.as_object_mut().expect("a row is an object");
    for (k, v) in [
        ("trace", json!(null)),
        ("tenant", json!(null)),
        ("traced", json!(false)),
        ("headers", json!({})),
        ("n_headers", json!(0)),
        ("tenant_in_map", json!(null)),
        ("by_tenant", json!(null)),
    ] {
        fields.insert(k.into(), v);
    }
    row
}

fn header(name: &str, value: Option<&[u8]>) -> rt::OwnedHeader {
    (name.as_bytes().into(), value.map(Into::into))
}

#[test]
fn topic_is_read_by_expressions_and_copied_by_map() {
    assert_eq!(
        rows("orders-eu", 3, 41),
        [without_headers(
            json!({"id": 41, "src": "orders-eu", "eu": true, "src_len": 9, "src_up": "ORDERS-EU", "part": 3, "off": 41})
        )]
    );
    assert_eq!(
        rows("orders-us", 0, 7),
        [without_headers(
            json!({"id": 7, "src": "orders-us", "eu": false, "src_len": 9, "src_up": "ORDERS-US", "part": 0, "off": 7})
        )]
    );
}

#[test]
fn headers_are_read_last_one_wins_and_the_map_holds_each_name_once() {
    let headers = [
        header("trace", Some(b"t-1")),
        header("tenant", Some("zürich".as_bytes())),
        header("bin", Some(&[0x00, 0xff, 0x10])),
        header("trace", Some(b"t-2")),
        header("empty", None),
        header("zürich", Some(b"z")),
    ];
    let rows = rows_with("orders-eu", 1, 5, &headers).expect("the record is processed");
    let row = &rows[0];
    assert_eq!(row["trace"], json!("t-2"), "header() reads the last header of the name");
    assert_eq!(row["tenant"], json!("zürich"));
    assert_eq!(row["traced"], json!(true));
    assert_eq!(
        row["headers"],
        json!({"trace": "t-2", "tenant": "zürich", "bin": "\u{0}\u{fffd}\u{10}", "empty": "", "zürich": "z"})
    );
    assert_eq!(row["n_headers"], json!(5), "repeated names count once in the map");
    assert_eq!(row["tenant_in_map"], json!("zürich"), "m['key'] reads a map entry");
    assert_eq!(row["by_tenant"], json!("z"), "the key may be any expression of the key's type");
}

#[test]
fn a_tenant_header_that_is_not_utf8_is_a_record_error_naming_it() {
    let headers = [header("tenant", Some(&[0xc3, 0x28]))];
    let error = rows_with("orders-eu", 0, 1, &headers).expect_err("header_str() refuses bytes that are not text");
    assert!(error.contains("header `tenant` is not UTF-8"), "{error}");
    // The same bytes read by header() are fine: only header_str() promises text.
    let headers = [header("trace", Some(&[0xc3, 0x28]))];
    let rows = rows_with("orders-eu", 0, 1, &headers).expect("header() reads any bytes");
    assert_eq!(rows[0]["trace"], json!("\u{fffd}("));
}

#[test]
fn a_filter_on_topic_drops_its_records() {
    assert_eq!(rows("orders-skip", 0, 1), Vec::<Value>::new());
}
