//! E0207: `source.kafka.auth.aws_msk_iam` owns the connection's security properties, and its
//! region and role must be well formed.

use super::Context;
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

/// Whether the passthrough property `key` contradicts `aws_msk_iam`.
fn conflicts(key: &str) -> bool {
    matches!(key, "security.protocol" | "sasl.mechanism" | "sasl.mechanisms" | "sasl.username" | "sasl.password")
        || key.starts_with("sasl.oauthbearer.")
        || key.starts_with("sasl.kerberos.")
}

/// `eu-west-1`, `us-gov-west-1`, `cn-north-1`, `ap-southeast-2`.
pub(crate) fn is_region(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    parts.len() >= 3
        && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()))
        && parts[0].len() == 2
        && parts[0].bytes().all(|b| b.is_ascii_lowercase())
        && parts.last().is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))
}

/// `arn:<partition>:iam::<12 digits>:role/<path and name>`.
pub(crate) fn is_role_arn(text: &str) -> bool {
    let fields: Vec<&str> = text.splitn(6, ':').collect();
    matches!(fields.as_slice(), ["arn", partition, "iam", "", account, resource]
        if partition.starts_with("aws")
            && account.len() == 12
            && account.bytes().all(|b| b.is_ascii_digit())
            && resource.strip_prefix("role/").is_some_and(|name| !name.is_empty()))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_and_role_arns_are_recognized() {
        for region in ["eu-west-1", "us-gov-west-1", "cn-north-1", "ap-southeast-2"] {
            assert!(is_region(region), "{region}");
        }
        for not in ["eu-west", "EU-WEST-1", "euwest1", "kafka.eu-west-1", "e-west-1", ""] {
            assert!(!is_region(not), "{not}");
        }
        assert!(is_role_arn("arn:aws:iam::123456789012:role/msk-writer"));
        assert!(is_role_arn("arn:aws-cn:iam::123456789012:role/path/to/r"));
        for not in
            ["arn:aws:iam::123:role/x", "arn:aws:iam::123456789012:user/x", "arn:aws:iam::123456789012:role/", "role/x"]
        {
            assert!(!is_role_arn(not), "{not}");
        }
    }
}
