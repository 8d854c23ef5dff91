//! The decoder `gen` writes for `format.json`, expanded by `pipeline!` and fed documents
//! directly: keys in any order, unknown keys, escapes, absent and null values, and every kind of
//! bad document, each checked row by row or by the field its error names.

use etl_runtime::__private as rt;
use proptest::prelude::*;
use serde_json::{Value, json};

#[allow(dead_code, clippy::all)]
mod sink {
    etl_macros::pipeline!("../../etl-gen/tests/pipelines/json/pipeline.yaml");
}

/// The Confluent frame the pipeline expects (`schema_id: 3`).
fn framed(doc: &str) -> Vec<u8> {
    let mut payload = vec![0, 0, 0, 0, 3];
    payload.extend_from_slice(doc.as_bytes());
    payload
}

/// Decodes one payload: the row it produced (as JSON), or the record error's text.
fn decode(payload: &[u8]) -> Result<Value, String> {
    let mut chain = sink::Chain::default();
    let mut harness = rt::ChainHarness::new(1);
    let record = rt::Record {
        payload: Some(payload),
        key: None,
        topic: "orders",
        partition: 0,
        offset: 0,
        timestamp_ms: Some(0),
        headers: rt::Headers::NONE,
    };
    let rows = harness.process(&mut chain, &record).map_err(|e| e.to_string())?;
    assert_eq!(rows, 1);
    let out = harness.take_output();
    Ok(serde_json::from_slice(&out).expect("an NDJSON row"))
}

fn doc(value: &Value) -> Vec<u8> {
    framed(&value.to_string())
}

/// A document with every required key, in schema order.
fn minimal() -> Value {
    json!({
        "id": 7, "name": "n", "kind": "b", "at": "2024-05-01T12:00:00.25+02:00", "day": "2024-05-01",
        "items": [], "geo": {"lat": 1.5}
    })
}

#[test]
fn absent_optional_values_are_null_and_absent_containers_empty() {
    let row = decode(&doc(&minimal())).unwrap();
    assert_eq!(row["id"], 7);
    assert_eq!(row["kind"], "b");
    assert_eq!(row["at"], "2024-05-01T10:00:00.250000Z", "the offset is applied: UTC, microseconds");
    assert_eq!(row["day"], "2024-05-01");
    for nullable in ["score", "ok", "uid", "user_agent", "geo_lon", "geo_place_city", "extra_note", "extra_say__hi_"] {
        assert_eq!(row[nullable], Value::Null, "{nullable}");
    }
    assert_eq!(row["tags"], json!([]));
    assert_eq!(row["counts"], json!({}));
    assert_eq!(row["grid"], json!([]));
    assert_eq!(row["geo_lat"], 1.5);
}

/// The minimal document with `extra` after it (a JSON text serde_json cannot make: a key may
/// repeat), as a framed payload.
fn with_tail(tail: &str) -> Vec<u8> {
    let text = minimal().to_string();
    framed(&format!("{}, {tail}}}", &text[..text.len() - 1]))
}

// A map whose key repeats keeps the key's last value (as Python's json and
// serde_json read it), once.
#[test]
fn a_repeated_map_key_keeps_its_last_value() {
    let payload = with_tail(r#""counts": {"a": 1, "b": 5, "a": 2}"#);
    let row = decode(&payload).unwrap();
    assert_eq!(row["counts"], json!({"a": 2, "b": 5}));
    // Read back through serde_json a repeated key would look fine: the row's own text has it once.
    let mut harness = rt::ChainHarness::new(1);
    let record = rt::Record {
        payload: Some(&payload),
        key: None,
        topic: "orders",
        partition: 0,
        offset: 0,
        timestamp_ms: Some(0),
        headers: rt::Headers::NONE,
    };
    harness.process(&mut sink::Chain::default(), &record).unwrap();
    let text = String::from_utf8(harness.take_output()).unwrap();
    assert_eq!(text.matches(r#""a":"#).count(), 1, "{text}");
}

// An object key that comes again replaces the object, as JSON readers read
// it: nothing of the first one is left, and a null replaces it whole.
#[test]
fn a_repeated_object_key_replaces_the_earlier_object() {
    let row = decode(&with_tail(r#""geo": {"lat": 1, "lon": 5, "place": {"city": "x"}}, "geo": {"lat": 2}"#)).unwrap();
    assert_eq!((row["geo_lat"].clone(), row["geo_lon"].clone()), (json!(2), Value::Null));
    assert_eq!(row["geo_place_city"], Value::Null);
    let row = decode(&with_tail(r#""extra": {"note": "first"}, "extra": null"#)).unwrap();
    assert_eq!(row["extra_note"], Value::Null);
    let error = decode(&with_tail(r#""extra": {"note": "first"}, "extra": {"say \"hi\"": 1}"#)).unwrap_err();
    assert!(error.contains("extra.note"), "the second object lacks the required note: {error}");
}

// A raw control character inside a string is invalid JSON (RFC 8259, 7),
// wherever the string is: a value read, a key, a value skipped unread.
#[test]
fn raw_control_characters_in_strings_are_errors() {
    for tail in ["\"user-agent\": \"a\tb\"", "\"zzz\": \"a\u{1}b\"", "\"z\nz\": 1", "\"zzz\": [\"\u{1f}\"]"] {
        let error = decode(&with_tail(tail)).unwrap_err();
        assert!(error.contains("control character"), "{tail:?}: {error}");
    }
    // Escaped, they are fine.
    assert_eq!(decode(&with_tail(r#""user-agent": "a\tb""#)).unwrap()["user_agent"], "a\tb");
    // Invalid UTF-8 in a string skipped unread is an error too.
    let mut payload = with_tail(r#""zzz": "ab""#);
    let at = payload.len() - 3;
    payload[at] = 0xff;
    assert!(decode(&payload).unwrap_err().contains("UTF-8"));
}

// A required property of an optional object is required when the object is
// present (and null or absent, the object leaves it null).
#[test]
fn a_present_optional_object_needs_its_required_properties() {
    let error = decode(&with_tail(r#""extra": {"say \"hi\"": 5}"#)).unwrap_err();
    assert!(error.contains("extra.note"), "{error}");
    let row = decode(&with_tail(r#""extra": {"note": "n"}"#)).unwrap();
    assert_eq!(row["extra_note"], "n");
    assert_eq!(decode(&with_tail(r#""extra": null"#)).unwrap()["extra_note"], Value::Null);
    assert_eq!(decode(&doc(&minimal())).unwrap()["extra_note"], Value::Null);
}

#[test]
fn keys_in_any_order_with_unknown_keys_and_escapes() {
    let text = r#" {
        "zzz": {"deep": [1, {"x": null}, "s\"tr"]}, "geo": {"place": {"city": "K\u00f8ge", "unknown": 1}, "lat": -3},
        "items": [{"qty": 2, "sku": "A\nB"}, {"sku": "C", "extra": [true]}], "day": "1970-01-01",
        "user-agent": "curl/8", "at": "1970-01-01T00:00:00Z", "kind": "c", "name": "tab\there", "id": -1,
        "counts": {"x": 1, "y\/z": -2}, "grid": [[1, null], []], "extra": null, "ok": false, "score": null,
        "uid": "123e4567-e89b-12d3-a456-426614174000", "tags": ["a", "\ud83d\ude00"]
    } "#;
    let row = decode(&framed(text)).unwrap();
    assert_eq!(row["name"], "tab\there");
    assert_eq!(row["geo_lat"], -3.0, "an integer is a number");
    assert_eq!(row["geo_place_city"], "Køge");
    assert_eq!(row["items"], json!([{"sku": "A\nB", "qty": 2}, {"sku": "C", "qty": null}]));
    assert_eq!(row["user_agent"], "curl/8", "a key that is no column name maps to one");
    assert_eq!(row["counts"], json!({"x": 1, "y/z": -2}));
    assert_eq!(row["grid"], json!([[1, null], []]));
    assert_eq!(row["extra_note"], Value::Null, "a null object leaves its fields null");
    // A key JSON must escape is matched by its unescaped text.
    let mut d = minimal();
    d["extra"] = json!({"say \"hi\"": 5, "note": "n"});
    let escaped = decode(&doc(&d)).unwrap();
    assert_eq!((&escaped["extra_say__hi_"], &escaped["extra_note"]), (&json!(5), &json!("n")));
    assert_eq!(row["ok"], false);
    assert_eq!(row["uid"], "123e4567-e89b-12d3-a456-426614174000");
    assert_eq!(row["tags"], json!(["a", "😀"]));
}

#[test]
fn a_missing_required_property_is_an_error_naming_it() {
    for (key, field) in [("id", "id"), ("items", "items"), ("geo", "geo")] {
        let mut d = minimal();
        d.as_object_mut().unwrap().remove(key);
        let e = decode(&doc(&d)).unwrap_err();
        assert!(e.contains(&format!("`{field}`")) && e.contains("missing"), "{key}: {e}");
    }
    // A required key below an optional object is required only when the object is there.
    let mut d = minimal();
    d["items"] = json!([{"qty": 1}]);
    let e = decode(&doc(&d)).unwrap_err();
    assert!(e.contains("`items[].sku`") && e.contains("missing"), "{e}");
}

#[test]
fn a_value_of_the_wrong_type_is_an_error_naming_the_field() {
    let cases = [
        ("id", json!("7"), "`id`: expected an integer, found a string"),
        ("id", json!(1.5), "`id`: expected an integer, found a number with a fraction"),
        ("name", json!(null), "`name`: expected a string, found null"),
        ("kind", json!("d"), "`kind`: not one of the enum's symbols"),
        ("at", json!("yesterday"), "`at`: expected an RFC 3339 date-time"),
        ("day", json!("2023-02-29"), "`day`: expected a date"),
        ("uid", json!("not-a-uuid"), "`uid`: expected a UUID"),
        ("tags", json!(["a", 1]), "`tags[]`: expected a string"),
        ("counts", json!({"a": "1"}), "`counts{}`: expected an integer, found a string"),
        ("geo", json!([1]), "`geo`: expected an object"),
        ("ok", json!("true"), "`ok`: expected a boolean, found a string"),
    ];
    for (key, value, expected) in cases {
        let mut d = minimal();
        d[key] = value;
        let e = decode(&doc(&d)).unwrap_err();
        assert!(e.contains(expected), "{key}: {e}");
    }
}

#[test]
fn malformed_documents_and_frames_are_errors() {
    let good = minimal().to_string();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (framed(&good[..good.len() - 1]), "invalid JSON document"),
        (framed(&format!("{good} x")), "unexpected data after the document"),
        (framed("[1, 2]"), "expected an object"),
        (framed(""), "expected an object"),
        (framed(&good.replace(':', " ")), "expected `:`"),
        (b"{\"id\": 1}".to_vec(), "magic byte"),
        ([vec![0, 0, 0, 0, 9], good.clone().into_bytes()].concat(), "schema id 9 is not the reader schema's"),
        (framed(&good.replace("\"n\"", "\"\\q\"")), "invalid escape"),
        (
            framed(&good.replace("\"n\"", "\"\u{1}\"").replace('\u{1}', "\u{fffd}"))
                .into_iter()
                .map(|b| if b == 0xef { 0xff } else { b })
                .collect(),
            "UTF-8",
        ),
    ];
    for (payload, expected) in cases {
        let e = decode(&payload).unwrap_err();
        assert!(e.contains(expected), "{:?}: {e}", String::from_utf8_lossy(&payload));
    }
}

/// Flattens nested objects of the schema into `parent_child` keys, as the row does (a null
/// object: its fields null; a null array or map: empty).
fn flatten(prefix: &str, value: &Value, out: &mut serde_json::Map<String, Value>) {
    for (k, v) in value.as_object().unwrap() {
        let column: String =
            format!("{prefix}{k}").chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        match (k.as_str(), v) {
            ("geo" | "extra", Value::Object(_)) => flatten(&format!("{column}_"), v, out),
            ("place", Value::Object(_)) if prefix == "geo_" => flatten(&format!("{column}_"), v, out),
            ("extra", Value::Null) => {
                out.insert("extra_note".into(), Value::Null);
                out.insert("extra_say__hi_".into(), Value::Null);
            }
            ("place", Value::Null) if prefix == "geo_" => {
                out.insert("geo_place_city".into(), Value::Null);
            }
            // An absent or null array or map is empty.
            ("tags" | "grid", Value::Null) => {
                out.insert(column, json!([]));
            }
            ("counts", Value::Null) => {
                out.insert(column, json!({}));
            }
            _ => {
                out.insert(column, v.clone());
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    // Any document datagen writes for the schema, with its keys reordered and unknown keys
    // mixed in, decodes into exactly its own values.
    #[test]
    fn documents_decode_into_their_own_values(seed in any::<u64>(), junk in "[a-z]{1,6}") {
        let schema = rt::apache_avro::Schema::parse_str(sink::SCHEMA).unwrap();
        for payload in rt::sample_payloads(&schema, rt::Encoding::Json, rt::Wire::Confluent { schema_id: 3 }, seed, 8) {
            let original: Value = serde_json::from_slice(&payload[5..]).unwrap();
            // serde_json's map sorts keys: another order than the schema's.
            let mut shuffled = original.as_object().unwrap().clone();
            shuffled.insert(format!("zz_{junk}"), json!({"a": [1, {"b": null}], "c": "\\\""}));
            let row = decode(&doc(&Value::Object(shuffled))).unwrap();
            let mut expected = serde_json::Map::new();
            flatten("", &original, &mut expected);
            prop_assert_eq!(Value::Object(expected), row);
        }
    }
}
