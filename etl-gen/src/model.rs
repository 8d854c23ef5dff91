//! The typed model of pipeline.yaml: one struct per section, every key documented.
//!
//! These doc comments are the source of docs/configuration.md (`cargo xtask codegen`), so
//! they are written for users. Every struct rejects unknown keys. Keys whose value may be
//! read from the environment have the type [`Template`]; every other key must be a literal
//! because a build-time check depends on it (see [`TEMPLATED_KEYS`]).

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::template::Template;
use crate::units::{Attempts, ByteSize, Duration, Ratio};

/// Key paths whose values may use `${VAR}`; `*` matches one map key or list index, and a
/// trailing `.*` any property name (librdkafka names contain dots).
pub const TEMPLATED_KEYS: &[&str] = &[
    "source.kafka.brokers",
    "source.kafka.topic",
    "source.kafka.topics[*]",
    "source.kafka.topic_pattern",
    "source.kafka.group_id",
    "source.kafka.rdkafka.*",
    "source.kafka.auth.aws_msk_iam.region",
    "source.kafka.auth.aws_msk_iam.role_arn",
    "format.avro.registry",
    "format.json.registry",
    "format.protobuf.registry",
    "sink.clickhouse.shards[*].replicas[*]",
    "sink.clickhouse.user",
    "sink.clickhouse.password",
    "sink.clickhouse.ca_file",
    "sink.clickhouse.client_cert",
    "sink.clickhouse.client_key",
    "sink.clickhouse.settings.*",
    "sink.file.path",
    "errors.dlq_topic",
    "admin.listen",
];

/// A whole pipeline.yaml.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PipelineFile {
    /// What the pipeline is called and how it runs.
    pub pipeline: Pipeline,
    /// Where records come from: exactly one of `kafka` or `datagen`.
    #[serde(with = "serde_yaml::with::singleton_map")]
    #[schemars(with = "Source")]
    pub source: Source,
    /// How message payloads are encoded.
    pub format: Format,
    /// The operator chain, applied in order. Empty: every schema field maps to the
    /// same-named column.
    #[serde(default, with = "one_key_maps")]
    #[schemars(with = "Vec<Operator>")]
    pub transform: Vec<Operator>,
    /// Several output tables, by name (`[a-z][a-z0-9_]*`): each record runs the shared
    /// `transform` once, then every output whose `when` holds runs its own operators and writes
    /// its table. Without it, `sink.clickhouse.table` is the one output. Needs `sink.clickhouse`;
    /// `sink.clickhouse.table` and `shard_key` then belong to each output.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub outputs: IndexMap<String, Output>,
    /// Where rows go: exactly one of `clickhouse` or `file`.
    #[serde(with = "serde_yaml::with::singleton_map")]
    #[schemars(with = "Sink")]
    pub sink: Sink,
    /// The in-flight byte budget and the pause controller.
    #[serde(default)]
    pub backpressure: Backpressure,
    /// Offset checkpointing.
    #[serde(default)]
    pub checkpoint: Checkpoint,
    /// What happens to records that cannot be decoded or transformed.
    #[serde(default)]
    pub errors: Errors,
    /// The admin HTTP server (/metrics, /healthz, /readyz).
    #[serde(default)]
    pub admin: Admin,
}

/// (De)serializes a list of operators, each written as a one-key mapping
/// (`- filter: "..."`), which serde_yaml otherwise expects as YAML tags.
mod one_key_maps {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Operator;

    #[derive(Deserialize, Serialize)]
    #[serde(transparent)]
    struct OneKey(#[serde(with = "serde_yaml::with::singleton_map")] Operator);

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Operator>, D::Error> {
        Ok(Vec::<OneKey>::deserialize(deserializer)?.into_iter().map(|o| o.0).collect())
    }

    pub(super) fn serialize<S: Serializer>(ops: &[Operator], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(ops.iter().cloned().map(OneKey))
    }
}

/// `pipeline:`
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Pipeline {
    /// The pipeline's name: `[a-z][a-z0-9-]*`. It names the generated crate and binary.
    pub name: String,
    /// Pipeline threads; lanes (partitions) are spread over them. Default: the number of
    /// cores the binary sees at run time.
    #[serde(default)]
    pub threads: Option<u32>,
}

/// `source:` exactly one source per pipeline.
// Read once per generation; boxing the larger variant would only add noise.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Source {
    /// A Kafka topic consumed as a member of a consumer group.
    Kafka(KafkaSource),
    /// Records synthesized from the Avro schema, for local runs, tests and benchmarks.
    Datagen(DatagenSource),
}

/// `source.kafka:`
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KafkaSource {
    /// Comma-separated bootstrap servers (`host:port,...`).
    pub brokers: Template,
    /// The topic to consume. Exactly one of `topic`, `topics` and `topic_pattern` is given.
    // Each of the three is left out of the serialized model (the config hash) when absent, so a
    // pipeline written with `topic` before the other two existed keeps its hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<Template>,
    /// Several topics, consumed as one stream (`[orders-eu, orders-us]`): every partition of
    /// each is a lane of its own, and `_topic` tells the records apart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topics: Vec<Template>,
    /// Every topic whose name matches this regular expression, which starts with `^`
    /// (librdkafka's pattern subscription): `"^orders-.*"`. A matching topic created while the
    /// pipeline runs is consumed within `topic.metadata.refresh.interval.ms` (librdkafka's
    /// default: 5 minutes; set it under `rdkafka:` to pick new topics up sooner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_pattern: Option<Template>,
    /// The consumer group id.
    pub group_id: Template,
    /// How often librdkafka commits the offsets the pipeline has stored
    /// (librdkafka's `auto.commit.interval.ms`).
    #[serde(default = "defaults::commit_interval")]
    pub commit_interval: Duration,
    /// No partition assigned by then: a fatal startup error that says why.
    #[serde(default = "defaults::startup_timeout")]
    pub startup_timeout: Duration,
    /// How often librdkafka emits statistics, which feed the lag metrics; `0s` disables.
    #[serde(default = "defaults::statistics_interval")]
    pub statistics_interval: Duration,
    /// The stall watchdog's bound: a partition that nothing holds back (no backpressure, no held
    /// record), whose broker holds records for it and delivers none, and whose lag has not shrunk
    /// for this long is stalled. It is logged with its offsets and fetch state, counted in
    /// `etl_source_stalled_partitions`, and its fetch restarted at its next offset; if it stalls
    /// for this long again, the binary exits 1 (storing nothing past durable data) so that its
    /// orchestrator restarts it. `0s` disables the watchdog. It tells a broker outage from a stall
    /// by the statistics (`statistics_interval`); with statistics off, an outage longer than twice
    /// this bound also ends in exit 1.
    // Left out of the serialized model (the config hash) at its default, so that the pipelines
    // written before the key existed keep their hash: a new hash re-inserts exactly-once batches
    // written above the committed offset (docs/adr/0001-exactly-once.md, 8).
    #[serde(default = "defaults::stall_timeout", skip_serializing_if = "defaults::is_stall_timeout")]
    // schemars leaves out a default that `skip_serializing_if` skips: the docs would say "none".
    #[schemars(extend("default" = defaults::stall_timeout().to_string()))]
    pub stall_timeout: Duration,
    /// Raw librdkafka properties, checked by librdkafka's own parser at gen time, then
    /// applied verbatim. Properties the framework owns are rejected (docs/diagnostics.md).
    /// Values may be strings, numbers or booleans, and may use `${VAR}`. Unless given here,
    /// `auto.offset.reset` is `earliest` (librdkafka's `latest` would make a new group skip
    /// what the topic already holds); `--check` shows the value in force.
    #[serde(default)]
    pub rdkafka: IndexMap<String, ScalarValue>,
    /// Authentication the framework does itself, instead of `rdkafka:` properties:
    /// `aws_msk_iam` (Amazon MSK's IAM access control). It sets `security.protocol` and
    /// `sasl.mechanism`; `gen` refuses the `rdkafka:` properties that would conflict (E0207).
    // Left out of the serialized model (the config hash) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<KafkaAuth>,
}

/// `source.kafka.auth`: how the client proves who it is to the brokers.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KafkaAuth {
    /// Amazon MSK's IAM access control: SASL/OAUTHBEARER with a token that is a SigV4-signed
    /// `kafka-cluster:Connect` request, made from the standard AWS credential chain
    /// (environment, shared profile, web identity as with IRSA on EKS, container endpoint,
    /// instance metadata) and renewed before it expires. Connects over TLS (`SASL_SSL`, MSK's
    /// IAM port 9098).
    pub aws_msk_iam: AwsMskIam,
}

/// `source.kafka.auth.aws_msk_iam`.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AwsMskIam {
    /// The cluster's AWS region, e.g. `eu-west-1` (the token is signed for it).
    pub region: Template,
    /// A role to assume (STS `AssumeRole`) over the chain's credentials, e.g. a role in the
    /// cluster's account. Without it the chain's own identity signs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_arn: Option<Template>,
}

/// What `source.kafka` subscribes to, once `topic-choice` (E0204) made sure it names exactly one.
#[derive(Clone, Copy, Debug)]
pub enum Subscription<'a> {
    /// `topic`.
    Topic(&'a Template),
    /// `topics`.
    Topics(&'a [Template]),
    /// `topic_pattern`.
    Pattern(&'a Template),
}

impl KafkaSource {
    /// The subscription the keys name; `None` unless exactly one of them is given.
    pub fn subscription(&self) -> Option<Subscription<'_>> {
        match (&self.topic, self.topics.as_slice(), &self.topic_pattern) {
            (Some(topic), [], None) => Some(Subscription::Topic(topic)),
            (None, [_, ..], None) => Some(Subscription::Topics(&self.topics)),
            (None, [], Some(pattern)) => Some(Subscription::Pattern(pattern)),
            _ => None,
        }
    }
}

/// `source.datagen:`
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DatagenSource {
    /// Records per second over all partitions; 0 means as fast as possible.
    #[serde(default)]
    pub rate: u64,
    /// Records to produce before the source ends; 0 means never end.
    #[serde(default)]
    pub count: u64,
    /// Seed of the random generator: the same seed gives the same records.
    #[serde(default)]
    pub seed: u64,
    /// Partitions (lanes) to spread the records over.
    #[serde(default = "defaults::one")]
    pub partitions: u32,
}

/// A librdkafka property or ClickHouse setting value: YAML strings, numbers and booleans,
/// passed on as their text.
#[derive(Clone, Debug, Serialize, JsonSchema, PartialEq)]
#[serde(untagged)]
pub enum ScalarValue {
    /// `true` / `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A decimal number.
    Float(f64),
    /// Text, possibly with `${VAR}`.
    Text(Template),
}

impl<'de> Deserialize<'de> for ScalarValue {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ScalarValue;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string, number or boolean")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<ScalarValue, E> {
                Ok(ScalarValue::Bool(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ScalarValue, E> {
                Ok(ScalarValue::Int(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ScalarValue, E> {
                i64::try_from(v).map(ScalarValue::Int).map_err(|_| E::custom(format!("`{v}` is too large")))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<ScalarValue, E> {
                Ok(ScalarValue::Float(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ScalarValue, E> {
                Template::parse(v).map(ScalarValue::Text).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(V)
    }
}

impl ScalarValue {
    /// The value as librdkafka reads it, with any `${VAR}` left in place.
    pub fn to_text(&self) -> String {
        match self {
            Self::Bool(b) => b.to_string(),
            Self::Int(i) => i.to_string(),
            Self::Float(f) => f.to_string(),
            Self::Text(t) => t.as_str().to_owned(),
        }
    }

    /// The template, when the value reads the environment.
    pub fn template(&self) -> Option<&Template> {
        match self {
            Self::Text(t) if !t.is_literal() => Some(t),
            _ => None,
        }
    }
}

/// `format:`
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Format {
    /// Avro payloads. Exactly one of `avro`, `json` and `protobuf`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub avro: Option<AvroFormat>,
    /// JSON payloads, described by a JSON Schema (the supported subset is in the type mapping
    /// below). Exactly one of `avro`, `json` and `protobuf`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<JsonFormat>,
    /// Protobuf payloads: one message type of a `.proto` file. Exactly one of `avro`, `json`
    /// and `protobuf`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protobuf: Option<ProtobufFormat>,
    /// Larger messages are record errors (handled by `errors.policy`).
    #[serde(default = "defaults::max_message_bytes")]
    pub max_message_bytes: ByteSize,
}

/// Which payload encoding a pipeline reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// `format.avro`
    Avro,
    /// `format.json`
    Json,
    /// `format.protobuf`
    Protobuf,
}

impl Encoding {
    /// The key under `format:`.
    pub fn key(self) -> &'static str {
        match self {
            Encoding::Avro => "avro",
            Encoding::Json => "json",
            Encoding::Protobuf => "protobuf",
        }
    }
}

/// What every schema-described format has: the view of `format.avro` or `format.json` the
/// rest of the generator reads.
#[derive(Clone, Copy, Debug)]
pub struct Selected<'a> {
    /// Which format.
    pub encoding: Encoding,
    /// The schema file, relative to pipeline.yaml.
    pub schema: &'a str,
    /// The framing.
    pub wire: Wire,
    /// The schema registry, if any.
    pub registry: Option<&'a Template>,
    /// The reader schema's registry ids.
    pub schema_id: Option<&'a SchemaIds>,
    /// How long a failing registry lookup is retried.
    pub registry_timeout: Duration,
}

impl Selected<'_> {
    /// The key path of a key of this format: `format.json.schema_id`.
    pub fn path(&self, key: &str) -> String {
        if key.is_empty() {
            format!("format.{}", self.encoding.key())
        } else {
            format!("format.{}.{key}", self.encoding.key())
        }
    }

    /// The reader schema's registry ids (empty when `schema_id` is not set).
    pub fn schema_ids(&self) -> Vec<u32> {
        self.schema_id.map(SchemaIds::ids).unwrap_or_default()
    }

    /// Whether writer schemas are resolved through a registry (a Confluent frame and a
    /// `registry` key; its URL may still resolve to empty at run time).
    pub fn uses_registry(&self) -> bool {
        self.registry.is_some() && self.wire == Wire::Confluent
    }
}

impl Format {
    /// The one format the file names; `None` when it names none or more than one (a
    /// diagnostic, reported by the loader, so nothing after validation sees `None`).
    pub fn selected(&self) -> Option<Selected<'_>> {
        match (&self.avro, &self.json, &self.protobuf) {
            (Some(a), None, None) => Some(Selected {
                encoding: Encoding::Avro,
                schema: &a.schema,
                wire: a.wire,
                registry: a.registry.as_ref(),
                schema_id: a.schema_id.as_ref(),
                registry_timeout: a.registry_timeout,
            }),
            (None, Some(j), None) => Some(Selected {
                encoding: Encoding::Json,
                schema: &j.schema,
                wire: j.wire,
                registry: j.registry.as_ref(),
                schema_id: j.schema_id.as_ref(),
                registry_timeout: j.registry_timeout,
            }),
            (None, None, Some(p)) => Some(Selected {
                encoding: Encoding::Protobuf,
                schema: &p.schema,
                wire: p.wire,
                registry: p.registry.as_ref(),
                schema_id: p.schema_id.as_ref(),
                registry_timeout: p.registry_timeout,
            }),
            _ => None,
        }
    }

    /// [`Format::selected`] of a validated pipeline.
    ///
    /// # Panics
    /// When the file names no format or several, which validation rejects.
    pub fn get(&self) -> Selected<'_> {
        self.selected().expect("validation admits exactly one format")
    }
}

/// `format.avro:`
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AvroFormat {
    /// The reader schema (.avsc), relative to pipeline.yaml; compiled into the binary.
    pub schema: String,
    /// `confluent`: a magic byte and a 4-byte schema id before the datum; `raw`: the bare datum.
    #[serde(default)]
    pub wire: Wire,
    /// Optional Confluent-API schema registry: writer schemas are fetched by id and
    /// resolved to the reader schema.
    #[serde(default)]
    pub registry: Option<Template>,
    /// The registry id (or a list of ids) under which the reader schema is registered.
    /// Messages framed with one of these ids are decoded directly. With `wire: confluent` and
    /// no registry it is required, and a message with any other id is a record error, never
    /// decoded as if it were the reader schema.
    #[serde(default)]
    pub schema_id: Option<SchemaIds>,
    /// How long a failing schema registry lookup (no answer, an error, or an id the registry
    /// does not know yet) is retried, the record's lane paused meanwhile, before the record
    /// becomes a record error under `errors.policy`.
    #[serde(default = "defaults::registry_timeout")]
    pub registry_timeout: Duration,
}

/// `format.json:`
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JsonFormat {
    /// The JSON Schema of one message (a file, relative to pipeline.yaml; compiled into the
    /// binary). Its top level is an object with `properties`.
    pub schema: String,
    /// `raw`: each message is one JSON document; `confluent`: a magic byte and a 4-byte schema
    /// id before the document.
    #[serde(default = "defaults::raw_wire")]
    pub wire: Wire,
    /// Optional Confluent-API schema registry: a message framed with an id `schema_id` does not
    /// list is decoded when the writer schema the registry has under that id is one the reader
    /// schema reads (`gen --check --registry`'s rules), and is a record error otherwise.
    #[serde(default)]
    pub registry: Option<Template>,
    /// The registry id (or a list of ids) of the reader schema, as for `format.avro`: decoded
    /// without asking the registry. With `wire: confluent` and no registry it is required, and a
    /// message framed with any other id is a record error.
    #[serde(default)]
    pub schema_id: Option<SchemaIds>,
    /// How long a failing schema registry lookup is retried, the record's lane paused meanwhile,
    /// before the record becomes a record error under `errors.policy`.
    #[serde(default = "defaults::registry_timeout")]
    pub registry_timeout: Duration,
}

/// `format.protobuf:`
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProtobufFormat {
    /// The `.proto` file (relative to pipeline.yaml). Its imports are resolved relative to its
    /// directory; Google's well-known types (`google/protobuf/timestamp.proto`, ...) are built
    /// in. Parsed by `gen`: no `protoc` is needed, and nothing of it is read at run time.
    pub schema: String,
    /// The fully qualified name of the message each Kafka message holds: `web.Click`.
    pub message: String,
    /// `raw`: each message is the bare Protobuf bytes; `confluent`: a magic byte, a 4-byte
    /// schema id and the message-index path (zig-zag varints) before them.
    #[serde(default = "defaults::raw_wire")]
    pub wire: Wire,
    /// Optional Confluent-API schema registry: a message framed with an id `schema_id` does not
    /// list is decoded when the writer schema the registry has under that id is one the reader
    /// schema reads (`gen --check --registry`'s rules), and is a record error otherwise.
    #[serde(default)]
    pub registry: Option<Template>,
    /// The registry id (or a list of ids) of the reader schema, as for `format.avro`: decoded
    /// without asking the registry. With `wire: confluent` and no registry it is required, and a
    /// message framed with any other id is a record error.
    #[serde(default)]
    pub schema_id: Option<SchemaIds>,
    /// How long a failing schema registry lookup is retried, the record's lane paused meanwhile,
    /// before the record becomes a record error under `errors.policy`.
    #[serde(default = "defaults::registry_timeout")]
    pub registry_timeout: Duration,
}

/// `format.avro.schema_id`: one id, or a list of them.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(untagged)]
pub enum SchemaIds {
    /// One id.
    One(u32),
    /// Several ids (the reader schema registered under several subjects or versions).
    Many(Vec<u32>),
}

impl SchemaIds {
    /// The ids, in the order written.
    pub fn ids(&self) -> Vec<u32> {
        match self {
            SchemaIds::One(id) => vec![*id],
            SchemaIds::Many(ids) => ids.clone(),
        }
    }
}

/// How a message frames its payload.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Wire {
    /// Magic byte 0, a big-endian 4-byte schema id, then the payload.
    #[default]
    Confluent,
    /// The bare payload.
    Raw,
}

/// One operator of `transform:`.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Operator {
    /// Keep rows for which the expression is true.
    Filter(String),
    /// Add or replace fields: `{ field: "expression" }`.
    Map(IndexMap<String, String>),
    /// Rename fields: `{ old: new }`.
    Rename(IndexMap<String, String>),
    /// Remove these fields.
    Drop(Vec<String>),
    /// One row per element of this array field; the field then holds the element.
    FlatMap(String),
    /// Keep only these fields, in this order (the column order).
    Select(Vec<String>),
    /// A user function `fn(row: &mut Row) -> bool` (false drops the row).
    Rust(RustOperator),
}

/// `transform[].rust:`
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RustOperator {
    /// A Rust file next to pipeline.yaml; it is included in the generated crate.
    pub file: String,
    /// The function's name.
    #[serde(rename = "fn")]
    pub function: String,
}

/// `sink:` exactly one sink per pipeline.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Sink {
    /// A ClickHouse table, sharded.
    Clickhouse(ClickhouseSink),
    /// A local NDJSON file (one shard), for local runs and tests.
    File(FileSink),
}

impl Sink {
    /// The knobs of the sizing rule, which both sinks have.
    pub fn flow(&self) -> Flow {
        let (batch, inflight, chunk, queue) = match self {
            Self::Clickhouse(c) => (&c.batch, &c.inflight, &c.chunk, &c.queue),
            Self::File(f) => (&f.batch, &f.inflight, &f.chunk, &f.queue),
        };
        Flow { batch: batch.clone(), inflight: inflight.clone(), chunk: chunk.clone(), queue: queue.clone() }
    }

    /// The number of shards (`shards` in the sizing rule).
    pub fn shard_count(&self) -> u64 {
        match self {
            Self::Clickhouse(c) => c.shards.len() as u64,
            Self::File(_) => 1,
        }
    }

    /// `clickhouse` or `file`: the key under `sink:`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Clickhouse(_) => "clickhouse",
            Self::File(_) => "file",
        }
    }
}

/// `sink.clickhouse:`
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClickhouseSink {
    /// The database of the table.
    #[serde(default = "defaults::database")]
    pub database: String,
    /// The table rows are inserted into. Required unless `outputs` names the tables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
    /// Rows are routed to shards by a hash of this output field; without it, round-robin.
    #[serde(default)]
    pub shard_key: Option<String>,
    /// Extra ClickHouse settings sent with every insert. Unless it names `async_insert`, every
    /// insert sends `async_insert=0`, so a server whose default turns async inserts on cannot
    /// change what an acknowledged insert means.
    #[serde(default)]
    pub settings: IndexMap<String, ScalarValue>,
    /// The ClickHouse input format of insert bodies: `native`, columns, which ClickHouse reads
    /// with a copy per column (a third less ClickHouse CPU than `rowbinary` in
    /// docs/BENCHMARKS.md, for about 30 ns per row here to make the columns); `rowbinary`, rows,
    /// which ClickHouse parses value by value. Batches, refused-row isolation and exactly-once
    /// work the same with either.
    #[serde(default)]
    pub format: InsertFormat,
    /// How insert bodies are compressed (ClickHouse's block framing over HTTP): `lz4`, fast on
    /// both sides; `zstd`, smaller bodies for more CPU on both sides (for a thin or metered
    /// network); `none`, for a server on the same host.
    #[serde(default)]
    pub compression: Compression,
    /// The column type of enums (Avro and Protobuf enums, JSON Schema string `enum`s):
    /// `low_cardinality`, `LowCardinality(String)`, which takes symbols a later schema adds
    /// without an ALTER; `enum`, `Enum8` (or `Enum16` past 128 symbols) numbering the symbols
    /// from 0 in schema order, one byte a value, and a table that refuses unknown symbols.
    #[serde(default, rename = "enum")]
    pub enum_column: EnumType,
    /// How a nested record (an Avro record, a JSON Schema object with `properties`, a
    /// Protobuf message) becomes columns: `flatten`, one column per leaf named
    /// `parent_child`; `tuple`, one `Tuple(name T, ...)` column named after the field (records
    /// nested in it are tuples too; the fields of an optional record are Nullable, as
    /// ClickHouse has no `Nullable(Tuple)`). Expressions read a nested field as
    /// `parent.child` either way. Records inside arrays and maps are tuples in both modes.
    #[serde(default)]
    pub nested: NestedMode,
    /// Time allowed for one insert.
    #[serde(default = "defaults::insert_timeout")]
    pub timeout: Duration,
    /// Retries of a failed insert.
    #[serde(default)]
    pub retry: Retry,
    /// Exactly-once inserts: batches per partition and shard, their spans recorded in the ledger
    /// table `<table>_etl_batches` before each insert, replays re-cut at the recorded spans so
    /// ClickHouse drops the repeats (docs/adr/0001-exactly-once.md). Needs a Kafka source and a
    /// table that deduplicates inserts (`gen --ddl` prints both tables).
    #[serde(default)]
    pub exactly_once: bool,
    /// One entry per shard; `len(shards)` is `shards` in the sizing rule.
    #[serde(default = "defaults::shards")]
    pub shards: Vec<Shard>,
    /// The ClickHouse user.
    #[serde(default = "defaults::user")]
    pub user: Template,
    /// The ClickHouse password (never logged).
    #[serde(default = "defaults::password")]
    pub password: Template,
    /// A PEM file of CA certificates trusted for `https://` replicas, besides Mozilla's roots
    /// (for a ClickHouse behind a private CA).
    #[serde(default)]
    pub ca_file: Option<Template>,
    /// A PEM file with the certificate (and its chain) this pipeline shows to `https://`
    /// replicas that require a client certificate (mutual TLS, e.g. ClickHouse Cloud private
    /// endpoints). Needs `client_key`.
    // Left out of the serialized model when unset, so that the config hash of every pipeline
    // written before them (and its exactly-once tokens) is unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<Template>,
    /// The PEM file of `client_cert`'s private key. The path may be shown; the key never is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key: Option<Template>,
    // The four flow keys below repeat in `FileSink`: serde's `flatten` cannot be combined
    // with `deny_unknown_fields`, and unknown keys must be errors. `Sink::flow` reads both.
    /// When a batch is written.
    #[serde(default)]
    pub batch: Batch,
    /// Concurrent writes.
    #[serde(default)]
    pub inflight: Inflight,
    /// The unit pipeline threads hand to the shard queues.
    #[serde(default)]
    pub chunk: Chunk,
    /// The per-shard queue between pipeline threads and the sink.
    #[serde(default)]
    pub queue: Queue,
}

/// `outputs.<name>:` one output table and the operators that make its rows.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Output {
    /// The table this output's rows are inserted into; no two outputs may write one table.
    pub table: String,
    /// The table's database. Default: `sink.clickhouse.database`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    /// A condition on the row the shared `transform` leaves (the language of `filter`): the
    /// output takes a record only when it holds. Without it, every record. A record that no
    /// output takes counts as intentionally dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// Operators for this output alone, after the shared `transform` (every operator but
    /// `rust`, which belongs in the shared `transform`).
    #[serde(default, with = "one_key_maps", skip_serializing_if = "Vec::is_empty")]
    #[schemars(with = "Vec<Operator>")]
    pub transform: Vec<Operator>,
    /// Rows are routed to shards by a hash of this field of the output's row; without it,
    /// round-robin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_key: Option<String>,
}

/// One table a pipeline writes: an entry of `outputs`, or `sink.clickhouse.table`.
#[derive(Clone, Copy, Debug)]
pub struct OutputTable<'a> {
    /// The output's name; `None` for `sink.clickhouse.table`.
    pub name: Option<&'a str>,
    /// The table's database.
    pub database: &'a str,
    /// The table.
    pub table: &'a str,
}

impl PipelineFile {
    /// The tables the pipeline writes, in output order (empty for a file sink, or a ClickHouse
    /// sink that names none, which `output-choice` refuses).
    pub fn output_tables(&self) -> Vec<OutputTable<'_>> {
        let Sink::Clickhouse(c) = &self.sink else { return Vec::new() };
        if self.outputs.is_empty() {
            return c
                .table
                .as_deref()
                .map(|table| OutputTable { name: None, database: &c.database, table })
                .into_iter()
                .collect();
        }
        self.outputs
            .iter()
            .map(|(name, o)| OutputTable {
                name: Some(name),
                database: o.database.as_deref().unwrap_or(&c.database),
                table: &o.table,
            })
            .collect()
    }

    /// The number of outputs (`outputs` in the sizing rule): the entries of `outputs`, or 1.
    pub fn output_count(&self) -> u64 {
        self.outputs.len().max(1) as u64
    }
}

/// `sink.clickhouse.format`: the input format of insert bodies.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum InsertFormat {
    /// ClickHouse's columnar Native format, made from the rows as each insert is sent.
    #[default]
    Native,
    /// Rows as the generated encoders write them.
    Rowbinary,
}

impl InsertFormat {
    /// The value as pipeline.yaml writes it.
    pub fn key(self) -> &'static str {
        match self {
            InsertFormat::Native => "native",
            InsertFormat::Rowbinary => "rowbinary",
        }
    }
}

/// `sink.clickhouse.nested`: how nested records become columns.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum NestedMode {
    /// One column per leaf, `parent_child`.
    #[default]
    Flatten,
    /// One `Tuple` column per top-level record field.
    Tuple,
}

/// `sink.clickhouse.enum`: the column type of enums.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EnumType {
    /// `LowCardinality(String)`.
    #[default]
    LowCardinality,
    /// `Enum8` or `Enum16`, the symbols numbered from 0 in schema order.
    Enum,
}

/// `sink.clickhouse.compression`: how insert bodies are compressed.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// LZ4 blocks.
    #[default]
    Lz4,
    /// Zstandard blocks (level 3).
    Zstd,
    /// Uncompressed.
    None,
}

impl Compression {
    /// The value as pipeline.yaml writes it.
    pub fn key(self) -> &'static str {
        match self {
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
            Compression::None => "none",
        }
    }
}

/// One ClickHouse shard.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Shard {
    /// The shard's replicas as `http://host:port` or `https://host:port` URLs; a failing
    /// replica is rotated out and retried later.
    pub replicas: Vec<Template>,
}

/// `sink.clickhouse.retry:`
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Retry {
    /// Attempts per batch for a retryable error (a connection refused, a timeout, a 5xx, a
    /// transient ClickHouse code), the first included, or `unlimited` (the default): a shard that
    /// is down pauses the lanes, and writing resumes when it is back. With a number, the pipeline
    /// stops after that many attempts without storing the batch's offsets.
    #[serde(default = "defaults::max_attempts")]
    pub max_attempts: Attempts,
    /// The first backoff; it doubles each attempt, with jitter.
    #[serde(default = "defaults::initial_backoff")]
    pub initial_backoff: Duration,
    /// The largest backoff.
    #[serde(default = "defaults::max_backoff")]
    pub max_backoff: Duration,
}

/// `sink.file:`
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileSink {
    /// The output file; relative paths are relative to the working directory.
    pub path: Template,
    /// The output format.
    #[serde(default)]
    pub format: FileFormat,
    /// When a batch is written.
    #[serde(default)]
    pub batch: Batch,
    /// Concurrent writes.
    #[serde(default)]
    pub inflight: Inflight,
    /// The unit pipeline threads hand to the shard queues.
    #[serde(default)]
    pub chunk: Chunk,
    /// The per-shard queue between pipeline threads and the sink.
    #[serde(default)]
    pub queue: Queue,
}

/// The file sink's format.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FileFormat {
    /// One JSON object per row and line.
    #[default]
    Ndjson,
}

/// The batching knobs both sinks have; each appears in the sizing rule.
#[derive(Clone, Debug)]
pub struct Flow {
    /// `batch.*`
    pub batch: Batch,
    /// `inflight.*`
    pub inflight: Inflight,
    /// `chunk.*`
    pub chunk: Chunk,
    /// `queue.*`
    pub queue: Queue,
}

/// `batch:` a batch is written when any limit is reached.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Batch {
    /// Rows per batch at most.
    #[serde(default = "defaults::max_rows")]
    pub max_rows: u64,
    /// Encoded bytes per batch at most.
    #[serde(default = "defaults::max_bytes")]
    pub max_bytes: ByteSize,
    /// How long a partial batch waits for more rows.
    #[serde(default = "defaults::linger")]
    pub linger: Duration,
}

/// `inflight:`
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Inflight {
    /// Concurrent writes per shard.
    #[serde(default = "defaults::max_per_shard")]
    pub max_per_shard: u64,
}

/// `chunk:`
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Chunk {
    /// Encoded bytes at which a pipeline thread hands a chunk to its shard queue.
    #[serde(default = "defaults::chunk_bytes")]
    pub target_bytes: ByteSize,
}

/// `queue:`
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Queue {
    /// Chunks per shard queue.
    #[serde(default = "defaults::queue_capacity")]
    pub capacity: u64,
}

/// `backpressure:`
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Backpressure {
    /// Bytes that may be in flight between the source and durable writes. Must satisfy the
    /// sizing rule (docs/configuration.md#the-sizing-rule).
    #[serde(default = "defaults::max_inflight_bytes")]
    pub max_inflight_bytes: ByteSize,
    /// Lanes pause when in-flight bytes cross `max_inflight_bytes × high_ratio`.
    #[serde(default = "defaults::high_ratio")]
    pub high_ratio: Ratio,
    /// Paused lanes resume below `max_inflight_bytes × low_ratio` (and after `min_pause`).
    #[serde(default = "defaults::low_ratio")]
    pub low_ratio: Ratio,
    /// A paused lane stays paused at least this long, so the controller cannot flap.
    #[serde(default = "defaults::min_pause")]
    pub min_pause: Duration,
}

/// `checkpoint:`
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// On revocation and shutdown, the time allowed to write what is in flight before the
    /// final offsets are committed.
    #[serde(default = "defaults::drain_timeout")]
    pub drain_timeout: Duration,
}

/// `errors:`
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Errors {
    /// What to do with a record that cannot be decoded or transformed.
    #[serde(default)]
    pub policy: ErrorPolicy,
    /// The Kafka topic for `policy: dlq`.
    #[serde(default)]
    pub dlq_topic: Option<Template>,
    /// What to do with a tombstone (a message with a null payload).
    #[serde(default)]
    pub tombstones: TombstonePolicy,
}

/// `errors.policy`
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ErrorPolicy {
    /// Count the record and move on.
    #[default]
    Skip,
    /// Stop the pipeline without committing past the record.
    Fail,
    /// Write the raw message with error headers to `dlq_topic`, then move on.
    Dlq,
}

/// `errors.tombstones`
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TombstonePolicy {
    /// Count the tombstone and move on.
    #[default]
    Skip,
    /// Stop the pipeline without committing past the tombstone.
    Fail,
}

/// `admin:`
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Admin {
    /// The address of /metrics, /healthz and /readyz.
    #[serde(default = "defaults::listen")]
    pub listen: Template,
    /// Serve `POST /admin/pause` and `POST /admin/resume` (a pause for maintenance: the member
    /// stays in its group, what was read is written and committed, nothing more is read until
    /// resumed; not kept across a restart). Off by default: the admin port has no
    /// authentication, so anyone who reaches it could stop the pipeline.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub control: bool,
}

macro_rules! default_impls {
    ($($ty:ident { $($field:ident: $value:expr),* $(,)? })*) => {
        $(impl Default for $ty {
            fn default() -> Self {
                Self { $($field: $value),* }
            }
        })*
    };
}

default_impls! {
    Retry {
        max_attempts: defaults::max_attempts(),
        initial_backoff: defaults::initial_backoff(),
        max_backoff: defaults::max_backoff(),
    }
    Batch { max_rows: defaults::max_rows(), max_bytes: defaults::max_bytes(), linger: defaults::linger() }
    Inflight { max_per_shard: defaults::max_per_shard() }
    Chunk { target_bytes: defaults::chunk_bytes() }
    Queue { capacity: defaults::queue_capacity() }
    Backpressure {
        max_inflight_bytes: defaults::max_inflight_bytes(),
        high_ratio: defaults::high_ratio(),
        low_ratio: defaults::low_ratio(),
        min_pause: defaults::min_pause(),
    }
    Checkpoint { drain_timeout: defaults::drain_timeout() }
    Errors { policy: ErrorPolicy::Skip, dlq_topic: None, tombstones: TombstonePolicy::Skip }
    Admin { listen: defaults::listen(), control: false }
}

/// The defaults (docs/configuration.md); with them the sizing rule holds for 1 to 3 shards.
/// Those the runtime applies too come from the shared table (`crate::contract::defaults`).
mod defaults {
    use super::*;
    use crate::contract::defaults as shared;

    pub(super) fn one() -> u32 {
        1
    }
    pub(super) fn commit_interval() -> Duration {
        Duration::from_secs(5)
    }
    /// Twice librdkafka's 45 s `session.timeout.ms`: a restart right after a crash waits for the
    /// dead member's session to expire, then for the rebalance (rule E0304; the soak saw 55 s).
    pub(super) fn startup_timeout() -> Duration {
        Duration::from_secs(90)
    }
    pub(super) fn statistics_interval() -> Duration {
        Duration::from_secs(5)
    }
    pub(super) fn stall_timeout() -> Duration {
        duration(shared::STALL_TIMEOUT)
    }
    pub(super) fn is_stall_timeout(d: &Duration) -> bool {
        *d == stall_timeout()
    }
    pub(super) fn max_message_bytes() -> ByteSize {
        ByteSize::mib(1)
    }
    pub(super) fn registry_timeout() -> Duration {
        duration(shared::REGISTRY_TIMEOUT)
    }
    /// Most JSON and Protobuf topics carry bare payloads; Avro's default stays `confluent`.
    pub(super) fn raw_wire() -> super::Wire {
        super::Wire::Raw
    }
    pub(super) fn database() -> String {
        "default".to_owned()
    }
    pub(super) fn insert_timeout() -> Duration {
        Duration::from_secs(30)
    }
    pub(super) fn shards() -> Vec<Shard> {
        vec![Shard { replicas: vec![template("${CLICKHOUSE_URL:-http://localhost:8123}")] }]
    }
    pub(super) fn user() -> Template {
        template("${CLICKHOUSE_USER:-default}")
    }
    pub(super) fn password() -> Template {
        template("${CLICKHOUSE_PASSWORD:-}")
    }
    pub(super) fn max_attempts() -> Attempts {
        Attempts::from_limit(shared::RETRY_MAX_ATTEMPTS)
    }
    pub(super) fn initial_backoff() -> Duration {
        duration(shared::RETRY_INITIAL_BACKOFF)
    }
    pub(super) fn max_backoff() -> Duration {
        duration(shared::RETRY_MAX_BACKOFF)
    }
    pub(super) fn max_rows() -> u64 {
        shared::BATCH_MAX_ROWS
    }
    pub(super) fn max_bytes() -> ByteSize {
        ByteSize::b(shared::BATCH_MAX_BYTES)
    }
    pub(super) fn linger() -> Duration {
        duration(shared::BATCH_LINGER)
    }
    pub(super) fn max_per_shard() -> u64 {
        shared::INFLIGHT_PER_SHARD
    }
    pub(super) fn chunk_bytes() -> ByteSize {
        ByteSize::b(shared::CHUNK_TARGET_BYTES)
    }
    pub(super) fn queue_capacity() -> u64 {
        shared::QUEUE_CAPACITY
    }
    pub(super) fn max_inflight_bytes() -> ByteSize {
        ByteSize::b(shared::MAX_INFLIGHT_BYTES)
    }
    pub(super) fn high_ratio() -> Ratio {
        ratio(shared::HIGH_RATIO)
    }
    pub(super) fn low_ratio() -> Ratio {
        ratio(shared::LOW_RATIO)
    }
    pub(super) fn min_pause() -> Duration {
        duration(shared::MIN_PAUSE)
    }
    pub(super) fn drain_timeout() -> Duration {
        duration(shared::DRAIN_TIMEOUT)
    }
    pub(super) fn listen() -> Template {
        template("0.0.0.0:9464")
    }

    fn duration(d: std::time::Duration) -> Duration {
        Duration::from_millis(d.as_millis() as u64)
    }

    fn ratio((numerator, places): (u64, u32)) -> Ratio {
        Ratio::new(numerator, places)
    }

    fn template(text: &str) -> Template {
        Template::parse(text).expect("default templates are valid")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::{PipelineFile, defaults};

    /// The first `default` stated for a property named `name` anywhere in the schema.
    fn schema_default(schema: &Value, name: &str) -> Option<Value> {
        match schema {
            Value::Object(map) => {
                if let Some(default) = map.get("properties").and_then(|p| p.get(name)).and_then(|p| p.get("default")) {
                    return Some(default.clone());
                }
                map.values().find_map(|v| schema_default(v, name))
            }
            Value::Array(items) => items.iter().find_map(|v| schema_default(v, name)),
            _ => None,
        }
    }

    /// `stall_timeout`'s default is added to the schema by hand (schemars leaves out a default
    /// that `skip_serializing_if` skips): it must be there, and be the one the model applies.
    #[test]
    fn the_schema_states_the_stall_timeout_default_the_model_applies() {
        let schema = serde_json::to_value(schemars::schema_for!(PipelineFile)).unwrap();
        let stated = schema_default(&schema, "stall_timeout").expect("the schema states a default");
        assert_eq!(stated, Value::String(defaults::stall_timeout().to_string()));
    }
}
