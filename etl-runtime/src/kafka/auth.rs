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

/// `source.kafka.auth`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KafkaAuth {
    /// `aws_msk_iam`: tokens for `region`, signed as `role_arn` when given (assumed over the
    /// credential chain's identity), else as the chain's identity.
    AwsMskIam { region: String, role_arn: Option<String> },
}

/// The properties `auth` sets, applied after the passthrough: `gen` rejects passthrough ones that
/// would conflict (E0207), and nothing overrides these.
pub(crate) fn properties(auth: Option<&KafkaAuth>) -> Vec<(String, String)> {
    match auth {
        None => Vec::new(),
        // MSK's IAM listener (port 9098) is TLS only.
        Some(KafkaAuth::AwsMskIam { .. }) => vec![
            ("security.protocol".into(), "SASL_SSL".into()),
            ("sasl.mechanism".into(), "OAUTHBEARER".into()),
        ],
    }
}

/// Where the clients' OAUTHBEARER tokens come from: shared by every client of the process (the
/// consumer, the dead-letter producer, the offsets tool), so credentials are fetched once.
#[derive(Debug, Clone, Default)]
pub(crate) struct TokenSource(Option<Arc<etl_aws::MskIam>>);

impl TokenSource {
    pub(crate) fn new(auth: Option<&KafkaAuth>) -> Self {
        TokenSource(auth.map(|KafkaAuth::AwsMskIam { region, role_arn }| {
            Arc::new(etl_aws::MskIam::new(region, role_arn.as_deref()))
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
                Ok(OAuthToken { token: token.token, principal_name: token.access_key_id, lifetime_ms: token.expires_ms })
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
    fn msk_iam_sets_tls_and_oauthbearer() {
        let auth = KafkaAuth::AwsMskIam { region: "eu-west-1".into(), role_arn: None };
        let set = properties(Some(&auth));
        assert!(set.contains(&("security.protocol".into(), "SASL_SSL".into())));
        assert!(set.contains(&("sasl.mechanism".into(), "OAUTHBEARER".into())));
        assert!(properties(None).is_empty());
    }

    #[test]
    fn without_auth_an_oauthbearer_refresh_says_what_is_missing() {
        let error = TokenSource::new(None).token().unwrap_err().to_string();
        assert!(error.contains("source.kafka.auth.aws_msk_iam"), "{error}");
    }
}
