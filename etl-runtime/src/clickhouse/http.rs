//! The sink's HTTP(S) connector: hyper with rustls, trusting Mozilla's roots plus `ca_file`, and
//! showing `client_cert` to servers that ask for one (mutual TLS).
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
    /// holds no certificate is a fatal start-up error naming the file; so is a client
    /// certificate or key (`client_auth`: the two PEM files) that cannot be read or does not match.
    pub(super) fn new(ca_file: Option<&Path>, client_auth: Option<(&Path, &Path)>) -> Result<Self, SinkError> {
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
            .with_root_certificates(roots);
        let tls = match client_auth {
            None => tls.with_no_client_auth(),
            Some((cert, key_file)) => {
                let (chain, key) = client_identity(cert, key_file)?;
                // The key's contents never reach a message: only the files are named.
                tls.with_client_auth_cert(chain, key).map_err(|e| {
                    SinkError::fatal(format!(
                        "sink.clickhouse.client_cert `{}` and client_key `{}` do not make a client identity: {e}",
                        cert.display(),
                        key_file.display()
                    ))
                })?
            }
        };
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

/// The certificate chain of `cert` and the private key of `key` (PEM files).
fn client_identity(
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, rustls_pki_types::PrivateKeyDer<'static>), SinkError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|e| SinkError::fatal(format!("sink.clickhouse.client_cert `{}`: {e}", cert.display())))?;
    if chain.is_empty() {
        return Err(SinkError::fatal(format!(
            "sink.clickhouse.client_cert `{}` holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)",
            cert.display()
        )));
    }
    // Only the error's kind is shown: a parse error's text could quote the file.
    let key = rustls_pki_types::PrivateKeyDer::from_pem_file(key).map_err(|e| {
        let why = match e {
            rustls_pki_types::pem::Error::Io(io) => io.kind().to_string(),
            rustls_pki_types::pem::Error::NoItemsFound => "no PEM private key (`-----BEGIN PRIVATE KEY-----`)".into(),
            _ => "not a PEM private key".into(),
        };
        SinkError::fatal(format!("sink.clickhouse.client_key `{}`: {why}", key.display()))
    })?;
    Ok((chain, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_ca_file_is_fatal_and_named() {
        let Err(e) = Connector::new(Some(Path::new("/nonexistent/ca.pem")), None) else { panic!("accepted") };
        assert!(e.to_string().contains("sink.clickhouse.ca_file `/nonexistent/ca.pem`"), "{e}");
    }

    #[test]
    fn a_ca_file_without_certificates_is_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate\n").unwrap();
        let Err(e) = Connector::new(Some(&path), None) else { panic!("accepted") };
        assert!(e.to_string().contains("holds no PEM certificate"), "{e}");
    }

    #[test]
    fn a_bad_client_key_is_named_and_never_quoted() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("client.pem"), dir.path().join("client-key.pem"));
        std::fs::write(&cert, "not a certificate\n").unwrap();
        std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\nc2VjcmV0IGtleSBieXRlcw==\n-----END PRIVATE KEY-----\n")
            .unwrap();
        let Err(e) = Connector::new(None, Some((&cert, &key))) else { panic!("accepted") };
        assert!(e.to_string().contains("client_cert") && e.to_string().contains("no PEM certificate"), "{e}");
        let Err(e) = Connector::new(None, Some((&key, &key))) else { panic!("accepted") };
        let text = e.to_string();
        assert!(text.contains("client-key.pem"), "names the file: {text}");
        assert!(!text.contains("c2VjcmV0") && !text.contains("secret"), "never shows the key: {text}");
        let Err(e) = Connector::new(None, Some((&cert, Path::new("/nonexistent/key.pem")))) else { panic!("accepted") };
        assert!(e.to_string().contains("client_cert"), "the certificate is read first: {e}");
    }
}
