//! `etl-gen msk-token`: the token of the binary's credential chain, equal to the one AWS's
//! reference signer (`aws-msk-iam-sasl-signer-python`, from `cargo xtask infra reference-signer`)
//! makes from the same environment at the same time; and its exit codes.

use std::path::Path;
use std::process::{Command, Output};

/// The environment both signers see: session credentials, nothing else to find.
const CREDENTIALS: [(&str, &str); 6] = [
    ("AWS_ACCESS_KEY_ID", "ASIAXMSKTOKENTEST001"),
    ("AWS_SECRET_ACCESS_KEY", "Zm9v/YmFy+YmF6=cXV4"),
    ("AWS_SESSION_TOKEN", "FwoGZXIvYXdzEJr//////////wEaDEXAMPLE+session/token=="),
    ("AWS_CONFIG_FILE", "/nonexistent"),
    ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"),
    ("AWS_EC2_METADATA_DISABLED", "true"),
];

fn msk_token(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_etl-gen"))
        .arg("msk-token")
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn reference_python() -> String {
    let output = Command::new(env!("CARGO"))
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap())
        .args(["xtask", "infra", "reference-signer"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "cargo xtask infra reference-signer: {}", String::from_utf8_lossy(&output.stderr));
    stdout.lines().find_map(|l| l.strip_prefix("MSK_SIGNER_PYTHON=")).expect("MSK_SIGNER_PYTHON=").to_owned()
}

#[test]
fn the_printed_token_is_the_reference_signers() {
    let script = r#"
import datetime, sys
import botocore.auth
botocore.auth.get_current_datetime = lambda *a, **k: datetime.datetime(2026, 3, 1, 0, 0, 7)
from aws_msk_iam_sasl_signer import MSKAuthTokenProvider
import importlib.metadata
print(MSKAuthTokenProvider.generate_auth_token("us-west-2")[0])
print("aws-msk-iam-sasl-signer-python/" + importlib.metadata.version("aws-msk-iam-sasl-signer-python"))
"#;
    let reference =
        Command::new(reference_python()).args(["-c", script]).env_clear().envs(CREDENTIALS).output().unwrap();
    assert!(reference.status.success(), "{}", String::from_utf8_lossy(&reference.stderr));
    let lines: Vec<String> = String::from_utf8(reference.stdout).unwrap().lines().map(str::to_owned).collect();
    let ours =
        msk_token(&["--region", "us-west-2", "--at", "2026-03-01T00:00:07Z", "--user-agent", &lines[1]], &CREDENTIALS);
    assert!(ours.status.success(), "{}", String::from_utf8_lossy(&ours.stderr));
    assert_eq!(String::from_utf8(ours.stdout).unwrap().trim(), lines[0]);
    // `--explain` names the source and the expiry, and never the secret.
    let explained = msk_token(&["--region", "us-west-2", "--at", "2026-03-01T00:00:07Z", "--explain"], &CREDENTIALS);
    let stderr = String::from_utf8(explained.stderr).unwrap();
    assert!(stderr.contains("credentials: environment (access key ASIAXMSKTOKENTEST001)"), "{stderr}");
    assert!(stderr.contains("expires: 2026-03-01T00:15:07Z"), "{stderr}");
    assert!(!stderr.contains("Zm9v/YmFy"), "{stderr}");
}

#[test]
fn a_bad_time_exits_2_and_no_credentials_exits_1() {
    let bad = msk_token(&["--region", "eu-west-1", "--at", "yesterday"], &CREDENTIALS);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("RFC 3339"));
    let none = msk_token(&["--region", "eu-west-1"], &CREDENTIALS[3..]);
    assert_eq!(none.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&none.stderr);
    assert!(stderr.contains("no AWS credentials found") && stderr.contains("AWS_WEB_IDENTITY_TOKEN_FILE"), "{stderr}");
}
