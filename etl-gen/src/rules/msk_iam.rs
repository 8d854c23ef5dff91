//! E0207: `source.kafka.auth.aws_msk_iam` owns the connection's security properties, and its
//! region and role must be well formed.

use super::Context;
use crate::contract::kafka_auth::{conflicts, is_region, is_role_arn};
use crate::diag::{Diagnostic, Rule};
use crate::model::Source;

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0207",
    name: "msk-iam-auth",
    summary: "`source.kafka.auth.aws_msk_iam` beside `rdkafka:` security properties, or with a malformed \
region or role",
    doc: "With `source.kafka.auth.aws_msk_iam` the binary connects to Amazon MSK's IAM listener itself: \
it sets `security.protocol: SASL_SSL` and `sasl.mechanism: OAUTHBEARER` and makes the OAUTHBEARER \
tokens from the AWS credential chain. A `source.kafka.rdkafka` property that chooses the protocol, \
the SASL mechanism or other SASL credentials (`security.protocol`, `sasl.mechanism`, \
`sasl.mechanisms`, `sasl.username`, `sasl.password`, `sasl.oauthbearer.*`, `sasl.kerberos.*`) would \
contradict it, so it is refused; TLS properties (`ssl.*`) stay allowed. A literal `region` must look \
like an AWS region (`eu-west-1`), a literal `role_arn` like an IAM role ARN \
(`arn:aws:iam::123456789012:role/name`); `${VAR}` values are checked when the binary starts.",
};

/// Reports conflicting passthrough properties and a malformed literal region or role.
pub(crate) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let Source::Kafka(kafka) = &cx.model.source else { return };
    let Some(auth) = &kafka.auth else { return };
    let msk = &auth.aws_msk_iam;
    for key in kafka.rdkafka.keys().filter(|k| conflicts(k)) {
        out.push(
            Diagnostic::error(
                &RULE,
                format!("source.kafka.rdkafka.{key}"),
                format!("`{key}` conflicts with `source.kafka.auth.aws_msk_iam`"),
            )
            .note("aws_msk_iam sets security.protocol=SASL_SSL and sasl.mechanism=OAUTHBEARER, and makes the tokens")
            .help(format!("remove `{key}` from `source.kafka.rdkafka`, or remove `source.kafka.auth`")),
        );
    }
    if msk.region.is_literal() && !is_region(msk.region.as_str()) {
        out.push(
            Diagnostic::error(
                &RULE,
                "source.kafka.auth.aws_msk_iam.region",
                format!("`{}` is not an AWS region", msk.region.as_str()),
            )
            .help("give the cluster's region, e.g. `eu-west-1` (the `arn:aws:kafka:<region>:…` of the cluster)"),
        );
    }
    if let Some(role) = msk.role_arn.as_ref().filter(|r| r.is_literal() && !is_role_arn(r.as_str())) {
        out.push(
            Diagnostic::error(
                &RULE,
                "source.kafka.auth.aws_msk_iam.role_arn",
                format!("`{}` is not an IAM role ARN", role.as_str()),
            )
            .help("e.g. `arn:aws:iam::123456789012:role/msk-writer`, or remove `role_arn` to sign as the chain's identity"),
        );
    }
}
