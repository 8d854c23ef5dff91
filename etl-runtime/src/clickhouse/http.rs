//! The sink's HTTP(S) connector: hyper with rustls, trusting Mozilla's roots plus `ca_file`.
//!
//! The clickhouse crate's built-in client trusts one fixed root set chosen at compile time. A
//! ClickHouse behind a company CA needs that CA trusted too, so the sink builds the same hyper
//! stack itself (the crate accepts any hyper client through `Client::with_http_client`) with a
//! root store of its own: the `webpki-roots` bundle, plus every certificate of `ca_file`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;

use crate::engine::errors::SinkError;

/// Dead peers are noticed by the kernel within minutes, not hours.
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

/// Below ClickHouse's own `keep_alive_timeout` (3 s by default), so the sink never reuses a
/// connection the server is about to close.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(2);

/// What every replica's client is built from: one TLS configuration, shared.
#[derive(Clone)]
pub(super) struct Connector(HttpsConnector<HttpConnector>);

impl Connector {
    /// The connector for `http://` and `https://` URLs. A `ca_file` that cannot be read or
    /// holds no certificate is a fatal start-up error naming the file.
    pub(super) fn new(ca_file: Option<&Path>) -> Result<Self, SinkError> {
        let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
        if let Some(path) = ca_file {
            let shown = path.display();
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<_, _>>())
                .map_err(|e| SinkError::fatal(format!("sink.clickhouse.ca_file `{shown}`: {e}")))?;
            if certs.is_empty() {
                return Err(SinkError::fatal(format!(
                    "sink.clickhouse.ca_file `{shown}` holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)"
                )));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| SinkError::fatal(format!("sink.clickhouse.ca_file `{shown}`: {e}")))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| SinkError::fatal(format!("TLS configuration: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.set_keepalive(Some(TCP_KEEPALIVE));
        http.set_nodelay(true);
        // The TLS layer above decides the scheme; the TCP connector must accept https URIs.
        http.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(Self(https))
    }

    /// A clickhouse client for one replica over this connector.
    pub(super) fn client(&self) -> clickhouse::Client {
        let hyper =
            HyperClient::builder(TokioExecutor::new()).pool_idle_timeout(POOL_IDLE_TIMEOUT).build(self.0.clone());
        clickhouse::Client::with_http_client(hyper)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_ca_file_is_fatal_and_named() {
        let Err(e) = Connector::new(Some(Path::new("/nonexistent/ca.pem"))) else { panic!("accepted") };
        assert!(e.to_string().contains("sink.clickhouse.ca_file `/nonexistent/ca.pem`"), "{e}");
    }

    #[test]
    fn a_ca_file_without_certificates_is_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate\n").unwrap();
        let Err(e) = Connector::new(Some(&path)) else { panic!("accepted") };
        assert!(e.to_string().contains("holds no PEM certificate"), "{e}");
    }
}
