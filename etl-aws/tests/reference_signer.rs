//! The MSK IAM token and the STS request signature, byte for byte against AWS's own reference
//! signer (`aws-msk-iam-sasl-signer-python` over botocore), for fixed credentials and times. The
//! venv comes from `cargo xtask infra reference-signer` (installed on first use).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use etl_aws::Credentials;
use etl_aws::msk::{self, token_with_agent};
use etl_aws::sigv4::{self, Scope};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The reference, run with the credentials in its environment and the signing time fixed.
const REFERENCE: &str = r#"
import sys, datetime
import botocore.auth
at = datetime.datetime.strptime(sys.argv[2], "%Y-%m-%dT%H:%M:%SZ")
botocore.auth.get_current_datetime = lambda *a, **k: at
if sys.argv[1] == "token":
    from aws_msk_iam_sasl_signer import MSKAuthTokenProvider
    token, expiry_ms = MSKAuthTokenProvider.generate_auth_token(sys.argv[3])
    print(token)
    print(expiry_ms)
else:
    import os
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    region, host, body = sys.argv[3], sys.argv[4], sys.argv[5]
    request = AWSRequest(method="POST", url=f"https://{host}/", data=body.encode(),
                         headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"})
    credentials = Credentials(os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"],
                              os.environ.get("AWS_SESSION_TOKEN"))
    SigV4Auth(credentials, "sts", region).add_auth(request)
    print(request.headers["Authorization"])
"#;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("etl-aws sits in the workspace").to_owned()
}

/// The reference signer's python, installed by the project's own command.
fn python() -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let output = Command::new(env!("CARGO"))
            .current_dir(workspace_root())
            .args(["xtask", "infra", "reference-signer"])
            .output()
            .expect("running cargo xtask infra reference-signer");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "cargo xtask infra reference-signer failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
            .lines()
            .find_map(|l| l.strip_prefix("MSK_SIGNER_PYTHON="))
            .unwrap_or_else(|| panic!("no MSK_SIGNER_PYTHON= in:\n{stdout}"))
            .to_owned()
    })
}

fn reference(credentials: &Credentials, args: &[&str]) -> Vec<String> {
    let mut command = Command::new(python());
    command
        .arg("-c")
        .arg(REFERENCE)
        .args(args)
        .env_clear()
        .env("AWS_ACCESS_KEY_ID", &credentials.access_key_id)
        .env("AWS_SECRET_ACCESS_KEY", credentials.secret_access_key.expose())
        // No shared files or metadata service behind the environment's credentials.
        .env("AWS_CONFIG_FILE", "/nonexistent")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        .env("AWS_EC2_METADATA_DISABLED", "true");
    if let Some(token) = &credentials.session_token {
        command.env("AWS_SESSION_TOKEN", token.expose());
    }
    let output = command.output().expect("running the reference signer");
    assert!(output.status.success(), "the reference signer failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("UTF-8").lines().map(str::to_owned).collect()
}

/// Long-term and session credentials, secrets with the characters that need encoding, regions of
/// several partitions' shapes, and times across a day and a year boundary.
fn cases() -> Vec<(Credentials, &'static str, &'static str)> {
    vec![
        (
            Credentials::new("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", None, "t"),
            "us-east-1",
            "2026-12-07T12:00:00Z",
        ),
        (
            Credentials::new(
                "ASIAQEXAMPLE1234ABCD",
                "s3cr3t+with/slashes=and+plus",
                Some("IQoJb3JpZ2luX2VjEJr//////////wEaCWV1LXdlc3QtMSJHMEUCIQD+token/with+all=the==chars".to_owned()),
                "t",
            ),
            "eu-west-1",
            "2026-12-31T23:59:59Z",
        ),
        (Credentials::new("AKID", "k", Some("short".to_owned()), "t"), "ap-southeast-2", "2027-01-01T00:00:00Z"),
        (
            Credentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None, "t"),
            "cn-north-1",
            "2024-02-29T08:30:15Z",
        ),
    ]
}

#[test]
fn msk_tokens_equal_the_reference_signers() {
    for (credentials, region, at) in cases() {
        let lines = reference(&credentials, &["token", at, region]);
        let (reference_token, reference_expiry) = (&lines[0], &lines[1]);
        let reference_url = msk::decode(reference_token).expect("the reference token is base64url");
        // Its user agent names the library and its version; ours names etl-rs. With the
        // reference's user agent, ours is the same token, byte for byte.
        let agent =
            reference_url.rsplit_once("&User-Agent=").map(|(_, ua)| ua.replace("%2F", "/")).expect("a user agent");
        let at_time = OffsetDateTime::parse(at, &Rfc3339).unwrap();
        let ours = token_with_agent(&credentials, region, at_time, &agent);
        assert_eq!(
            &ours.token,
            reference_token,
            "token for {region} at {at}\nours: {}\nreference: {reference_url}",
            msk::decode(&ours.token).unwrap()
        );
        assert_eq!(ours.expires_ms.to_string(), *reference_expiry, "expiry for {region} at {at}");
        // And with our own user agent, everything before it is the same.
        let own = msk::decode(&msk::token_with(&credentials, region, at_time).token).unwrap();
        assert_eq!(own.rsplit_once("&User-Agent=").unwrap().0, reference_url.rsplit_once("&User-Agent=").unwrap().0);
    }
}

#[test]
fn signed_sts_posts_carry_the_reference_signers_authorization() {
    let body = "Action=AssumeRole&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fetl&RoleSessionName=etl-rs-msk";
    for (credentials, region, at) in cases() {
        let host = format!("sts.{region}.amazonaws.com");
        let expected = reference(&credentials, &["post", at, region, &host, body]);
        let headers = sigv4::sign_form_post(
            &host,
            body,
            &credentials,
            Scope { region, service: "sts" },
            OffsetDateTime::parse(at, &Rfc3339).unwrap(),
        );
        let authorization = headers.iter().find(|(k, _)| *k == "authorization").map(|(_, v)| v.as_str());
        assert_eq!(authorization, Some(expected[0].as_str()), "STS signature for {region} at {at}");
    }
}
