//! `msk-token`: the MSK IAM token the binary would send, from the same credential chain, so that
//! an operator can debug an IAM setup without a broker.

use std::process::ExitCode;

use clap::Args;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// `msk-token` arguments.
#[derive(Debug, Args)]
pub struct MskTokenArgs {
    /// The cluster's AWS region (`source.kafka.auth.aws_msk_iam.region`).
    #[arg(long)]
    pub region: String,
    /// A role to assume over the chain's credentials (`aws_msk_iam.role_arn`).
    #[arg(long, value_name = "ARN")]
    pub role_arn: Option<String>,
    /// Sign at this time (RFC 3339, e.g. `2026-12-07T12:00:00Z`) instead of now: the same
    /// credentials and time give the same token, to compare with another signer.
    #[arg(long, value_name = "RFC3339")]
    pub at: Option<String>,
    /// Also print the signed URL inside the token, its expiry and where the credentials came from
    /// (on stderr; stdout keeps just the token).
    #[arg(long)]
    pub explain: bool,
    /// The `User-Agent` inside the token (default `etl-rs/<version>`, what the binary sends). It
    /// is not signed; set it to another signer's to compare tokens byte for byte.
    #[arg(long, value_name = "UA")]
    pub user_agent: Option<String>,
}

/// Prints the token on stdout. Exit 2 for a bad `--at`, 1 when no credentials could be had.
pub fn run(args: &MskTokenArgs) -> ExitCode {
    let at = match &args.at {
        None => OffsetDateTime::now_utc(),
        Some(text) => match OffsetDateTime::parse(text, &Rfc3339) {
            Ok(at) => at,
            Err(e) => {
                eprintln!("error: --at {text}: not an RFC 3339 time ({e}); e.g. 2026-12-07T12:00:00Z");
                return ExitCode::from(2);
            }
        },
    };
    let msk = etl_aws::MskIam::new(&args.region, args.role_arn.as_deref());
    let user_agent = args.user_agent.as_deref().unwrap_or(etl_aws::msk::USER_AGENT);
    match msk.credentials(OffsetDateTime::now_utc()) {
        Ok(credentials) => {
            let token = etl_aws::msk::token_with_agent(&credentials, msk.region(), at, user_agent);
            println!("{}", token.token);
            if args.explain {
                let expires = OffsetDateTime::from_unix_timestamp(token.expires_ms / 1000)
                    .ok()
                    .and_then(|t| t.format(&Rfc3339).ok())
                    .unwrap_or_default();
                eprintln!("credentials: {} (access key {})", token.source, token.access_key_id);
                eprintln!("expires: {expires} ({} ms)", token.expires_ms);
                eprintln!("url: {}", etl_aws::msk::decode(&token.token).unwrap_or_default());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
