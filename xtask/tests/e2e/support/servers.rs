//! Server faults beyond a freeze: a ClickHouse server of `cargo xtask infra up` killed (its port
//! refuses connections) and started again with its data, a replica that answers every request
//! with a server error, and a proxy in front of a real server that can hang (accepts connections
//! and answers nothing).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::freeze::{listening_pids, process_state};
use super::xtask;

/// SIGKILLs the server of `url` (a server of `cargo xtask infra up`) and waits until it is gone,
/// so that connections to its port are refused.
pub fn kill_server(url: &str) {
    for pid in listening_pids(url) {
        let ok = Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap().success();
        assert!(ok, "kill -KILL {pid} (the server of {url})");
        let deadline = Instant::now() + Duration::from_secs(10);
        while process_state(pid).is_some_and(|s| s != 'Z') {
            assert!(Instant::now() < deadline, "pid {pid} (the server of {url}) did not die");
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("killed pid {pid}, the server of {url}");
    }
}

/// Starts ClickHouse server `index` of `cargo xtask infra up` unless it runs (a killed one comes
/// back with its data; the others are left alone); returns its URL. Servers 0 and 1 are the
/// scenarios' two shards; a scenario that kills or freezes a server uses one of its own:
/// [`OUTAGE_SERVER`], [`REPLICA_SERVERS`].
pub fn start_server(index: u16) -> String {
    let output = xtask()
        .args(["infra", "up", "--only-clickhouse", "--clickhouse-index", &index.to_string()])
        .output()
        .expect("running cargo xtask infra up");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "infra up failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let key = if index == 0 { "CLICKHOUSE_URL=".to_owned() } else { format!("CLICKHOUSE_URL_{}=", index + 1) };
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(key.as_str()))
        .unwrap_or_else(|| panic!("no {key} in the output of infra up:\n{stdout}"))
        .to_owned()
}

/// The server scenario 13 kills and freezes (its shard 1).
pub const OUTAGE_SERVER: u16 = 2;

/// The servers of scenario 14's shard 1: the one it kills, and the other.
pub const REPLICA_SERVERS: [u16; 2] = [3, 4];

/// A stand-in replica on loopback that answers every request with HTTP 500 and a retryable
/// ClickHouse error (a replica whose Keeper session is gone), counting the connections it accepted.
pub struct FailingReplica {
    pub addr: SocketAddr,
    connections: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl FailingReplica {
    pub fn start() -> FailingReplica {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        {
            let (connections, stop) = (connections.clone(), stop.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    connections.fetch_add(1, Ordering::SeqCst);
                    std::thread::spawn(move || answer_500(stream));
                }
            });
        }
        FailingReplica { addr, connections, stop }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for FailingReplica {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Reads the request head, answers 500 without waiting for the body, and closes: the client sees
/// a complete error answer either way.
fn answer_500(mut stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf = [0u8; 64 << 10];
    let mut head = Vec::new();
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let body = "Code: 242. DB::Exception: Table is in readonly mode: the replica lost its Keeper session. \
                (TABLE_IS_READ_ONLY)\n";
    let _ = write!(
        stream,
        "HTTP/1.1 500 Internal Server Error\r\nX-ClickHouse-Exception-Code: 242\r\nContent-Type: text/plain\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// A TCP proxy on loopback in front of a ClickHouse server that can hang: while hung it still
/// accepts connections but forwards nothing either way, like a replica stuck in a lock or a path
/// that black-holes replies. It counts the connections it accepted.
pub struct HangingProxy {
    pub addr: SocketAddr,
    hung: Arc<AtomicBool>,
    connections: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl HangingProxy {
    pub fn start(target: &str) -> HangingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let target = super::http::host_port(target).to_owned();
        let (hung, connections, stop) =
            (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        {
            let (hung, connections, stop) = (hung.clone(), connections.clone(), stop.clone());
            std::thread::spawn(move || {
                for client in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(client) = client else { continue };
                    connections.fetch_add(1, Ordering::SeqCst);
                    let Ok(server) = TcpStream::connect(&target) else { continue };
                    for (from, to) in
                        [(client.try_clone(), server.try_clone()), (server.try_clone(), client.try_clone())]
                    {
                        let (Ok(from), Ok(to)) = (from, to) else { continue };
                        let hung = hung.clone();
                        std::thread::spawn(move || forward(from, to, &hung));
                    }
                }
            });
        }
        HangingProxy { addr, hung, connections, stop }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops forwarding (`true`) or forwards again (`false`).
    pub fn hang(&self, hung: bool) {
        self.hung.store(hung, Ordering::SeqCst);
    }

    /// The connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for HangingProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.hung.store(false, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

/// Copies `from` to `to`, holding what it read while `hung` is set.
fn forward(mut from: TcpStream, mut to: TcpStream, hung: &AtomicBool) {
    let mut buf = [0u8; 64 << 10];
    loop {
        while hung.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while hung.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// A [`HangingProxy`] in front of each of the two ClickHouse servers, for one scenario's pipelines:
/// [`ShardProxies::freeze`] hangs both, which the pipelines see as both servers frozen (connections
/// accepted, nothing answered, what they sent held and delivered after the thaw) while the servers
/// themselves go on serving every other scenario.
pub struct ShardProxies {
    proxies: [HangingProxy; 2],
    urls: [String; 2],
}

/// Both shards of a [`ShardProxies`] hung until this is dropped.
pub struct ProxiesFrozen<'a>(&'a ShardProxies);

impl ShardProxies {
    pub fn start() -> ShardProxies {
        let clickhouse = &super::infra::infra().clickhouse;
        let proxies = [HangingProxy::start(&clickhouse[0]), HangingProxy::start(&clickhouse[1])];
        let urls = [proxies[0].url(), proxies[1].url()];
        ShardProxies { proxies, urls }
    }

    /// The pipeline environment that sends both shards through the proxies.
    pub fn env(&self) -> [(&'static str, &str); 2] {
        [("CLICKHOUSE_URL", self.urls[0].as_str()), ("CLICKHOUSE_URL_2", self.urls[1].as_str())]
    }

    /// Hangs both proxies until the guard is dropped.
    pub fn freeze(&self) -> ProxiesFrozen<'_> {
        for proxy in &self.proxies {
            proxy.hang(true);
        }
        eprintln!("froze the shard proxies {:?}", self.urls);
        ProxiesFrozen(self)
    }
}

impl Drop for ProxiesFrozen<'_> {
    fn drop(&mut self) {
        for proxy in &self.0.proxies {
            proxy.hang(false);
        }
    }
}
