//! The sink's HTTP contract against a fake server on loopback: what every insert carries (settings,
//! token, credentials, lz4 framing), how answers are classified, the timeout, and replica rotation.
//! No ClickHouse is needed; `tests/clickhouse.rs` covers the real server.

use std::time::{Duration, Instant};

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc::Receiver;

use super::*;
use crate::engine::chunk::{Chunk, ChunkOrigin};
use crate::engine::errors::SinkErrorKind;

/// How the fake server answers.
#[derive(Clone)]
enum Answer {
    /// This raw HTTP response.
    With(String),
    /// Nothing, ever (a hung server).
    Hang,
}

/// A loopback server on plain threads that captures each request (head and raw body) and answers
/// it; returns its URL and the captured requests.
fn fake_server(answer: Answer) -> (String, Receiver<Vec<u8>>) {
    fake_server_on("127.0.0.1:0".parse().unwrap(), answer)
}

/// [`fake_server`] on a given address (a port that refused connections before, say).
fn fake_server_on(addr: std::net::SocketAddr, answer: Answer) -> (String, Receiver<Vec<u8>>) {
    let listener = TcpListener::bind(addr).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let (tx, answer) = (tx.clone(), answer.clone());
            std::thread::spawn(move || {
                let mut request = Vec::new();
                let mut buf = [0u8; 65536];
                // A chunked body ends with an empty chunk; a query's body has a Content-Length.
                while !request.ends_with(b"0\r\n\r\n") && !has_whole_body(&request) {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = tx.send(request);
                match answer {
                    Answer::With(response) => {
                        let _ = stream.write_all(response.as_bytes());
                    }
                    // Keep the connection open and silent until the client gives up.
                    Answer::Hang => while stream.read(&mut buf).is_ok_and(|n| n > 0) {},
                }
            });
        }
    });
    (url, rx)
}

/// Whether `request` is a head with a `Content-Length` and that many body bytes after it.
fn has_whole_body(request: &[u8]) -> bool {
    let text = String::from_utf8_lossy(request);
    let Some((head, body)) = text.split_once("\r\n\r\n") else { return false };
    head.lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|length| body.len() >= length)
}

/// The next captured request.
fn next(requests: &Receiver<Vec<u8>>) -> Vec<u8> {
    requests.recv_timeout(Duration::from_secs(5)).expect("a request reached the fake server")
}

/// A raw HTTP response with `body`.
fn response(status: &str, headers: &str, body: &str) -> Answer {
    // One request per connection: the fake server does not keep connections alive.
    let head = format!("HTTP/1.1 {status}\r\n{headers}Connection: close\r\nContent-Length: {}\r\n\r\n", body.len());
    Answer::With(head + body)
}

fn ok() -> Answer {
    response("200 OK", "", "")
}

fn config(shards: Vec<Vec<String>>) -> ClickhouseSinkConfig {
    ClickhouseSinkConfig {
        shards,
        database: "analytics".into(),
        table: "orders".into(),
        user: "writer".into(),
        password: "hunter2".into(),
        settings: vec![("max_partitions_per_insert_block".into(), "7".into())],
        format: InsertFormat::RowBinary,
        compression: InsertCompression::Lz4,
        timeout: Duration::from_millis(300),
        columns: vec![("id".into(), "Int64".into()), ("name".into(), "String".into())],
        ca_file: None,
        client_cert: None,
        client_key: None,
        exactly_once: None,
    }
}

/// A batch of `rows` rows `(id, "row <id>")` in one chunk.
fn batch(token: &str, rows: i64) -> Batch {
    let mut bytes = Vec::new();
    for id in 0..rows {
        crate::codec::rowbinary::i64(&mut bytes, id);
        crate::codec::rowbinary::string(&mut bytes, format!("row {id}").as_bytes());
    }
    let origin = ChunkOrigin {
        thread: 0,
        lane_id: 1,
        lane: crate::engine::lane::LaneKey::new("t", 0),
        first_offset: 0,
        last_offset: rows - 1,
    };
    let len = bytes.len() as u64;
    let chunk = Chunk {
        bytes,
        rows: rows as u32,
        origin,
        shard: 0,
        urgent: false,
        row_offsets: Vec::new(),
        recorded: None,
        fence: None,
        first_timestamp_ms: None,
    };
    Batch { shard: 0, token: token.into(), chunks: vec![chunk], rows: rows as u64, bytes: len, held: len, span: None }
}

/// The request line and headers, lower-cased, and the body after the head.
fn split(request: &[u8]) -> (String, &[u8]) {
    let at = request.windows(4).position(|w| w == b"\r\n\r\n").expect("a request head") + 4;
    (String::from_utf8_lossy(&request[..at]).to_lowercase(), &request[at..])
}

fn decoded(head: &str) -> String {
    let line = head.lines().next().unwrap();
    let mut out = String::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                out.push(u8::from_str_radix(&line[i + 1..i + 3], 16).unwrap() as char);
                i += 3;
            }
            b'+' => {
                out.push(' ');
                i += 1;
            }
            c => {
                out.push(c as char);
                i += 1;
            }
        }
    }
    out
}

// Invariant 3 on the wire: every insert waits for the end of the query, carries the batch token,
// the configured settings, the statement naming the columns, the credentials as headers (never in
// the URL), and an lz4-compressed body in ClickHouse's block framing.
#[tokio::test]
async fn every_insert_carries_the_contract() {
    let (url, requests) = fake_server(ok());
    let sink = ClickhouseSink::new(config(vec![vec![url]])).unwrap();
    sink.write(0, &batch("tok-1", 100)).await.unwrap();
    let request = next(&requests);
    let (head, body) = split(&request);
    let line = decoded(&head);
    for needle in [
        "wait_end_of_query=1",
        "async_insert=0",
        "insert_deduplication_token=tok-1",
        "max_partitions_per_insert_block=7",
        "decompress=1",
        "database=analytics",
        "query=insert into `analytics`.`orders` (`id`, `name`) format rowbinary",
    ] {
        assert!(line.contains(needle), "`{needle}` missing from {line}");
    }
    assert!(head.contains("x-clickhouse-user: writer"), "{head}");
    assert!(head.contains("x-clickhouse-key: hunter2"), "{head}");
    assert!(!line.contains("hunter2"), "the password is not in the URL");
    // Chunked body: "<hex size>\r\n", then a compressed block: 16 bytes of checksum, then the
    // method byte, 0x82 for lz4.
    let data = &body[body.windows(2).position(|w| w == b"\r\n").unwrap() + 2..];
    assert_eq!(data[16], 0x82, "lz4 block framing");
}

// `compression`: zstd bodies carry ClickHouse's block framing with the zstd method byte (0x90)
// and `decompress=1`; `none` sends the RowBinary body as it is, without `decompress`.
#[tokio::test]
async fn compression_is_what_the_pipeline_chose() {
    let (url, requests) = fake_server(ok());
    let zstd = ClickhouseSinkConfig { compression: InsertCompression::Zstd, ..config(vec![vec![url]]) };
    ClickhouseSink::new(zstd).unwrap().write(0, &batch("tok-zstd", 100)).await.unwrap();
    let request = next(&requests);
    let (head, body) = split(&request);
    assert!(decoded(&head).contains("decompress=1"), "{head}");
    let data = &body[body.windows(2).position(|w| w == b"\r\n").unwrap() + 2..];
    assert_eq!(data[16], 0x90, "zstd block framing");

    let (url, requests) = fake_server(ok());
    let none = ClickhouseSinkConfig { compression: InsertCompression::None, ..config(vec![vec![url]]) };
    ClickhouseSink::new(none).unwrap().write(0, &batch("tok-none", 3)).await.unwrap();
    let request = next(&requests);
    let (head, body) = split(&request);
    assert!(!decoded(&head).contains("decompress"), "{head}");
    let mut rows = Vec::new();
    for id in 0..3 {
        crate::codec::rowbinary::i64(&mut rows, id);
        crate::codec::rowbinary::string(&mut rows, format!("row {id}").as_bytes());
    }
    assert!(body.windows(rows.len()).any(|w| w == rows), "the rows as they are");
}

// `format: native`: the statement says Native and the body is one Native block of the batch's
// rows, column by column: the ids, then the names (uncompressed here, to read it).
#[tokio::test]
async fn native_bodies_are_the_rows_column_by_column() {
    let (url, requests) = fake_server(ok());
    let native = ClickhouseSinkConfig {
        format: InsertFormat::Native,
        compression: InsertCompression::None,
        ..config(vec![vec![url]])
    };
    ClickhouseSink::new(native).unwrap().write(0, &batch("tok-native", 3)).await.unwrap();
    let request = next(&requests);
    let (head, body) = split(&request);
    assert!(decoded(&head).contains("(`id`, `name`) format native"), "{head}");
    let mut block = vec![2, 3];
    crate::codec::rowbinary::string(&mut block, b"id");
    crate::codec::rowbinary::string(&mut block, b"Int64");
    for id in 0..3 {
        crate::codec::rowbinary::i64(&mut block, id);
    }
    crate::codec::rowbinary::string(&mut block, b"name");
    crate::codec::rowbinary::string(&mut block, b"String");
    for id in 0..3 {
        crate::codec::rowbinary::string(&mut block, format!("row {id}").as_bytes());
    }
    assert!(body.windows(block.len()).any(|w| w == block), "one Native block of the three rows");
}

// `format: native` and bytes that are not rows of the declared types (an encoder and the types
// disagree): no Native block can be made, nothing reaches the server, and the rows come back as
// refused data, as ClickHouse's parse error would make them under RowBinary.
#[tokio::test]
async fn native_refuses_bytes_that_are_not_rows_without_sending_them() {
    let (url, requests) = fake_server(ok());
    let native = ClickhouseSinkConfig { format: InsertFormat::Native, ..config(vec![vec![url]]) };
    let mut bad = batch("tok-bad", 4);
    bad.chunks[0].bytes.pop();
    let error = ClickhouseSink::new(native).unwrap().write(0, &bad).await.unwrap_err();
    assert_eq!(error.kind, SinkErrorKind::Data { rows: vec![0, 1, 2, 3] }, "{}", error.message);
    assert!(error.message.contains("do not decode as rows"), "{}", error.message);
    assert!(requests.recv_timeout(Duration::from_millis(300)).is_err(), "no request was sent");
}

// Async inserts are pinned off unless the pipeline's settings choose them: then the insert
// carries the pipeline's choice, and no second, contradicting `async_insert`.
#[tokio::test]
async fn async_inserts_are_off_unless_chosen() {
    let (url, requests) = fake_server(ok());
    let chosen = vec![("async_insert".to_owned(), "1".to_owned())];
    let sink = ClickhouseSink::new(ClickhouseSinkConfig { settings: chosen, ..config(vec![vec![url]]) }).unwrap();
    sink.write(0, &batch("tok-async", 3)).await.unwrap();
    let request = next(&requests);
    let line = decoded(&split(&request).0);
    assert!(line.contains("async_insert=1"), "{line}");
    assert!(!line.contains("async_insert=0"), "{line}");
}

// A ClickHouse exception answer is classified by its code; the password is scrubbed from the
// message even if the server echoes it; a fatal answer does not mark the replica unhealthy.
#[tokio::test]
async fn answers_are_classified_and_scrubbed() {
    let auth = response(
        "500 Internal Server Error",
        "X-ClickHouse-Exception-Code: 516\r\n",
        "Code: 516. DB::Exception: writer: wrong password hunter2 (AUTHENTICATION_FAILED)",
    );
    let (url, _requests) = fake_server(auth);
    let sink = ClickhouseSink::new(config(vec![vec![url]])).unwrap();
    let error = sink.write(0, &batch("tok-2", 3)).await.unwrap_err();
    assert_eq!(error.kind, SinkErrorKind::Fatal, "{}", error.message);
    assert!(error.message.contains("Code: 516"), "{}", error.message);
    assert!(!error.message.contains("hunter2"), "{}", error.message);
    assert_eq!(sink.shards[0].replicas[0].healthy.get(), 1);

    let (url, _requests) = fake_server(response("503 Service Unavailable", "", ""));
    let sink = ClickhouseSink::new(config(vec![vec![url]])).unwrap();
    let error = sink.write(0, &batch("tok-3", 3)).await.unwrap_err();
    assert_eq!(error.kind, SinkErrorKind::Retryable, "{}", error.message);
    assert_eq!(sink.shards[0].replicas[0].healthy.get(), 0);
}

// The per-insert timeout bounds a hung server: the write fails as retryable soon after it.
#[tokio::test]
async fn a_hung_server_times_out_as_retryable() {
    let (url, _requests) = fake_server(Answer::Hang);
    let sink = ClickhouseSink::new(config(vec![vec![url]])).unwrap();
    let started = Instant::now();
    let error = sink.write(0, &batch("tok-4", 10)).await.unwrap_err();
    assert_eq!(error.kind, SinkErrorKind::Retryable, "{}", error.message);
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(2), "{took:?}");
}

// Rotation: the first replica refuses connections, so the first attempt fails as retryable and
// marks it unhealthy; the next attempt (the runtime's retry) goes to the second replica and
// succeeds with the same token; later writes stay there while the first cools down.
#[tokio::test]
async fn a_failing_replica_is_rotated_out() {
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let (live, requests) = fake_server(ok());
    let sink = ClickhouseSink::new(config(vec![vec![dead, live]])).unwrap();
    let first = batch("tok-5", 5);
    assert_eq!(sink.write(0, &first).await.unwrap_err().kind, SinkErrorKind::Retryable);
    assert_eq!(sink.shards[0].replicas[0].healthy.get(), 0);
    sink.write(0, &first).await.unwrap();
    assert!(decoded(&split(&next(&requests)).0).contains("insert_deduplication_token=tok-5"));
    assert_eq!(sink.shards[0].replicas[1].healthy.get(), 1);
    sink.write(0, &batch("tok-6", 5)).await.unwrap();
    assert!(decoded(&split(&next(&requests)).0).contains("insert_deduplication_token=tok-6"));
}

// A replica that failed is probed again once its cooldown is over, off the insert path: while it
// is still down it stays unhealthy and cools down again; once it answers it is healthy again,
// and the shard stays on the replica that works.
#[tokio::test]
async fn a_failed_replica_is_probed_after_its_cooldown() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let (live, requests) = fake_server(ok());
    let sink = ClickhouseSink::new(config(vec![vec![format!("http://{addr}"), live]])).unwrap();
    let healthy = |index: usize| sink.shards[0].replicas[index].healthy.get();
    assert_eq!(sink.write(0, &batch("tok-7", 5)).await.unwrap_err().kind, SinkErrorKind::Retryable);
    sink.write(0, &batch("tok-7", 5)).await.unwrap();
    next(&requests);

    tokio::time::sleep(replicas::REPLICA_COOLDOWN + Duration::from_millis(50)).await;
    sink.write(0, &batch("tok-8", 5)).await.unwrap();
    assert!(decoded(&split(&next(&requests)).0).contains("insert_deduplication_token=tok-8"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(healthy(0), 0, "refused again: still unhealthy");

    let (_back, probes) = fake_server_on(addr, ok());
    tokio::time::sleep(replicas::REPLICA_COOLDOWN + Duration::from_millis(50)).await;
    sink.write(0, &batch("tok-9", 5)).await.unwrap();
    assert!(decoded(&split(&next(&requests)).0).contains("insert_deduplication_token=tok-9"), "stays on the live one");
    assert!(String::from_utf8_lossy(&next(&probes)).contains("system.replicas"), "the probe reached the replica");
    let deadline = Instant::now() + Duration::from_secs(2);
    while healthy(0) != 1 {
        assert!(Instant::now() < deadline, "the replica that answers again is healthy again");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// With nothing inserted at all, the idle prober the first check starts still probes a failed
// replica once its cooldown is over: the health gauge of a replica that came back is right
// while the pipeline has nothing to write (a caught-up topic, a shard no row goes to).
#[tokio::test]
async fn a_failed_replica_is_probed_while_nothing_is_inserted() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let (live, requests) = fake_server(ok());
    let sink = ClickhouseSink::new(config(vec![vec![format!("http://{addr}"), live]])).unwrap();
    let healthy = |index: usize| sink.shards[0].replicas[index].healthy.get();
    assert_eq!(sink.write(0, &batch("tok-10", 5)).await.unwrap_err().kind, SinkErrorKind::Retryable);
    assert_eq!(healthy(0), 0, "refused: unhealthy");
    // Its outcome against a fake server does not matter here: the check starts the prober.
    let _ = sink.check().await;

    let (_back, probes) = fake_server_on(addr, ok());
    let deadline = Instant::now() + replicas::REPLICA_COOLDOWN * 4;
    while healthy(0) != 1 {
        assert!(Instant::now() < deadline, "the replica that answers again is probed healthy without an insert");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(String::from_utf8_lossy(&next(&probes)).contains("system.replicas"), "the probe reached the replica");
    let inserts = requests.try_iter().filter(|r| decoded(&split(r).0).contains("insert_deduplication_token")).count();
    assert_eq!(inserts, 0, "nothing was inserted meanwhile");
}
