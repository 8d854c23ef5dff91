//! The contracts the generator shares with the runtime, compiled here from the runtime's own
//! files: they depend on `std` alone, so the generator needs no dependency on etl-runtime and
//! the two sides cannot disagree. docs/ARCHITECTURE.md explains the choice.

/// The live table's columns against the pipeline's: the sink's start-up check and `gen --migrate`
/// compare them with the same code.
#[path = "../../etl-runtime/src/contract/columns.rs"]
#[allow(dead_code)]
pub(crate) mod columns;
/// The defaults both sides apply.
#[path = "../../etl-runtime/src/contract/defaults.rs"]
#[allow(dead_code)]
pub(crate) mod defaults;
/// What `source.kafka.auth.aws_msk_iam` owns and accepts (rule E0207).
#[path = "../../etl-runtime/src/contract/kafka_auth.rs"]
pub(crate) mod kafka_auth;
/// The librdkafka properties etl-rs owns (rule E0301).
#[path = "../../etl-runtime/src/contract/owned_properties.rs"]
pub(crate) mod owned_properties;
/// What is secret, so `--check`, logs and the generated README can never disagree about it.
#[path = "../../etl-runtime/src/secret.rs"]
#[allow(dead_code, unreachable_pub)]
pub(crate) mod secret;
