//! `cargo xtask produce`: fill a topic with synthesized records of a pipeline's schema, in
//! the pipeline's wire format. For trying pipelines locally, the end-to-end tests and the
//! benchmarks.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use etl_runtime::__private::{Encoding, Wire, sample_payloads};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

/// `produce` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct ProduceArgs {
    /// The pipeline whose schema, wire format and topic to use.
    pipeline: PathBuf,
    /// Records to produce.
    #[arg(long, default_value_t = 100_000)]
    count: usize,
    /// Partitions of the topic, if it has to be created.
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// Seed of the record generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The topic (default: the pipeline's `topic`, or the first of its `topics`, with `${VAR:-default}`
    /// resolved; a pipeline with `topic_pattern` needs it).
    #[arg(long)]
    topic: Option<String>,
    /// The brokers (default: $KAFKA_BROKERS).
    #[arg(long, env = "KAFKA_BROKERS")]
    brokers: String,
}

pub(crate) fn run(args: &ProduceArgs) -> anyhow::Result<()> {
    let outcome = etl_gen::validate_file(&args.pipeline, &etl_gen::Options::default())?;
    let Some(pipeline) = outcome.pipeline else {
        bail!("{}", outcome.report.render());
    };
    let etl_gen::model::Source::Kafka(kafka) = &pipeline.model.source else {
        bail!("{} does not read from Kafka", args.pipeline.display());
    };
    let env = |name: &str| std::env::var(name).ok();
    let topic = match &args.topic {
        Some(t) => t.clone(),
        None => match (&kafka.topic, kafka.topics.first()) {
            (Some(topic), _) | (None, Some(topic)) => topic.resolve(env).map_err(anyhow::Error::msg)?,
            // A pattern names no topic to write to.
            (None, None) => bail!("{} reads topics by pattern; pass --topic", args.pipeline.display()),
        },
    };
    let schema = apache_avro::Schema::parse_str(&pipeline.datagen_schema)?;
    let format = pipeline.model.format.get();
    let wire = match format.wire {
        etl_gen::model::Wire::Raw => Wire::Raw,
        // Framed with the reader schema's own id, so the pipeline decodes them directly.
        etl_gen::model::Wire::Confluent => {
            Wire::Confluent { schema_id: format.schema_ids().first().copied().unwrap_or(1) }
        }
    };
    let encoding = match format.encoding {
        etl_gen::model::Encoding::Avro => Encoding::Avro,
        etl_gen::model::Encoding::Json => Encoding::Json,
        etl_gen::model::Encoding::Protobuf => Encoding::Protobuf,
    };
    create_topic(&args.brokers, &topic, args.partitions)?;
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &args.brokers)
        .set("linger.ms", "20")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .context("creating the producer")?;
    let started = Instant::now();
    let progress = crate::progress::Progress::records("produce", args.count as u64);
    // Generate in slices so memory stays flat for large counts.
    let mut produced = 0usize;
    let mut seed = args.seed;
    while produced < args.count {
        let n = (args.count - produced).min(100_000);
        for (i, payload) in sample_payloads(&schema, encoding, wire, seed, n).iter().enumerate() {
            let key = format!("{}", produced + i);
            let mut record = BaseRecord::to(&topic).key(&key).payload(payload);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((e, back)) if e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::QueueFull) => {
                        record = back;
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err((e, _)) => bail!("producing to {topic}: {e}"),
                }
            }
            progress.inc(1);
        }
        produced += n;
        seed += 1;
    }
    producer.flush(Duration::from_secs(60)).context("flushing the producer")?;
    progress.finish();
    eprintln!("produced {produced} records to {topic} in {:.1}s", started.elapsed().as_secs_f64());
    Ok(())
}

fn create_topic(brokers: &str, topic: &str, partitions: i32) -> anyhow::Result<()> {
    let admin: AdminClient<_> = ClientConfig::new().set("bootstrap.servers", brokers).create()?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let results = runtime.block_on(admin.create_topics(
        &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
    ))?;
    for result in results {
        match result {
            Ok(_) | Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => bail!("creating topic {name}: {code}"),
        }
    }
    Ok(())
}
