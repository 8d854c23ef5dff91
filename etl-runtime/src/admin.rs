//! The admin HTTP server: `/metrics`, `/healthz` and `/readyz` on `admin.listen`.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::engine::shared::Shared;

/// Serves the admin endpoints on `listener` until the runtime shuts down.
pub(crate) async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>) -> std::io::Result<()> {
    let router = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
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

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::time::Duration;

    use crate::engine::start::Pipeline;
    use crate::testing::{NullSink, PassThrough};

    fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let status = response.split(' ').nth(1).unwrap().parse().unwrap();
        (status, response)
    }

    // The admin server answers /healthz, exports every metric of docs/METRICS.md on /metrics, and /readyz
    // turns from 503 to 200 once the source reports ready (the null sink's check passes at once).
    #[test]
    fn admin_endpoints() {
        let pipeline = Pipeline::start(crate::testing::config(1, 1), || PassThrough, NullSink, None).unwrap();
        let listener = pipeline.runtime().block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        pipeline.runtime().spawn(super::serve(listener, pipeline.shared().clone()));

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
