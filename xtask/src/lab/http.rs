//! Plain HTTP/1.0 over a socket for `bench` and `soak`: ClickHouse statements and a pipeline's
//! `/metrics`. HTTP/1.0 keeps responses unchunked and the connection closes after each one, so
//! the body is everything after the header.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{Context, bail};

/// `host:port` of an `http://host:port[/...]` URL.
pub(crate) fn host_port(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}

/// Sends one request; returns the status and the body.
pub(crate) fn request(addr: &str, method: &str, path: &str, body: &[u8]) -> anyhow::Result<(u16, Vec<u8>)> {
    let mut stream = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(300)))?;
    write!(stream, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n", body.len())?;
    stream.write_all(body)?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let Some(split) = response.windows(4).position(|w| w == b"\r\n\r\n") else {
        bail!("{addr}: no HTTP header in the answer");
    };
    let head = String::from_utf8_lossy(&response[..split]);
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok((status, response[split + 4..].to_vec()))
}

/// Runs a statement on the ClickHouse server at `url`; returns its output.
pub(crate) fn clickhouse(url: &str, sql: &str) -> anyhow::Result<Vec<u8>> {
    let (status, body) = request(host_port(url), "POST", "/", sql.as_bytes())?;
    if status != 200 {
        bail!("{url}: {sql}: {}", String::from_utf8_lossy(&body).trim());
    }
    Ok(body)
}

/// [`clickhouse`], as text.
pub(crate) fn clickhouse_text(url: &str, sql: &str) -> anyhow::Result<String> {
    Ok(String::from_utf8(clickhouse(url, sql)?)?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn host_port_of_urls() {
        assert_eq!(super::host_port("http://127.0.0.1:18123"), "127.0.0.1:18123");
        assert_eq!(super::host_port("http://127.0.0.1:18123/?x=1"), "127.0.0.1:18123");
        assert_eq!(super::host_port("127.0.0.1:9464"), "127.0.0.1:9464");
    }
}
