//! The whole run loop with no server: datagen → chain → file sink, and a fatal sink ending a run.

mod common;

use std::time::Duration;

use apache_avro::Schema;
use etl_runtime::{
    Batch, Chain, DatagenConfig, DatagenSource, FileSink, Record, RecordError, RecordErrorKind, RowOut, RunOutcome,
    Sink, SinkError, Wire, run,
};

const SCHEMA: &str = r#"{"type": "record", "name": "Order", "fields": [
    {"name": "order_id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "total", "type": "double"},
    {"name": "coupon", "type": ["null", "string"]}
]}"#;

/// Decodes the Confluent-framed datum and writes it as one NDJSON line, with its partition and
/// offset, the way the generated file-sink encoder would.
struct ToJson(Schema);

impl Chain for ToJson {
    fn process(&mut self, record: &Record<'_>, out: &mut RowOut<'_>) -> Result<(), RecordError> {
        let payload = record.payload.unwrap_or_default();
        let datum = payload
            .strip_prefix(&[0, 0, 0, 0, 1])
            .ok_or_else(|| RecordError::new(RecordErrorKind::Decode, "missing Confluent frame"))?;
        let value = apache_avro::from_avro_datum(&self.0, &mut &datum[..], None)
            .map_err(|e| RecordError::new(RecordErrorKind::Decode, e.to_string()))?;
        let value = quote_non_finite(value);
        let mut json =
            serde_json::Value::try_from(value).map_err(|e| RecordError::new(RecordErrorKind::Encode, e.to_string()))?;
        json["_partition"] = record.partition.into();
        json["_offset"] = record.offset.into();
        let shard = out.round_robin();
        out.push_row(shard, |buf| {
            serde_json::to_writer(&mut *buf, &json)
                .map_err(|e| RecordError::new(RecordErrorKind::Encode, e.to_string()))?;
            buf.push(b'\n');
            Ok(())
        })
    }
}

/// NaN and the infinities (datagen writes them) as the generated file sink writes them: JSON
/// numbers cannot hold them.
fn quote_non_finite(value: apache_avro::types::Value) -> apache_avro::types::Value {
    use apache_avro::types::Value;
    match value {
        Value::Double(f) if !f.is_finite() => Value::String(format!("{f}").to_lowercase()),
        Value::Record(fields) => Value::Record(fields.into_iter().map(|(k, v)| (k, quote_non_finite(v))).collect()),
        Value::Union(i, v) => Value::Union(i, Box::new(quote_non_finite(*v))),
        other => other,
    }
}

fn datagen(count: u64, partitions: u32) -> DatagenSource {
    let config = DatagenConfig {
        rate: 0,
        count,
        seed: 42,
        partitions,
        wire: Wire::Confluent { schema_id: 1 },
        ..DatagenConfig::default()
    };
    DatagenSource::new(Schema::parse_str(SCHEMA).unwrap(), config).unwrap()
}

// Invariant 3: datagen into the file sink end to end through `run`: N records in, N lines out
// (each partition's offsets exactly once), every offset stored to the end, exit code 0.
#[test]
fn datagen_to_file_sink() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orders.ndjson");
    let count = 5_000;
    let source = datagen(count, 3);
    let stored = source.stored_offsets();
    let schema = Schema::parse_str(SCHEMA).unwrap();
    let config = common::config(2, 1);
    let outcome = run(config, source, move || ToJson(schema.clone()), FileSink::open(&path).unwrap(), None);
    assert_eq!(outcome, RunOutcome::Clean);
    assert_eq!(outcome.exit_code(), 0);

    let text = std::fs::read_to_string(&path).unwrap();
    let mut seen = std::collections::HashSet::new();
    for line in text.lines() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(row["order_id"].is_i64() && row["customer"].is_string());
        assert!(seen.insert((row["_partition"].as_i64().unwrap(), row["_offset"].as_i64().unwrap())), "duplicate row");
    }
    assert_eq!(seen.len() as u64, count);
    let stored = stored.lock().unwrap().clone();
    let expected: std::collections::BTreeMap<i32, i64> = [(0, 1667), (1, 1667), (2, 1666)].into();
    assert_eq!(stored, expected);
    for (partition, next) in expected {
        assert!((0..next).all(|o| seen.contains(&(i64::from(partition), o))));
    }
}

/// Refuses every write with a fatal error.
struct Refusing;

impl Sink for Refusing {
    async fn write(&self, _shard: usize, _batch: &Batch) -> Result<(), SinkError> {
        Err(SinkError::fatal("table does not exist"))
    }

    async fn check(&self) -> Result<(), SinkError> {
        Ok(())
    }
}

// Invariant 3: a fatal sink error ends `run` with exit code 1 and no offset is stored past the
// unwritten rows (here: none were written, so nothing past offset 0).
#[test]
fn fatal_sink_error_ends_run_with_exit_code_1() {
    let source = datagen(1_000, 1);
    let stored = source.stored_offsets();
    let schema = Schema::parse_str(SCHEMA).unwrap();
    let mut config = common::config(1, 1);
    config.drain_timeout = Duration::from_secs(2);
    let outcome = run(config, source, move || ToJson(schema.clone()), Refusing, None);
    assert!(matches!(outcome, RunOutcome::Fatal(ref m) if m.contains("table does not exist")), "{outcome:?}");
    assert_eq!(outcome.exit_code(), 1);
    assert!(stored.lock().unwrap().get(&0).is_none_or(|&next| next == 0));
}

/// An unbounded in-memory source that asks for a shutdown after a while, as SIGTERM would.
struct StopsItself {
    stored: common::Stored,
}

impl etl_runtime::Source for StopsItself {
    fn start(&mut self, pipeline: etl_runtime::PipelineHandle) -> Result<(), etl_runtime::SourceError> {
        for partition in 0..2 {
            pipeline.add_lane(Box::new(common::MemLane::new(partition, None, &self.stored)));
        }
        pipeline.set_source_ready(true);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            pipeline.request_shutdown();
        });
        Ok(())
    }
}

// Invariant 4: a shutdown request (what SIGTERM triggers) on an unbounded source drains, stores the
// final offsets and ends `run` with exit code 0; every row below the stored offsets is written once.
#[test]
fn shutdown_request_drains_and_exits_0() {
    let stored = common::Stored::default();
    let sink = common::RecordingSink::default();
    let source = StopsItself { stored: stored.clone() };
    let outcome = run(common::config(2, 2), source, || common::PassThrough, sink.clone(), None);
    assert_eq!(outcome.exit_code(), 0, "{outcome:?}");
    let stored = stored.lock().unwrap().clone();
    assert_eq!(stored.len(), 2);
    assert!(sink.assert_exactly_once(&stored) > 0);
}

/// Routes each record to two outputs of two shards, as a generated chain with `outputs:` does:
/// output 0 takes every record; output 1 takes every record and fails on every third, after
/// output 0 has already pushed that record's row.
struct TwoOutputs;

impl Chain for TwoOutputs {
    fn process(&mut self, record: &Record<'_>, out: &mut RowOut<'_>) -> Result<(), RecordError> {
        let payload = record.payload.unwrap_or_default();
        let slot = out.output_round_robin(0, 2);
        out.push_row(slot, |buf| buf.extend_from_slice(payload));
        let slot = out.output_slot_for_key_hash(1, 2, record.offset as u64);
        out.push_row(slot, |buf| buf.extend_from_slice(payload));
        if record.offset % 3 == 2 {
            return Err(RecordError::new(RecordErrorKind::Operator, "output 1 cannot make this row"));
        }
        Ok(())
    }
}

// ADR 0002, all or nothing per record: when one output's chain fails on a record, none of its rows
// is written by any output (output 0 had pushed one already), the record counts as an error under
// `skip`, and every other record lands once in each output; the offsets reach the end. Each
// output's rows land on its own shards, and its metrics carry its name.
#[test]
fn a_record_that_fails_in_one_output_is_written_by_none() {
    const N: i64 = 3_000;
    let (orders, refunds) = (common::RecordingSink::default(), common::RecordingSink::default());
    let sink =
        etl_runtime::Outputs::new(vec![("orders".into(), orders.clone()), ("refunds".into(), refunds.clone())], 2)
            .unwrap();
    assert_eq!(sink.slots(), 4);
    let mut config = common::config(1, 4);
    config.error_policy = etl_runtime::ErrorPolicy::Skip;
    let pipeline = etl_runtime::Pipeline::start(config, || TwoOutputs, sink, None).unwrap();
    let stored = common::Stored::default();
    pipeline.handle().add_lane(Box::new(common::MemLane::new(0, Some(N), &stored)));
    assert!(common::wait_for(Duration::from_secs(20), || stored.lock().unwrap().get(&0) == Some(&N)));
    let metrics = pipeline.metrics_text();
    let report = pipeline.shutdown(Duration::from_secs(5));
    assert!(report.fatal.is_none(), "{:?}", report.fatal);
    for (name, sink) in [("orders", &orders), ("refunds", &refunds)] {
        let rows = sink.rows.lock().unwrap();
        for offset in 0..N {
            let expected = if offset % 3 == 2 { None } else { Some(1) };
            assert_eq!(rows.get(&(0, offset)).copied(), expected, "{name}: offset {offset}");
        }
        assert_eq!(rows.len() as i64, N - N / 3, "{name}: no row of a failed record");
    }
    assert_eq!(common::metric(&metrics, r#"etl_records_dropped_total{reason="error"}"#), (N / 3) as f64);
    for output in ["orders", "refunds"] {
        let mut rows = 0.0;
        for shard in 0..2 {
            let series = format!(r#"etl_sink_batch_rows_count{{output="{output}",shard="{shard}"}}"#);
            assert!(common::metric(&metrics, &series) >= 1.0, "{series}: each output writes both its shards");
            rows += common::metric(&metrics, &format!(r#"etl_sink_rows_total{{output="{output}",shard="{shard}"}}"#));
        }
        assert_eq!(rows, (N - N / 3) as f64, "etl_sink_rows_total counts {output}'s rows");
    }
}
