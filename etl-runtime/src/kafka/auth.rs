//! `source.kafka.auth`: authentication the framework does itself. Today that is Amazon MSK's IAM
//! access control, SASL/OAUTHBEARER with a SigV4-signed token (etl-aws) that librdkafka asks for
//! again, through its refresh event, before the current one expires.

use std::error::Error;
use std::sync::Arc;

use rdkafka::client::{ClientContext, OAuthToken};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use time::OffsetDateTime;

use super::context::log_to_tracing;
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
    if let Some(role) = role_arn.as_deref().filter(|r| !kafka_auth::is_role_arn(r)) {
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

/// Where the clients' OAUTHBEARER tokens come from: shared by every client of the process (the
/// consumer, the dead-letter producer, the offsets tool), so credentials are fetched once.
#[derive(Debug, Clone, Default)]
pub(crate) struct TokenSource(Option<Arc<etl_aws::MskIam>>);

impl TokenSource {
    pub(crate) fn new(auth: Option<&KafkaAuth>) -> Self {
        Self::with_environment(auth, etl_aws::Environment::process())
    }

    /// With the credential chain reading `env` rather than the process's environment.
    pub(crate) fn with_environment(auth: Option<&KafkaAuth>, env: etl_aws::Environment) -> Self {
        TokenSource(auth.map(|KafkaAuth::AwsMskIam { region, role_arn }| {
            Arc::new(etl_aws::MskIam::with_environment(region, role_arn.as_deref(), env))
        }))
    }

    /// A fresh token, for librdkafka's refresh event. A failure is logged and handed back:
    /// librdkafka retries it, and reports the authentication failure as a client error.
    pub(crate) fn token(&self) -> Result<OAuthToken, Box<dyn Error>> {
        let Some(msk) = &self.0 else {
            return Err("SASL mechanism OAUTHBEARER needs a token source: etl-rs makes tokens for \
                        `source.kafka.auth.aws_msk_iam` only (OIDC is not built: README, Missing)"
                .into());
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
        self.tokens.token()
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

    /// librdkafka asks the context for a token, accepts it (it connects only once it holds one),
    /// and sends it in the SASL/OAUTHBEARER exchange. A stub broker answers like a 0.10 broker
    /// (SaslHandshake v0, after which the client writes its initial response as a raw frame) and
    /// reads what the client sends.
    #[test]
    fn librdkafka_sends_the_token_the_context_makes() {
        use std::io::{Read as _, Write as _};
        use std::time::{Duration, Instant};

        use rdkafka::ClientConfig;
        use rdkafka::consumer::BaseConsumer;

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let broker = std::thread::spawn(move || -> Vec<u8> {
            // A client without a token never connects: give up after a while rather than hang.
            listener.set_nonblocking(true).unwrap();
            let deadline = Instant::now() + Duration::from_secs(15);
            let mut stream = loop {
                match listener.accept() {
                    Ok((stream, _)) => break stream,
                    Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                    Err(_) => return Vec::new(),
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
                    _ => return request,
                }
            }
        });

        let auth = KafkaAuth::AwsMskIam { region: "eu-west-1".into(), role_arn: None };
        let env = etl_aws::Environment::from_pairs([
            ("AWS_ACCESS_KEY_ID", "AKIDSTUB"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ]);
        let mut config = ClientConfig::new();
        for (k, v) in properties(Some(&auth)) {
            config.set(k, v);
        }
        config
            .set("bootstrap.servers", format!("127.0.0.1:{port}"))
            .set("group.id", "auth-test")
            // The stub does not speak TLS.
            .set("security.protocol", "SASL_PLAINTEXT");
        let context = ToolContext { tokens: TokenSource::with_environment(Some(&auth), env) };
        let consumer: BaseConsumer<ToolContext> = config.create_with_context(context).unwrap();
        while !broker.is_finished() {
            // The refresh event reaches the context through the consumer's poll.
            let _ = consumer.poll(Duration::from_millis(100));
        }
        let sent = broker.join().expect("the stub broker got the client's SASL initial response");
        let text = String::from_utf8(sent).unwrap();
        let token = text
            .strip_prefix("n,,\u{1}auth=Bearer ")
            .and_then(|t| t.strip_suffix("\u{1}\u{1}"))
            .unwrap_or_else(|| panic!("not an OAUTHBEARER initial response: {text:?}"));
        let url = etl_aws::msk::decode(token).unwrap();
        assert!(url.starts_with("https://kafka.eu-west-1.amazonaws.com/?Action=kafka-cluster%3AConnect&"), "{url}");
        assert!(url.contains("X-Amz-Credential=AKIDSTUB%2F"), "{url}");
    }

    #[test]
    fn without_auth_an_oauthbearer_refresh_says_what_is_missing() {
        let error = TokenSource::new(None).token().err().expect("no token without auth").to_string();
        assert!(error.contains("source.kafka.auth.aws_msk_iam"), "{error}");
    }
}
