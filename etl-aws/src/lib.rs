//! AWS for etl-rs: SigV4 signing, the standard credential chain, and the OAUTHBEARER token of
//! Amazon MSK's IAM authentication, shared by the runtime (librdkafka's refresh callback) and
//! `etl-gen msk-token` (the same token, printed for debugging).

pub mod credentials;
pub mod msk;
pub mod sigv4;

pub use credentials::{Credentials, Environment, Secret};
pub use msk::{MskIam, MskToken};

/// What can go wrong getting credentials or a token.
#[derive(Debug, thiserror::Error)]
pub enum AwsError {
    /// No provider of the chain is configured, and instance metadata did not answer.
    #[error("no AWS credentials found: {0}")]
    NoCredentials(String),
    /// A configured provider failed; it is named.
    #[error("AWS credentials from {provider}: {message}")]
    Provider { provider: String, message: String },
}
