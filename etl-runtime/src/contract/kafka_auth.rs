//! The checks of the authentication etl-rs does itself, shared with etl-gen (rules E0207 and
//! E0303): which passthrough properties `source.kafka.auth.aws_msk_iam` owns, what a region and a
//! role ARN look like, and which `sasl.oauthbearer.*` properties its OIDC client takes. `gen`
//! checks literals; the runtime checks the values `${VAR}`s resolve to.

/// Whether the passthrough property `key` contradicts `aws_msk_iam`, which sets the protocol and
/// the SASL mechanism and makes the credentials itself (`ssl.*` stays the user's).
pub(crate) fn conflicts(key: &str) -> bool {
    matches!(key, "security.protocol" | "sasl.mechanism" | "sasl.mechanisms" | "sasl.username" | "sasl.password")
        || key.starts_with("sasl.oauthbearer.")
        || key.starts_with("sasl.kerberos.")
}

/// The passthrough properties of `sasl.oauthbearer.method: oidc` that the runtime's own OIDC
/// client takes (librdkafka's needs libcurl, which is not linked): they never reach librdkafka.
/// Each with the canonical name it stands for.
pub(crate) const OIDC_PROPERTIES: &[(&str, &str)] = &[
    ("sasl.oauthbearer.method", "sasl.oauthbearer.method"),
    ("sasl.oauthbearer.client.id", "sasl.oauthbearer.client.id"),
    ("sasl.oauthbearer.client.credentials.client.id", "sasl.oauthbearer.client.id"),
    ("sasl.oauthbearer.client.secret", "sasl.oauthbearer.client.secret"),
    ("sasl.oauthbearer.client.credentials.client.secret", "sasl.oauthbearer.client.secret"),
    ("sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.token.endpoint.url"),
    ("sasl.oauthbearer.scope", "sasl.oauthbearer.scope"),
    // Only `client_credentials` gets this far (`oidc_unsupported` refuses the others).
    ("sasl.oauthbearer.grant.type", "sasl.oauthbearer.grant.type"),
];

/// The properties OIDC needs besides the method.
pub(crate) const OIDC_REQUIRED: &[&str] =
    &["sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret", "sasl.oauthbearer.token.endpoint.url"];

/// What of librdkafka's OIDC the runtime's client does not do, with why: refused rather than
/// ignored, since a broker would then refuse the token for a reason nobody could see.
pub(crate) fn oidc_unsupported(key: &str, value: &str) -> Option<&'static str> {
    if key == "sasl.oauthbearer.extensions" {
        return Some(
            "SASL extensions (e.g. Confluent Cloud's logicalCluster and identityPoolId) cannot be set through rdkafka's token callback",
        );
    }
    if key == "sasl.oauthbearer.grant.type" && !value.trim().eq_ignore_ascii_case("client_credentials") {
        return Some("only the client_credentials grant is supported");
    }
    if key.starts_with("sasl.oauthbearer.assertion.") {
        return Some("JWT-bearer assertions are not supported; use client_credentials");
    }
    None
}

/// The canonical OIDC property `key` stands for, if it is one the runtime's client takes.
pub(crate) fn oidc_property(key: &str) -> Option<&'static str> {
    OIDC_PROPERTIES.iter().find(|(name, _)| *name == key).map(|(_, canonical)| *canonical)
}

/// `eu-west-1`, `us-gov-west-1`, `cn-north-1`, `ap-southeast-2`: lower-case words joined by `-`,
/// two letters first, a number last.
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

    #[test]
    fn the_protocol_and_sasl_are_owned_and_tls_is_not() {
        for key in ["security.protocol", "sasl.mechanisms", "sasl.oauthbearer.method", "sasl.kerberos.keytab"] {
            assert!(conflicts(key), "{key}");
        }
        assert!(!conflicts("ssl.ca.location") && !conflicts("client.id"));
    }
}
