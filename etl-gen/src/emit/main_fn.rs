//! The `main` of the generated `src/main.rs`: the settings read from the environment
//! (`SETTINGS`, and a named index for each one `main` reads), and `main` itself, which builds
//! the runtime configuration, the source, the sink and the chains and calls
//! `etl_runtime::__private::run`.

use std::cell::RefCell;
use std::collections::BTreeMap;

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};

use super::Error;
use super::chain_impl::{MainInputs, datagen_wire};
use crate::contract::defaults::{RETRY_INITIAL_BACKOFF, RETRY_MAX_ATTEMPTS, RETRY_MAX_BACKOFF};
use crate::contract::owned_properties::AUTO_OFFSET_RESET;
use crate::model::{ErrorPolicy, Sink, Source, TombstonePolicy, Wire};
use crate::template::{Part, Template};

/// Every value the binary reads from its environment: key path, template, secret. The
/// order is the order `--check` prints them in.
pub(super) fn settings(m: &crate::model::PipelineFile) -> Result<Vec<(String, Template, bool)>, Error> {
    let mut out = settings_of(m)?;
    for (key, _, secret) in &mut out {
        *secret = crate::contract::secret::is_secret_setting(key);
    }
    Ok(out)
}

/// The settings of [`settings`], before the shared definition decides which are secret.
fn settings_of(m: &crate::model::PipelineFile) -> Result<Vec<(String, Template, bool)>, Error> {
    let mut out = vec![("admin.listen".to_owned(), m.admin.listen.clone(), false)];
    if let Source::Kafka(k) = &m.source {
        out.push(("source.kafka.brokers".into(), k.brokers.clone(), false));
        if let Some(topic) = &k.topic {
            out.push(("source.kafka.topic".into(), topic.clone(), false));
        }
        for (i, topic) in k.topics.iter().enumerate() {
            out.push((format!("source.kafka.topics[{i}]"), topic.clone(), false));
        }
        if let Some(pattern) = &k.topic_pattern {
            out.push(("source.kafka.topic_pattern".into(), pattern.clone(), false));
        }
        out.push(("source.kafka.group_id".into(), k.group_id.clone(), false));
        for (name, value) in &k.rdkafka {
            let key = format!("source.kafka.rdkafka.{name}");
            out.push((key.clone(), template(key, &value.to_text())?, false));
        }
        // The framework's default, shown by `--check` like the properties the user wrote.
        if !k.rdkafka.contains_key("auto.offset.reset") {
            let earliest = Template::parse(AUTO_OFFSET_RESET).expect("a literal");
            out.push(("source.kafka.rdkafka.auto.offset.reset".into(), earliest, false));
        }
        if let Some(auth) = &k.auth {
            let msk = &auth.aws_msk_iam;
            out.push(("source.kafka.auth.aws_msk_iam.region".into(), msk.region.clone(), false));
            if let Some(role) = &msk.role_arn {
                out.push(("source.kafka.auth.aws_msk_iam.role_arn".into(), role.clone(), false));
            }
        }
    }
    match &m.sink {
        Sink::File(f) => out.push(("sink.file.path".into(), f.path.clone(), false)),
        Sink::Clickhouse(c) => {
            for (s, shard) in c.shards.iter().enumerate() {
                for (r, replica) in shard.replicas.iter().enumerate() {
                    out.push((format!("sink.clickhouse.shards[{s}].replicas[{r}]"), replica.clone(), false));
                }
            }
            out.push(("sink.clickhouse.user".into(), c.user.clone(), false));
            out.push(("sink.clickhouse.password".into(), c.password.clone(), false));
            if let Some(ca_file) = &c.ca_file {
                out.push(("sink.clickhouse.ca_file".into(), ca_file.clone(), false));
            }
            for (key, file) in [("client_cert", &c.client_cert), ("client_key", &c.client_key)] {
                if let Some(file) = file {
                    out.push((format!("sink.clickhouse.{key}"), file.clone(), false));
                }
            }
            for (name, value) in &c.settings {
                let key = format!("sink.clickhouse.settings.{name}");
                out.push((key.clone(), template(key, &value.to_text())?, false));
            }
        }
    }
    if let Some(format) = m.format.selected()
        && let (Some(registry), Wire::Confluent) = (format.registry, format.wire)
    {
        out.push((format.path("registry"), registry.clone(), false));
    }
    if let (ErrorPolicy::Dlq, Some(topic)) = (&m.errors.policy, &m.errors.dlq_topic) {
        out.push(("errors.dlq_topic".into(), topic.clone(), false));
    }
    Ok(out)
}

/// The template of the setting `key`.
fn template(key: String, text: &str) -> Result<Template, Error> {
    Template::parse(text).map_err(|why| Error::Setting { key, why })
}

fn parts_tokens(t: &Template) -> TokenStream {
    let parts = t.parts().iter().map(|p| match p {
        Part::Lit(s) => quote!(rt::Part::Lit(#s)),
        Part::Var { name, default: Some(d) } => quote!(rt::Part::Var(#name, Some(#d))),
        Part::Var { name, default: None } => quote!(rt::Part::Var(#name, None)),
    });
    quote!(&[#(#parts),*])
}

/// Emits `SETTINGS` and `main`.
pub(super) fn emit(inputs: &MainInputs<'_>) -> Result<TokenStream, Error> {
    let m = &inputs.pipeline.model;
    let name = &m.pipeline.name;
    let version = inputs.version;
    let hash = inputs.config_hash;

    // Every value read from the environment, with its key, for `--check` and start-up.
    let settings = Settings::new(settings(m)?);
    let source = source(inputs, &settings)?;
    let (sink, shard_count) = sink(inputs, &settings)?;
    let config = runtime_config(inputs, &settings, shard_count)?;
    let chains = chains(inputs, &settings)?;
    let dead_letter = dead_letter(m, &settings)?;
    let rdkafka_fn = rdkafka_fn(m, &settings)?;
    let setting_indexes = settings.module();
    let setting_items = settings.list.iter().map(|(key, t, _)| {
        let parts = parts_tokens(t);
        quote!(rt::Setting { key: #key, parts: #parts })
    });
    let schema_const = super::format::schema_const(inputs.pipeline, inputs.schema_include);
    Ok(unsuffixed(quote! {
        #schema_const

        const BUILD: rt::Build = rt::Build { pipeline: #name, version: #version, config_hash: #hash };

        /// The values read from the environment at start-up.
        static SETTINGS: &[rt::Setting] = &[#(#setting_items),*];

        #setting_indexes

        fn main() -> ::std::process::ExitCode {
            let resolved = match rt::start(&BUILD, SETTINGS) {
                rt::Start::Run(resolved) => resolved,
                rt::Start::Exit(code) => return code,
            };
            rt::init_logging();
            #config
            #source
            #sink
            #dead_letter
            #chains
            rt::run_command(resolved.command(), config, source, chains, sink, dead_letter).into()
        }

        #rdkafka_fn
    }))
}

/// The statements that make `source`: datagen, or the Kafka consumer.
fn source(inputs: &MainInputs<'_>, settings: &Settings) -> Result<TokenStream, Error> {
    let m = &inputs.pipeline.model;
    let drain = m.checkpoint.drain_timeout.as_millis();
    Ok(match &m.source {
        Source::Datagen(d) => {
            let (rate, count, seed, partitions) = (d.rate, d.count, d.seed, d.partitions);
            let wire = datagen_wire(m);
            let encoding = super::format::datagen_encoding(inputs.pipeline);
            quote!(
                let schema = rt::apache_avro::Schema::parse_str(SCHEMA).expect("the schema was validated by gen");
                let source = match rt::DatagenSource::new(schema, rt::DatagenConfig {
                    rate: #rate, count: #count, seed: #seed, partitions: #partitions, wire: #wire, encoding: #encoding,
                }) {
                    Ok(source) => source,
                    Err(e) => return rt::startup_error(e),
                };
            )
        }
        Source::Kafka(k) => {
            let (commit, startup, stats) =
                (k.commit_interval.as_millis(), k.startup_timeout.as_millis(), k.statistics_interval.as_millis());
            let brokers = settings.value("source.kafka.brokers")?;
            let topic = subscription(k, settings)?;
            let group_id = settings.value("source.kafka.group_id")?;
            let auth = auth_call(k);
            quote!(
                let source = match rt::KafkaSource::new(rt::KafkaSourceConfig {
                    brokers: #brokers.to_owned(),
                    topic: #topic,
                    group_id: #group_id.to_owned(),
                    commit_interval: ::std::time::Duration::from_millis(#commit),
                    startup_timeout: ::std::time::Duration::from_millis(#startup),
                    statistics_interval: ::std::time::Duration::from_millis(#stats),
                    properties: rdkafka_properties(&resolved),
                    auth: #auth,
                }) {
                    Ok(source) => source.with_drain_timeout(::std::time::Duration::from_millis(#drain)),
                    Err(e) => return rt::startup_error(e),
                };
            )
        }
    })
}

/// `kafka_auth(&resolved)` where the pipeline has `source.kafka.auth` (and so the function),
/// else `None`.
fn auth_call(k: &crate::model::KafkaSource) -> TokenStream {
    if k.auth.is_some() { quote!(kafka_auth(&resolved)) } else { quote!(None) }
}

/// The body of `kafka_auth`: `source.kafka.auth` from the resolved settings.
fn kafka_auth(k: &crate::model::KafkaSource, settings: &Settings) -> Result<TokenStream, Error> {
    let Some(auth) = &k.auth else { return Ok(quote!(None)) };
    let region = settings.value("source.kafka.auth.aws_msk_iam.region")?;
    let role_arn = match &auth.aws_msk_iam.role_arn {
        Some(_) => {
            let role = settings.value("source.kafka.auth.aws_msk_iam.role_arn")?;
            quote!(Some(#role.to_owned()))
        }
        None => quote!(None),
    };
    Ok(quote!(Some(rt::KafkaAuth::AwsMskIam { region: #region.to_owned(), role_arn: #role_arn })))
}

/// The expression of `KafkaSourceConfig::topic` (a `String`): the topic, the topics joined by
/// commas (a topic name cannot hold one), or the pattern, which starts with `^`. The values of
/// `topics` and `topic_pattern` are checked once resolved, so that a variable cannot turn a name
/// into a list or a pattern into a name (`topic` is passed as it always was).
fn subscription(k: &crate::model::KafkaSource, settings: &Settings) -> Result<TokenStream, Error> {
    use crate::model::Subscription;
    Ok(match k.subscription() {
        Some(Subscription::Topic(_)) => {
            let topic = settings.value("source.kafka.topic")?;
            quote!(#topic.to_owned())
        }
        Some(Subscription::Topics(topics)) => {
            let topics = (0..topics.len())
                .map(|i| settings.value(&format!("source.kafka.topics[{i}]")))
                .collect::<Result<Vec<_>, _>>()?;
            quote!(match rt::topic_list(&[#(#topics),*]) {
                Ok(topics) => topics,
                Err(e) => return rt::startup_error(e),
            })
        }
        Some(Subscription::Pattern(_)) => {
            let pattern = settings.value("source.kafka.topic_pattern")?;
            quote!(match rt::topic_pattern(#pattern) {
                Ok(pattern) => pattern,
                Err(e) => return rt::startup_error(e),
            })
        }
        // topic-choice (E0204) refused it before emission.
        None => return Err(Error::Setting { key: "source.kafka.topic".into(), why: "no topic".into() }),
    })
}

/// The statements that make `sink` (a file, or the ClickHouse shards), and the shard count (the
/// number of sink slots: outputs × shards).
fn sink(inputs: &MainInputs<'_>, settings: &Settings) -> Result<(TokenStream, usize), Error> {
    let m = &inputs.pipeline.model;
    Ok(match &m.sink {
        Sink::File(_) => {
            let path = settings.value("sink.file.path")?;
            (
                quote!(
                    let sink = match rt::FileSink::open(#path) {
                        Ok(sink) => sink,
                        Err(e) => return rt::startup_error(format!("sink.file.path `{}`: {e}", #path)),
                    };
                ),
                1,
            )
        }
        Sink::Clickhouse(c) => {
            let config = ClickhouseTokens::new(inputs, settings, c)?;
            if m.outputs.is_empty() {
                (one_table(inputs, c, &config), c.shards.len())
            } else {
                (several_outputs(inputs, c, &config), m.outputs.len() * c.shards.len())
            }
        }
    })
}

/// The parts of a `ClickhouseSinkConfig` that every output of a pipeline shares, as tokens.
struct ClickhouseTokens {
    shards: Vec<TokenStream>,
    user: TokenStream,
    password: TokenStream,
    settings: TokenStream,
    format: TokenStream,
    compression: TokenStream,
    timeout: u64,
    ca_file: TokenStream,
    client_cert: TokenStream,
    client_key: TokenStream,
    exactly_once: TokenStream,
}

impl ClickhouseTokens {
    fn new(
        inputs: &MainInputs<'_>,
        settings: &Settings,
        c: &crate::model::ClickhouseSink,
    ) -> Result<ClickhouseTokens, Error> {
        let m = &inputs.pipeline.model;
        let mut shards = Vec::new();
        for (s, shard) in c.shards.iter().enumerate() {
            let mut replicas = Vec::new();
            for r in 0..shard.replicas.len() {
                let key = format!("sink.clickhouse.shards[{s}].replicas[{r}]");
                let replica = settings.value(&key)?;
                replicas.push(quote!(#replica.to_owned()));
            }
            shards.push(quote!(vec![#(#replicas),*]));
        }
        let format = match c.format {
            crate::model::InsertFormat::Rowbinary => quote!(RowBinary),
            crate::model::InsertFormat::Native => quote!(Native),
        };
        let compression = match c.compression {
            crate::model::Compression::Lz4 => quote!(Lz4),
            crate::model::Compression::Zstd => quote!(Zstd),
            crate::model::Compression::None => quote!(None),
        };
        let ca_file = match c.ca_file {
            Some(_) => {
                let ca_file = settings.value("sink.clickhouse.ca_file")?;
                quote!(Some(#ca_file.into()))
            }
            None => quote!(None),
        };
        let path = |key: &str, set: bool| -> Result<TokenStream, Error> {
            Ok(if set {
                let value = settings.value(&format!("sink.clickhouse.{key}"))?;
                quote!(Some(#value.into()))
            } else {
                quote!(None)
            })
        };
        let client_cert = path("client_cert", c.client_cert.is_some())?;
        let client_key = path("client_key", c.client_key.is_some())?;
        // The ledger's identity; E0901 made sure the source is Kafka.
        let exactly_once = match (&m.source, c.exactly_once) {
            (Source::Kafka(k), true) => {
                let topic = subscription(k, settings)?;
                quote!(Some(rt::ExactlyOnceConfig {
                    pipeline: BUILD.pipeline.to_owned(),
                    topic: #topic,
                    config_hash: BUILD.config_hash.to_owned(),
                }))
            }
            _ => quote!(None),
        };
        Ok(ClickhouseTokens {
            shards,
            user: settings.value("sink.clickhouse.user")?,
            password: settings.value("sink.clickhouse.password")?,
            settings: settings.group("sink.clickhouse.settings.")?,
            format,
            compression,
            timeout: c.timeout.as_millis(),
            ca_file,
            client_cert,
            client_key,
            exactly_once,
        })
    }
}

impl ClickhouseTokens {
    /// The `ClickhouseSinkConfig` literal with these shared parts and the output's own.
    fn config(
        &self,
        database: TokenStream,
        table: TokenStream,
        columns: TokenStream,
        exactly_once: &TokenStream,
    ) -> TokenStream {
        let ClickhouseTokens {
            shards,
            user,
            password,
            settings,
            format,
            compression,
            timeout,
            ca_file,
            client_cert,
            client_key,
            ..
        } = self;
        // `columns: columns` would be clippy's redundant field name.
        let columns = if columns.to_string() == "columns" { quote!(columns) } else { quote!(columns: #columns) };
        quote!(rt::ClickhouseSinkConfig {
            shards: vec![#(#shards),*],
            database: #database,
            table: #table,
            user: #user.to_owned(),
            password: #password.to_owned(),
            settings: #settings.map(|(k, v)| (k.to_owned(), v.to_owned())).collect(),
            format: rt::InsertFormat::#format,
            compression: rt::InsertCompression::#compression,
            timeout: ::std::time::Duration::from_millis(#timeout),
            #columns,
            ca_file: #ca_file,
            client_cert: #client_cert,
            client_key: #client_key,
            exactly_once: #exactly_once,
        })
    }
}

/// The columns of output `k`, as `ClickhouseSinkConfig::columns` takes them.
fn columns_of(inputs: &MainInputs<'_>, k: usize) -> TokenStream {
    let columns = inputs.pipeline.plan.outputs[k].output.iter().map(|col| {
        let (name, ty) = (&col.name, col.ty.clickhouse());
        quote!((#name.to_owned(), #ty.to_owned()))
    });
    quote!(vec![#(#columns),*])
}

/// `sink` for a pipeline without `outputs`: one ClickHouse sink of `sink.clickhouse.table`.
fn one_table(inputs: &MainInputs<'_>, c: &crate::model::ClickhouseSink, t: &ClickhouseTokens) -> TokenStream {
    let (database, table) = (&c.database, c.table.as_deref().unwrap_or_default());
    let exactly_once = &t.exactly_once;
    let config = t.config(quote!(#database.to_owned()), quote!(#table.to_owned()), columns_of(inputs, 0), exactly_once);
    quote!(
        let sink = match rt::ClickhouseSink::new(#config) {
            Ok(sink) => sink,
            Err(e) => return rt::startup_error(e),
        };
    )
}

/// `sink` for a pipeline with `outputs`: one ClickHouse sink per output, each its table's
/// shards and ledger, behind `rt::Outputs`; the engine sees outputs × shards slots.
fn several_outputs(inputs: &MainInputs<'_>, c: &crate::model::ClickhouseSink, t: &ClickhouseTokens) -> TokenStream {
    let m = &inputs.pipeline.model;
    let outputs = m.output_tables().into_iter().enumerate().map(|(k, o)| {
        let (name, database, table, columns) = (o.name.unwrap_or_default(), o.database, o.table, columns_of(inputs, k));
        quote!((#name, #database, #table, #columns))
    });
    let shard_count = c.shards.len();
    let exactly_once = &t.exactly_once;
    let config =
        t.config(quote!(database.to_owned()), quote!(table.to_owned()), quote!(columns), &quote!(exactly_once.clone()));
    quote!(
        let exactly_once = #exactly_once;
        let mut outputs = ::std::vec::Vec::new();
        for (name, database, table, columns) in [#(#outputs),*] {
            match rt::ClickhouseSink::for_output(name, #config) {
                Ok(sink) => outputs.push((name.to_owned(), sink)),
                Err(e) => return rt::startup_error(format!("outputs.{name} (`{database}.{table}`): {e}")),
            }
        }
        let sink = match rt::Outputs::new(outputs, #shard_count) {
            Ok(sink) => sink,
            Err(e) => return rt::startup_error(e),
        };
    )
}

/// The statements that make `chains`, the factory of each pipeline thread's `Chain`: with a
/// registry client when the format asks one about writer ids outside `schema_id`.
fn chains(inputs: &MainInputs<'_>, settings: &Settings) -> Result<TokenStream, Error> {
    let format = inputs.pipeline.model.format.get();
    let registry_timeout = format.registry_timeout.as_millis();
    Ok(if format.uses_registry() {
        let registry = settings.value(&format.path("registry"))?;
        let (registry_key, schema_id_key) = (format.path("registry"), format.path("schema_id"));
        let empty = format!(
            "{registry_key} resolved to an empty URL and {schema_id_key} is not set: Confluent-framed messages could \
         not be told apart by writer schema; set the registry's variable, or set {schema_id_key} to the reader \
         schema's registry id"
        );
        let bad_url = format!("{registry_key}: {{e}}");
        let timeout = quote!(::std::time::Duration::from_millis(#registry_timeout));
        let (reader_const, client) = super::format::registry_client(inputs.pipeline, &timeout);
        quote!(
            #reader_const
            let registry = match #registry.trim() {
                "" if SCHEMA_IDS.is_empty() => return rt::startup_error(#empty),
                "" => None,
                url => match #client {
                    Ok(registry) => Some(registry),
                    Err(e) => return rt::startup_error(format!(#bad_url)),
                },
            };
            let chains = move || Chain { registry: registry.clone() };
        )
    } else {
        quote!(let chains = Chain::default;)
    })
}

/// The statement that makes `dead_letter`: the DLQ producer under `errors.policy: dlq`.
fn dead_letter(m: &crate::model::PipelineFile, settings: &Settings) -> Result<TokenStream, Error> {
    Ok(match (&m.errors.policy, &m.errors.dlq_topic, &m.source) {
        (ErrorPolicy::Dlq, Some(_), Source::Kafka(k)) => {
            let brokers = settings.value("source.kafka.brokers")?;
            let dlq_topic = settings.value("errors.dlq_topic")?;
            let auth = auth_call(k);
            // Every record names its own topic; `with_source_topic` only covers one that does
            // not, so a source of several topics leaves it out.
            let dlq = if k.topic.is_some() {
                let topic = settings.value("source.kafka.topic")?;
                quote!(dlq.with_source_topic(#topic))
            } else {
                quote!(dlq)
            };
            quote!(
                let dead_letter: ::std::option::Option<::std::sync::Arc<dyn rt::DeadLetter>> = match rt::KafkaDeadLetter::new(
                    #brokers,
                    #dlq_topic,
                    &rdkafka_properties(&resolved),
                    #auth,
                ) {
                    Ok(dlq) => Some(::std::sync::Arc::new(#dlq)),
                    Err(e) => return rt::startup_error(e),
                };
            )
        }
        _ => quote!(let dead_letter: ::std::option::Option<::std::sync::Arc<dyn rt::DeadLetter>> = None;),
    })
}

/// `rdkafka_properties`, the `rdkafka:` passthrough resolved, for a Kafka source.
fn rdkafka_fn(m: &crate::model::PipelineFile, settings: &Settings) -> Result<TokenStream, Error> {
    Ok(match &m.source {
        Source::Kafka(k) => {
            let properties = settings.group("source.kafka.rdkafka.")?;
            let auth = match &k.auth {
                Some(_) => {
                    let auth = kafka_auth(k, settings)?;
                    quote!(
                        /// `source.kafka.auth`, resolved.
                        fn kafka_auth(resolved: &rt::Resolved) -> ::std::option::Option<rt::KafkaAuth> {
                            #auth
                        }
                    )
                }
                None => TokenStream::new(),
            };
            quote!(
                #auth

                /// The `rdkafka:` passthrough properties, resolved.
                fn rdkafka_properties(
                    resolved: &rt::Resolved,
                ) -> ::std::vec::Vec<(::std::string::String, ::std::string::String)> {
                    #properties.map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
                }
            )
        }
        Source::Datagen(_) => TokenStream::new(),
    })
}

/// The statements that make `config`, the `RuntimeConfig`: sizes, timeouts and policies.
fn runtime_config(inputs: &MainInputs<'_>, settings: &Settings, shard_count: usize) -> Result<TokenStream, Error> {
    let m = &inputs.pipeline.model;
    let drain = m.checkpoint.drain_timeout.as_millis();
    let registry_timeout = m.format.get().registry_timeout.as_millis();
    // `gen --memory`'s bound is linear in the partitions an instance owns; the binary applies it
    // to the lanes it owns for `etl_memory_bound_bytes`.
    let memory_fixed = crate::memory::total(inputs.pipeline, 0);
    let memory_per_partition = crate::memory::total(inputs.pipeline, 1) - memory_fixed;
    // The stall watchdog watches Kafka partitions; datagen's lanes are never watched anyway.
    let stall_timeout = match &m.source {
        Source::Kafka(k) => k.stall_timeout.as_millis(),
        Source::Datagen(_) => 0,
    };
    let flow = m.sink.flow();
    let bp = &m.backpressure;
    let threads = match m.pipeline.threads {
        Some(t) => {
            let t = t as usize;
            quote!(#t)
        }
        None => quote!(::std::thread::available_parallelism().map_or(1, |n| n.get())),
    };
    let (max_inflight, high, low, min_pause) =
        (bp.max_inflight_bytes.bytes(), bp.high_ratio.to_f64(), bp.low_ratio.to_f64(), bp.min_pause.as_millis());
    let (max_rows, max_bytes, linger) =
        (flow.batch.max_rows, flow.batch.max_bytes.bytes(), flow.batch.linger.as_millis());
    let inflight = flow.inflight.max_per_shard as usize;
    let chunk = flow.chunk.target_bytes.bytes() as usize;
    let queue = flow.queue.capacity as usize;
    let retry = match &m.sink {
        Sink::Clickhouse(c) => {
            (c.retry.max_attempts.limit(), c.retry.initial_backoff.as_millis(), c.retry.max_backoff.as_millis())
        }
        // `sink.file` has no retry keys: the runtime gets the defaults.
        Sink::File(_) => {
            (RETRY_MAX_ATTEMPTS, RETRY_INITIAL_BACKOFF.as_millis() as u64, RETRY_MAX_BACKOFF.as_millis() as u64)
        }
    };
    let (attempts, initial, max_backoff) = retry;
    let attempts = match attempts {
        Some(n) => quote!(::std::option::Option::Some(#n)),
        None => quote!(::std::option::Option::None),
    };
    let exactly_once_runtime = matches!(&m.sink, Sink::Clickhouse(c) if c.exactly_once);
    let policy = match m.errors.policy {
        ErrorPolicy::Skip => quote!(rt::ErrorPolicy::Skip),
        ErrorPolicy::Fail => quote!(rt::ErrorPolicy::Fail),
        ErrorPolicy::Dlq => quote!(rt::ErrorPolicy::DeadLetter),
    };
    let tombstones = match m.errors.tombstones {
        TombstonePolicy::Skip => quote!(rt::TombstonePolicy::Skip),
        TombstonePolicy::Fail => quote!(rt::TombstonePolicy::Fail),
    };
    let admin_listen = settings.index("admin.listen")?;
    let admin_control = m.admin.control;
    Ok(quote!(
    let admin_listen = match resolved.socket_addr(#admin_listen) {
        Ok(addr) => addr,
        Err(e) => return rt::startup_error(e),
    };
    let config = rt::RuntimeConfig {
        pipeline: BUILD.pipeline.to_owned(),
        config_hash: BUILD.config_hash.to_owned(),
        version: BUILD.version.to_owned(),
        threads: #threads,
        shards: #shard_count,
        backpressure: rt::BackpressureConfig {
            max_inflight_bytes: #max_inflight,
            high_ratio: #high,
            low_ratio: #low,
            min_pause: ::std::time::Duration::from_millis(#min_pause),
        },
        batch: rt::BatchConfig {
            max_rows: #max_rows,
            max_bytes: #max_bytes,
            linger: ::std::time::Duration::from_millis(#linger),
        },
        inflight_per_shard: #inflight,
        chunk_target_bytes: #chunk,
        queue_capacity: #queue,
        retry: rt::RetryConfig {
            max_attempts: #attempts,
            initial_backoff: ::std::time::Duration::from_millis(#initial),
            max_backoff: ::std::time::Duration::from_millis(#max_backoff),
        },
        drain_timeout: ::std::time::Duration::from_millis(#drain),
        error_policy: #policy,
        tombstones: #tombstones,
        admin_listen: Some(admin_listen),
        admin_control: #admin_control,
        exactly_once: #exactly_once_runtime,
        unavailable_timeout: ::std::time::Duration::from_millis(#registry_timeout),
        stall_timeout: ::std::time::Duration::from_millis(#stall_timeout),
        memory_bound: Some(rt::MemoryBound {
            fixed_bytes: #memory_fixed,
            per_partition_bytes: #memory_per_partition,
        }),
    };
    ))
}

/// `tokens` with the numeric literals' type suffixes (`250u64`, `0.9f64`) dropped: in `main`
/// every number is a struct field or an argument of a known type, so the suffix is noise.
fn unsuffixed(tokens: TokenStream) -> TokenStream {
    use proc_macro2::{Group, TokenTree};
    tokens
        .into_iter()
        .map(|tree| match tree {
            TokenTree::Group(g) => {
                let mut group = Group::new(g.delimiter(), unsuffixed(g.stream()));
                group.set_span(g.span());
                TokenTree::Group(group)
            }
            TokenTree::Literal(l) => {
                let text = l.to_string();
                let int = ["u64", "usize", "u32"].iter().find_map(|s| text.strip_suffix(s)?.parse::<u64>().ok());
                let float = text.strip_suffix("f64").and_then(|t| t.parse::<f64>().ok());
                match (int, float) {
                    (Some(n), _) => TokenTree::Literal(Literal::u64_unsuffixed(n)),
                    (None, Some(x)) => TokenTree::Literal(Literal::f64_unsuffixed(x)),
                    _ => TokenTree::Literal(l),
                }
            }
            other => other,
        })
        .collect()
}

/// The settings list of `SETTINGS` and the named indexes into it that `main` uses: the
/// generated code reads a setting as `resolved.get(setting::SOURCE_KAFKA_BROKERS)`, so a key
/// the list lacks fails here, at gen time, instead of in the binary. Only the indexes `main`
/// uses are emitted, so the generated crate has no unused constant.
struct Settings {
    /// `(key path, template, secret)`, in `SETTINGS` order.
    list: Vec<(String, Template, bool)>,
    /// (index, constant name) → its definition, for the indexes asked for so far.
    used: RefCell<BTreeMap<(usize, String), TokenStream>>,
}

impl Settings {
    fn new(list: Vec<(String, Template, bool)>) -> Self {
        Settings { list, used: RefCell::new(BTreeMap::new()) }
    }

    /// `setting::NAME`, the index of `key`.
    fn index(&self, key: &str) -> Result<TokenStream, Error> {
        let index =
            self.list.iter().position(|(k, ..)| k == key).ok_or_else(|| Error::UnknownSetting(key.to_owned()))?;
        let name = const_ident(key);
        let literal = Literal::usize_unsuffixed(index);
        self.used.borrow_mut().insert((index, name.to_string()), quote!(pub(crate) const #name: usize = #literal;));
        Ok(quote!(setting::#name))
    }

    /// `resolved.get(setting::NAME)`: the value of `key`.
    fn value(&self, key: &str) -> Result<TokenStream, Error> {
        let index = self.index(key)?;
        Ok(quote!(resolved.get(#index)))
    }

    /// `resolved.group(setting::NAME, prefix)`: the settings whose keys start with `prefix`
    /// (which the list keeps together), as `(key without the prefix, value)`.
    fn group(&self, prefix: &str) -> Result<TokenStream, Error> {
        let members: Vec<usize> =
            self.list.iter().enumerate().filter(|(_, (k, ..))| k.starts_with(prefix)).map(|(i, _)| i).collect();
        let start = members.first().copied().unwrap_or(self.list.len());
        let end = start + members.len();
        if members.iter().copied().ne(start..end) {
            return Err(Error::ScatteredGroup(prefix.to_owned()));
        }
        let name = const_ident(prefix);
        let key = (start, name.to_string());
        let (start, end) = (Literal::usize_unsuffixed(start), Literal::usize_unsuffixed(end));
        self.used.borrow_mut().insert(key, quote!(pub(crate) const #name: ::std::ops::Range<usize> = #start..#end;));
        Ok(quote!(resolved.group(setting::#name, #prefix)))
    }

    /// `mod setting`, with the indexes asked for.
    fn module(&self) -> TokenStream {
        let items = self.used.borrow();
        let items = items.values();
        quote!(
            /// Indexes into `SETTINGS`, named by key path (ranges for the groups of properties).
            mod setting {
                #(#items)*
            }
        )
    }
}

/// `source.kafka.rdkafka.` → `SOURCE_KAFKA_RDKAFKA`, `shards[0].replicas[1]` → `SHARDS_0_REPLICAS_1`.
fn const_ident(key: &str) -> proc_macro2::Ident {
    let mut name = String::new();
    for c in key.chars() {
        if c.is_ascii_alphanumeric() {
            name.push(c.to_ascii_uppercase());
        } else if !name.is_empty() && !name.ends_with('_') {
            name.push('_');
        }
    }
    format_ident!("{}", name.trim_end_matches('_'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        let t = |s: &str| Template::parse(s).unwrap();
        Settings::new(vec![
            ("admin.listen".into(), t("0.0.0.0:9464"), false),
            ("source.kafka.rdkafka.client.id".into(), t("etl"), false),
            ("source.kafka.rdkafka.auto.offset.reset".into(), t("earliest"), false),
            ("sink.clickhouse.shards[0].replicas[1]".into(), t("${URL}"), false),
        ])
    }

    #[test]
    fn a_setting_main_reads_but_the_list_lacks_fails_at_gen_time() {
        let s = settings();
        assert!(s.value("source.kafka.brokers").unwrap_err().to_string().contains("`source.kafka.brokers`"));
        assert!(s.value("admin.listen").is_ok());
    }

    #[test]
    fn indexes_and_ranges_are_named_by_key_path() {
        let s = settings();
        assert_eq!(
            s.index("sink.clickhouse.shards[0].replicas[1]").unwrap().to_string(),
            "setting :: SINK_CLICKHOUSE_SHARDS_0_REPLICAS_1"
        );
        s.group("source.kafka.rdkafka.").unwrap();
        let module = s.module().to_string();
        assert!(module.contains("SINK_CLICKHOUSE_SHARDS_0_REPLICAS_1 : usize = 3"), "{module}");
        assert!(module.contains("SOURCE_KAFKA_RDKAFKA : :: std :: ops :: Range < usize > = 1 .. 3"), "{module}");
        assert!(!module.contains("ADMIN_LISTEN"), "only what main reads: {module}");
    }
}
