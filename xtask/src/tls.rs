//! TLS for the local services: a throwaway CA, a server certificate for loopback, and the
//! TLS-terminating front (`infra serve-tls`) that puts the broker and ClickHouse behind it.
//!
//! Neither local service can serve TLS itself here: chDB's clickhouse-local starts only its
//! HTTP and native listeners, and Tansu 0.6's `--cert` and `--key` flags exclude each other.
//! A front that terminates TLS and forwards bytes to the plaintext port is what many
//! deployments run anyway (a load balancer before ClickHouse), and it exercises everything the
//! pipeline does differently with TLS: librdkafka's OpenSSL handshake and certificate checks,
//! and the ClickHouse sink's rustls client with a private CA (`ca_file`).

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The CA certificate clients trust (`ssl.ca.location`, `sink.clickhouse.ca_file`).
pub(crate) const CA_FILE: &str = "ca.pem";
const CERT_FILE: &str = "cert.pem";
const KEY_FILE: &str = "key.pem";
/// A client certificate of the CA and its key, which the mutual-TLS front accepts
/// (`sink.clickhouse.client_cert`, `client_key`).
pub(crate) const CLIENT_CERT_FILE: &str = "client.pem";
pub(crate) const CLIENT_KEY_FILE: &str = "client-key.pem";

/// Writes a CA and a server certificate for `127.0.0.1`/`localhost` into `dir`, unless they
/// are there already (a running front keeps using the files it loaded).
pub(crate) fn ensure_certificates(dir: &Path) -> anyhow::Result<()> {
    if [CA_FILE, CERT_FILE, KEY_FILE, CLIENT_CERT_FILE, CLIENT_KEY_FILE].iter().all(|f| dir.join(f).exists()) {
        return Ok(());
    }
    fs::create_dir_all(dir)?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name.push(DnType::CommonName, "etl-rs local test CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let mut server = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
    server.distinguished_name.push(DnType::CommonName, "localhost");
    let server_key = KeyPair::generate()?;
    let server_cert = server.signed_by(&server_key, &issuer)?;

    let mut client = CertificateParams::new(Vec::<String>::new())?;
    client.distinguished_name.push(DnType::CommonName, "etl-rs pipeline");
    client.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let client_key = KeyPair::generate()?;
    let client_cert = client.signed_by(&client_key, &issuer)?;

    fs::write(dir.join(CA_FILE), ca_cert.pem())?;
    fs::write(dir.join(CERT_FILE), server_cert.pem())?;
    write_private(&dir.join(KEY_FILE), &server_key.serialize_pem())?;
    fs::write(dir.join(CLIENT_CERT_FILE), client_cert.pem())?;
    write_private(&dir.join(CLIENT_KEY_FILE), &client_key.serialize_pem())?;
    Ok(())
}

/// A key file readable by its owner only.
fn write_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    file.write_all(contents.as_bytes())?;
    Ok(())
}

/// `serve-tls` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeTlsArgs {
    /// The loopback port TLS clients connect to.
    #[arg(long)]
    listen: u16,
    /// The loopback port of the plaintext service behind the front.
    #[arg(long)]
    upstream: u16,
    /// The directory with `cert.pem` and `key.pem` (and `ca.pem`).
    #[arg(long)]
    tls_dir: PathBuf,
    /// Refuse clients without a certificate signed by `ca.pem` (mutual TLS).
    #[arg(long)]
    require_client_cert: bool,
}

/// Accepts TLS connections on `listen` and copies bytes both ways to `upstream`, until killed.
pub(crate) fn serve(args: &ServeTlsArgs) -> anyhow::Result<()> {
    let certs = CertificateDer::pem_file_iter(args.tls_dir.join(CERT_FILE))
        .and_then(|c| c.collect::<Result<Vec<_>, _>>())
        .context("reading cert.pem")?;
    let key = PrivateKeyDer::from_pem_file(args.tls_dir.join(KEY_FILE)).context("reading key.pem")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder =
        rustls::ServerConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions()?;
    let builder = if args.require_client_cert {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_file(args.tls_dir.join(CA_FILE)).context("reading ca.pem")?)?;
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).build()?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let config = builder.with_single_cert(certs, key)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let upstream = SocketAddr::from(([127, 0, 0, 1], args.upstream));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], args.listen))).await?;
        eprintln!("serve-tls: 127.0.0.1:{} -> {upstream}", args.listen);
        loop {
            let (client, peer) = listener.accept().await?;
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // One connection's failure (a client that rejects the certificate, a service
                // that went away) is that connection's business; the front keeps serving.
                let result = async {
                    client.set_nodelay(true)?;
                    let mut tls = acceptor.accept(client).await?;
                    let mut plain = tokio::net::TcpStream::connect(upstream).await?;
                    plain.set_nodelay(true)?;
                    tokio::io::copy_bidirectional(&mut tls, &mut plain).await?;
                    Ok::<_, std::io::Error>(())
                }
                .await;
                if let Err(e) = result {
                    eprintln!("serve-tls: connection from {peer}: {e}");
                }
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use rustls::client::danger::ServerCertVerifier as _;

    use super::*;

    #[test]
    fn certificates_are_written_once_and_chain_to_the_ca() {
        let dir = std::env::temp_dir().join(format!("etl-rs-tls-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        ensure_certificates(&dir).unwrap();
        let first = fs::read(dir.join(CERT_FILE)).unwrap();
        ensure_certificates(&dir).unwrap();
        assert_eq!(fs::read(dir.join(CERT_FILE)).unwrap(), first, "existing files are reused");

        // The server certificate verifies against the CA for 127.0.0.1.
        let ca = CertificateDer::from_pem_file(dir.join(CA_FILE)).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider).build().unwrap();
        let cert = CertificateDer::from_pem_file(dir.join(CERT_FILE)).unwrap();
        let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
        verifier.verify_server_cert(&cert, &[], &name, &[], rustls_pki_types::UnixTime::now()).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }
}
