//! Writes the random schemas the differential tests decode: for each format a handful of
//! pipelines (datagen into a file, `wire: raw`) whose schemas are drawn from a seed, and
//! `cases.rs`, which expands each with `etl_macros::pipeline!` and lists them.
//!
//! The seed is `ETL_DIFFERENTIAL_SEED` when set, else the day (days since 1970), so each day's
//! build tries other schemas and a failure is reproduced by setting the seed it printed.
//! `ETL_DIFFERENTIAL_SCHEMAS` sets how many schemas per format (default 4): each is a generated
//! chain the test crate compiles, which is what this test costs.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde_json::{Value, json};

/// SplitMix64: small, and the same sequence on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

const FORMATS: [&str; 3] = ["avro", "json", "protobuf"];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=ETL_DIFFERENTIAL_SEED");
    println!("cargo:rerun-if-env-changed=ETL_DIFFERENTIAL_SCHEMAS");
    let seed = match std::env::var("ETL_DIFFERENTIAL_SEED") {
        Ok(s) => s.parse().expect("ETL_DIFFERENTIAL_SEED is an unsigned integer"),
        Err(_) => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("a clock after 1970");
            now.as_secs() / 86_400
        }
    };
    let per_format: usize = std::env::var("ETL_DIFFERENTIAL_SCHEMAS").map_or(4, |s| s.parse().expect("a count"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));

    let mut cases = String::new();
    let mut list = String::new();
    for (f, format) in FORMATS.iter().enumerate() {
        for i in 0..per_format {
            let mut rng = Rng(seed.wrapping_mul(1_000).wrapping_add((f * 100 + i) as u64));
            let dir = out.join(format!("{format}-{i}"));
            std::fs::create_dir_all(&dir).unwrap();
            let (file, format_yaml, schema) = match *format {
                "avro" => {
                    let mut names = 0;
                    let schema = avro_record(&mut rng, 0, false, &mut names);
                    ("schema.avsc", "avro: { schema: schema.avsc, wire: raw }", schema.to_string())
                }
                "json" => {
                    let mut schema = json_object(&mut rng, 0);
                    schema["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
                    ("schema.json", "json: { schema: schema.json, wire: raw }", schema.to_string())
                }
                _ => (
                    "schema.proto",
                    "protobuf: { schema: schema.proto, message: diff.M0, wire: raw }",
                    protobuf_file(&mut rng),
                ),
            };
            std::fs::write(dir.join(file), schema).unwrap();
            let name = format!("{format}{i}");
            let yaml = pipeline_yaml(&name, format_yaml);
            let pipeline = dir.join("pipeline.yaml");
            std::fs::write(&pipeline, yaml).unwrap();
            writeln!(
                cases,
                "#[allow(dead_code, unused, clippy::all)]\npub mod {name} {{ etl_macros::pipeline!({:?}); }}",
                pipeline.display().to_string()
            )
            .unwrap();
            writeln!(
                list,
                "    Case {{ name: {name:?}, format: {format:?}, schema_file: {:?}, schema: {name}::SCHEMA, \
                 decode: |p| crate::run_chain(&mut {name}::Chain::default(), p) }},",
                dir.join(file).display().to_string()
            )
            .unwrap();
        }
    }
    writeln!(cases, "/// The seed the schemas were drawn from.\npub const SEED: u64 = {seed};").unwrap();
    // A chain with no state is a unit struct, one with some is not: `default()` suits both.
    writeln!(
        cases,
        "/// Every generated pipeline.\n#[allow(clippy::default_constructed_unit_structs)]\npub const CASES: &[Case] = &[\n{list}];"
    )
    .unwrap();
    std::fs::write(out.join("cases.rs"), cases).unwrap();
}

fn pipeline_yaml(name: &str, format: &str) -> String {
    format!(
        "# Drawn by etl-differential/build.rs.\n\
         pipeline: {{ name: diff-{name}, threads: 1 }}\n\
         source:\n  datagen: {{ count: 10, seed: 1, partitions: 1 }}\n\
         format:\n  {format}\n\
         sink:\n  file:\n    path: out.ndjson\n    batch: {{ max_rows: 50000, max_bytes: 8MiB, linger: 200ms }}\n\
         backpressure:\n  max_inflight_bytes: 96MiB\n\
         admin:\n  listen: 127.0.0.1:0\n"
    )
}

// ---- Avro ---------------------------------------------------------------------------------

/// A record of 1 to 5 fields (6 to 12 at the top), nested to depth 3.
fn avro_record(rng: &mut Rng, depth: u32, in_container: bool, names: &mut u32) -> Value {
    let n = if depth == 0 { 6 + rng.below(7) } else { 1 + rng.below(5) };
    *names += 1;
    let name = format!("R{names}");
    let fields: Vec<Value> = (0..n)
        .map(|i| json!({"name": format!("f{i}"), "type": avro_type(rng, depth + 1, in_container, names)}))
        .collect();
    json!({"type": "record", "name": name, "fields": fields})
}

fn avro_type(rng: &mut Rng, depth: u32, in_container: bool, names: &mut u32) -> Value {
    let kinds = if depth < 3 { 17 } else { 14 };
    let (ty, container) = match rng.below(kinds) {
        0 => (json!("boolean"), false),
        1 => (json!("int"), false),
        2 => (json!("long"), false),
        3 => (json!("float"), false),
        4 => (json!("double"), false),
        5 => (json!("string"), false),
        6 => (json!("bytes"), false),
        7 => {
            *names += 1;
            let symbols: Vec<String> = (0..1 + rng.below(5)).map(|s| format!("S{s}_{names}")).collect();
            (json!({"type": "enum", "name": format!("E{names}"), "symbols": symbols}), false)
        }
        8 => (json!({"type": "long", "logicalType": "timestamp-millis"}), false),
        9 => (json!({"type": "long", "logicalType": "timestamp-micros"}), false),
        10 => (json!({"type": "int", "logicalType": "date"}), false),
        11 => (json!({"type": "string", "logicalType": "uuid"}), false),
        12 => {
            if rng.one_in(2) {
                let precision = 1 + rng.below(38);
                let scale = rng.below(precision + 1);
                (json!({"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}), false)
            } else {
                *names += 1;
                let size = 1 + rng.below(16);
                // The most decimal digits a two's-complement number of `size` bytes always holds.
                let max = (((8 * size - 1) as f64) * std::f64::consts::LOG10_2).floor() as u64;
                let precision = 1 + rng.below(max.min(38));
                let scale = rng.below(precision + 1);
                let fixed = json!({"type": "fixed", "name": format!("F{names}"), "size": size,
                    "logicalType": "decimal", "precision": precision, "scale": scale});
                (fixed, false)
            }
        }
        13 => {
            let logical = ["time-millis", "time-micros", "local-timestamp-millis", "local-timestamp-micros"];
            match rng.below(7) {
                // A union of several scalars: a Variant (with null or not).
                6 => {
                    let mut branches = vec![json!("string"), json!("long")];
                    if rng.one_in(2) {
                        branches.push(json!("double"));
                    }
                    if rng.one_in(2) {
                        branches.insert(rng.below(branches.len() as u64 + 1) as usize, json!("null"));
                    }
                    return json!(branches);
                }
                0..=3 => {
                    let l = logical[rng.below(4) as usize];
                    let base = if l == "time-millis" { "int" } else { "long" };
                    (json!({"type": base, "logicalType": l}), false)
                }
                _ => (json!("long"), false),
            }
        }
        14 => (json!({"type": "array", "items": avro_type(rng, depth + 1, true, names)}), true),
        15 => (json!({"type": "map", "values": avro_type(rng, depth + 1, true, names)}), true),
        _ => (avro_record(rng, depth, in_container, names), true),
    };
    // ClickHouse has no Nullable(Array/Map/Tuple): inside arrays and maps only scalars are nullable.
    if rng.one_in(4) && !(in_container && container) {
        if rng.one_in(2) { json!(["null", ty]) } else { json!([ty, "null"]) }
    } else {
        ty
    }
}

// ---- JSON Schema --------------------------------------------------------------------------

/// An object of 1 to 5 properties (6 to 12 at the top), some required, nested to depth 3.
fn json_object(rng: &mut Rng, depth: u32) -> Value {
    let n = if depth == 0 { 6 + rng.below(7) } else { 1 + rng.below(5) };
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    for i in 0..n {
        let name = format!("p{i}");
        properties.insert(name.clone(), json_type(rng, depth + 1, false));
        if rng.below(3) > 0 {
            required.push(name);
        }
    }
    json!({"type": "object", "properties": properties, "required": required})
}

fn json_type(rng: &mut Rng, depth: u32, in_container: bool) -> Value {
    let kinds = if depth < 3 { 12 } else { 9 };
    let mut ty = match rng.below(kinds) {
        0 => json!({"type": "integer"}),
        1 => json!({"type": "number"}),
        2 => json!({"type": "boolean"}),
        3 => json!({"type": "string"}),
        4 => json!({"type": "string", "format": "date-time"}),
        5 => json!({"type": "string", "format": "date"}),
        6 => json!({"type": "string", "format": "uuid"}),
        7 => {
            let symbols: Vec<String> = ["a", "with space", "ü", "x1", ""][..1 + rng.below(5) as usize]
                .iter()
                .map(|s| (*s).to_owned())
                .collect();
            json!({"type": "string", "enum": symbols})
        }
        8 => match rng.below(7) {
            0 => json!({"type": "string", "format": "ipv4"}),
            1 => json!({"type": "string", "format": "ipv6"}),
            2 => json!({"type": "object"}),
            // Several scalar types: a Variant.
            3 => json!({"type": ["string", "integer"]}),
            4 => json!({"type": ["integer", "number", "boolean"]}),
            _ => json!({"type": "integer"}),
        },
        9 => json!({"type": "array", "items": json_type(rng, depth + 1, true)}),
        10 => json!({"type": "object", "additionalProperties": json_type(rng, depth + 1, true)}),
        _ => json_object(rng, depth),
    };
    // ClickHouse has no Nullable(Array/Map/Tuple): inside arrays and maps only scalars are nullable.
    let container = matches!(ty["type"].as_str(), Some("array" | "object"));
    if rng.one_in(4) && ty.get("enum").is_none() && !(in_container && container) {
        ty["type"] = match ty["type"].clone() {
            serde_json::Value::Array(mut types) => {
                types.push(json!("null"));
                serde_json::Value::Array(types)
            }
            t => json!([t, "null"]),
        };
    }
    ty
}

// ---- Protobuf -----------------------------------------------------------------------------

const SCALARS: [&str; 15] = [
    "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64", "sfixed32", "sfixed64", "bool",
    "string", "bytes", "float", "double",
];

const WRAPPERS: [&str; 9] = [
    "Int32Value",
    "Int64Value",
    "UInt32Value",
    "UInt64Value",
    "FloatValue",
    "DoubleValue",
    "BoolValue",
    "StringValue",
    "BytesValue",
];

/// A proto3 file: `M0` and the messages and enums it uses, all at the top level.
fn protobuf_file(rng: &mut Rng) -> String {
    let mut out = String::from(
        "// Drawn by etl-differential/build.rs.\nsyntax = \"proto3\";\npackage diff;\n\n\
         import \"google/protobuf/timestamp.proto\";\nimport \"google/protobuf/wrappers.proto\";\n\n",
    );
    let mut next = 1;
    proto_message(rng, 0, 0, &mut next, &mut out);
    out
}

fn proto_message(rng: &mut Rng, index: u32, depth: u32, next: &mut u32, out: &mut String) {
    let n = if depth == 0 { 6 + rng.below(8) } else { 1 + rng.below(5) };
    let mut body = String::new();
    let mut number = 1 + rng.below(3) as u32;
    let mut i = 0;
    while i < n {
        let name = format!("f{i}");
        let choice = rng.below(if depth < 3 { 10 } else { 7 });
        if choice == 9 {
            // A oneof of two or three members.
            let _ = writeln!(body, "  oneof o{i} {{");
            for m in 0..2 + rng.below(2) {
                let ty = if rng.one_in(3) && depth < 3 {
                    let id = *next;
                    *next += 1;
                    proto_message(rng, id, depth + 1, next, out);
                    format!("M{id}")
                } else {
                    SCALARS[rng.below(SCALARS.len() as u64) as usize].to_owned()
                };
                let _ = writeln!(body, "    {ty} {name}m{m} = {number};");
                number += 1;
            }
            let _ = writeln!(body, "  }}");
            i += 1;
            continue;
        }
        let ty = match choice {
            0..=2 => SCALARS[rng.below(SCALARS.len() as u64) as usize].to_owned(),
            3 => {
                let id = *next;
                *next += 1;
                let values: Vec<String> = (0..1 + rng.below(4)).map(|v| format!("  E{id}_V{v} = {v};")).collect();
                let _ = writeln!(out, "enum E{id} {{\n{}\n}}\n", values.join("\n"));
                format!("E{id}")
            }
            4 => "google.protobuf.Timestamp".to_owned(),
            5 => format!("google.protobuf.{}", WRAPPERS[rng.below(WRAPPERS.len() as u64) as usize]),
            6 => SCALARS[rng.below(SCALARS.len() as u64) as usize].to_owned(),
            _ => {
                let id = *next;
                *next += 1;
                proto_message(rng, id, depth + 1, next, out);
                format!("M{id}")
            }
        };
        let wrapper = ty.starts_with("google.protobuf.") && ty.ends_with("Value");
        let label = match rng.below(6) {
            0 if !wrapper => "repeated ",
            1 if !ty.starts_with("google.") && !ty.starts_with('E') => "optional ",
            2 if !ty.starts_with("google.protobuf.Timestamp") && !wrapper => {
                let key = ["string", "int64", "int32", "bool", "uint32"][rng.below(5) as usize];
                let _ = writeln!(body, "  map<{key}, {ty}> {name} = {number};");
                number += 1 + rng.below(2) as u32;
                i += 1;
                continue;
            }
            _ => "",
        };
        let _ = writeln!(body, "  {label}{ty} {name} = {number};");
        // Gaps, so unknown numbers fall between known ones.
        number += 1 + rng.below(2) as u32;
        i += 1;
    }
    let _ = writeln!(out, "message M{index} {{\n{body}}}\n");
}
