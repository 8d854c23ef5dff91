//! The credential chain against local stubs of the services it calls: STS (web identity and
//! assumed roles), the container endpoint and the instance metadata service (IMDSv2). Each test
//! gives the chain an environment of its own; nothing reads the process's.

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use etl_aws::credentials::resolve;
use etl_aws::{AwsError, Environment, MskIam, msk};
use time::OffsetDateTime;

/// One request a stub received.
#[derive(Debug, Clone)]
struct Request {
    method: String,
    path: String,
    headers: HashMap<String, String>,
    body: String,
}

/// A local HTTP server that answers each request with `answer(request)` = (status, body) and
/// keeps what it received.
struct Stub {
    url: String,
    received: Arc<Mutex<Vec<Request>>>,
}

impl Stub {
    fn start(answer: impl Fn(&Request) -> (u16, String) + Send + 'static) -> Stub {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = received.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let mut parts = line.split_whitespace();
                let (method, path) =
                    (parts.next().unwrap_or_default().to_owned(), parts.next().unwrap_or_default().to_owned());
                let mut headers = HashMap::new();
                loop {
                    let mut header = String::new();
                    reader.read_line(&mut header).unwrap();
                    let header = header.trim_end();
                    if header.is_empty() {
                        break;
                    }
                    let (k, v) = header.split_once(':').unwrap();
                    headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
                }
                let length = headers.get("content-length").and_then(|l| l.parse().ok()).unwrap_or(0);
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                let request = Request { method, path, headers, body: String::from_utf8(body).unwrap() };
                let (status, body) = answer(&request);
                log.lock().unwrap().push(request);
                write!(
                    stream,
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .unwrap();
            }
        });
        Stub { url, received }
    }

    fn requests(&self) -> Vec<Request> {
        self.received.lock().unwrap().clone()
    }
}

fn sts_answer(action: &str, key: &str) -> String {
    format!(
        "<{action}Response><{action}Result><Credentials><AccessKeyId>{key}</AccessKeyId>\
         <SecretAccessKey>secret-of-{key}</SecretAccessKey><SessionToken>session-of-{key}</SessionToken>\
         <Expiration>2099-01-01T00:00:00Z</Expiration></Credentials></{action}Result></{action}Response>"
    )
}

const NO_METADATA: [(&str, &str); 3] = [
    ("AWS_EC2_METADATA_DISABLED", "true"),
    ("AWS_CONFIG_FILE", "/nonexistent"),
    ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"),
];

fn env(pairs: &[(&str, &str)]) -> Environment {
    Environment::from_pairs(NO_METADATA.iter().copied().chain(pairs.iter().copied()))
}

#[test]
fn environment_credentials_come_first_and_a_half_set_is_an_error() {
    let c = resolve(
        &env(&[
            ("AWS_ACCESS_KEY_ID", "AKENV"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("AWS_SESSION_TOKEN", "t"),
            ("AWS_ROLE_ARN", "arn:x"),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/x"),
        ]),
        "eu-west-1",
    )
    .unwrap();
    assert_eq!((c.access_key_id.as_str(), c.source.as_str()), ("AKENV", "environment"));
    assert_eq!(c.session_token.unwrap().expose(), "t");
    let error = resolve(&env(&[("AWS_ACCESS_KEY_ID", "AKENV")]), "eu-west-1").unwrap_err().to_string();
    assert!(error.contains("AWS_SECRET_ACCESS_KEY"), "{error}");
}

#[test]
fn profiles_are_read_from_the_credentials_and_config_files() {
    let dir = tempfile::tempdir().unwrap();
    let credentials = dir.path().join("credentials");
    let config = dir.path().join("config");
    std::fs::write(&credentials, "[default]\naws_access_key_id = AKDEFAULT\naws_secret_access_key = s1\n\n[etl]\naws_access_key_id=AKETL\naws_secret_access_key=s2\naws_session_token=t2\n").unwrap();
    std::fs::write(&config, "[profile fromconfig]\naws_access_key_id = AKCONFIG\naws_secret_access_key = s3\n[profile role]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = default\n").unwrap();
    let files = [
        ("AWS_SHARED_CREDENTIALS_FILE", credentials.to_str().unwrap()),
        ("AWS_CONFIG_FILE", config.to_str().unwrap()),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ];
    let with = |profile: Option<&str>| {
        let mut pairs = files.to_vec();
        if let Some(p) = profile {
            pairs.push(("AWS_PROFILE", p));
        }
        resolve(&Environment::from_pairs(pairs), "eu-west-1")
    };
    assert_eq!(with(None).unwrap().access_key_id, "AKDEFAULT");
    let etl = with(Some("etl")).unwrap();
    assert_eq!((etl.access_key_id.as_str(), etl.source.as_str()), ("AKETL", "profile etl"));
    assert_eq!(etl.session_token.unwrap().expose(), "t2");
    assert_eq!(with(Some("fromconfig")).unwrap().access_key_id, "AKCONFIG");
    let role = with(Some("role")).unwrap_err().to_string();
    assert!(role.contains("role_arn") && role.contains("profile role"), "{role}");
    let missing = with(Some("nope")).unwrap_err().to_string();
    assert!(missing.contains("AWS_PROFILE"), "{missing}");
}

#[test]
fn web_identity_exchanges_the_token_file_at_sts() {
    let stub = Stub::start(|r| {
        if r.body.contains("Action=AssumeRoleWithWebIdentity") {
            (200, sts_answer("AssumeRoleWithWebIdentity", "ASIAWEB"))
        } else {
            (400, String::new())
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "eyJhbGciOi.projected.jwt\n").unwrap();
    let c = resolve(
        &env(&[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", token_file.to_str().unwrap()),
            ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/etl"),
            ("AWS_ROLE_SESSION_NAME", "pod-1"),
            ("AWS_ENDPOINT_URL_STS", &stub.url),
        ]),
        "eu-west-1",
    )
    .unwrap();
    assert_eq!(c.access_key_id, "ASIAWEB");
    assert_eq!(c.session_token.unwrap().expose(), "session-of-ASIAWEB");
    assert_eq!(c.expires.unwrap().year(), 2099);
    let requests = stub.requests();
    assert_eq!(requests.len(), 1);
    let body = &requests[0].body;
    assert_eq!(requests[0].method, "POST");
    for part in [
        "RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fetl",
        "RoleSessionName=pod-1",
        "WebIdentityToken=eyJhbGciOi.projected.jwt",
        "Version=2011-06-15",
    ] {
        assert!(body.contains(part), "{part} missing from {body}");
    }
    assert!(!requests[0].headers.contains_key("authorization"), "AssumeRoleWithWebIdentity is not signed");
}

#[test]
fn the_container_endpoint_is_asked_with_its_authorization_token() {
    let stub = Stub::start(|r| {
        if r.headers.get("authorization").map(String::as_str) == Some("pod-identity-token") {
            (
                200,
                r#"{"AccessKeyId":"ASIAPOD","SecretAccessKey":"s","Token":"t","Expiration":"2099-01-01T00:00:00Z"}"#
                    .to_owned(),
            )
        } else {
            (401, "{}".to_owned())
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("eks-pod-identity-token");
    std::fs::write(&token_file, "pod-identity-token\n").unwrap();
    let full = format!("{}/v1/credentials", stub.url);
    let c = resolve(
        &env(&[
            ("AWS_CONTAINER_CREDENTIALS_FULL_URI", &full),
            ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", token_file.to_str().unwrap()),
        ]),
        "eu-west-1",
    )
    .unwrap();
    assert_eq!((c.access_key_id.as_str(), c.source.as_str()), ("ASIAPOD", "container endpoint"));
    assert_eq!(stub.requests()[0].path, "/v1/credentials");
    // A wrong token is refused by the endpoint, and the error says so.
    let error = resolve(
        &env(&[("AWS_CONTAINER_CREDENTIALS_FULL_URI", &full), ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "wrong")]),
        "eu-west-1",
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("container endpoint") && error.contains("401"), "{error}");
}

#[test]
fn instance_metadata_is_read_with_an_imdsv2_session_token() {
    let stub = Stub::start(|r| {
        let session = r.headers.get("x-aws-ec2-metadata-token").map(String::as_str) == Some("imds-session");
        match (r.method.as_str(), r.path.as_str()) {
            ("PUT", "/latest/api/token") if r.headers.contains_key("x-aws-ec2-metadata-token-ttl-seconds") => (200, "imds-session".to_owned()),
            ("GET", "/latest/meta-data/iam/security-credentials/") if session => (200, "etl-instance-role\n".to_owned()),
            ("GET", "/latest/meta-data/iam/security-credentials/etl-instance-role") if session => (
                200,
                r#"{"Code":"Success","Type":"AWS-HMAC","AccessKeyId":"ASIAEC2","SecretAccessKey":"s","Token":"t","Expiration":"2099-01-01T00:00:00Z"}"#.to_owned(),
            ),
            _ => (401, String::new()),
        }
    });
    let c = resolve(
        &Environment::from_pairs([
            ("AWS_EC2_METADATA_SERVICE_ENDPOINT", stub.url.as_str()),
            ("AWS_CONFIG_FILE", "/nonexistent"),
            ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"),
        ]),
        "eu-west-1",
    )
    .unwrap();
    assert_eq!((c.access_key_id.as_str(), c.source.as_str()), ("ASIAEC2", "instance metadata (etl-instance-role)"));
    assert_eq!(stub.requests().len(), 3);
}

#[test]
fn no_source_at_all_is_an_error_that_names_every_place_looked() {
    let error = resolve(&env(&[]), "eu-west-1").unwrap_err();
    assert!(matches!(error, AwsError::NoCredentials(_)));
    let text = error.to_string();
    for place in [
        "AWS_ACCESS_KEY_ID",
        "~/.aws/credentials",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS",
        "AWS_EC2_METADATA_DISABLED",
    ] {
        assert!(text.contains(place), "{place} missing from: {text}");
    }
}

#[test]
fn a_role_is_assumed_with_signed_sts_calls_and_its_credentials_cached_until_near_expiry() {
    let stub = Stub::start(|r| {
        if r.body.contains("Action=AssumeRole&")
            && r.headers.get("authorization").is_some_and(|a| a.starts_with("AWS4-HMAC-SHA256 Credential=AKBASE/"))
        {
            (200, sts_answer("AssumeRole", "ASIAROLE"))
        } else {
            (403, "<ErrorResponse><Error><Code>AccessDenied</Code><Message>denied by the stub</Message></Error></ErrorResponse>".to_owned())
        }
    });
    let msk = MskIam::with_environment(
        "eu-west-1",
        Some("arn:aws:iam::123456789012:role/msk-writer"),
        env(&[("AWS_ACCESS_KEY_ID", "AKBASE"), ("AWS_SECRET_ACCESS_KEY", "s"), ("AWS_ENDPOINT_URL_STS", &stub.url)]),
    );
    let at = OffsetDateTime::now_utc();
    let token = msk.token(at).unwrap();
    let url = msk::decode(&token.token).unwrap();
    assert!(url.contains("X-Amz-Credential=ASIAROLE%2F"), "{url}");
    assert!(url.contains("X-Amz-Security-Token=session-of-ASIAROLE"), "{url}");
    assert_eq!(token.access_key_id, "ASIAROLE");
    assert!(token.source.contains("msk-writer") && token.source.contains("environment"), "{}", token.source);
    let request = &stub.requests()[0];
    assert!(request.headers["authorization"].contains("/eu-west-1/sts/aws4_request"), "{:?}", request.headers);
    assert!(request.headers.contains_key("x-amz-date"));
    // The next refresh signs with the cached role credentials: STS is not asked again.
    msk.token(at).unwrap();
    assert_eq!(stub.requests().len(), 1);
    // A role STS refuses: the error carries STS's code and message.
    let refused = MskIam::with_environment(
        "eu-west-1",
        Some("arn:aws:iam::123456789012:role/other"),
        env(&[("AWS_ACCESS_KEY_ID", "AKOTHER"), ("AWS_SECRET_ACCESS_KEY", "s"), ("AWS_ENDPOINT_URL_STS", &stub.url)]),
    );
    let error = refused.token(at).unwrap_err().to_string();
    assert!(
        error.contains("AccessDenied") && error.contains("denied by the stub") && error.contains("role/other"),
        "{error}"
    );
}

#[test]
fn a_half_configured_source_is_an_error_not_a_fall_through() {
    // Each would otherwise go on to another source, as far as the node's instance role.
    let cases: [(&[(&str, &str)], &str); 3] = [
        (&[("AWS_SECRET_ACCESS_KEY", "s")], "AWS_ACCESS_KEY_ID is not"),
        (&[("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/secrets/token")], "AWS_ROLE_ARN is not"),
        (&[("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://creds.example.com/v1")], "use https"),
    ];
    for (pairs, expected) in cases {
        let error = resolve(&env(pairs), "eu-west-1").unwrap_err().to_string();
        assert!(error.contains(expected), "{pairs:?}: {error}");
    }
    // A credentials file that is there and cannot be read (a directory here).
    let dir = tempfile::tempdir().unwrap();
    let error = resolve(
        &Environment::from_pairs([
            ("AWS_SHARED_CREDENTIALS_FILE", dir.path().to_str().unwrap()),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ]),
        "eu-west-1",
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("profile default") && error.contains("reading"), "{error}");
}
