//! The MSK IAM token: a SigV4-presigned `kafka-cluster:Connect` URL, base64url without padding,
//! as AWS's signer libraries make it, with the credentials cached between refreshes.

use std::sync::Mutex;

use base64::Engine as _;
use time::OffsetDateTime;

use crate::AwsError;
use crate::credentials::{self, Credentials, Environment};
use crate::sigv4::{self, Scope};

/// How long a token is valid, as AWS's signers set it (`X-Amz-Expires`). librdkafka asks for the
/// next one at 80% of this.
pub const TOKEN_LIFETIME_S: u32 = 900;

/// Temporary credentials are fetched again once they are this close to expiry: more than a
/// token's lifetime, so that no token outlives the credentials that signed it.
const CREDENTIALS_MARGIN_S: i64 = TOKEN_LIFETIME_S as i64 + 60;

/// `User-Agent` in the token: the broker logs it, which tells an operator who connected.
pub const USER_AGENT: &str = concat!("etl-rs/", env!("CARGO_PKG_VERSION"));

/// One token and what librdkafka needs to know of it.
#[derive(Clone)]
pub struct MskToken {
    /// What the client sends as the bearer token.
    pub token: String,
    /// Its expiry, in milliseconds since the epoch (`X-Amz-Date` + 900 s).
    pub expires_ms: i64,
    /// The access key id that signed it (not secret), for logs and the SASL principal.
    pub access_key_id: String,
    /// The provider that gave the credentials.
    pub source: String,
}

/// The token is a bearer credential for 15 minutes: not shown.
impl std::fmt::Debug for MskToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MskToken")
            .field("token", &"********")
            .field("expires_ms", &self.expires_ms)
            .field("access_key_id", &self.access_key_id)
            .field("source", &self.source)
            .finish()
    }
}

/// `source.kafka.auth.aws_msk_iam`: makes tokens for one region, optionally as an assumed role.
#[derive(Debug)]
pub struct MskIam {
    region: String,
    role_arn: Option<String>,
    session_name: String,
    env: Environment,
    /// The last credentials that expire, kept until near their expiry (STS and the metadata
    /// services are asked once per credentials' lifetime, not once per token).
    cached: Mutex<Option<Credentials>>,
}

impl MskIam {
    /// Reads the environment of the process (the credential chain's variables).
    pub fn new(region: &str, role_arn: Option<&str>) -> Self {
        Self::with_environment(region, role_arn, Environment::process())
    }

    pub fn with_environment(region: &str, role_arn: Option<&str>, env: Environment) -> Self {
        MskIam {
            region: region.to_owned(),
            role_arn: role_arn.filter(|r| !r.is_empty()).map(str::to_owned),
            session_name: env.get("AWS_ROLE_SESSION_NAME").unwrap_or("etl-rs-msk").to_owned(),
            env,
            cached: Mutex::new(None),
        }
    }

    pub fn region(&self) -> &str {
        &self.region
    }

    /// The credentials to sign with at `now`: the cached ones while they hold, else the chain's
    /// (and the role assumed over them).
    pub fn credentials(&self, now: OffsetDateTime) -> Result<Credentials, AwsError> {
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = cached.as_ref()
            && c.expires.is_some_and(|e| (e - now).whole_seconds() > CREDENTIALS_MARGIN_S)
        {
            return Ok(c.clone());
        }
        let base = credentials::resolve(&self.env, &self.region)?;
        let credentials = match &self.role_arn {
            Some(role) => credentials::assume_role(&base, &self.env, &self.region, role, &self.session_name)?,
            None => base,
        };
        *cached = credentials.expires.is_some().then(|| credentials.clone());
        Ok(credentials)
    }

    /// A token signed at `at` with credentials from the chain.
    pub fn token(&self, at: OffsetDateTime) -> Result<MskToken, AwsError> {
        let credentials = self.credentials(OffsetDateTime::now_utc())?;
        Ok(token_with(&credentials, &self.region, at))
    }
}

/// The token for `credentials` in `region`, signed at `at`.
pub fn token_with(credentials: &Credentials, region: &str, at: OffsetDateTime) -> MskToken {
    token_with_agent(credentials, region, at, USER_AGENT)
}

/// [`token_with`] with another `User-Agent` (unsigned, so it changes nothing else): `msk-token
/// --user-agent` uses it to compare byte for byte with another signer.
pub fn token_with_agent(credentials: &Credentials, region: &str, at: OffsetDateTime, user_agent: &str) -> MskToken {
    let at = at.replace_nanosecond(0).expect("zero nanoseconds are valid");
    let host = format!("kafka.{region}.amazonaws.com");
    let signed = sigv4::presign_get(
        &host,
        "/",
        &[("Action", "kafka-cluster:Connect")],
        credentials,
        Scope { region, service: "kafka-cluster" },
        at,
        TOKEN_LIFETIME_S,
    );
    // The user agent is added after signing, as AWS's signers add it.
    let url = format!("{signed}&User-Agent={}", sigv4::percent_encode(user_agent));
    MskToken {
        token: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(url),
        expires_ms: (at.unix_timestamp() + i64::from(TOKEN_LIFETIME_S)) * 1000,
        access_key_id: credentials.access_key_id.clone(),
        source: credentials.source.clone(),
    }
}

/// The URL inside a token, for `msk-token --decode` and tests.
pub fn decode(token: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token.trim_end_matches('=')).ok()?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_the_base64url_of_the_signed_url_with_the_user_agent_last() {
        let credentials = Credentials::new("AKID", "secret", None, "test");
        let at = OffsetDateTime::from_unix_timestamp(1_796_644_800).unwrap();
        let token = token_with(&credentials, "us-east-1", at);
        assert!(!token.token.contains('=') && !token.token.contains('+') && !token.token.contains('/'));
        let url = decode(&token.token).unwrap();
        assert!(url.starts_with("https://kafka.us-east-1.amazonaws.com/?Action=kafka-cluster%3AConnect&"), "{url}");
        assert!(url.ends_with(&format!("&User-Agent={}", sigv4::percent_encode(USER_AGENT))), "{url}");
        assert!(!url.contains("X-Amz-Security-Token"));
        assert_eq!(token.expires_ms, (1_796_644_800 + 900) * 1000);
    }

    #[test]
    fn static_credentials_are_read_each_time_and_temporary_ones_cached() {
        let env = Environment::from_pairs([("AWS_ACCESS_KEY_ID", "AKID"), ("AWS_SECRET_ACCESS_KEY", "s")]);
        let msk = MskIam::with_environment("eu-west-1", None, env);
        let now = OffsetDateTime::now_utc();
        assert_eq!(msk.credentials(now).unwrap().access_key_id, "AKID");
        assert!(msk.cached.lock().unwrap().is_none());
        let mut temporary = Credentials::new("ASIA", "s", Some("t".into()), "container endpoint");
        temporary.expires = Some(now + time::Duration::hours(1));
        *msk.cached.lock().unwrap() = Some(temporary.clone());
        assert_eq!(msk.credentials(now).unwrap().access_key_id, "ASIA");
        // Within the margin of their expiry (a token's lifetime and a minute), the chain is asked
        // again.
        assert_eq!(msk.credentials(now + time::Duration::minutes(43)).unwrap().access_key_id, "ASIA");
        assert_eq!(msk.credentials(now + time::Duration::minutes(45)).unwrap().access_key_id, "AKID");
    }
}
