//! Writes the seed corpus of each fuzz target: datagen payloads of its pipeline's schema (edge
//! values included), framed as the pipeline expects. `cargo run --bin corpus` in fuzz/.

use etl_runtime::__private as rt;

#[allow(dead_code, unused, clippy::all)]
mod avro {
    etl_macros::pipeline!("../etl-gen/tests/pipelines/kitchen_sink/pipeline.yaml");
}
#[allow(dead_code, unused, clippy::all)]
mod json {
    etl_macros::pipeline!("../etl-gen/tests/pipelines/json/pipeline.yaml");
}
#[allow(dead_code, unused, clippy::all)]
mod protobuf {
    etl_macros::pipeline!("../etl-gen/tests/pipelines/protobuf/pipeline.yaml");
}

fn main() {
    let targets = [
        ("avro", avro::SCHEMA, rt::Encoding::Avro, rt::Wire::Confluent { schema_id: 1 }),
        ("json", json::SCHEMA, rt::Encoding::Json, rt::Wire::Confluent { schema_id: 3 }),
        ("protobuf", protobuf::SCHEMA, rt::Encoding::Protobuf, rt::Wire::Confluent { schema_id: 4 }),
    ];
    for (name, schema, encoding, wire) in targets {
        let schema = rt::apache_avro::Schema::parse_str(schema).expect("the pipeline's schema");
        let dir = std::path::Path::new("corpus").join(name);
        std::fs::create_dir_all(&dir).expect("corpus directory");
        for (i, payload) in rt::sample_payloads(&schema, encoding, wire, 39, 64).iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:02}")), payload).expect("a corpus file");
        }
        println!("{name}: 64 payloads in {}", dir.display());
    }
}
