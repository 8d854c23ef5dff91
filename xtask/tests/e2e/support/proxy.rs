//! TCP proxies on loopback in front of a ClickHouse server: a throttling one (the slow-sink
//! fault) and one that can be closed (a shard down for one pipeline while its server lives).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::http::host_port;
use super::infra::infra;

/// A throttling proxy in front of each of the two ClickHouse servers, at `bytes_per_sec` each, and
/// their URLs (for the pipeline's `CLICKHOUSE_URL` and `CLICKHOUSE_URL_2`).
pub fn throttle_both_shards(bytes_per_sec: u64) -> ([ThrottledProxy; 2], [String; 2]) {
    let proxies = [
        ThrottledProxy::start(&infra().clickhouse[0], bytes_per_sec),
        ThrottledProxy::start(&infra().clickhouse[1], bytes_per_sec),
    ];
    let urls = [proxies[0].url(), proxies[1].url()];
    (proxies, urls)
}

/// A TCP proxy on loopback whose client-to-server direction (the inserts' bodies) is limited to
/// `bytes_per_sec` while throttled. The limit is shared by all connections through the proxy.
pub struct ThrottledProxy {
    pub addr: SocketAddr,
    throttled: Arc<AtomicBool>,
    /// Bytes forwarded client to server.
    pub forwarded: Arc<AtomicU64>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl ThrottledProxy {
    pub fn start(target: &str, bytes_per_sec: u64) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let throttled = Arc::new(AtomicBool::new(true));
        let forwarded = Arc::new(AtomicU64::new(0));
        let next_free = Arc::new(tokio::sync::Mutex::new(tokio::time::Instant::now()));
        let target = host_port(target).to_owned();
        {
            let (throttled, forwarded) = (throttled.clone(), forwarded.clone());
            runtime.spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(server) = tokio::net::TcpStream::connect(&target).await else { continue };
                    let _ = client.set_nodelay(true);
                    let (mut client_read, mut client_write) = client.into_split();
                    let (mut server_read, mut server_write) = server.into_split();
                    let (throttled, forwarded, next_free) = (throttled.clone(), forwarded.clone(), next_free.clone());
                    tokio::spawn(async move {
                        use tokio::io::{AsyncReadExt, AsyncWriteExt};
                        let mut buf = vec![0u8; 8192];
                        loop {
                            let n = match client_read.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            if throttled.load(Ordering::Relaxed) {
                                // A token bucket without burst: each chunk waits for its share of
                                // the rate after the previous chunk of any connection.
                                let due = {
                                    let mut next = next_free.lock().await;
                                    let now = tokio::time::Instant::now();
                                    *next = (*next).max(now) + Duration::from_secs_f64(n as f64 / bytes_per_sec as f64);
                                    *next
                                };
                                tokio::time::sleep_until(due).await;
                            }
                            if server_write.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                            forwarded.fetch_add(n as u64, Ordering::Relaxed);
                        }
                        let _ = server_write.shutdown().await;
                    });
                    tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                    });
                }
            });
        }
        ThrottledProxy { addr, throttled, forwarded, runtime: Some(runtime) }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Forwards at full speed from now on.
    pub fn unthrottle(&self) {
        self.throttled.store(false, Ordering::Relaxed);
    }
}

impl Drop for ThrottledProxy {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A TCP proxy on loopback in front of a ClickHouse server that can be closed: closing cuts every
/// connection through it and resets new ones, until it is opened again.
///
/// The long-outage scenario kills a shard's server; an exactly-once pipeline reaches that shard
/// through this proxy, which is closed a moment before the kill. A non-replicated table logs an
/// insert's token before it commits the part, so a SIGKILL between the two loses rows that the
/// replay cannot restore (docs/INVARIANTS.md, 8): a ClickHouse fault the product can only warn
/// about. Through the proxy the pipeline sees the same outage, and no insert of its own is inside
/// the server when it dies.
pub struct GatedProxy {
    pub addr: SocketAddr,
    open: tokio::sync::watch::Sender<bool>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl GatedProxy {
    /// An open proxy to the server of `target`.
    pub fn start(target: &str) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let (open, gate) = tokio::sync::watch::channel(true);
        let target = host_port(target).to_owned();
        runtime.spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !*gate.borrow() {
                    continue; // dropped: the client's request fails like one to a dead server
                }
                let Ok(mut server) = tokio::net::TcpStream::connect(&target).await else { continue };
                let mut gate = gate.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        // Closed: both sockets drop, mid-request or not.
                        _ = gate.wait_for(|open| !*open) => {}
                    }
                });
            }
        });
        GatedProxy { addr, open, runtime: Some(runtime) }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Cuts every connection and refuses new ones.
    pub fn close(&self) {
        self.open.send_replace(false);
    }

    /// Forwards again.
    pub fn open(&self) {
        self.open.send_replace(true);
    }
}

impl Drop for GatedProxy {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
