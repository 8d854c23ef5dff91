//! `sasl.oauthbearer.method: oidc`: the OAuth 2 client-credentials grant, done by the runtime
//! because the bundled librdkafka has no libcurl (and rdkafka hands the refresh to the
//! application anyway). It asks the token endpoint as librdkafka's own client would: a form POST
//! of `grant_type=client_credentials` (and `scope`), the client's id and secret as HTTP Basic.

use std::time::Duration;

use base64::Engine as _;

use crate::contract::kafka_auth::{OIDC_REQUIRED, oidc_property, oidc_unsupported};
use crate::engine::errors::SourceError;

/// How long the token endpoint may take to answer.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(10);

/// The client of one token endpoint.
pub(crate) struct Oidc {
    endpoint: String,
    client_id: String,
    client_secret: String,
    scope: Option<String>,
    agent: ureq::Agent,
}

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc")
            .field("endpoint", &crate::secret::mask_userinfo(&self.endpoint))
            .field("client_id", &self.client_id)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// A token and what librdkafka needs of it.
pub(crate) struct OidcToken {
    pub(crate) token: String,
    /// Its expiry, in milliseconds since the epoch: the JWT's `exp`, else `expires_in` from now.
    pub(crate) expires_ms: i64,
    /// The JWT's `sub`, else the client id.
    pub(crate) principal: String,
}

/// The token is a bearer credential: not shown.
impl std::fmt::Debug for OidcToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcToken")
            .field("token", &"********")
            .field("expires_ms", &self.expires_ms)
            .field("principal", &self.principal)
            .finish()
    }
}

impl Oidc {
    /// Takes the OIDC properties out of `properties` (they must not reach librdkafka, which
    /// refuses them without libcurl) when `sasl.oauthbearer.method` is `oidc`; `None` otherwise.
    pub(crate) fn take(properties: &mut Vec<(String, String)>) -> Result<Option<Oidc>, SourceError> {
        let method = properties.iter().rev().find(|(k, _)| k == "sasl.oauthbearer.method").map(|(_, v)| v.trim());
        if method.is_some_and(|m| m.eq_ignore_ascii_case("default")) {
            // librdkafka's own default, and a property it refuses without libcurl: drop it.
            properties.retain(|(k, _)| k != "sasl.oauthbearer.method");
            return Ok(None);
        }
        if !method.is_some_and(|m| m.eq_ignore_ascii_case("oidc")) {
            return Ok(None);
        }
        if let Some((key, why)) = properties.iter().find_map(|(k, v)| oidc_unsupported(k, v).map(|why| (k, why))) {
            return Err(SourceError::fatal(format!(
                "rdkafka property `{key}` with sasl.oauthbearer.method oidc: {why}"
            )));
        }
        let mechanism = properties
            .iter()
            .rev()
            .find(|(k, _)| k == "sasl.mechanism" || k == "sasl.mechanisms")
            .map(|(_, v)| v.trim().to_owned());
        if !mechanism.as_deref().is_some_and(|m| m.eq_ignore_ascii_case("OAUTHBEARER")) {
            return Err(SourceError::fatal(
                "rdkafka property `sasl.oauthbearer.method` is oidc but `sasl.mechanism` is not OAUTHBEARER; set it",
            ));
        }
        let mut values = std::collections::HashMap::new();
        properties.retain(|(k, v)| match oidc_property(k) {
            Some(canonical) => {
                values.insert(canonical, v.clone());
                false
            }
            None => true,
        });
        for required in OIDC_REQUIRED {
            if values.get(required).is_none_or(|v| v.trim().is_empty()) {
                return Err(SourceError::fatal(format!(
                    "rdkafka property `{required}` is needed with sasl.oauthbearer.method oidc"
                )));
            }
        }
        let endpoint = values["sasl.oauthbearer.token.endpoint.url"].trim().to_owned();
        if !(endpoint.starts_with("https://") || endpoint.starts_with("http://")) {
            return Err(SourceError::fatal(format!(
                "rdkafka property `sasl.oauthbearer.token.endpoint.url` `{}` is not an http(s) URL",
                crate::secret::mask_userinfo(&endpoint)
            )));
        }
        Ok(Some(Oidc {
            endpoint,
            client_id: values["sasl.oauthbearer.client.id"].clone(),
            client_secret: values["sasl.oauthbearer.client.secret"].clone(),
            scope: values.get("sasl.oauthbearer.scope").map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()),
            agent: ureq::Agent::config_builder()
                .timeout_global(Some(TOKEN_TIMEOUT))
                .http_status_as_error(false)
                .build()
                .new_agent(),
        }))
    }

    /// A fresh token from the endpoint.
    pub(crate) fn token(&self) -> Result<OidcToken, String> {
        let basic =
            base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", self.client_id, self.client_secret));
        let mut body = "grant_type=client_credentials".to_owned();
        if let Some(scope) = &self.scope {
            body.push_str("&scope=");
            // RFC 3986 encoding is valid form encoding (`%20` for a space).
            body.push_str(&etl_aws::sigv4::percent_encode(scope));
        }
        let shown = crate::secret::mask_userinfo(&self.endpoint);
        let mut response = self
            .agent
            .post(&self.endpoint)
            .header("Authorization", &format!("Basic {basic}"))
            .header("Accept", "application/json")
            .header("Content-Type", "application/x-www-form-urlencoded")
            .send(body.as_bytes())
            .map_err(|e| format!("POST {shown}: {e}"))?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().map_err(|e| format!("POST {shown}: {e}"))?;
        if status != 200 {
            return Err(format!("POST {shown}: HTTP {status}: {}", text.chars().take(300).collect::<String>()));
        }
        let answer: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("POST {shown}: the answer is not JSON: {e}"))?;
        let token = answer
            .get("access_token")
            .and_then(|t| t.as_str())
            .ok_or_else(|| format!("POST {shown}: the answer has no access_token"))?
            .to_owned();
        let claims = jwt_claims(&token);
        let now_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        let expires_ms = claims
            .as_ref()
            .and_then(|c| c.get("exp"))
            .and_then(serde_json::Value::as_i64)
            .map(|exp| exp * 1000)
            .or_else(|| answer.get("expires_in").and_then(serde_json::Value::as_i64).map(|s| now_ms + s * 1000))
            .ok_or_else(|| format!("POST {shown}: the token has no `exp` claim and the answer no `expires_in`"))?;
        let principal = claims
            .as_ref()
            .and_then(|c| c.get("sub"))
            .and_then(|s| s.as_str())
            .map_or_else(|| self.client_id.clone(), str::to_owned);
        Ok(OidcToken { token, expires_ms, principal })
    }
}

/// The claims of a JWT (`header.claims.signature`), if `token` is one; not verified (the
/// broker does that).
fn jwt_claims(token: &str) -> Option<serde_json::Value> {
    let claims = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(claims.trim_end_matches('=')).ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn oidc_properties_are_taken_out_and_checked() {
        let mut p = props(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "OAUTHBEARER"),
            ("sasl.oauthbearer.method", "OIDC"),
            ("sasl.oauthbearer.client.credentials.client.id", "etl"),
            ("sasl.oauthbearer.client.secret", "s3cret"),
            ("sasl.oauthbearer.token.endpoint.url", "https://idp.example/token"),
            ("sasl.oauthbearer.scope", "kafka read"),
        ]);
        let oidc = Oidc::take(&mut p).unwrap().expect("oidc");
        assert_eq!(p, props(&[("security.protocol", "SASL_SSL"), ("sasl.mechanism", "OAUTHBEARER")]));
        assert_eq!((oidc.client_id.as_str(), oidc.scope.as_deref()), ("etl", Some("kafka read")));
        assert!(!format!("{oidc:?}").contains("s3cret"));
        // Not oidc: nothing is taken, but the default method (which librdkafka refuses without
        // libcurl) is dropped.
        let mut plain = props(&[("sasl.mechanism", "PLAIN"), ("sasl.oauthbearer.method", "default")]);
        assert!(Oidc::take(&mut plain).unwrap().is_none());
        assert_eq!(plain, props(&[("sasl.mechanism", "PLAIN")]));
        // The client-credentials grant, said explicitly, is taken too.
        let mut explicit = props(&[
            ("sasl.mechanism", "OAUTHBEARER"),
            ("sasl.oauthbearer.method", "oidc"),
            ("sasl.oauthbearer.grant.type", "client_credentials"),
            ("sasl.oauthbearer.client.id", "etl"),
            ("sasl.oauthbearer.client.secret", "s"),
            ("sasl.oauthbearer.token.endpoint.url", "https://idp.example/token"),
        ]);
        assert!(Oidc::take(&mut explicit).unwrap().is_some());
        assert_eq!(explicit, props(&[("sasl.mechanism", "OAUTHBEARER")]));
        let fail = |pairs: &[(&str, &str)]| Oidc::take(&mut props(pairs)).unwrap_err().message;
        let base = [("sasl.mechanism", "OAUTHBEARER"), ("sasl.oauthbearer.method", "oidc")];
        assert!(fail(&base).contains("sasl.oauthbearer.client.id"));
        assert!(fail(&[base[1]]).contains("sasl.mechanism"));
        assert!(fail(&[base[0], base[1], ("sasl.oauthbearer.extensions", "a=b")]).contains("extensions"));
    }

    #[test]
    fn claims_are_read_from_a_jwt() {
        let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"sub":"etl","exp":2000000000}"#);
        let token = format!("eyJhbGciOiJSUzI1NiJ9.{claims}.c2ln");
        let c = jwt_claims(&token).unwrap();
        assert_eq!((c["sub"].as_str(), c["exp"].as_i64()), (Some("etl"), Some(2_000_000_000)));
        assert!(jwt_claims("opaque-token").is_none());
    }
}
