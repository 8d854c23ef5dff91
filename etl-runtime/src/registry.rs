//! A Confluent-API schema registry client: writer schemas by id, resolved to the reader
//! schema the binary was generated for.
//!
//! The generated decoder reads exactly the reader schema. A message framed with one of the
//! reader schema's own ids (`format.avro.schema_id`), or whose writer schema the registry says
//! is the same (by canonical form), takes that fast path untouched. One written with another
//! schema is decoded with apache-avro's schema resolution into a reader-shaped value,
//! re-encoded with the reader schema, and then decoded by the generated code: a slower but
//! correct path that keeps one decoder.
//!
//! Schemas that were found are cached (at most [`CACHE_CAPACITY`] ids). A lookup that fails
//! (no connection, an HTTP error, or a 404 because the registry lags the producer) is never
//! cached: it is [`RecordErrorKind::Unavailable`], which makes the pipeline thread hold the
//! record, pause its lane and ask again with capped backoff, until `format.avro.registry_timeout`
//! turns it into a record error under `errors.policy` (see `pipeline`).

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

struct Inner {
    url: String,
    /// The URL without credentials, for messages.
    shown: String,
    reader: Schema,
    reader_canonical: String,
    reader_ids: Vec<u32>,
    cache: RwLock<HashMap<u32, Arc<Entry>>>,
    /// When the lookups of each id that is failing now began to fail (at most
    /// [`CACHE_CAPACITY`] ids). Not a cache of the failure: every record asks again. It lets a
    /// record whose id has been failing for longer than `timeout` become a record error at its
    /// first failed lookup, so a stream of messages with an id nobody knows costs one
    /// `registry_timeout`, not one per message.
    failing: Mutex<HashMap<u32, Instant>>,
    /// `format.avro.registry_timeout`.
    timeout: Duration,
    agent: ureq::Agent,
}

impl std::fmt::Debug for Inner {
    // By hand: the URL may carry credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("url", &self.shown)
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

#[derive(Debug)]
enum Entry {
    Same,
    Writer(Schema),
}

impl Registry {
    /// A client of the registry at `url` for the reader schema `reader_json`, registered under
    /// `reader_ids` (which are decoded without asking the registry). An id whose lookups have
    /// failed for `timeout` makes its records record errors.
    pub fn new(url: &str, reader_json: &str, reader_ids: &[u32], timeout: Duration) -> Result<Self, RegistryError> {
        let url = url.trim();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(RegistryError::NotHttp(redact_url(url)));
        }
        let reader = Schema::parse_str(reader_json).map_err(|e| RegistryError::ReaderSchema(e.to_string()))?;
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
                reader_canonical: reader.canonical_form(),
                reader,
                reader_ids: reader_ids.to_vec(),
                cache: RwLock::new(HashMap::new()),
                failing: Mutex::new(HashMap::new()),
                timeout,
                agent,
            }),
        })
    }

    /// The datum of a message written with schema `id`, as the reader schema reads it.
    pub fn resolve<'a>(&self, id: u32, datum: &'a [u8]) -> Result<Datum<'a>, RecordError> {
        if self.inner.reader_ids.contains(&id) {
            return Ok(Datum::Same(datum));
        }
        let cached = self.inner.cache.read().expect("registry cache lock").get(&id).cloned();
        let entry = match cached {
            Some(entry) => entry,
            None => {
                let entry = Arc::new(self.fetch(id).map_err(|error| self.failed(id, error))?);
                self.inner.failing.lock().expect("registry failing lock").remove(&id);
                let mut cache = self.inner.cache.write().expect("registry cache lock");
                if cache.len() >= CACHE_CAPACITY
                    && let Some(&evicted) = cache.keys().next()
                {
                    cache.remove(&evicted);
                }
                cache.insert(id, entry.clone());
                entry
            }
        };
        match entry.as_ref() {
            Entry::Same => Ok(Datum::Same(datum)),
            Entry::Writer(writer) => {
                let mut reader = datum;
                let value =
                    apache_avro::from_avro_datum(writer, &mut reader, Some(&self.inner.reader)).map_err(|e| {
                        RecordError::new(
                            RecordErrorKind::Decode,
                            format!("schema id {id}: resolving to the reader schema: {e}"),
                        )
                    })?;
                let bytes = apache_avro::to_avro_datum(&self.inner.reader, value).map_err(|e| {
                    RecordError::new(RecordErrorKind::Decode, format!("schema id {id}: re-encoding: {e}"))
                })?;
                Ok(Datum::Reencoded(bytes))
            }
        }
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
                    "{} (lookups of this id have failed for {failing_for:?}: format.avro.registry_timeout is {:?})",
                    error.message, self.inner.timeout
                ),
            )
        } else {
            error
        }
    }

    /// Asks the registry for schema `id`. Every failure is `Unavailable` (retried by the caller)
    /// except a schema that the registry returns but that does not parse, which no retry mends.
    fn fetch(&self, id: u32) -> Result<Entry, RecordError> {
        let url = format!("{}/schemas/ids/{id}", self.inner.url);
        let shown = &self.inner.shown;
        let unavailable = |e: String| {
            RecordError::new(
                RecordErrorKind::Unavailable,
                crate::secret::mask_userinfo(&format!("schema registry {shown}: schema id {id}: {e}")),
            )
        };
        let mut response = self.inner.agent.get(&url).call().map_err(|e| unavailable(e.to_string()))?;
        let status = response.status().as_u16();
        let body = response.body_mut().read_to_string().map_err(|e| unavailable(e.to_string()))?;
        match status {
            200 => {}
            // The registry may lag the producer that registered the schema: asked again later.
            404 => return Err(unavailable("unknown to the schema registry (HTTP 404)".into())),
            other => return Err(unavailable(format!("HTTP {other}: {}", body.chars().take(200).collect::<String>()))),
        }
        let json: serde_json::Value = serde_json::from_str(&body).map_err(|e| unavailable(format!("bad JSON: {e}")))?;
        let Some(text) = json.get("schema").and_then(|s| s.as_str()) else {
            return Err(unavailable("the answer has no `schema`".into()));
        };
        let writer = Schema::parse_str(text).map_err(|e| {
            RecordError::new(
                RecordErrorKind::Decode,
                format!("schema id {id}: the registry's schema does not parse: {e}"),
            )
        })?;
        if writer.canonical_form() == self.inner.reader_canonical {
            tracing::info!(id, "writer schema is the reader schema");
            Ok(Entry::Same)
        } else {
            tracing::info!(id, "writer schema differs from the reader schema; resolving");
            Ok(Entry::Writer(writer))
        }
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
}
