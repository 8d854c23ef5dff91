//! AWS Signature Version 4: the presigned query (the MSK IAM token) and the signed form POST
//! (STS `AssumeRole`), byte for byte as botocore signs them.

use ring::{digest, hmac};
use time::OffsetDateTime;

use crate::credentials::Credentials;

/// `X-Amz-Algorithm`.
const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// The SHA-256 of an empty payload, which a presigned GET signs.
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// Percent-encodes `value` the way SigV4 wants it (RFC 3986: everything but `A-Z a-z 0-9 - _ . ~`,
/// upper-case hex), which is also how botocore writes the query it sends.
pub fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len() * 3 / 2);
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `key=value&…` with both sides percent-encoded, in the order given.
fn query(pairs: &[(&str, &str)]) -> String {
    pairs.iter().map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v))).collect::<Vec<_>>().join("&")
}

/// `YYYYMMDDTHHMMSSZ` and `YYYYMMDD` of a signing time, in UTC.
fn stamps(at: OffsetDateTime) -> (String, String) {
    let at = at.to_offset(time::UtcOffset::UTC);
    let long = format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    );
    let short = long[..8].to_owned();
    (long, short)
}

fn sha256_hex(data: &[u8]) -> String {
    hex(digest::digest(&digest::SHA256, data).as_ref())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hmac_sha256(key: &[u8], data: &str) -> hmac::Tag {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes())
}

/// What is signed and where: the request's scope.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// The region, e.g. `eu-west-1`.
    pub region: &'a str,
    /// The signing name of the service, e.g. `kafka-cluster` or `sts`.
    pub service: &'a str,
}

impl Scope<'_> {
    fn credential_scope(&self, day: &str) -> String {
        format!("{day}/{}/{}/aws4_request", self.region, self.service)
    }

    /// The signature of `string_to_sign`, from the secret through the day, region and service keys.
    fn signature(&self, secret: &str, day: &str, string_to_sign: &str) -> String {
        let k_date = hmac_sha256(format!("AWS4{secret}").as_bytes(), day);
        let k_region = hmac_sha256(k_date.as_ref(), self.region);
        let k_service = hmac_sha256(k_region.as_ref(), self.service);
        let k_signing = hmac_sha256(k_service.as_ref(), "aws4_request");
        hex(hmac_sha256(k_signing.as_ref(), string_to_sign).as_ref())
    }
}

fn string_to_sign(stamp: &str, credential_scope: &str, canonical_request: &str) -> String {
    format!("{ALGORITHM}\n{stamp}\n{credential_scope}\n{}", sha256_hex(canonical_request.as_bytes()))
}

/// A GET of `https://{host}{path}?{params}` presigned for `expires_s` seconds from `at`: the
/// query carries the operation's parameters, then the authentication ones (the session token
/// among them, signed), then `X-Amz-Signature`. Only `host` is a signed header.
pub fn presign_get(
    host: &str,
    path: &str,
    params: &[(&str, &str)],
    credentials: &Credentials,
    scope: Scope<'_>,
    at: OffsetDateTime,
    expires_s: u32,
) -> String {
    let (stamp, day) = stamps(at);
    let credential_scope = scope.credential_scope(&day);
    let credential = format!("{}/{credential_scope}", credentials.access_key_id);
    let expires = expires_s.to_string();
    let mut auth: Vec<(&str, &str)> = vec![
        ("X-Amz-Algorithm", ALGORITHM),
        ("X-Amz-Credential", &credential),
        ("X-Amz-Date", &stamp),
        ("X-Amz-Expires", &expires),
        ("X-Amz-SignedHeaders", "host"),
    ];
    if let Some(token) = &credentials.session_token {
        auth.push(("X-Amz-Security-Token", token.expose()));
    }
    // The canonical query is every parameter, encoded, sorted by key (then value).
    let mut canonical: Vec<(String, String)> =
        params.iter().chain(&auth).map(|(k, v)| (percent_encode(k), percent_encode(v))).collect();
    canonical.sort();
    let canonical_query = canonical.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&");
    let canonical_request = format!("GET\n{path}\n{canonical_query}\nhost:{host}\n\nhost\n{EMPTY_SHA256}");
    let signature = scope.signature(
        credentials.secret_access_key.expose(),
        &day,
        &string_to_sign(&stamp, &credential_scope, &canonical_request),
    );
    let operation = query(params);
    let separator = if operation.is_empty() { "" } else { "&" };
    format!("https://{host}{path}?{operation}{separator}{}&X-Amz-Signature={signature}", query(&auth))
}

/// The headers of a signed `POST` of a form body (`application/x-www-form-urlencoded`) to
/// `https://{host}/`: `X-Amz-Date`, `X-Amz-Security-Token` with a session, and `Authorization`.
/// Signed: `content-type`, `host`, `x-amz-date` (and the token), as botocore signs STS calls.
pub fn sign_form_post(
    host: &str,
    body: &str,
    credentials: &Credentials,
    scope: Scope<'_>,
    at: OffsetDateTime,
) -> Vec<(&'static str, String)> {
    let (stamp, day) = stamps(at);
    let credential_scope = scope.credential_scope(&day);
    let content_type = "application/x-www-form-urlencoded; charset=utf-8";
    let mut headers: Vec<(&'static str, String)> =
        vec![("content-type", content_type.to_owned()), ("host", host.to_owned()), ("x-amz-date", stamp.clone())];
    if let Some(token) = &credentials.session_token {
        headers.push(("x-amz-security-token", token.expose().to_owned()));
    }
    let canonical_headers: String = headers.iter().map(|(k, v)| format!("{k}:{}\n", v.trim())).collect();
    let signed_headers = headers.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(";");
    let canonical_request =
        format!("POST\n/\n\n{canonical_headers}\n{signed_headers}\n{}", sha256_hex(body.as_bytes()));
    let signature = scope.signature(
        credentials.secret_access_key.expose(),
        &day,
        &string_to_sign(&stamp, &credential_scope, &canonical_request),
    );
    headers.push((
        "authorization",
        format!(
            "{ALGORITHM} Credential={}/{credential_scope}, SignedHeaders={signed_headers}, Signature={signature}",
            credentials.access_key_id
        ),
    ));
    // `host` is the connection's; the HTTP client sets it.
    headers.retain(|(k, _)| *k != "host");
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::Credentials;

    #[test]
    fn percent_encoding_keeps_only_the_unreserved_characters() {
        assert_eq!(percent_encode("kafka-cluster:Connect"), "kafka-cluster%3AConnect");
        assert_eq!(percent_encode("a/b+c=d e~f_g.h"), "a%2Fb%2Bc%3Dd%20e~f_g.h");
        assert_eq!(percent_encode("é"), "%C3%A9");
    }

    /// AWS's published example of a signing key and signature (the IAM `ListUsers` GET of the
    /// SigV4 documentation, "Examples of how to derive a signing key").
    #[test]
    fn the_signing_key_chain_matches_the_documented_example() {
        let scope = Scope { region: "us-east-1", service: "iam" };
        let string_to_sign = "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/iam/aws4_request\n\
             f536975d06c0309214f805bb90ccff089219ecd68b2577efef23edd43b7e1a59";
        assert_eq!(
            scope.signature("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20150830", string_to_sign),
            "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
        );
    }

    #[test]
    fn a_presigned_url_puts_the_signature_last_and_signs_the_session_token() {
        let credentials = Credentials::new("AKID", "secret", Some("to/ken".to_owned()), "test");
        let at = OffsetDateTime::from_unix_timestamp(1_796_644_800).unwrap();
        let url = presign_get(
            "kafka.eu-west-1.amazonaws.com",
            "/",
            &[("Action", "kafka-cluster:Connect")],
            &credentials,
            Scope { region: "eu-west-1", service: "kafka-cluster" },
            at,
            900,
        );
        assert!(
            url.starts_with("https://kafka.eu-west-1.amazonaws.com/?Action=kafka-cluster%3AConnect&X-Amz-Algorithm=")
        );
        assert!(url.contains("&X-Amz-Date=20261207T120000Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host&X-Amz-Security-Token=to%2Fken&X-Amz-Signature="), "{url}");
        let signature = url.rsplit_once("X-Amz-Signature=").unwrap().1;
        assert_eq!(signature.len(), 64);
        // Another token, another signature: the token is signed.
        let other = Credentials::new("AKID", "secret", Some("other".to_owned()), "test");
        let url2 = presign_get(
            "kafka.eu-west-1.amazonaws.com",
            "/",
            &[("Action", "kafka-cluster:Connect")],
            &other,
            Scope { region: "eu-west-1", service: "kafka-cluster" },
            at,
            900,
        );
        assert_ne!(signature, url2.rsplit_once("X-Amz-Signature=").unwrap().1);
    }
}
