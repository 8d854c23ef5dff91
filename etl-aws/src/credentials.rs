//! AWS credentials and the standard chain that finds them: environment, shared profile, web
//! identity (IRSA on EKS), container endpoint (ECS, EKS Pod Identity), instance metadata (IMDSv2),
//! and an optional role assumed on top through STS.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::AwsError;
use crate::sigv4::{self, Scope};

/// A value that is never printed: `Debug` and `Display` show a mask.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value itself, for signing.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("********")
    }
}

/// Signing credentials, with where they came from and until when they hold.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: Secret,
    pub session_token: Option<Secret>,
    /// When temporary credentials expire; `None` for long-term keys.
    pub expires: Option<OffsetDateTime>,
    /// The provider that found them (`environment`, `profile default`, `web identity`, …), for logs.
    pub source: String,
}

impl Credentials {
    pub fn new(access_key_id: &str, secret: &str, session_token: Option<String>, source: &str) -> Self {
        Credentials {
            access_key_id: access_key_id.to_owned(),
            secret_access_key: Secret::new(secret),
            session_token: session_token.filter(|t| !t.is_empty()).map(Secret::new),
            expires: None,
            source: source.to_owned(),
        }
    }
}

/// The environment the chain reads: the process's, or a fixed map in tests (the chain never
/// reads `std::env` itself, so tests can run side by side).
#[derive(Clone, Default)]
pub struct Environment(HashMap<String, String>);

/// The variables' names only: the environment holds secrets, of AWS and of everything else.
impl fmt::Debug for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.0.keys().map(String::as_str).collect();
        names.sort_unstable();
        f.debug_tuple("Environment").field(&names).finish()
    }
}

impl Environment {
    pub fn process() -> Self {
        Environment(std::env::vars().collect())
    }

    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Environment(pairs.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect())
    }

    /// A variable's value; an empty one counts as unset, as the AWS SDKs count it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str).filter(|v| !v.is_empty())
    }

    fn home(&self) -> Option<PathBuf> {
        self.get("HOME").map(PathBuf::from)
    }
}

/// How long an HTTP call of the chain may take: the metadata endpoints answer locally or not at
/// all, and off EC2 the instance metadata address does not answer, so the chain gives up fast.
const METADATA_TIMEOUT: Duration = Duration::from_secs(2);
const STS_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the chain's HTTP calls go when no variable says otherwise.
const IMDS_ENDPOINT: &str = "http://169.254.169.254";
const ECS_ENDPOINT: &str = "http://169.254.170.2";

/// Finds base credentials, first provider that is configured wins: a configured provider that
/// fails is an error of its own, not a silent fall-through to the next one (which would sign with
/// another identity than the operator set up).
pub fn resolve(env: &Environment, region: &str) -> Result<Credentials, AwsError> {
    if let Some(credentials) = from_environment(env)? {
        return Ok(credentials);
    }
    if let Some(credentials) = from_profile(env)? {
        return Ok(credentials);
    }
    if let Some(token_file) = env.get("AWS_WEB_IDENTITY_TOKEN_FILE") {
        let Some(role_arn) = env.get("AWS_ROLE_ARN") else {
            return Err(AwsError::Provider {
                provider: "web identity".into(),
                message: "AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not (IRSA sets both: is the \
                          service account annotated with eks.amazonaws.com/role-arn?)"
                    .into(),
            });
        };
        return web_identity(env, region, token_file, role_arn);
    }
    if env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").is_some()
        || env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI").is_some()
    {
        return container(env);
    }
    if env.get("AWS_EC2_METADATA_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Err(AwsError::NoCredentials(
            "none in the environment (AWS_ACCESS_KEY_ID), the shared files (~/.aws/credentials, \
             ~/.aws/config), web identity (AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN) or the container \
             endpoint (AWS_CONTAINER_CREDENTIALS_*), and instance metadata is disabled (AWS_EC2_METADATA_DISABLED)"
                .to_owned(),
        ));
    }
    instance_metadata(env).map_err(|e| {
        AwsError::NoCredentials(format!(
            "none in the environment (AWS_ACCESS_KEY_ID), the shared files (~/.aws/credentials, ~/.aws/config), \
             web identity (AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN) or the container endpoint \
             (AWS_CONTAINER_CREDENTIALS_*), and the instance metadata service failed: {e}"
        ))
    })
}

fn from_environment(env: &Environment) -> Result<Option<Credentials>, AwsError> {
    let key = env.get("AWS_ACCESS_KEY_ID").or_else(|| env.get("AWS_ACCESS_KEY"));
    let secret = env.get("AWS_SECRET_ACCESS_KEY").or_else(|| env.get("AWS_SECRET_KEY"));
    match (key, secret) {
        (Some(key), Some(secret)) => {
            Ok(Some(Credentials::new(key, secret, env.get("AWS_SESSION_TOKEN").map(str::to_owned), "environment")))
        }
        (Some(_), None) => Err(AwsError::Provider {
            provider: "environment".into(),
            message: "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not".into(),
        }),
        (None, Some(_)) => Err(AwsError::Provider {
            provider: "environment".into(),
            message: "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not".into(),
        }),
        (None, None) => Ok(None),
    }
}

/// The named profile's static keys, from the credentials file, then the config file. A profile
/// that names a role (`role_arn`) or a process (`credential_process`) is refused with what to use
/// instead: etl-rs does not run those.
fn from_profile(env: &Environment) -> Result<Option<Credentials>, AwsError> {
    let profile = env.get("AWS_PROFILE").or_else(|| env.get("AWS_DEFAULT_PROFILE")).unwrap_or("default");
    let explicit = env.get("AWS_PROFILE").is_some();
    let home = env.home();
    let credentials_file = env
        .get("AWS_SHARED_CREDENTIALS_FILE")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".aws/credentials")));
    let config_file =
        env.get("AWS_CONFIG_FILE").map(PathBuf::from).or_else(|| home.as_ref().map(|h| h.join(".aws/config")));
    let config_section = if profile == "default" { "default".to_owned() } else { format!("profile {profile}") };
    let mut found = HashMap::new();
    for (file, section) in [(credentials_file, profile.to_owned()), (config_file, config_section)] {
        let Some(file) = file else { continue };
        // A missing file is no profile; one that is there and cannot be read is an error, not a
        // reason to go on to another identity.
        let text = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(AwsError::Provider {
                    provider: format!("profile {profile}"),
                    message: format!("reading {}: {e}", file.display()),
                });
            }
        };
        if let Some(values) = ini_section(&text, &section) {
            for (k, v) in values {
                found.entry(k).or_insert(v);
            }
        }
    }
    let source = format!("profile {profile}");
    match (found.get("aws_access_key_id"), found.get("aws_secret_access_key")) {
        (Some(key), Some(secret)) => {
            Ok(Some(Credentials::new(key, secret, found.get("aws_session_token").cloned(), &source)))
        }
        _ if found.contains_key("role_arn")
            || found.contains_key("credential_process")
            || found.contains_key("sso_session") =>
        {
            Err(AwsError::Provider {
                provider: source,
                message: "the profile assumes a role, runs a process or uses SSO, which etl-rs does not do; give the \
                          role as `source.kafka.auth.aws_msk_iam.role_arn` over a profile with keys, or use web \
                          identity (AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN)"
                    .into(),
            })
        }
        _ if explicit => Err(AwsError::Provider {
            provider: source,
            message: "AWS_PROFILE names a profile with no aws_access_key_id and aws_secret_access_key in \
                      ~/.aws/credentials or ~/.aws/config"
                .into(),
        }),
        _ => Ok(None),
    }
}

/// The `key = value` lines of `[section]` in an INI file, keys lower-cased; `None` without it.
fn ini_section(text: &str, section: &str) -> Option<HashMap<String, String>> {
    let mut current: Option<String> = None;
    let mut values: Option<HashMap<String, String>> = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
            if name == section {
                values.get_or_insert_with(HashMap::new);
            }
            current = Some(name);
            continue;
        }
        if current.as_deref() == Some(section)
            && let Some((k, v)) = line.split_once('=')
        {
            values.get_or_insert_with(HashMap::new).insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    values
}

/// The STS endpoint: `AWS_ENDPOINT_URL_STS`, then `AWS_ENDPOINT_URL`, then the regional one
/// (China's regions are under `amazonaws.com.cn`).
fn sts_endpoint(env: &Environment, region: &str) -> String {
    let suffix = if region.starts_with("cn-") { "amazonaws.com.cn" } else { "amazonaws.com" };
    env.get("AWS_ENDPOINT_URL_STS")
        .or_else(|| env.get("AWS_ENDPOINT_URL"))
        .map(|u| u.trim_end_matches('/').to_owned())
        .unwrap_or_else(|| format!("https://sts.{region}.{suffix}"))
}

/// Whether the container endpoint `url` may be sent the authorization token: over https any
/// host; over http only loopback and the addresses ECS and EKS Pod Identity serve on, as the AWS
/// SDKs allow.
fn container_host_allowed(url: &str) -> bool {
    if url.starts_with("https://") {
        return true;
    }
    let Some(rest) = url.strip_prefix("http://") else { return false };
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    matches!(host, "localhost" | "::1" | "169.254.170.2" | "169.254.170.23" | "fd00:ec2::23")
        || host.parse::<std::net::Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder().timeout_global(Some(timeout)).http_status_as_error(false).build().new_agent()
}

/// A session name for STS: `AWS_ROLE_SESSION_NAME`, else `etl-rs-<unix seconds>`.
fn session_name(env: &Environment) -> String {
    env.get("AWS_ROLE_SESSION_NAME")
        .map(str::to_owned)
        .unwrap_or_else(|| format!("etl-rs-{}", OffsetDateTime::now_utc().unix_timestamp()))
}

/// IRSA: the projected service-account token exchanged at STS for the role's credentials
/// (`AssumeRoleWithWebIdentity`, which is not signed).
fn web_identity(env: &Environment, region: &str, token_file: &str, role_arn: &str) -> Result<Credentials, AwsError> {
    let provider = "web identity".to_owned();
    let token = std::fs::read_to_string(token_file).map_err(|e| AwsError::Provider {
        provider: provider.clone(),
        message: format!("reading AWS_WEB_IDENTITY_TOKEN_FILE {token_file}: {e}"),
    })?;
    let body = form(&[
        ("Action", "AssumeRoleWithWebIdentity"),
        ("Version", "2011-06-15"),
        ("RoleArn", role_arn),
        ("RoleSessionName", &session_name(env)),
        ("WebIdentityToken", token.trim()),
    ]);
    let url = format!("{}/", sts_endpoint(env, region));
    let mut response = agent(STS_TIMEOUT)
        .post(&url)
        .header("content-type", "application/x-www-form-urlencoded; charset=utf-8")
        .send(body.as_bytes())
        .map_err(|e| AwsError::Provider { provider: provider.clone(), message: format!("POST {url}: {e}") })?;
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    sts_credentials(status, &text, &format!("web identity ({role_arn})"))
}

/// `source.kafka.auth.aws_msk_iam.role_arn`: the role assumed with the base credentials
/// (`AssumeRole`, signed with them).
pub fn assume_role(
    base: &Credentials,
    env: &Environment,
    region: &str,
    role_arn: &str,
    session: &str,
) -> Result<Credentials, AwsError> {
    let body = form(&[
        ("Action", "AssumeRole"),
        ("Version", "2011-06-15"),
        ("RoleArn", role_arn),
        ("RoleSessionName", session),
    ]);
    let endpoint = sts_endpoint(env, region);
    let host = endpoint.split_once("://").map_or(endpoint.as_str(), |(_, rest)| rest);
    let headers = sigv4::sign_form_post(host, &body, base, Scope { region, service: "sts" }, OffsetDateTime::now_utc());
    let url = format!("{endpoint}/");
    let mut request = agent(STS_TIMEOUT).post(&url);
    for (name, value) in &headers {
        request = request.header(*name, value);
    }
    let mut response = request.send(body.as_bytes()).map_err(|e| AwsError::Provider {
        provider: format!("assume role {role_arn}"),
        message: format!("POST {url}: {e}"),
    })?;
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    sts_credentials(status, &text, &format!("role {role_arn} (over {})", base.source))
}

fn form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", sigv4::percent_encode(k), sigv4::percent_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// The credentials in an STS answer (XML), or its error's code and message.
fn sts_credentials(status: u16, body: &str, source: &str) -> Result<Credentials, AwsError> {
    if status != 200 {
        let code = xml_value(body, "Code").unwrap_or_default();
        let message = xml_value(body, "Message").unwrap_or_else(|| body.chars().take(300).collect());
        return Err(AwsError::Provider {
            provider: source.to_owned(),
            message: format!("STS HTTP {status} {code}: {message}"),
        });
    }
    let field = |name: &str| {
        xml_value(body, name).ok_or_else(|| AwsError::Provider {
            provider: source.to_owned(),
            message: format!("the STS answer has no <{name}>"),
        })
    };
    let mut credentials =
        Credentials::new(&field("AccessKeyId")?, &field("SecretAccessKey")?, Some(field("SessionToken")?), source);
    credentials.expires = xml_value(body, "Expiration").and_then(|e| OffsetDateTime::parse(&e, &Rfc3339).ok());
    Ok(credentials)
}

/// The text of the first `<name>…</name>` element, its five XML entities decoded. STS answers are
/// flat enough that this is all the XML the chain needs.
fn xml_value(body: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let start = body.find(&open)? + open.len();
    let end = start + body[start..].find(&format!("</{name}>"))?;
    Some(
        body[start..end]
            .trim()
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&"),
    )
}

/// The JSON both metadata services answer with.
#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct MetadataCredentials {
    access_key_id: String,
    secret_access_key: String,
    token: Option<String>,
    expiration: Option<String>,
}

fn metadata_credentials(body: &str, source: &str) -> Result<Credentials, AwsError> {
    let parsed: MetadataCredentials = serde_json::from_str(body).map_err(|e| AwsError::Provider {
        provider: source.to_owned(),
        message: format!("the answer is not credentials JSON: {e}"),
    })?;
    let mut credentials = Credentials::new(&parsed.access_key_id, &parsed.secret_access_key, parsed.token, source);
    credentials.expires = parsed.expiration.and_then(|e| OffsetDateTime::parse(&e, &Rfc3339).ok());
    Ok(credentials)
}

/// ECS task roles and EKS Pod Identity: a GET of the container endpoint, with the authorization
/// token from `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE` (read each time: EKS rotates it) or
/// `AWS_CONTAINER_AUTHORIZATION_TOKEN`.
fn container(env: &Environment) -> Result<Credentials, AwsError> {
    let provider = "container endpoint";
    let url = match (env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"), env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI")) {
        (Some(relative), _) => format!("{ECS_ENDPOINT}{relative}"),
        (None, Some(full)) => full.to_owned(),
        (None, None) => unreachable!("called only when one of the two is set"),
    };
    if !container_host_allowed(&url) {
        return Err(AwsError::Provider {
            provider: provider.into(),
            message: format!(
                "AWS_CONTAINER_CREDENTIALS_FULL_URI {url}: over http only loopback and the ECS and EKS Pod Identity \
                 addresses (169.254.170.2, 169.254.170.23, fd00:ec2::23) are asked; use https"
            ),
        });
    }
    let authorization = match env.get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE") {
        Some(file) => {
            Some(std::fs::read_to_string(file).map(|t| t.trim().to_owned()).map_err(|e| AwsError::Provider {
                provider: provider.into(),
                message: format!("reading AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE {file}: {e}"),
            })?)
        }
        None => env.get("AWS_CONTAINER_AUTHORIZATION_TOKEN").map(str::to_owned),
    };
    let mut request = agent(METADATA_TIMEOUT).get(&url);
    if let Some(token) = &authorization {
        request = request.header("Authorization", token);
    }
    let mut response = request
        .call()
        .map_err(|e| AwsError::Provider { provider: provider.into(), message: format!("GET {url}: {e}") })?;
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().unwrap_or_default();
    if status != 200 {
        return Err(AwsError::Provider {
            provider: provider.into(),
            message: format!("GET {url}: HTTP {status}: {body}"),
        });
    }
    metadata_credentials(&body, provider)
}

/// IMDSv2: a session token (PUT), the instance profile's role name, then its credentials.
/// `AWS_EC2_METADATA_SERVICE_ENDPOINT` moves the service (tests, IPv6).
fn instance_metadata(env: &Environment) -> Result<Credentials, AwsError> {
    let provider = "instance metadata";
    let fail = |message: String| AwsError::Provider { provider: provider.into(), message };
    let base = env.get("AWS_EC2_METADATA_SERVICE_ENDPOINT").unwrap_or(IMDS_ENDPOINT).trim_end_matches('/').to_owned();
    let agent = agent(METADATA_TIMEOUT);
    let url = format!("{base}/latest/api/token");
    let mut response = agent
        .put(&url)
        .header("x-aws-ec2-metadata-token-ttl-seconds", "21600")
        .send_empty()
        .map_err(|e| fail(format!("PUT {url}: {e}")))?;
    if response.status().as_u16() != 200 {
        return Err(fail(format!("PUT {url}: HTTP {}", response.status().as_u16())));
    }
    let token = response.body_mut().read_to_string().map_err(|e| fail(e.to_string()))?;
    let get = |path: &str| -> Result<String, AwsError> {
        let url = format!("{base}{path}");
        let mut response = agent
            .get(&url)
            .header("x-aws-ec2-metadata-token", token.trim())
            .call()
            .map_err(|e| fail(format!("GET {url}: {e}")))?;
        let status = response.status().as_u16();
        let body = response.body_mut().read_to_string().map_err(|e| fail(e.to_string()))?;
        if status != 200 {
            return Err(fail(format!("GET {url}: HTTP {status}")));
        }
        Ok(body)
    };
    let roles = get("/latest/meta-data/iam/security-credentials/")?;
    let role = roles
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .ok_or_else(|| fail("the instance has no instance profile (no role under iam/security-credentials/)".into()))?
        .to_owned();
    let body = get(&format!("/latest/meta-data/iam/security-credentials/{role}"))?;
    metadata_credentials(&body, &format!("instance metadata ({role})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ini_sections_are_found_with_their_keys() {
        let text = "[default]\naws_access_key_id = A\n\n[profile  etl]\n# c\nAWS_Secret_Access_Key=B\n[other]\nx=y\n";
        assert_eq!(ini_section(text, "default").unwrap()["aws_access_key_id"], "A");
        assert_eq!(ini_section(text, "profile etl").unwrap()["aws_secret_access_key"], "B");
        assert!(ini_section(text, "missing").is_none());
    }

    #[test]
    fn sts_answers_and_errors_are_read() {
        let ok = "<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>ASIA1</AccessKeyId>\
                  <SecretAccessKey>s&amp;k</SecretAccessKey><SessionToken>t</SessionToken>\
                  <Expiration>2026-12-07T13:00:00Z</Expiration></Credentials></AssumeRoleResult></AssumeRoleResponse>";
        let c = sts_credentials(200, ok, "role").unwrap();
        assert_eq!((c.access_key_id.as_str(), c.secret_access_key.expose()), ("ASIA1", "s&k"));
        assert_eq!(c.expires.unwrap().unix_timestamp(), 1_796_648_400);
        let denied =
            "<ErrorResponse><Error><Code>AccessDenied</Code><Message>not allowed</Message></Error></ErrorResponse>";
        let e = sts_credentials(403, denied, "role").unwrap_err().to_string();
        assert!(e.contains("AccessDenied") && e.contains("not allowed"), "{e}");
    }

    #[test]
    fn container_endpoints_over_http_are_only_the_local_ones() {
        for ok in [
            "http://169.254.170.2/v2/credentials/x",
            "http://169.254.170.23/v1/credentials",
            "http://[fd00:ec2::23]/v1/credentials",
            "http://127.0.0.1:8080/creds",
            "http://localhost/creds",
            "https://creds.example.com/x",
        ] {
            assert!(container_host_allowed(ok), "{ok}");
        }
        for not in ["http://creds.example.com/x", "http://10.0.0.1/creds", "ftp://127.0.0.1/x"] {
            assert!(!container_host_allowed(not), "{not}");
        }
    }

    #[test]
    fn china_regions_use_their_own_sts_domain() {
        let env = Environment::default();
        assert_eq!(sts_endpoint(&env, "cn-north-1"), "https://sts.cn-north-1.amazonaws.com.cn");
        assert_eq!(sts_endpoint(&env, "eu-west-1"), "https://sts.eu-west-1.amazonaws.com");
    }

    #[test]
    fn secrets_are_not_printed() {
        let c = Credentials::new("AKID", "very-secret", Some("tok".into()), "environment");
        let shown = format!("{c:?}");
        assert!(!shown.contains("very-secret") && !shown.contains("tok\""), "{shown}");
        let env = Environment::from_pairs([("AWS_SECRET_ACCESS_KEY", "very-secret")]);
        let shown = format!("{env:?}");
        assert!(shown.contains("AWS_SECRET_ACCESS_KEY") && !shown.contains("very-secret"), "{shown}");
    }
}
