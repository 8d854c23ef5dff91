//! `source.kafka.auth`: authentication the framework does itself, and where the clients'
//! OAUTHBEARER tokens come from: Amazon MSK's IAM access control (a SigV4-signed token from
//! etl-aws) or an OIDC token endpoint (`sasl.oauthbearer.method: oidc`, `oidc.rs`). librdkafka asks
//! for a new token, through its refresh event, before the current one expires.

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::client::{ClientContext, OAuthToken};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerContext};
use rdkafka::error::KafkaError;
use time::OffsetDateTime;

use super::properties::log_to_tracing;
use crate::contract::kafka_auth;
use crate::engine::errors::SourceError;

/// `source.kafka.auth`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KafkaAuth {
    /// `aws_msk_iam`: tokens for `region`, signed as `role_arn` when given (assumed over the
    /// credential chain's identity), else as the chain's identity.
    AwsMskIam { region: String, role_arn: Option<String> },
}

/// Checks the resolved `auth` (a `${VAR}` may resolve to anything) and the passthrough beside it,
/// as `gen` checks literals (E0207).
pub(crate) fn check(auth: Option<&KafkaAuth>, passthrough: &[(String, String)]) -> Result<(), SourceError> {
    let Some(KafkaAuth::AwsMskIam { region, role_arn }) = auth else { return Ok(()) };
    if !kafka_auth::is_region(region) {
        return Err(SourceError::fatal(format!(
            "source.kafka.auth.aws_msk_iam.region `{region}` is not an AWS region (e.g. `eu-west-1`)"
        )));
    }
    // An empty role (`${MSK_ROLE_ARN:-}`) is no role.
    if let Some(role) = role_arn.as_deref().filter(|r| !r.is_empty() && !kafka_auth::is_role_arn(r)) {
        return Err(SourceError::fatal(format!(
            "source.kafka.auth.aws_msk_iam.role_arn `{role}` is not an IAM role ARN \
             (e.g. `arn:aws:iam::123456789012:role/msk-writer`)"
        )));
    }
    if let Some((key, _)) = passthrough.iter().find(|(k, _)| kafka_auth::conflicts(k)) {
        return Err(SourceError::fatal(format!(
            "rdkafka property `{key}` conflicts with source.kafka.auth.aws_msk_iam, which sets the protocol \
             and SASL itself; remove it"
        )));
    }
    Ok(())
}

/// The properties `auth` sets, applied after the passthrough: `gen` rejects passthrough ones that
/// would conflict (E0207), and nothing overrides these.
pub(crate) fn properties(auth: Option<&KafkaAuth>) -> Vec<(String, String)> {
    match auth {
        None => Vec::new(),
        // MSK's IAM listener (port 9098) is TLS only.
        Some(KafkaAuth::AwsMskIam { .. }) => {
            vec![("security.protocol".into(), "SASL_SSL".into()), ("sasl.mechanism".into(), "OAUTHBEARER".into())]
        }
    }
}

/// Where the clients' OAUTHBEARER tokens come from: shared by the source's clients (the consumer,
/// the offsets tool, `dlq replay`'s plan), so credentials are fetched once for them; the
/// dead-letter producer makes its own from the same settings.
#[derive(Debug, Clone, Default)]
pub(crate) enum TokenSource {
    /// No token source: an OAUTHBEARER refresh is an error that says so.
    #[default]
    None,
    /// `source.kafka.auth.aws_msk_iam`.
    AwsMskIam(Arc<etl_aws::MskIam>),
    /// `sasl.oauthbearer.method: oidc`.
    Oidc(Arc<super::oidc::Oidc>),
}

impl TokenSource {
    /// The token source of `auth`, or of the OIDC properties in `passthrough`, which it takes out
    /// (librdkafka without libcurl refuses them).
    pub(crate) fn new(auth: Option<&KafkaAuth>, passthrough: &mut Vec<(String, String)>) -> Result<Self, SourceError> {
        if let Some(oidc) = super::oidc::Oidc::take(passthrough)? {
            return Ok(TokenSource::Oidc(Arc::new(oidc)));
        }
        Ok(Self::with_environment(auth, etl_aws::Environment::process()))
    }

    /// With the credential chain reading `env` rather than the process's environment.
    pub(crate) fn with_environment(auth: Option<&KafkaAuth>, env: etl_aws::Environment) -> Self {
        match auth {
            Some(KafkaAuth::AwsMskIam { region, role_arn }) => {
                TokenSource::AwsMskIam(Arc::new(etl_aws::MskIam::with_environment(region, role_arn.as_deref(), env)))
            }
            None => TokenSource::None,
        }
    }

    /// A fresh token, for librdkafka's refresh event. A failure is logged and handed back:
    /// librdkafka retries it, and reports the authentication failure as a client error.
    pub(crate) fn token(&self) -> Result<OAuthToken, Box<dyn Error>> {
        let msk = match self {
            TokenSource::None => {
                return Err("SASL mechanism OAUTHBEARER needs a token source: `source.kafka.auth.aws_msk_iam`, \
                            or `sasl.oauthbearer.method: oidc` with its client id, secret and token endpoint"
                    .into());
            }
            TokenSource::Oidc(oidc) => {
                return match oidc.token() {
                    Ok(token) => {
                        tracing::info!(principal = %token.principal, expires_ms = token.expires_ms, "OIDC token fetched");
                        Ok(OAuthToken {
                            token: token.token,
                            principal_name: token.principal,
                            lifetime_ms: token.expires_ms,
                        })
                    }
                    Err(error) => {
                        tracing::error!(%error, "OIDC token: the token endpoint did not give one");
                        Err(error.into())
                    }
                };
            }
            TokenSource::AwsMskIam(msk) => msk,
        };
        match msk.token(OffsetDateTime::now_utc()) {
            Ok(token) => {
                tracing::info!(
                    region = msk.region(),
                    credentials = %token.source,
                    access_key_id = %token.access_key_id,
                    expires_ms = token.expires_ms,
                    "AWS MSK IAM token made"
                );
                Ok(OAuthToken {
                    token: token.token,
                    principal_name: token.access_key_id,
                    lifetime_ms: token.expires_ms,
                })
            }
            Err(error) => {
                tracing::error!(region = msk.region(), %error, "AWS MSK IAM token: no credentials to sign with");
                Err(error.into())
            }
        }
    }
}

/// The context of the clients that only read metadata and offsets (`offsets`, `dlq replay`'s
/// plan): logs, and tokens when the brokers want them.
#[derive(Clone, Default)]
pub(crate) struct ToolContext {
    pub(crate) tokens: TokenSource,
    /// Set once a token was made (and so handed to librdkafka).
    made: Arc<AtomicBool>,
}

impl ToolContext {
    pub(crate) fn new(tokens: TokenSource) -> Self {
        ToolContext { tokens, made: Arc::default() }
    }
}

/// How long [`await_token`] polls for the first token.
const TOKEN_WAIT: Duration = Duration::from_secs(30);

/// Polls `consumer` until it holds its first token, when it needs one. rdkafka hands a token
/// refresh to the application only inside a poll, and librdkafka connects to no broker before it
/// has a token: a client that only makes requests (metadata, offsets, watermarks) and never polls
/// would wait out every request's timeout.
pub(crate) fn await_token(consumer: &BaseConsumer<ToolContext>) {
    let context = consumer.context();
    if matches!(context.tokens, TokenSource::None) {
        return;
    }
    let deadline = Instant::now() + TOKEN_WAIT;
    while !context.made.load(Ordering::Acquire) && Instant::now() < deadline {
        let _ = consumer.poll(Duration::from_millis(50));
    }
}

impl ClientContext for ToolContext {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_to_tracing(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, reason, "kafka client error");
    }

    fn generate_oauth_token(&self, _config: Option<&str>) -> Result<OAuthToken, Box<dyn Error>> {
        let token = self.tokens.token()?;
        self.made.store(true, Ordering::Release);
        Ok(token)
    }
}

impl ConsumerContext for ToolContext {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolved_values_are_checked_like_literals() {
        let msk = |region: &str, role: Option<&str>| KafkaAuth::AwsMskIam {
            region: region.into(),
            role_arn: role.map(Into::into),
        };
        assert!(check(Some(&msk("eu-west-1", None)), &[]).is_ok());
        assert!(check(None, &[("security.protocol".into(), "SSL".into())]).is_ok());
        let region = check(Some(&msk("eu-west", None)), &[]).unwrap_err().message;
        assert!(region.contains("eu-west") && region.contains("not an AWS region"), "{region}");
        let role = check(Some(&msk("eu-west-1", Some("msk-writer"))), &[]).unwrap_err().message;
        assert!(role.contains("role_arn"), "{role}");
        assert!(check(Some(&msk("eu-west-1", Some(""))), &[]).is_ok(), "an empty role is no role");
        let conflict =
            check(Some(&msk("eu-west-1", None)), &[("sasl.mechanism".into(), "PLAIN".into())]).unwrap_err().message;
        assert!(conflict.contains("sasl.mechanism"), "{conflict}");
    }

    #[test]
    fn msk_iam_sets_tls_and_oauthbearer() {
        let auth = KafkaAuth::AwsMskIam { region: "eu-west-1".into(), role_arn: None };
        let set = properties(Some(&auth));
        assert!(set.contains(&("security.protocol".into(), "SASL_SSL".into())));
        assert!(set.contains(&("sasl.mechanism".into(), "OAUTHBEARER".into())));
        assert!(properties(None).is_empty());
    }

    use std::io::{Read as _, Write as _};

    use rdkafka::ClientConfig;

    /// The stub broker's thread: what the client sent, and the connection it sent it on.
    type StubBroker = std::thread::JoinHandle<(Vec<u8>, Option<std::net::TcpStream>)>;

    /// A stub broker that answers like a 0.10 broker (SaslHandshake v0, after which the client
    /// writes its SASL initial response as a raw frame) and returns what the client sent as its
    /// initial response, with the connection, left open and unanswered; empty if no client
    /// connected within 15 s (one without a token never does).
    fn stub_broker() -> (u16, StubBroker) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let broker = std::thread::spawn(move || -> (Vec<u8>, Option<std::net::TcpStream>) {
            // A client without a token never connects: give up after a while rather than hang.
            listener.set_nonblocking(true).unwrap();
            let deadline = Instant::now() + Duration::from_secs(15);
            let mut stream = loop {
                match listener.accept() {
                    Ok((stream, _)) => break stream,
                    Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                    Err(_) => return (Vec::new(), None),
                }
            };
            stream.set_nonblocking(false).unwrap();
            stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let frame = |stream: &mut std::net::TcpStream| -> Vec<u8> {
                let mut size = [0; 4];
                stream.read_exact(&mut size).unwrap();
                let mut body = vec![0; u32::from_be_bytes(size) as usize];
                stream.read_exact(&mut body).unwrap();
                body
            };
            let reply = |stream: &mut std::net::TcpStream, correlation: &[u8], body: &[u8]| {
                let mut framed = ((correlation.len() + body.len()) as u32).to_be_bytes().to_vec();
                framed.extend(correlation);
                framed.extend(body);
                stream.write_all(&framed).unwrap();
            };
            loop {
                let request = frame(&mut stream);
                let (key, version) =
                    (i16::from_be_bytes([request[0], request[1]]), i16::from_be_bytes([request[2], request[3]]));
                let correlation = request[4..8].to_vec();
                match key {
                    // ApiVersions: newer versions are refused (UNSUPPORTED_VERSION, which makes
                    // the client ask with v0); v0 is told of SaslHandshake v0 only, so the
                    // client sends its SASL messages as raw frames, not SaslAuthenticate.
                    18 if version > 0 => reply(&mut stream, &correlation, &[0, 35, 0, 0, 0, 0]),
                    18 => reply(&mut stream, &correlation, &[0, 0, 0, 0, 0, 1, 0, 17, 0, 0, 0, 0]),
                    // SaslHandshake: no error, and the one mechanism.
                    17 => {
                        let mut body = vec![0, 0, 0, 0, 0, 1, 0, 11];
                        body.extend(b"OAUTHBEARER");
                        reply(&mut stream, &correlation, &body);
                    }
                    _ => return (request, Some(stream)),
                }
            }
        });
        (port, broker)
    }

    /// The bearer token of an OAUTHBEARER initial response (RFC 7628).
    fn bearer(sent: Vec<u8>) -> String {
        let text = String::from_utf8(sent).unwrap();
        text.strip_prefix("n,,\u{1}auth=Bearer ")
            .and_then(|t| t.strip_suffix("\u{1}\u{1}"))
            .unwrap_or_else(|| panic!("not an OAUTHBEARER initial response: {text:?}"))
            .to_owned()
    }

    /// `aws_msk_iam` in eu-west-1, and tokens signed with the access key `key_id`.
    fn stub_msk(key_id: &str) -> (KafkaAuth, TokenSource) {
        let auth = KafkaAuth::AwsMskIam { region: "eu-west-1".into(), role_arn: None };
        let env = etl_aws::Environment::from_pairs([
            ("AWS_ACCESS_KEY_ID", key_id),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ]);
        let tokens = TokenSource::with_environment(Some(&auth), env);
        (auth, tokens)
    }

    /// A consumer of the stub broker on `port` with `tokens` and `properties`, over
    /// SASL_PLAINTEXT (the stub does not speak TLS).
    fn stub_client(tokens: TokenSource, properties: &[(String, String)], port: u16) -> BaseConsumer<ToolContext> {
        let mut config = ClientConfig::new();
        for (k, v) in properties {
            config.set(k, v);
        }
        config
            .set("bootstrap.servers", format!("127.0.0.1:{port}"))
            .set("group.id", "auth-test")
            .set("security.protocol", "SASL_PLAINTEXT");
        config.create_with_context(ToolContext::new(tokens)).unwrap()
    }

    /// The stub broker's client with `tokens` and `properties`, polled until the stub has what the
    /// client sent.
    fn initial_response(
        tokens: TokenSource,
        properties: &[(String, String)],
        broker: StubBroker,
        port: u16,
    ) -> (Vec<u8>, BaseConsumer<ToolContext>, Option<std::net::TcpStream>) {
        let consumer = stub_client(tokens, properties, port);
        while !broker.is_finished() {
            // The refresh event reaches the context through the consumer's poll.
            let _ = consumer.poll(Duration::from_millis(100));
        }
        let (sent, connection) = broker.join().expect("the stub broker");
        (sent, consumer, connection)
    }

    /// librdkafka asks the context for a token, accepts it (it connects only once it holds one),
    /// and sends it in the SASL/OAUTHBEARER exchange.
    #[test]
    fn librdkafka_sends_the_token_the_context_makes() {
        let (port, broker) = stub_broker();
        let (auth, tokens) = stub_msk("AKIDSTUB");
        let (sent, _consumer, _connection) = initial_response(tokens, &properties(Some(&auth)), broker, port);
        let url = etl_aws::msk::decode(&bearer(sent)).unwrap();
        assert!(url.starts_with("https://kafka.eu-west-1.amazonaws.com/?Action=kafka-cluster%3AConnect&"), "{url}");
        assert!(url.contains("X-Amz-Credential=AKIDSTUB%2F"), "{url}");
    }

    /// A client that never polls (the offsets tool's) connects once [`await_token`] got it its
    /// first token; without it, librdkafka never connects.
    #[test]
    fn await_token_lets_a_client_that_never_polls_connect() {
        let (port, broker) = stub_broker();
        let (auth, tokens) = stub_msk("AKIDTOOL");
        let consumer = stub_client(tokens, &properties(Some(&auth)), port);
        await_token(&consumer);
        // No poll from here on.
        let (sent, _connection) = broker.join().unwrap();
        let url = etl_aws::msk::decode(&bearer(sent)).unwrap();
        assert!(url.contains("X-Amz-Credential=AKIDTOOL%2F"), "{url}");
        drop(consumer);
    }

    /// `sasl.oauthbearer.method: oidc`: the client credentials go to the token endpoint (a stub),
    /// the broker gets the endpoint's token, and librdkafka asks for a new one before it expires.
    #[test]
    fn oidc_tokens_come_from_the_endpoint_and_are_refreshed_before_expiry() {
        use base64::Engine as _;

        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(String, String)>::new()));
        let endpoint = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/oauth2/token", endpoint.local_addr().unwrap());
        let log = asked.clone();
        std::thread::spawn(move || {
            for stream in endpoint.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut request = Vec::new();
                let mut buf = [0; 4096];
                // Headers and the short form body arrive together or soon after.
                while !String::from_utf8_lossy(&request).contains("grant_type") {
                    let n = stream.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    request.extend(&buf[..n]);
                }
                let text = String::from_utf8_lossy(&request).into_owned();
                let authorization = text
                    .lines()
                    .find_map(|l| l.strip_prefix("Authorization: ").or_else(|| l.strip_prefix("authorization: ")))
                    .unwrap_or_default()
                    .to_owned();
                let body = text.rsplit("\r\n\r\n").next().unwrap_or_default().to_owned();
                let n = {
                    let mut log = log.lock().unwrap();
                    log.push((authorization, body));
                    log.len()
                };
                // A JWT that expires in 6 s: librdkafka renews at 80% of its lifetime.
                let exp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 6;
                let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .encode(format!(r#"{{"sub":"etl-client","exp":{exp},"n":{n}}}"#));
                let answer = format!(r#"{{"access_token":"eyJhbGciOiJub25lIn0.{claims}.","token_type":"bearer"}}"#);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                    answer.len()
                );
            }
        });
        let mut passthrough: Vec<(String, String)> = [
            ("sasl.mechanism", "OAUTHBEARER"),
            ("sasl.oauthbearer.method", "oidc"),
            ("sasl.oauthbearer.client.id", "etl-client"),
            ("sasl.oauthbearer.client.secret", "client-secret"),
            ("sasl.oauthbearer.token.endpoint.url", url.as_str()),
            ("sasl.oauthbearer.scope", "kafka"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        let tokens = TokenSource::new(None, &mut passthrough).unwrap();
        assert!(matches!(tokens, TokenSource::Oidc(_)));
        let (port, broker) = stub_broker();
        // The connection stays open and the SASL exchange unanswered, so nothing but the token's
        // lifetime makes librdkafka ask for another.
        let (sent, consumer, _connection) = initial_response(tokens, &passthrough, broker, port);
        let token = bearer(sent);
        assert!(token.starts_with("eyJhbGciOiJub25lIn0."), "the endpoint's token: {token}");
        // Renewed before the first one expires, with the same client credentials.
        let deadline = Instant::now() + Duration::from_secs(15);
        while asked.lock().unwrap().len() < 2 && Instant::now() < deadline {
            let _ = consumer.poll(Duration::from_millis(100));
        }
        let asked = asked.lock().unwrap().clone();
        assert!(asked.len() >= 2, "the token was not refreshed: {asked:?}");
        let basic = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("etl-client:client-secret"));
        for (authorization, body) in &asked {
            assert_eq!(authorization, &basic);
            assert_eq!(body, "grant_type=client_credentials&scope=kafka");
        }
    }

    #[test]
    fn without_auth_an_oauthbearer_refresh_says_what_is_missing() {
        let error = TokenSource::None.token().err().expect("no token without auth").to_string();
        assert!(error.contains("source.kafka.auth.aws_msk_iam") && error.contains("oidc"), "{error}");
    }
}
