//! Stub schema registries on loopback, for the scenarios that run with `SCHEMA_REGISTRY_URL`: one
//! that knows only the reader's id, and one that knows three ids and can be stopped and started.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// A stub Confluent-API schema registry on loopback that knows only schema id 1, the e2e
/// reader schema; every other id is 404. Returns its URL.
pub fn stub_registry() -> String {
    let known = known_schema();
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let addr = listener.local_addr().expect("bound");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            answer_known(stream, &known, &["1"]);
        }
    });
    format!("http://{addr}")
}

/// A stub registry that knows writer schema ids 1, 2 and 3 (each the e2e reader schema, as a
/// producer that re-registers it under a new subject gets new ids), that can be stopped (its port
/// refuses connections) and started again on the same port. It counts the lookups it answered.
pub struct StoppableRegistry {
    port: u16,
    up: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
}

impl StoppableRegistry {
    /// A registry on a free loopback port, stopped until [`StoppableRegistry::start`].
    pub fn stopped() -> StoppableRegistry {
        let port = TcpListener::bind("127.0.0.1:0").expect("a loopback port").local_addr().unwrap().port();
        let (up, answered) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let known = known_schema();
        {
            let (up, answered) = (up.clone(), answered.clone());
            std::thread::spawn(move || {
                let mut listener: Option<TcpListener> = None;
                loop {
                    if !up.load(Ordering::SeqCst) {
                        // Closed: connections to the port are refused.
                        listener = None;
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                    // std sets SO_REUSEADDR, so the port can be bound again at once.
                    let l = listener.get_or_insert_with(|| {
                        let l = TcpListener::bind(("127.0.0.1", port)).expect("binding the registry's port again");
                        l.set_nonblocking(true).unwrap();
                        l
                    });
                    match l.accept() {
                        Ok((stream, _)) => {
                            stream.set_nonblocking(false).unwrap();
                            if answer_known(stream, &known, &["1", "2", "3"]) {
                                answered.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            });
        }
        StoppableRegistry { port, up, answered }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn start(&self) {
        self.up.store(true, Ordering::SeqCst);
    }

    /// Stops listening (within 10 ms); connections are refused from then on.
    pub fn stop(&self) {
        self.up.store(false, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(50));
    }

    /// Lookups answered with a schema.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::SeqCst)
    }
}

/// A stub registry that answers `GET /schemas/ids/{id}` with the JSON answer given for `id` (404
/// for any other id). Returns its URL and the count of lookups it answered with a schema.
pub fn serving_schemas(answers: Vec<(u32, String)>) -> (String, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let addr = listener.local_addr().expect("bound");
    let answered = Arc::new(AtomicU64::new(0));
    let counter = answered.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let body_for =
                |id: &str| answers.iter().find(|(known, _)| known.to_string() == id).map(|(_, b)| b.as_str());
            if answer(stream, body_for) {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    (format!("http://{addr}"), answered)
}

/// The e2e reader schema as the registry's JSON answer.
fn known_schema() -> String {
    let schema = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/schemas/order.avsc"))
        .expect("the e2e schema");
    let escaped = schema.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n").replace('\r', "");
    format!("{{\"schema\":\"{escaped}\"}}")
}

/// Answers one request: for `GET /schemas/ids/{id}`, what `body_for(id)` gives, or 404 when it
/// gives nothing. Returns whether it answered with a schema.
fn answer<'a>(mut stream: TcpStream, body_for: impl Fn(&str) -> Option<&'a str>) -> bool {
    let mut request = [0u8; 1024];
    let n = stream.read(&mut request).unwrap_or(0);
    let line = String::from_utf8_lossy(&request[..n]);
    let found =
        line.strip_prefix("GET /schemas/ids/").and_then(|rest| rest.split_once(' ')).and_then(|(id, _)| body_for(id));
    let (status, body) = match found {
        Some(body) => ("200 OK", body),
        None => ("404 Not Found", "{}"),
    };
    let _ = write!(stream, "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    found.is_some()
}

/// [`answer`] with the reader schema for the ids in `ids`.
fn answer_known(stream: TcpStream, known: &str, ids: &[&str]) -> bool {
    answer(stream, |id| ids.contains(&id).then_some(known))
}
