//! A Confluent-API schema registry client: writer schemas by id, resolved to the reader
//! schema the binary was generated for.
//!
//! The generated decoder reads exactly the reader schema. A message whose writer schema is
//! the same (by canonical form) takes that fast path untouched. One written with another
//! schema is decoded with apache-avro's schema resolution into a reader-shaped value,
//! re-encoded with the reader schema, and then decoded by the generated code: a slower but
//! correct path that keeps one decoder. Each id is fetched once and cached, including
//! unknown ids (404), so the registry is asked once per schema, not per record. The first
//! record with a new id waits for that fetch (bounded by a timeout) on its pipeline thread.
//! A registry that cannot be reached is `RecordErrorKind::Unavailable`, which stops the
//! pipeline instead of skipping good records.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use apache_avro::Schema;

use crate::chain::{RecordError, RecordErrorKind};

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

#[derive(Debug)]
struct Inner {
    url: String,
    reader: Schema,
    reader_canonical: String,
    cache: RwLock<HashMap<u32, Arc<Entry>>>,
    agent: ureq::Agent,
}

#[derive(Debug)]
enum Entry {
    Same,
    Writer(Schema),
    Unknown(String),
}

impl Registry {
    /// A client of the registry at `url` for the reader schema `reader_json`.
    pub fn new(url: &str, reader_json: &str) -> Result<Self, String> {
        let reader = Schema::parse_str(reader_json).map_err(|e| format!("the reader schema: {e}"))?;
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(5)))
            .http_status_as_error(false)
            .build()
            .new_agent();
        Ok(Registry {
            inner: Arc::new(Inner {
                url: url.trim_end_matches('/').to_owned(),
                reader_canonical: reader.canonical_form(),
                reader,
                cache: RwLock::new(HashMap::new()),
                agent,
            }),
        })
    }

    /// The datum of a message written with schema `id`, as the reader schema reads it.
    pub fn resolve<'a>(&self, id: u32, datum: &'a [u8]) -> Result<Datum<'a>, RecordError> {
        let cached = self.inner.cache.read().expect("registry cache lock").get(&id).cloned();
        let entry = match cached {
            Some(entry) => entry,
            None => {
                let entry = Arc::new(self.fetch(id)?);
                self.inner.cache.write().expect("registry cache lock").insert(id, entry.clone());
                entry
            }
        };
        match entry.as_ref() {
            Entry::Same => Ok(Datum::Same(datum)),
            Entry::Unknown(why) => Err(RecordError::new(RecordErrorKind::Decode, format!("schema id {id}: {why}"))),
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

    fn fetch(&self, id: u32) -> Result<Entry, RecordError> {
        let url = format!("{}/schemas/ids/{id}", self.inner.url);
        let unavailable =
            |e: String| RecordError::new(RecordErrorKind::Unavailable, format!("schema registry {url}: {e}"));
        let mut response = self.inner.agent.get(&url).call().map_err(|e| unavailable(e.to_string()))?;
        let status = response.status().as_u16();
        let body = response.body_mut().read_to_string().map_err(|e| unavailable(e.to_string()))?;
        match status {
            200 => {}
            404 => {
                tracing::warn!(id, "unknown schema id");
                return Ok(Entry::Unknown("unknown to the schema registry".into()));
            }
            other => return Err(unavailable(format!("HTTP {other}: {body}"))),
        }
        let json: serde_json::Value = serde_json::from_str(&body).map_err(|e| unavailable(format!("bad JSON: {e}")))?;
        let Some(text) = json.get("schema").and_then(|s| s.as_str()) else {
            return Err(unavailable("the answer has no `schema`".into()));
        };
        let writer = match Schema::parse_str(text) {
            Ok(writer) => writer,
            Err(e) => return Ok(Entry::Unknown(format!("the registry's schema does not parse: {e}"))),
        };
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

    const READER: &str = r#"{"type":"record","name":"Order","fields":[
        {"name":"id","type":"long"},{"name":"note","type":"string","default":"none"}]}"#;
    const WRITER_V1: &str = r#"{"type":"record","name":"Order","fields":[{"name":"id","type":"long"}]}"#;

    /// A Confluent-API registry on loopback that knows ids 1 (the reader) and 2 (an older
    /// writer without `note`), and counts the requests.
    fn registry_server() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use axum::extract::Path;
        use axum::routing::get;
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = hits.clone();
        let app = axum::Router::new().route(
            "/schemas/ids/{id}",
            get(move |Path(id): Path<u32>| {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async move {
                    let schema = match id {
                        1 => READER,
                        2 => WRITER_V1,
                        _ => return (axum::http::StatusCode::NOT_FOUND, String::from("{}")),
                    };
                    (axum::http::StatusCode::OK, serde_json::json!({ "schema": schema }).to_string())
                }
            }),
        );
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || rt.block_on(async { axum::serve(listener, app).await.unwrap() }));
        (format!("http://{addr}"), hits)
    }

    #[test]
    fn same_schema_is_untouched_and_other_writers_are_resolved() {
        let (url, hits) = registry_server();
        let registry = Registry::new(&url, READER).unwrap();
        let reader = Schema::parse_str(READER).unwrap();
        let same = apache_avro::to_avro_datum(
            &reader,
            Value::Record(vec![("id".into(), Value::Long(7)), ("note".into(), Value::String("x".into()))]),
        )
        .unwrap();
        assert!(matches!(registry.resolve(1, &same).unwrap(), Datum::Same(b) if b == same.as_slice()));
        // An older writer: the reader's default fills the missing field.
        let writer = Schema::parse_str(WRITER_V1).unwrap();
        let old = apache_avro::to_avro_datum(&writer, Value::Record(vec![("id".into(), Value::Long(9))])).unwrap();
        let resolved = registry.resolve(2, &old).unwrap();
        let value = apache_avro::from_avro_datum(&reader, &mut resolved.bytes(), None).unwrap();
        assert_eq!(
            value,
            Value::Record(vec![("id".into(), Value::Long(9)), ("note".into(), Value::String("none".into()))])
        );
        // Unknown ids are record errors (errors.policy applies), cached like the others.
        let err = registry.resolve(99, &old).unwrap_err();
        assert_eq!(err.kind, RecordErrorKind::Decode);
        for _ in 0..10 {
            registry.resolve(1, &same).unwrap();
            registry.resolve(2, &old).unwrap();
            assert!(registry.resolve(99, &old).is_err());
        }
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 3, "each id is fetched once");
    }

    #[test]
    fn an_unreachable_registry_stops_rather_than_skips() {
        // Port 1 on loopback: nothing listens there.
        let registry = Registry::new("http://127.0.0.1:1", READER).unwrap();
        let err = registry.resolve(1, &[]).unwrap_err();
        assert_eq!(err.kind, RecordErrorKind::Unavailable, "{err}");
    }
}
