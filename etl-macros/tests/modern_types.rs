//! ClickHouse's newer column types end to end against the real server: Avro's time and
//! local-timestamp logical types, JSON Schema's `ipv4`/`ipv6`, enums as `Enum8` columns
//! (`sink.clickhouse.enum: enum`), Avro unions as Variants, Kafka headers as columns, nested records as tuples
//! (`nested: tuple`) or flattened, read as `a.b` either way, and Protobuf maps that keep their
//! key types, read by `m[key]` and `length(m)`. Each test writes records, runs
//! the generated chain on them, inserts its rows through the ClickHouse sink into the table
//! `gen --ddl` creates, in both insert formats, and compares the table with what it wrote.

use std::path::Path;
use std::time::Duration;

use etl_runtime::__private as rt;
use etl_runtime::{ClickhouseSink, ClickhouseSinkConfig, InsertFormat};
use serde_json::{Value, json};

#[allow(dead_code, clippy::all)]
mod avro_chain {
    etl_macros::pipeline!("modern_types/avro.yaml");
}

#[allow(dead_code, clippy::all)]
mod json_chain {
    etl_macros::pipeline!("modern_types/json.yaml");
}

#[allow(dead_code, clippy::all)]
mod protobuf_chain {
    etl_macros::pipeline!("modern_types/protobuf.yaml");
}

#[allow(dead_code, clippy::all)]
mod events_chain {
    etl_macros::pipeline!("../../examples/events_with_json/pipeline.yaml");
}

#[path = "../../etl-runtime/tests/support/clickhouse.rs"]
mod support;

use support::{Row, clickhouse_urls, exec, run_pipeline, runtime_config, select, sink_config, unique_table};

const FORMATS: [InsertFormat; 2] = [InsertFormat::Native, InsertFormat::RowBinary];

/// The rows `chain` makes of one record (`payload` with `headers`, at `offset`) and their
/// encoding, or its record error.
fn process(
    chain: &mut impl etl_runtime::Chain,
    offset: i64,
    payload: &[u8],
    headers: &[rt::OwnedHeader],
) -> Result<(u32, Vec<u8>), String> {
    let mut harness = rt::ChainHarness::new(1);
    let record = rt::Record {
        payload: Some(payload),
        key: None,
        topic: "events",
        partition: 0,
        offset,
        timestamp_ms: Some(0),
        headers: rt::Headers::owned(headers),
    };
    let n = harness.process(chain, &record).map_err(|e| e.to_string())?;
    Ok((n, harness.take_output()))
}

/// The RowBinary row `chain` makes of each payload (with its headers).
fn chain_rows(chain: &mut impl etl_runtime::Chain, records: &[(Vec<u8>, Vec<rt::OwnedHeader>)]) -> Vec<Row> {
    records
        .iter()
        .enumerate()
        .map(|(offset, (payload, headers))| {
            let (n, row) =
                process(chain, offset as i64, payload, headers).unwrap_or_else(|e| panic!("record {offset}: {e}"));
            assert_eq!(n, 1, "one row per record");
            (None, row)
        })
        .collect()
}

/// Creates the table `gen --ddl` prints for `pipeline` (under a fresh name), inserts `rows`
/// through the sink in `format`, and returns the table ordered by its first column (the id), as
/// ClickHouse renders it.
fn land(pipeline: &str, rows: &[Row], format: InsertFormat) -> Vec<Value> {
    let (url, _) = clickhouse_urls();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(pipeline);
    let outcome = etl_gen::validate_file(&path, &etl_gen::Options::default()).expect("the pipeline reads");
    let validated = outcome.pipeline.unwrap_or_else(|| panic!("{pipeline} is valid: {:?}", outcome.report));
    let ddl = etl_gen::ddl::create_table(&validated).expect("a ClickHouse pipeline has DDL");
    let named = validated.model.output_tables()[0].table.to_owned();
    let table = unique_table(&named);
    for statement in etl_gen::ddl::statements(&ddl) {
        exec(&url, &statement.replace(&format!("`{named}`"), &format!("`{table}`")));
    }
    // The sink's columns are the table's: its start-up check then compares the two, and the
    // insert names them.
    let columns: Vec<(String, String)> = select(
        &url,
        &format!(
            "SELECT name, type FROM system.columns WHERE database = 'default' AND table = '{table}' ORDER BY position"
        ),
    )
    .into_iter()
    .map(|c| (c["name"].as_str().unwrap().to_owned(), c["type"].as_str().unwrap().to_owned()))
    .collect();
    let borrowed: Vec<(&str, &str)> = columns.iter().map(|(n, t)| (n.as_str(), t.as_str())).collect();
    let sink = ClickhouseSink::new(ClickhouseSinkConfig { format, ..sink_config(&[&url], &table, &borrowed) }).unwrap();
    let end = run_pipeline(runtime_config(1), sink, vec![rows.to_vec()], None, Duration::from_secs(30));
    assert_eq!(end.fatal, None, "{pipeline} in {format:?}");
    let landed = select(&url, &format!("SELECT * FROM default.`{table}` ORDER BY 1"));
    exec(&url, &format!("DROP TABLE default.`{table}`"));
    landed
}

#[test]
fn avro_times_local_timestamps_enums_headers_and_tuples_land_as_written() {
    use rt::apache_avro::{Schema, to_avro_datum, types::Value as A};
    let schema = Schema::parse_str(include_str!("modern_types/events.avsc")).unwrap();
    let level = |i: u32| A::Enum(i, ["debug", "info", "warn"][i as usize].to_owned());
    let record = |fields: Vec<(&str, A)>| {
        to_avro_datum(&schema, A::Record(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())).unwrap()
    };
    let header =
        |name: &str, value: Option<&[u8]>| -> rt::OwnedHeader { (name.as_bytes().into(), value.map(Into::into)) };
    let records = vec![
        (
            record(vec![
                ("id", A::Long(1)),
                ("level", level(2)),
                ("previous", A::Union(1, Box::new(level(0)))),
                ("seen", A::Array(vec![level(0), level(1), level(2)])),
                ("at_local", A::LocalTimestampMillis(1_709_210_096_789)), // 2024-02-29 12:34:56.789
                ("at_local_us", A::LocalTimestampMicros(-1)),
                ("opens", A::TimeMillis(32_400_000)), // 09:00
                ("closes", A::Union(1, Box::new(A::TimeMicros(86_399_999_999)))),
                (
                    "address",
                    A::Record(vec![
                        ("city".into(), A::String("Oslo".into())),
                        (
                            "geo".into(),
                            A::Record(vec![("lat".into(), A::Double(59.9)), ("lon".into(), A::Double(10.7))]),
                        ),
                    ]),
                ),
                (
                    "billing",
                    A::Union(
                        1,
                        Box::new(A::Record(vec![
                            ("street".into(), A::String("Main 1".into())),
                            ("zip".into(), A::Int(150)),
                        ])),
                    ),
                ),
                (
                    "items",
                    A::Array(vec![A::Record(vec![("sku".into(), A::String("a".into())), ("qty".into(), A::Int(2))])]),
                ),
                ("doc", A::String(r#"{"a": {"b": [1, 2]}, "c": "d"}"#.into())),
                ("maybe_doc", A::Union(1, Box::new(A::String("{}".into())))),
                ("value", A::Union(2, Box::new(A::Long(7)))),
                ("either", A::Union(0, Box::new(A::String("s".into())))),
                (
                    "values",
                    A::Array(vec![A::Union(0, Box::new(A::Long(1))), A::Union(1, Box::new(A::String("two".into())))]),
                ),
            ]),
            vec![header("tenant", Some(b"acme")), header("trace", Some(b"t-1")), header("tenant", Some(b"beta"))],
        ),
        (
            record(vec![
                ("id", A::Long(2)),
                ("level", level(0)),
                ("previous", A::Union(0, Box::new(A::Null))),
                ("seen", A::Array(vec![])),
                ("at_local", A::LocalTimestampMillis(0)),
                ("at_local_us", A::LocalTimestampMicros(1_000_001)),
                ("opens", A::TimeMillis(0)),
                ("closes", A::Union(0, Box::new(A::Null))),
                (
                    "address",
                    A::Record(vec![
                        ("city".into(), A::String("".into())),
                        (
                            "geo".into(),
                            A::Record(vec![("lat".into(), A::Double(-0.5)), ("lon".into(), A::Double(0.0))]),
                        ),
                    ]),
                ),
                ("billing", A::Union(0, Box::new(A::Null))),
                ("items", A::Array(vec![])),
                ("doc", A::String(r#"{"x": true}"#.into())),
                ("maybe_doc", A::Union(0, Box::new(A::Null))),
                ("value", A::Union(1, Box::new(A::String("text".into())))),
                ("either", A::Union(1, Box::new(A::Long(-3)))),
                ("values", A::Array(vec![])),
            ]),
            vec![header("empty", None)],
        ),
    ];
    #[allow(clippy::default_constructed_unit_structs)]
    let rows = chain_rows(&mut avro_chain::Chain::default(), &records);
    // A json string that is not a JSON object is a record error.
    let mut bad = records[1].0.clone();
    let good = br#"{"x": true}"#;
    let at = bad.windows(good.len()).position(|w| w == good).expect("the doc's text");
    bad[at] = b'[';
    #[allow(clippy::default_constructed_unit_structs)]
    let error = process(&mut avro_chain::Chain::default(), 0, &bad, &[]).expect_err("not a JSON object");
    assert!(error.contains("not a JSON object"), "{error}");
    let expected = vec![
        json!({
            "id": 1, "level": "warn", "previous": "debug", "seen": ["debug", "info", "warn"],
            "at_local": "2024-02-29 12:34:56.789", "at_local_us": "1969-12-31 23:59:59.999999",
            "opens": "09:00:00.000", "closes": "23:59:59.999999",
            "tenant": "beta", "headers": {"tenant": "beta", "trace": "t-1"},
            "address": {"city": "Oslo", "geo": {"lat": 59.9, "lon": 10.7}}, "billing": {"street": "Main 1", "zip": 150},
            "items": [{"sku": "a", "qty": 2}], "city_upper": "OSLO", "lat": 59.9, "street": "Main 1",
            "doc": {"a": {"b": [1, 2]}, "c": "d"}, "maybe_doc": {},
            "value": 7, "either": "s", "values": [1, "two"], "value_long": 7, "value_text": null,
        }),
        json!({
            "id": 2, "level": "debug", "previous": null, "seen": [],
            "at_local": "1970-01-01 00:00:00.000", "at_local_us": "1970-01-01 00:00:01.000001",
            "opens": "00:00:00.000", "closes": null,
            "tenant": null, "headers": {"empty": ""},
            "address": {"city": "", "geo": {"lat": -0.5, "lon": 0}}, "billing": {"street": null, "zip": null},
            "items": [], "city_upper": "", "lat": -0.5, "street": null,
            "doc": {"x": true}, "maybe_doc": null,
            "value": "text", "either": -3, "values": [], "value_long": null, "value_text": "TEXT",
        }),
    ];
    for format in FORMATS {
        assert_eq!(land("modern_types/avro.yaml", &rows, format), expected, "{format:?}");
    }
}

#[test]
fn json_addresses_quoted_enum_symbols_and_json_objects_land_as_written() {
    let documents = [
        r#"{"id": 1, "client": "192.0.2.1", "server": "2001:DB8::1", "kind": "it's", "at": "2024-05-01T12:00:00.25+02:00",
            "attrs": {"color": "red", "size": {"w": 2, "h": 3}, "tags": ["a", "b"]}, "payload": {"k": "caf\u00e9"},
            "origin": {"country": "NO", "geo": {"lat": 1.25}}, "value": "s1", "amount": 5, "flag_or_day": true}"#,
        r#"{"id": 2, "client": "255.255.255.255", "server": "10.0.0.1", "kind": "ü", "at": "1969-12-31T23:59:59Z",
            "attrs": {}, "payload": null, "value": 42, "amount": 2.5, "flag_or_day": "2024-02-29"}"#,
        r#"{"id": 3, "client": "0.0.0.0", "kind": "low", "at": "2024-02-29T00:00:00.000001Z", "attrs": {"n": 1.5}, "value": null}"#,
    ];
    let records: Vec<(Vec<u8>, Vec<rt::OwnedHeader>)> =
        documents.iter().map(|d| (d.as_bytes().to_vec(), Vec::new())).collect();
    #[allow(clippy::default_constructed_unit_structs)]
    let rows = chain_rows(&mut json_chain::Chain::default(), &records);
    let expected = vec![
        json!({"id": 1, "client": "192.0.2.1", "server": "2001:db8::1", "kind": "it's", "at": "2024-05-01 10:00:00.250000",
            "attrs": {"color": "red", "size": {"w": 2, "h": 3}, "tags": ["a", "b"]}, "payload": {"k": "café"},
            "origin_country": "NO", "origin_geo_lat": 1.25, "country": "NO", "lat": 1.25,
            "value": "s1", "amount": 5, "flag_or_day": true, "value_num": null, "amount_f": null}),
        json!({"id": 2, "client": "255.255.255.255", "server": "::ffff:10.0.0.1", "kind": "ü", "at": "1969-12-31 23:59:59.000000",
            "attrs": {}, "payload": null, "origin_country": null, "origin_geo_lat": null, "country": null, "lat": null,
            "value": 42, "amount": 2.5, "flag_or_day": "2024-02-29", "value_num": 42, "amount_f": 2.5}),
        json!({"id": 3, "client": "0.0.0.0", "server": null, "kind": "low", "at": "2024-02-29 00:00:00.000001",
            "attrs": {"n": 1.5}, "payload": null, "origin_country": null, "origin_geo_lat": null, "country": null, "lat": null,
            "value": null, "amount": null, "flag_or_day": null, "value_num": null, "amount_f": null}),
    ];
    for format in FORMATS {
        assert_eq!(land("modern_types/json.yaml", &rows, format), expected, "{format:?}");
    }
}

// An address that is not one, or a JSON column's value that is no object, is a record error naming
// the field.
#[test]
fn a_malformed_address_or_a_json_value_that_is_no_object_is_a_record_error_naming_the_field() {
    #[allow(clippy::default_constructed_unit_structs)]
    let mut chain = json_chain::Chain::default();
    for (doc, field) in [
        (json!({"id": 1, "client": "192.0.2", "kind": "low", "at": "2024-05-01T00:00:00Z", "attrs": {}}), "client"),
        (
            json!({"id": 1, "client": "1.2.3.4", "server": "2001:db8::g", "kind": "low", "at": "2024-05-01T00:00:00Z"}),
            "server",
        ),
        (json!({"id": 1, "client": "1.2.3.4", "kind": "low", "at": "2024-05-01T00:00:00Z", "attrs": [1]}), "attrs"),
        (
            json!({"id": 1, "client": "1.2.3.4", "kind": "low", "at": "2024-05-01T00:00:00Z", "attrs": {}, "payload": 7}),
            "payload",
        ),
        (
            json!({"id": 1, "client": "1.2.3.4", "kind": "low", "at": "2024-05-01T00:00:00Z", "attrs": {}, "value": true}),
            "value",
        ),
        (
            json!({"id": 1, "client": "1.2.3.4", "kind": "low", "at": "2024-05-01T00:00:00Z", "attrs": {}, "amount": "5"}),
            "amount",
        ),
    ] {
        let error = process(&mut chain, 0, doc.to_string().as_bytes(), &[]).expect_err("a bad value");
        assert!(error.contains(field), "{error}");
    }
}

// examples/events_with_json: a tuple, a map, a JSON column, a variant and Kafka headers (repeated,
// binary, absent) in one pipeline; xtask/tests/e2e.rs runs its binary from Kafka.
#[test]
fn the_events_with_json_example_lands_its_tuple_map_json_variant_and_headers_as_written() {
    let header =
        |name: &str, value: Option<&[u8]>| -> rt::OwnedHeader { (name.as_bytes().into(), value.map(Into::into)) };
    let records: Vec<(Vec<u8>, Vec<rt::OwnedHeader>)> = vec![
        (
            json!({"event_id": 1, "at": "2024-05-01T12:00:00.25+02:00", "kind": "purchase",
                "user": {"id": 7, "country": "NO"}, "labels": {"env": "prod", "team": "web"},
                "props": {"cart": {"items": 2, "skus": ["a", "b"]}, "coupon": "x"}, "value": 1250})
            .to_string()
            .into_bytes(),
            vec![
                header("source", Some(b"web")),
                header("trace-id", Some(b"\x01ab")),
                // A header set again replaces the first.
                header("source", Some(b"app")),
            ],
        ),
        (
            json!({"event_id": 2, "at": "1969-12-31T23:59:59Z", "kind": "view", "user": {"id": -1},
                "value": "sku-9", "props": {}})
            .to_string()
            .into_bytes(),
            vec![header("trace-id", None)],
        ),
        (
            json!({"event_id": 3, "at": "2024-02-29T00:00:00.000001Z", "kind": "click",
                "user": {"id": 0, "country": null}, "labels": {}, "value": null})
            .to_string()
            .into_bytes(),
            Vec::new(),
        ),
    ];
    #[allow(clippy::default_constructed_unit_structs)]
    let rows = chain_rows(&mut events_chain::Chain::default(), &records);
    let expected = vec![
        json!({"event_id": 1, "at": "2024-05-01 10:00:00.250000", "kind": "purchase",
            "user": {"id": 7, "country": "NO"}, "country": "NO",
            "labels": {"env": "prod", "team": "web"}, "env": "prod",
            "props": {"cart": {"items": 2, "skus": ["a", "b"]}, "coupon": "x"},
            "value": 1250, "amount": 1250, "source": "app", "trace": "\u{1}ab",
            "headers": {"source": "app", "trace-id": "\u{1}ab"}}),
        json!({"event_id": 2, "at": "1969-12-31 23:59:59.000000", "kind": "view",
            "user": {"id": -1, "country": null}, "country": null, "labels": {}, "env": null,
            "props": {}, "value": "sku-9", "amount": null, "source": null, "trace": null,
            "headers": {"trace-id": ""}}),
        json!({"event_id": 3, "at": "2024-02-29 00:00:00.000001", "kind": "click",
            "user": {"id": 0, "country": null}, "country": null, "labels": {}, "env": null,
            "props": null, "value": null, "amount": null, "source": null, "trace": null, "headers": {}}),
    ];
    for format in FORMATS {
        assert_eq!(land("../../examples/events_with_json/pipeline.yaml", &rows, format), expected, "{format:?}");
    }
}

/// A protobuf varint.
fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A length-delimited field.
fn delimited(number: u64, bytes: &[u8], out: &mut Vec<u8>) {
    varint(number << 3 | 2, out);
    varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// One map entry of field `number`: the key's and the value's own encodings (tag included).
fn entry(number: u64, key: Vec<u8>, value: Vec<u8>, out: &mut Vec<u8>) {
    delimited(number, &[key, value].concat(), out);
}

/// Field `number` of wire type varint.
fn int(number: u64, v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    varint(number << 3, &mut out);
    varint(v, &mut out);
    out
}

fn text(number: u64, s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    delimited(number, s.as_bytes(), &mut out);
    out
}

fn double(number: u64, v: f64) -> Vec<u8> {
    let mut out = Vec::new();
    varint(number << 3 | 1, &mut out);
    out.extend_from_slice(&v.to_le_bytes());
    out
}

#[test]
fn protobuf_maps_keep_their_key_types_and_expressions_read_them() {
    let zigzag = |v: i64| ((v << 1) ^ (v >> 63)) as u64;
    let mut first = int(1, 1);
    entry(2, int(1, 7), text(2, "seven"), &mut first);
    entry(2, int(1, -9_000_000_000i64 as u64), text(2, "big"), &mut first);
    // A key written twice keeps its last entry, in the column and for `m[key]`.
    entry(2, int(1, 7), text(2, "SEVEN"), &mut first);
    entry(3, int(1, 1), int(2, -5i64 as u64), &mut first);
    entry(3, int(1, 0), int(2, 3), &mut first);
    entry(4, int(1, u64::from(u32::MAX)), double(2, 0.5), &mut first);
    entry(5, text(1, "a"), int(2, 42), &mut first);
    entry(6, int(1, zigzag(-1)), text(2, "minus one"), &mut first);
    // attrs: {"name": "x", "n": 1.5, "on": true, "none": null, "list": [1, "a"], "deep": {"k": "v"}},
    // written in two occurrences that Protobuf merges (the second replaces `name`).
    let value = |kind: Vec<u8>| kind;
    let string_value = |s: &str| text(3, s);
    let struct_of = |entries: Vec<(&str, Vec<u8>)>| {
        let mut out = Vec::new();
        for (k, v) in entries {
            let mut e = text(1, k);
            delimited(2, &v, &mut e);
            delimited(1, &e, &mut out);
        }
        out
    };
    let mut list = Vec::new();
    delimited(1, &double(2, 1.0), &mut list);
    delimited(1, &string_value("a"), &mut list);
    let mut deep = Vec::new();
    delimited(5, &struct_of(vec![("k", string_value("v"))]), &mut deep);
    let mut list_value = Vec::new();
    delimited(6, &list, &mut list_value);
    let attrs_1 =
        struct_of(vec![("name", string_value("old")), ("n", double(2, 1.5)), ("on", int(4, 1)), ("none", int(1, 0))]);
    let attrs_2 = struct_of(vec![("name", string_value("x")), ("list", value(list_value)), ("deep", deep.clone())]);
    delimited(7, &attrs_1, &mut first);
    delimited(8, &deep, &mut first);
    delimited(7, &attrs_2, &mut first);
    delimited(9, &struct_of(vec![("i", double(2, 0.0))]), &mut first);
    delimited(9, &[], &mut first);
    delimited(11, &[int(1, 5), text(2, "o")].concat(), &mut first);
    delimited(12, &text(2, "t"), &mut first);
    // Nothing but the id: every map empty, every lookup null, Structs empty, Values null.
    let second = int(1, 2);
    // A Value that holds a number has no JSON column value.
    let mut third = int(1, 3);
    delimited(8, &double(2, 2.0), &mut third);
    let records = vec![(first, Vec::new()), (second, Vec::new())];
    #[allow(clippy::default_constructed_unit_structs)]
    let error = process(&mut protobuf_chain::Chain::default(), 0, &third, &[]).expect_err("a number Value");
    assert!(error.contains("extra") && error.contains("neither a struct nor null"), "{error}");
    #[allow(clippy::default_constructed_unit_structs)]
    let rows = chain_rows(&mut protobuf_chain::Chain::default(), &records);
    let expected = vec![
        json!({
            "id": 1, "names": {"7": "SEVEN", "-9000000000": "big"}, "flags": {"true": -5, "false": 3},
            "weights": {"4294967295": 0.5}, "counts": {"a": 42}, "offsets": {"-1": "minus one"},
            "name_7": "SEVEN", "name_big": "big", "n_names": 2, "flagged": -5, "weight_max": 0.5, "count_a": 42,
            "below": "minus one",
            "attrs": {"name": "x", "n": 1.5, "on": true, "list": [1, "a"], "deep": {"k": "v"}},
            "extra": {"k": "v"}, "history": [{"i": 0}, {}], "maybe": null,
            "origin": {"x": 5, "label": "o"}, "target": {"x": 0, "label": "t"}, "origin_x": 5, "target_label": "t",
        }),
        json!({
            "id": 2, "names": {}, "flags": {}, "weights": {}, "counts": {}, "offsets": {},
            "name_7": null, "name_big": null, "n_names": 0, "flagged": null, "weight_max": null, "count_a": null,
            "below": null,
            "attrs": {}, "extra": null, "history": [], "maybe": null,
            "origin": {"x": 0, "label": ""}, "target": {"x": null, "label": null}, "origin_x": 0, "target_label": null,
        }),
    ];
    for format in FORMATS {
        assert_eq!(land("modern_types/protobuf.yaml", &rows, format), expected, "{format:?}");
    }
}
