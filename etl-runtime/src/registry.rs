//! A Confluent-API schema registry client: writer schemas by id, judged against the reader schema
//! the binary was generated for.
//!
//! The generated decoder reads exactly the reader schema. A message framed with one of the
//! reader schema's own ids (`format.*.schema_id`) takes that fast path without asking. For
//! another id the writer schema is fetched once and cached:
//!
//! - **Avro.** A writer the registry says is the reader (by canonical form) is decoded directly.
//!   One written with another schema is decoded with apache-avro's schema resolution into a
//!   reader-shaped value, re-encoded with the reader schema, and then decoded by the generated
//!   code: a slower but correct path that keeps one decoder.
//! - **JSON Schema and Protobuf.** Their decoders go by key and by field number, so a writer that
//!   added, dropped or renamed things is read as it is. The writer schema is judged once by the
//!   rules `gen --check --registry` applies (`etl_schema::*::compat`, one copy of them): if the
//!   reader reads it, its messages are decoded directly; if not, each of its messages is a record
//!   error naming the first problem (under `errors.policy`), and the whole verdict is logged once.
//!   A schema of another `schemaType` is such an error too.
//!
//! A lookup that fails (no connection, an HTTP error, or a 404 because the registry lags the
//! producer) is never cached: it is [`RecordErrorKind::Unavailable`], which makes the pipeline
//! thread hold the record, pause its lane and ask again with capped backoff, until the format's
//! `registry_timeout` turns it into a record error under `errors.policy` (see `pipeline`).
//! Verdicts are cached because a registry id names one schema forever.

#[cfg(feature = "registry-protobuf")]
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use apache_avro::Schema;

use crate::engine::errors::{RecordError, RecordErrorKind};
use crate::secret::redact_url;

/// How many writer schemas the cache keeps. A topic sees a handful of schema versions; the
/// bound only matters for a stream of corrupt ids, each of which the registry happens to know.
pub(crate) const CACHE_CAPACITY: usize = 1024;

/// How long one lookup may take. The pipeline thread waits for it (and with it the thread's other
/// lanes, acks and drains), so it stays short; a registry that does not answer in time is retried
/// like any other failure.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);

/// The datum to decode: the message's own bytes, or the reader-shaped re-encoding.
#[derive(Debug)]
pub enum Datum<'a> {
    /// The writer schema is the reader schema.
    Same(&'a [u8]),
    /// Resolved from another writer schema and re-encoded with the reader schema.
    Reencoded(Vec<u8>),
}

impl Datum<'_> {
    /// The bytes the generated decoder reads.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Datum::Same(b) => b,
            Datum::Reencoded(v) => v,
        }
    }
}

/// A registry client shared by every pipeline thread (cheap to clone).
#[derive(Clone, Debug)]
pub struct Registry {
    inner: Arc<Inner>,
}

/// The reader schema, in the form its format's rules compare.
enum Reader {
    Avro {
        schema: Schema,
        canonical: String,
    },
    #[cfg(feature = "registry-json")]
    Json(Vec<etl_schema::json::JField>),
    #[cfg(feature = "registry-protobuf")]
    Protobuf(etl_schema::protobuf::Message),
}

impl Reader {
    /// The format's key under `format:`, and the `schemaType` the registry gives its schemas.
    fn format(&self) -> (&'static str, &'static str) {
        match self {
            Reader::Avro { .. } => ("avro", "AVRO"),
            #[cfg(feature = "registry-json")]
            Reader::Json(_) => ("json", "JSON"),
            #[cfg(feature = "registry-protobuf")]
            Reader::Protobuf(_) => ("protobuf", "PROTOBUF"),
        }
    }
}

struct Inner {
    url: String,
    /// The URL without credentials, for messages.
    shown: String,
    reader: Reader,
    reader_ids: Vec<u32>,
    cache: RwLock<HashMap<u32, Arc<Entry>>>,
    /// When the lookups of each id that is failing now began to fail (at most
    /// [`CACHE_CAPACITY`] ids). Not a cache of the failure: every record asks again. It lets a
    /// record whose id has been failing for longer than `timeout` become a record error at its
    /// first failed lookup, so a stream of messages with an id nobody knows costs one
    /// `registry_timeout`, not one per message.
    failing: Mutex<HashMap<u32, Instant>>,
    /// `format.*.registry_timeout`.
    timeout: Duration,
    agent: ureq::Agent,
}

impl std::fmt::Debug for Inner {
    // By hand: the URL may carry credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("url", &self.shown)
            .field("format", &self.reader.format().0)
            .field("reader_ids", &self.reader_ids)
            .finish_non_exhaustive()
    }
}

/// A registry client that cannot be made.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RegistryError {
    /// The URL (shown without credentials) is not `http://` or `https://`.
    #[error("`{0}` is not an http:// or https:// URL")]
    NotHttp(String),
    /// The reader schema does not parse.
    #[error("the reader schema: {0}")]
    ReaderSchema(String),
}

/// What is known of a writer schema id.
#[derive(Debug)]
enum Entry {
    /// Its messages are decoded as they are.
    Same,
    /// An Avro writer schema other than the reader's: resolved.
    Writer(Schema),
    /// The reader cannot read it: each of its messages is this record error.
    Unreadable(String),
}

impl Registry {
    /// A client of the registry at `url` for the Avro reader schema `reader_json`, registered under
    /// `reader_ids` (which are decoded without asking the registry). An id whose lookups have
    /// failed for `timeout` makes its records record errors.
    pub fn new(url: &str, reader_json: &str, reader_ids: &[u32], timeout: Duration) -> Result<Self, RegistryError> {
        let schema = Schema::parse_str(reader_json).map_err(|e| RegistryError::ReaderSchema(e.to_string()))?;
        Self::with_reader(url, Reader::Avro { canonical: schema.canonical_form(), schema }, reader_ids, timeout)
    }

    /// [`Registry::new`] for a JSON Schema reader (the schema's text).
    #[cfg(feature = "registry-json")]
    pub fn json(url: &str, reader_schema: &str, reader_ids: &[u32], timeout: Duration) -> Result<Self, RegistryError> {
        let fields = match etl_schema::json::parse(reader_schema) {
            Ok(Ok(fields)) => fields,
            Ok(Err(unsupported)) => {
                let first = unsupported.first().map(|u| format!("{}: {}", u.path, u.what)).unwrap_or_default();
                return Err(RegistryError::ReaderSchema(first));
            }
            Err(invalid) => return Err(RegistryError::ReaderSchema(invalid.0)),
        };
        Self::with_reader(url, Reader::Json(fields), reader_ids, timeout)
    }

    /// [`Registry::new`] for a Protobuf reader: `message` of the compiled `descriptor_set` (the
    /// reader's `.proto` and its imports, as `gen` compiled them).
    #[cfg(feature = "registry-protobuf")]
    pub fn protobuf(
        url: &str,
        descriptor_set: &[u8],
        message: &str,
        reader_ids: &[u32],
        timeout: Duration,
    ) -> Result<Self, RegistryError> {
        let reader = match etl_schema::protobuf::from_descriptor_set(descriptor_set, "", message) {
            Ok(Ok(reader)) => reader,
            Ok(Err(unsupported)) => {
                let first = unsupported.first().map(|u| format!("{}: {}", u.path, u.what)).unwrap_or_default();
                return Err(RegistryError::ReaderSchema(first));
            }
            Err(etl_schema::protobuf::Invalid::Compile(e)) => return Err(RegistryError::ReaderSchema(e)),
            Err(etl_schema::protobuf::Invalid::UnknownMessage(_)) => {
                return Err(RegistryError::ReaderSchema(format!("no message `{message}`")));
            }
        };
        Self::with_reader(url, Reader::Protobuf(reader), reader_ids, timeout)
    }

    fn with_reader(url: &str, reader: Reader, reader_ids: &[u32], timeout: Duration) -> Result<Self, RegistryError> {
        let url = url.trim();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(RegistryError::NotHttp(redact_url(url)));
        }
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(LOOKUP_TIMEOUT))
            .http_status_as_error(false)
            .build()
            .new_agent();
        let url = url.trim_end_matches('/').to_owned();
        Ok(Registry {
            inner: Arc::new(Inner {
                shown: redact_url(&url),
                url,
                reader,
                reader_ids: reader_ids.to_vec(),
                cache: RwLock::new(HashMap::new()),
                failing: Mutex::new(HashMap::new()),
                timeout,
                agent,
            }),
        })
    }

    /// The datum of an Avro message written with schema `id`, as the reader schema reads it.
    pub fn resolve<'a>(&self, id: u32, datum: &'a [u8]) -> Result<Datum<'a>, RecordError> {
        if self.inner.reader_ids.contains(&id) {
            return Ok(Datum::Same(datum));
        }
        match self.entry(id)?.as_ref() {
            Entry::Same => Ok(Datum::Same(datum)),
            Entry::Unreadable(why) => Err(RecordError::new(RecordErrorKind::Decode, why.clone())),
            Entry::Writer(writer) => {
                // Irrefutable when the runtime is built without the JSON and Protobuf readers.
                #[allow(irrefutable_let_patterns)]
                let Reader::Avro { schema: reader, .. } = &self.inner.reader else {
                    unreachable!("only Avro readers resolve writer schemas")
                };
                let mut bytes = datum;
                let value = apache_avro::from_avro_datum(writer, &mut bytes, Some(reader)).map_err(|e| {
                    RecordError::new(
                        RecordErrorKind::Decode,
                        format!("schema id {id}: resolving to the reader schema: {e}"),
                    )
                })?;
                let bytes = apache_avro::to_avro_datum(reader, value).map_err(|e| {
                    RecordError::new(RecordErrorKind::Decode, format!("schema id {id}: re-encoding: {e}"))
                })?;
                Ok(Datum::Reencoded(bytes))
            }
        }
    }

    /// Whether a JSON or Protobuf message written with schema `id` may be decoded with the reader
    /// schema: `Ok` when the reader reads that writer schema, the record error that says why not
    /// otherwise.
    pub fn check(&self, id: u32) -> Result<(), RecordError> {
        if self.inner.reader_ids.contains(&id) {
            return Ok(());
        }
        // Per record: judged under the read lock, without taking a reference to the entry (an
        // atomic count every thread would write).
        let verdict = |entry: &Entry| match entry {
            Entry::Same | Entry::Writer(_) => Ok(()),
            Entry::Unreadable(why) => Err(RecordError::new(RecordErrorKind::Decode, why.clone())),
        };
        if let Some(entry) = self.inner.cache.read().expect("registry cache lock").get(&id) {
            return verdict(entry);
        }
        verdict(self.entry(id)?.as_ref())
    }

    /// What is known of `id`: cached, or fetched and judged now.
    fn entry(&self, id: u32) -> Result<Arc<Entry>, RecordError> {
        if let Some(entry) = self.inner.cache.read().expect("registry cache lock").get(&id) {
            return Ok(entry.clone());
        }
        let entry = Arc::new(self.fetch(id).map_err(|error| self.failed(id, error))?);
        self.inner.failing.lock().expect("registry failing lock").remove(&id);
        let mut cache = self.inner.cache.write().expect("registry cache lock");
        if cache.len() >= CACHE_CAPACITY
            && let Some(&evicted) = cache.keys().next()
        {
            cache.remove(&evicted);
        }
        cache.insert(id, entry.clone());
        Ok(entry)
    }

    /// A failed lookup of `id`: still `Unavailable` (the record is held and tried again) until
    /// the lookups of this id have failed for `timeout`, then a record error.
    fn failed(&self, id: u32, error: RecordError) -> RecordError {
        if error.kind != RecordErrorKind::Unavailable {
            return error;
        }
        let now = Instant::now();
        let mut failing = self.inner.failing.lock().expect("registry failing lock");
        if failing.len() >= CACHE_CAPACITY
            && !failing.contains_key(&id)
            && let Some(&oldest) = failing.iter().min_by_key(|(_, since)| **since).map(|(id, _)| id)
        {
            failing.remove(&oldest);
        }
        let since = *failing.entry(id).or_insert(now);
        let failing_for = now.duration_since(since);
        if failing_for >= self.inner.timeout {
            RecordError::new(
                RecordErrorKind::Decode,
                format!(
                    "{} (lookups of this id have failed for {failing_for:?}: format.{}.registry_timeout is {:?})",
                    error.message,
                    self.inner.reader.format().0,
                    self.inner.timeout
                ),
            )
        } else {
            error
        }
    }

    /// `Unavailable`: a lookup that may succeed when asked again.
    fn unavailable(&self, id: u32, what: &str) -> RecordError {
        RecordError::new(
            RecordErrorKind::Unavailable,
            crate::secret::mask_userinfo(&format!("schema registry {}: schema id {id}: {what}", self.inner.shown)),
        )
    }

    /// GETs `path` of the registry as JSON. Every failure is `Unavailable`; a 404 too, since the
    /// registry may lag the producer that registered the schema.
    fn get(&self, id: u32, path: &str) -> Result<serde_json::Value, RecordError> {
        let url = format!("{}{path}", self.inner.url);
        let mut response = self.inner.agent.get(&url).call().map_err(|e| self.unavailable(id, &e.to_string()))?;
        let status = response.status().as_u16();
        let body = response.body_mut().read_to_string().map_err(|e| self.unavailable(id, &e.to_string()))?;
        match status {
            200 => serde_json::from_str(&body).map_err(|e| self.unavailable(id, &format!("bad JSON: {e}"))),
            404 => Err(self.unavailable(id, &format!("{path} is unknown to the schema registry (HTTP 404)"))),
            other => {
                Err(self
                    .unavailable(id, &format!("{path}: HTTP {other}: {}", body.chars().take(200).collect::<String>())))
            }
        }
    }

    /// Asks the registry for schema `id` and judges it. Every failure to get an answer is
    /// `Unavailable` (retried by the caller); an answer is a verdict, cached by the caller.
    fn fetch(&self, id: u32) -> Result<Entry, RecordError> {
        let answer = self.get(id, &format!("/schemas/ids/{id}"))?;
        let Some(text) = answer.get("schema").and_then(|s| s.as_str()) else {
            return Err(self.unavailable(id, "the answer has no `schema`"));
        };
        // The registry leaves `schemaType` out for Avro.
        let kind = answer.get("schemaType").and_then(|t| t.as_str()).unwrap_or("AVRO");
        let (format, expected) = self.inner.reader.format();
        if !kind.eq_ignore_ascii_case(expected) {
            tracing::warn!(id, schema_type = kind, format, "the writer schema is of another format");
            return Ok(Entry::Unreadable(format!(
                "schema id {id} is a {kind} schema in the registry; this pipeline reads format.{format} \
                 (is the topic written by another producer?)"
            )));
        }
        match &self.inner.reader {
            Reader::Avro { canonical, .. } => {
                let writer = match Schema::parse_str(text) {
                    Ok(writer) => writer,
                    Err(e) => {
                        return Ok(Entry::Unreadable(format!(
                            "schema id {id}: the registry's schema does not parse: {e}"
                        )));
                    }
                };
                if writer.canonical_form() == *canonical {
                    tracing::info!(id, "writer schema is the reader schema");
                    Ok(Entry::Same)
                } else {
                    tracing::info!(id, "writer schema differs from the reader schema; resolving");
                    Ok(Entry::Writer(writer))
                }
            }
            #[cfg(feature = "registry-json")]
            Reader::Json(fields) => Ok(self.verdict(id, etl_schema::json::compat::check(fields, text))),
            #[cfg(feature = "registry-protobuf")]
            Reader::Protobuf(message) => {
                let mut imports = BTreeMap::new();
                etl_schema::protobuf::fetch_references(&answer, &mut |path| self.get(id, path), &mut imports).map_err(
                    |e| match e {
                        etl_schema::protobuf::ReferenceError::Fetch(e) => e,
                        // A registry mid-write may answer with less than it will: asked again.
                        etl_schema::protobuf::ReferenceError::Malformed(what) => self.unavailable(id, &what),
                    },
                )?;
                Ok(self.verdict(id, etl_schema::protobuf::compat::check(message, text, &imports)))
            }
        }
    }

    /// The entry of a writer schema with these findings, logged once (it is cached).
    #[cfg(any(feature = "registry-json", feature = "registry-protobuf"))]
    fn verdict(&self, id: u32, findings: Vec<etl_schema::Finding>) -> Entry {
        let Some(first) = findings.first() else {
            tracing::info!(id, "the reader schema reads this writer schema");
            return Entry::Same;
        };
        for f in &findings {
            tracing::error!(id, problem = %f.what, help = %f.help, "the reader schema cannot read this writer schema");
        }
        let more = match findings.len() {
            1 => String::new(),
            n => format!(" (and {} more problem(s), logged at the lookup)", n - 1),
        };
        Entry::Unreadable(format!(
            "schema id {id} (from the registry) cannot be read with the reader schema: {}{more}; help: {}",
            first.what, first.help
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apache_avro::types::Value;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const READER: &str = r#"{"type":"record","name":"Order","fields":[
        {"name":"id","type":"long"},{"name":"note","type":"string","default":"none"}]}"#;
    const WRITER_V1: &str = r#"{"type":"record","name":"Order","fields":[{"name":"id","type":"long"}]}"#;

    /// A Confluent-API registry on loopback that knows ids 1 (the reader) and 2 (an older writer
    /// without `note`); id 3 (the reader again) is answered with 404 first, then 500, and only
    /// the third time with the schema, as a registry that lags the producer would. Ids from 1000
    /// on are copies of the reader. It counts the requests.
    fn registry_server() -> (String, Arc<AtomicUsize>) {
        use axum::extract::Path;
        use axum::routing::get;
        let hits = Arc::new(AtomicUsize::new(0));
        let lagging = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        let app = axum::Router::new().route(
            "/schemas/ids/{id}",
            get(move |Path(id): Path<u32>| {
                counter.fetch_add(1, Ordering::SeqCst);
                let lagging = lagging.clone();
                async move {
                    let ok = |schema: &str| {
                        (axum::http::StatusCode::OK, serde_json::json!({ "schema": schema }).to_string())
                    };
                    match id {
                        1 | 1000.. => ok(READER),
                        2 => ok(WRITER_V1),
                        3 => match lagging.fetch_add(1, Ordering::SeqCst) {
                            0 => (axum::http::StatusCode::NOT_FOUND, String::from("{}")),
                            1 => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, String::from("oops")),
                            _ => ok(READER),
                        },
                        _ => (axum::http::StatusCode::NOT_FOUND, String::from("{}")),
                    }
                }
            }),
        );
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || rt.block_on(async { axum::serve(listener, app).await.unwrap() }));
        (format!("http://{addr}"), hits)
    }

    /// A datum of the reader schema with id `id`.
    fn reader_datum(id: i64) -> Vec<u8> {
        datum(READER, Value::Record(vec![("id".into(), Value::Long(id)), ("note".into(), Value::String("n".into()))]))
    }

    fn datum(schema: &str, value: Value) -> Vec<u8> {
        apache_avro::to_avro_datum(&Schema::parse_str(schema).unwrap(), value).unwrap()
    }

    #[test]
    fn same_schema_is_untouched_and_other_writers_are_resolved() {
        let (url, hits) = registry_server();
        let registry = Registry::new(&url, READER, &[], Duration::from_secs(60)).unwrap();
        let reader = Schema::parse_str(READER).unwrap();
        let same = datum(
            READER,
            Value::Record(vec![("id".into(), Value::Long(7)), ("note".into(), Value::String("x".into()))]),
        );
        assert!(matches!(registry.resolve(1, &same).unwrap(), Datum::Same(b) if b == same.as_slice()));
        // An older writer: the reader's default fills the missing field.
        let old = datum(WRITER_V1, Value::Record(vec![("id".into(), Value::Long(9))]));
        let resolved = registry.resolve(2, &old).unwrap();
        let value = apache_avro::from_avro_datum(&reader, &mut resolved.bytes(), None).unwrap();
        assert_eq!(
            value,
            Value::Record(vec![("id".into(), Value::Long(9)), ("note".into(), Value::String("none".into()))])
        );
        for _ in 0..10 {
            registry.resolve(1, &same).unwrap();
            registry.resolve(2, &old).unwrap();
        }
        assert_eq!(hits.load(Ordering::SeqCst), 2, "each schema that was found is fetched once");
    }

    #[test]
    fn the_reader_schemas_own_ids_are_decoded_without_asking() {
        let (url, hits) = registry_server();
        let registry = Registry::new(&url, READER, &[5], Duration::from_secs(60)).unwrap();
        assert!(matches!(registry.resolve(5, &[1, 2]).unwrap(), Datum::Same(_)));
        assert_eq!(hits.load(Ordering::SeqCst), 0);
    }

    // A lookup that fails is retryable and never cached: a registry that answers 404, then 500,
    // then the schema, serves the record on the third try.
    #[test]
    fn failed_lookups_are_unavailable_and_never_cached() {
        let (url, hits) = registry_server();
        let registry = Registry::new(&url, READER, &[], Duration::from_secs(60)).unwrap();
        let same = reader_datum(1);
        let first = registry.resolve(3, &same).unwrap_err();
        assert_eq!(first.kind, RecordErrorKind::Unavailable, "{first}");
        assert!(first.message.contains("404") && first.message.contains("schema id 3"), "{first}");
        let second = registry.resolve(3, &same).unwrap_err();
        assert_eq!(second.kind, RecordErrorKind::Unavailable, "{second}");
        assert!(second.message.contains("500"), "{second}");
        assert!(matches!(registry.resolve(3, &same).unwrap(), Datum::Same(_)));
        registry.resolve(3, &same).unwrap();
        assert_eq!(hits.load(Ordering::SeqCst), 3, "two failures asked again, the success cached");
    }

    // An id whose lookups keep failing past the timeout makes its records record errors at their
    // first failed lookup (one timeout in all, not one per record); still asked every time, so a
    // registry that catches up is heard at once.
    #[test]
    fn an_id_failing_longer_than_the_timeout_is_a_record_error() {
        let (url, hits) = registry_server();
        let url = url.replace("http://", "http://me:hunter2@");
        let registry = Registry::new(&url, READER, &[], Duration::from_millis(300)).unwrap();
        assert_eq!(registry.resolve(99, &[]).unwrap_err().kind, RecordErrorKind::Unavailable);
        std::thread::sleep(Duration::from_millis(350));
        for _ in 0..3 {
            let error = registry.resolve(99, &[]).unwrap_err();
            assert_eq!(error.kind, RecordErrorKind::Decode, "{error}");
            assert!(error.message.contains("registry_timeout"), "{error}");
        }
        assert_eq!(hits.load(Ordering::SeqCst), 4, "every record asks again");
        assert!(!format!("{registry:?}").contains("hunter2"));
    }

    #[test]
    fn only_http_urls_are_registries() {
        let error = Registry::new("registry:8081", READER, &[], Duration::from_secs(1)).unwrap_err();
        assert!(error.to_string().contains("http://"), "{error}");
        let shown = Registry::new("ftp://me:hunter2@r", READER, &[], Duration::from_secs(1)).unwrap_err().to_string();
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn the_cache_is_bounded() {
        let (url, _) = registry_server();
        let registry = Registry::new(&url, READER, &[], Duration::from_secs(60)).unwrap();
        let same = reader_datum(1);
        for id in 1000..1000 + CACHE_CAPACITY as u32 + 50 {
            registry.resolve(id, &same).unwrap();
        }
        assert_eq!(registry.inner.cache.read().unwrap().len(), CACHE_CAPACITY);
    }

    #[test]
    fn an_unreachable_registry_is_unavailable_and_its_credentials_are_not_shown() {
        // Port 1 on loopback: nothing listens there.
        let registry = Registry::new("http://me:hunter2@127.0.0.1:1", READER, &[], Duration::from_secs(60)).unwrap();
        let err = registry.resolve(1, &[]).unwrap_err();
        assert_eq!(err.kind, RecordErrorKind::Unavailable, "{err}");
        assert!(!err.message.contains("hunter2"), "{err}");
    }

    /// A Confluent-API registry on loopback serving `schemas` (id → the `/schemas/ids/{id}`
    /// answer) and `subjects` ((subject, version) → schema text). It counts the requests.
    #[cfg(any(feature = "registry-json", feature = "registry-protobuf"))]
    fn serving(
        schemas: Vec<(u32, serde_json::Value)>,
        subjects: Vec<((&'static str, u32), &'static str)>,
    ) -> (String, Arc<AtomicUsize>) {
        use axum::extract::Path;
        use axum::http::StatusCode;
        use axum::routing::get;
        let hits = Arc::new(AtomicUsize::new(0));
        let schemas: Arc<HashMap<u32, serde_json::Value>> = Arc::new(schemas.into_iter().collect());
        let subjects: Arc<HashMap<(String, u32), &'static str>> =
            Arc::new(subjects.into_iter().map(|((s, v), t)| ((s.to_owned(), v), t)).collect());
        let (counter, counter2) = (hits.clone(), hits.clone());
        let app = axum::Router::new()
            .route(
                "/schemas/ids/{id}",
                get(move |Path(id): Path<u32>| {
                    counter.fetch_add(1, Ordering::SeqCst);
                    let answer = schemas.get(&id).cloned();
                    async move {
                        match answer {
                            Some(answer) => (StatusCode::OK, answer.to_string()),
                            None => (StatusCode::NOT_FOUND, "{}".to_owned()),
                        }
                    }
                }),
            )
            .route(
                "/subjects/{subject}/versions/{version}",
                get(move |Path((subject, version)): Path<(String, u32)>| {
                    counter2.fetch_add(1, Ordering::SeqCst);
                    let text = subjects.get(&(subject, version)).copied();
                    async move {
                        match text {
                            Some(text) => (StatusCode::OK, serde_json::json!({ "schema": text }).to_string()),
                            None => (StatusCode::NOT_FOUND, "{}".to_owned()),
                        }
                    }
                }),
            );
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || rt.block_on(async { axum::serve(listener, app).await.unwrap() }));
        (format!("http://{addr}"), hits)
    }

    // A JSON writer that adds and drops properties the reader does not need is read; one whose
    // property the reader requires changed type is not, nor is an Avro schema; each id is asked
    // once, the verdicts (good and bad) cached, the reader's own ids never asked.
    #[cfg(feature = "registry-json")]
    #[test]
    fn json_writers_are_judged_by_the_compatibility_rules_once_per_id() {
        use serde_json::json;
        let reader = r#"{"type": "object", "required": ["id"], "properties": {
            "id": {"type": "integer"}, "note": {"type": "string"}}}"#;
        let evolved = r#"{"type": "object", "required": ["id", "extra"], "properties": {
            "id": {"type": "integer"}, "extra": {"type": "boolean"}}}"#;
        let broken = r#"{"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}}"#;
        let (url, hits) = serving(
            vec![
                (10, json!({"schemaType": "JSON", "schema": evolved})),
                (11, json!({"schemaType": "JSON", "schema": broken})),
                (12, json!({"schema": READER})),
            ],
            vec![],
        );
        let registry = Registry::json(&url, reader, &[7], Duration::from_secs(60)).unwrap();
        for _ in 0..3 {
            registry.check(7).unwrap();
            registry.check(10).unwrap();
            let error = registry.check(11).unwrap_err();
            assert_eq!(error.kind, RecordErrorKind::Decode, "{error}");
            assert!(
                error.message.contains("schema id 11")
                    && error.message.contains("property `id`: it is a string in the writer and an integer"),
                "{error}"
            );
            let error = registry.check(12).unwrap_err();
            assert!(
                error.message.contains("AVRO schema in the registry; this pipeline reads format.json (is the topic"),
                "{error}"
            );
        }
        assert_eq!(hits.load(Ordering::SeqCst), 3, "one lookup per id, verdicts cached");
        let missing = registry.check(13).unwrap_err();
        assert_eq!(missing.kind, RecordErrorKind::Unavailable, "{missing}");
    }

    // A Protobuf writer is compiled with the schemas its references name (fetched from their
    // subjects): one that renamed and added fields is read, one that changed a field's type is
    // not, and one whose reference the registry does not have yet is retried (Unavailable).
    #[cfg(feature = "registry-protobuf")]
    #[test]
    fn protobuf_writers_are_compiled_with_their_references_and_judged() {
        use serde_json::json;
        const COMMON: &str = "syntax = \"proto3\"; package shop; message Money { int64 cents = 1; }";
        let reader = r#"syntax = "proto3"; package shop; import "common.proto";
            message Order { int64 id = 1; Money total = 2; string note = 3; }"#;
        let evolved = r#"syntax = "proto3"; package shop; import "common.proto";
            message Order { int32 order_id = 1; Money total = 2; bool gift = 4; }"#;
        let broken = r#"syntax = "proto3"; package shop; message Order { int64 id = 1; Money total = 2; }
            message Money { string cents = 1; }"#;
        let reference = json!([{"name": "common.proto", "subject": "shop/common", "version": 1}]);
        let missing_reference = json!([{"name": "common.proto", "subject": "shop/common", "version": 2}]);
        let (url, hits) = serving(
            vec![
                (20, json!({"schemaType": "PROTOBUF", "schema": evolved, "references": reference})),
                (21, json!({"schemaType": "PROTOBUF", "schema": broken})),
                (22, json!({"schemaType": "PROTOBUF", "schema": evolved, "references": missing_reference})),
            ],
            vec![(("shop%2Fcommon", 1), COMMON), (("shop/common", 1), COMMON)],
        );
        let sources = [("order.proto".to_owned(), reader.to_owned()), ("common.proto".to_owned(), COMMON.to_owned())];
        let message = etl_schema::protobuf::parse_sources("order.proto", &sources.into_iter().collect(), "shop.Order")
            .unwrap()
            .unwrap();
        let registry =
            Registry::protobuf(&url, &message.descriptor_set, "shop.Order", &[1], Duration::from_secs(60)).unwrap();
        registry.check(1).unwrap();
        registry.check(20).unwrap();
        let error = registry.check(21).unwrap_err();
        assert_eq!(error.kind, RecordErrorKind::Decode, "{error}");
        assert!(
            error.message.contains("schema id 21") && error.message.contains("field `total = 2.cents = 1`"),
            "{error}"
        );
        let error = registry.check(22).unwrap_err();
        assert_eq!(error.kind, RecordErrorKind::Unavailable, "{error}");
        assert!(error.message.contains("404"), "{error}");
        let before = hits.load(Ordering::SeqCst);
        registry.check(20).unwrap();
        registry.check(21).unwrap_err();
        assert_eq!(hits.load(Ordering::SeqCst), before, "verdicts are cached");
    }
}
