//! A stub schema registry on loopback, for the scenarios that run with `SCHEMA_REGISTRY_URL`.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;

/// A stub Confluent-API schema registry on loopback that knows only schema id 1, the e2e
/// reader schema; every other id is 404. Returns its URL.
pub fn stub_registry() -> String {
    let schema = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/schemas/order.avsc"))
        .expect("the e2e schema");
    let escaped = schema.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n").replace('\r', "");
    let known = format!("{{\"schema\":\"{escaped}\"}}");
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let addr = listener.local_addr().expect("bound");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 1024];
            let n = stream.read(&mut request).unwrap_or(0);
            let line = String::from_utf8_lossy(&request[..n]);
            let (status, body) = if line.starts_with("GET /schemas/ids/1 ") {
                ("200 OK", known.as_str())
            } else {
                ("404 Not Found", "{}")
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://{addr}")
}
