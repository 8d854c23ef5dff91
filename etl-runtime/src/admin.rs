//! The admin HTTP server: `/metrics`, `/healthz` and `/readyz` on `admin.listen`, and with
//! `admin.control: true`, `POST /admin/pause` and `POST /admin/resume`.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};

use crate::engine::shared::Shared;

/// Serves the admin endpoints on `listener` until the runtime shuts down.
pub(crate) async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>) -> std::io::Result<()> {
    let router = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/admin/pause", post(pause))
        .route("/admin/resume", post(resume))
        .with_state(shared);
    axum::serve(listener, router).await
}

async fn metrics(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], shared.render_metrics())
}

/// Alive as long as the process answers.
async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready when the source says so (for Kafka: joined the group, even with no partition), the
/// sink's check has passed, no shard's writes are failing and no partition is stalled; otherwise
/// 503 with the reason.
async fn readyz(State(shared): State<Arc<Shared>>) -> (StatusCode, String) {
    match shared.not_ready_because() {
        None => (StatusCode::OK, "ready\n".to_owned()),
        Some(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {reason}\n")),
    }
}

/// Pauses every lane at the source through the pause controller: the member stays in its group
/// (the source keeps polling), what the lanes read is written and committed, and nothing more is
/// read until `/admin/resume`. Not kept across a restart.
async fn pause(State(shared): State<Arc<Shared>>) -> (StatusCode, String) {
    operator_pause(&shared, true)
}

async fn resume(State(shared): State<Arc<Shared>>) -> (StatusCode, String) {
    operator_pause(&shared, false)
}

fn operator_pause(shared: &Shared, paused: bool) -> (StatusCode, String) {
    let (verb, already) = if paused { ("paused", "already paused") } else { ("resumed", "not paused") };
    if !shared.config.admin_control {
        return (
            StatusCode::FORBIDDEN,
            "the admin control endpoints are off: set `admin.control: true` in pipeline.yaml (the admin port has no \
             authentication; keep it off networks you do not trust)\n"
                .to_owned(),
        );
    }
    if shared.set_operator_paused(paused) {
        tracing::warn!(paused, "{verb} by the operator through the admin endpoint");
        (StatusCode::OK, format!("{verb}\n"))
    } else {
        (StatusCode::OK, format!("{already}\n"))
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::time::Duration;

    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

    use crate::engine::errors::SourceError;
    use crate::engine::lane::{Lane, Record};
    use crate::engine::start::Pipeline;
    use crate::testing::{NullSink, PassThrough};

    /// An endless partition that shares what it handed out, what was stored and its pause state.
    #[derive(Clone, Default)]
    struct Watched {
        taken: Arc<AtomicI64>,
        stored: Arc<AtomicI64>,
        paused: Arc<AtomicBool>,
        polled_while_paused: Arc<AtomicBool>,
    }

    /// A record every 50 µs, far below what the null sink takes, so nothing but the operator
    /// pauses it; and never idle, so only a pause seals its open buffer before a chunk is full
    /// (20-byte rows: a turn's burst of 256 records does not end on a chunk's boundary).
    struct EndlessLane(Watched, [u8; 20]);

    impl EndlessLane {
        fn new(watched: &Watched) -> Box<Self> {
            Box::new(EndlessLane(watched.clone(), [7; 20]))
        }
    }

    impl Lane for EndlessLane {
        fn topic(&self) -> &str {
            "orders"
        }

        fn partition(&self) -> i32 {
            0
        }

        fn next(&mut self) -> Option<Result<Record<'_>, SourceError>> {
            if self.0.paused.load(Ordering::SeqCst) {
                self.0.polled_while_paused.store(true, Ordering::SeqCst);
                return None;
            }
            std::thread::sleep(Duration::from_micros(50));
            let offset = self.0.taken.fetch_add(1, Ordering::SeqCst);
            Some(Ok(Record {
                payload: Some(&self.1),
                key: None,
                topic: "orders",
                partition: 0,
                offset,
                timestamp_ms: None,
                headers: crate::Headers::NONE,
            }))
        }

        fn pause(&mut self) {
            self.0.paused.store(true, Ordering::SeqCst);
        }

        fn resume(&mut self) {
            self.0.paused.store(false, Ordering::SeqCst);
        }

        fn store_offset(&mut self, next_offset: i64) -> Result<(), SourceError> {
            self.0.stored.store(next_offset, Ordering::SeqCst);
            Ok(())
        }
    }

    fn eventually(mut condition: impl FnMut() -> bool) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if condition() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// A pipeline with its admin server on a free port; its source not ready yet.
    fn served(admin_control: bool) -> (Pipeline, std::net::SocketAddr) {
        let mut config = crate::RuntimeConfig { admin_control, ..crate::testing::config(1, 1) };
        // A budget the slow lane never fills: only the operator pauses it.
        config.backpressure.max_inflight_bytes = 256 << 20;
        let pipeline = Pipeline::start(config, || PassThrough, NullSink, None).unwrap();
        let listener = pipeline.runtime().block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        pipeline.runtime().spawn(super::serve(listener, pipeline.shared().clone()));
        (pipeline, addr)
    }

    // `POST /admin/pause` pauses the lanes through the pause controller: they stop taking records
    // (and are never polled while paused), what they took is written and its offsets stored while
    // they wait, `/readyz` and `etl_admin_paused` say so; `/admin/resume` lets them go on. With
    // `admin.control` off, both answer 403 and change nothing.
    #[test]
    fn the_operator_pauses_and_resumes_through_the_pause_controller() {
        let (pipeline, addr) = served(true);
        pipeline.handle().set_source_ready(true);
        let lane = Watched::default();
        pipeline.handle().add_lane(EndlessLane::new(&lane));
        assert!(eventually(|| lane.taken.load(Ordering::SeqCst) > 1_000), "the lane runs");
        assert!(get(addr, "/metrics").1.contains("\netl_backpressure_pause_events_total 0\n"));

        let (status, body) = post(addr, "/admin/pause");
        assert_eq!(status, 200);
        assert!(body.ends_with("\r\n\r\npaused\n"), "{body}");
        assert!(eventually(|| lane.paused.load(Ordering::SeqCst)), "the lane pauses at the source");
        let settled = || lane.stored.load(Ordering::SeqCst) == lane.taken.load(Ordering::SeqCst);
        assert!(eventually(settled), "what the lane took is written and stored while it is paused");
        let taken = lane.taken.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(lane.taken.load(Ordering::SeqCst), taken, "a paused pipeline takes no record");
        assert!(!lane.polled_while_paused.load(Ordering::SeqCst), "a paused lane is never polled");
        let (status, body) = get(addr, "/readyz");
        assert_eq!(status, 503);
        assert!(body.contains("paused by POST /admin/pause"), "{body}");
        assert!(get(addr, "/metrics").1.contains("\netl_admin_paused 1\n"));
        assert!(post(addr, "/admin/pause").1.ends_with("already paused\n"));

        let (status, body) = post(addr, "/admin/resume");
        assert_eq!(status, 200);
        assert!(body.ends_with("\r\n\r\nresumed\n"), "{body}");
        assert!(eventually(|| lane.taken.load(Ordering::SeqCst) > taken + 1_000), "the lane goes on");
        assert_eq!(get(addr, "/readyz").0, 200);
        assert!(get(addr, "/metrics").1.contains("\netl_admin_paused 0\n"));
        assert!(post(addr, "/admin/resume").1.ends_with("not paused\n"));
        pipeline.shutdown(Duration::from_secs(1));

        let (pipeline, addr) = served(false);
        pipeline.handle().set_source_ready(true);
        let lane = Watched::default();
        pipeline.handle().add_lane(EndlessLane::new(&lane));
        let (status, body) = post(addr, "/admin/pause");
        assert_eq!(status, 403);
        assert!(body.contains("set `admin.control: true`"), "{body}");
        assert!(eventually(|| lane.taken.load(Ordering::SeqCst) > 1_000), "the lane runs on");
        assert_eq!(get(addr, "/readyz").0, 200);
        pipeline.shutdown(Duration::from_secs(1));
    }

    fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
        request(addr, "GET", path)
    }

    fn post(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
        request(addr, "POST", path)
    }

    fn request(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, String) {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(stream, "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let status = response.split(' ').nth(1).unwrap().parse().unwrap();
        (status, response)
    }

    // The admin server answers /healthz, exports every metric of docs/METRICS.md on /metrics, and /readyz
    // turns from 503 to 200 once the source reports ready (the null sink's check passes at once).
    #[test]
    fn admin_endpoints() {
        let (pipeline, addr) = served(false);
        assert_eq!(get(addr, "/healthz").0, 200);
        let (status, body) = get(addr, "/metrics");
        assert_eq!(status, 200);
        for doc in crate::metric_catalogue() {
            // Vector metrics without a labelled child yet show only in the catalogue, so check
            // the families that always have a value.
            if doc.labels.is_empty() || doc.labels == ["output", "shard"] || doc.name == "etl_build_info" {
                assert!(body.contains(doc.name), "{} missing from /metrics", doc.name);
            }
        }
        assert_eq!(get(addr, "/readyz").0, 503);
        pipeline.handle().set_source_ready(true);
        let mut status = 0;
        for _ in 0..100 {
            status = get(addr, "/readyz").0;
            if status == 200 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(status, 200);
        pipeline.shutdown(Duration::from_secs(1));
    }
}
