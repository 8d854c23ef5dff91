//! E0303: a passthrough property that librdkafka itself rejects.

use super::Context;
use crate::contract::kafka_auth::{OIDC_REQUIRED, oidc_property, oidc_unsupported};
use crate::diag::{Diagnostic, Rule};
use crate::model::Source;

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0303",
    name: "rdkafka-property",
    summary: "a property in `source.kafka.rdkafka` that librdkafka's own parser rejects",
    doc: "Each passthrough property is set on a fresh librdkafka configuration at gen time, \
with the same librdkafka the binary links, so a misspelt name or an ill-typed value \
(`fetch.max.bytes: lots`, `auto.offset.reset: newest`) fails the build with librdkafka's \
own message instead of failing in production. A value that uses `${VAR}` is only known \
at run time: then only the property name is checked. librdkafka's CONFIGURATION.md lists \
the properties; this rule cannot see producer-only properties, which the consumer ignores \
with a warning. It also knows what this build's librdkafka lacks: the GSSAPI (Kerberos) \
SASL mechanism needs libsasl2, which is not linked; PLAIN and SCRAM-SHA-256/512 are built in, \
as is TLS (OpenSSL); a property this build does not support at all (librdkafka says so \
whatever the value) is refused even when its value is a `${VAR}`. OAUTHBEARER needs a token \
source: `source.kafka.auth.aws_msk_iam` (which sets the mechanism itself), or \
`sasl.oauthbearer.method: oidc` with `sasl.oauthbearer.client.id`, `sasl.oauthbearer.client.secret` \
and `sasl.oauthbearer.token.endpoint.url` (and optionally `sasl.oauthbearer.scope`), which the \
binary's own OIDC client takes (librdkafka's needs libcurl, which is not linked). That client \
does the client-credentials grant only: `sasl.oauthbearer.extensions`, other grant types and \
JWT assertions are refused.",
};

/// SASL mechanisms librdkafka only has with libsasl2 (Cyrus), which this build does not link.
const MISSING_MECHANISMS: &[&str] = &["GSSAPI"];

/// What librdkafka says about one property.
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "librdkafka"), allow(dead_code))]
pub(crate) enum Verdict {
    /// Accepted.
    Ok,
    /// The property does not exist.
    Unknown(String),
    /// The property exists but the value is invalid.
    Invalid(String),
}

/// Asks librdkafka whether it accepts `name = value`.
#[cfg(feature = "librdkafka")]
pub(crate) fn librdkafka_verdict(name: &str, value: &str) -> Verdict {
    use rdkafka::ClientConfig;
    use rdkafka::error::KafkaError;
    use rdkafka::types::RDKafkaConfRes;

    let mut config = ClientConfig::new();
    config.set(name, value);
    match config.create_native_config() {
        Ok(_) => Verdict::Ok,
        Err(KafkaError::ClientConfig(RDKafkaConfRes::RD_KAFKA_CONF_UNKNOWN, message, ..)) => Verdict::Unknown(message),
        Err(KafkaError::ClientConfig(_, message, ..)) => Verdict::Invalid(message),
        Err(other) => Verdict::Invalid(other.to_string()),
    }
}

/// Without librdkafka linked, every property is accepted (the binary checks at startup).
#[cfg(not(feature = "librdkafka"))]
pub(crate) fn librdkafka_verdict(_name: &str, _value: &str) -> Verdict {
    Verdict::Ok
}

/// Reports each passthrough property that librdkafka rejects by name or value (the owned ones
/// are E0301's) and a SASL mechanism this build's librdkafka lacks; of a `${VAR}` value only the
/// name can be checked.
pub(crate) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let Source::Kafka(kafka) = &cx.model.source else { return };
    // `sasl.oauthbearer.method` is oidc, or may be (a `${VAR}`).
    let method = kafka.rdkafka.get("sasl.oauthbearer.method");
    let oidc = method.is_some_and(|m| m.template().is_some() || m.to_text().trim().eq_ignore_ascii_case("oidc"));
    let oidc_literal =
        method.is_some_and(|m| m.template().is_none() && m.to_text().trim().eq_ignore_ascii_case("oidc"));
    for (name, value) in &kafka.rdkafka {
        // Owned properties get their own, clearer diagnostic.
        if crate::contract::owned_properties::lookup(name).is_some() {
            continue;
        }
        let path = format!("source.kafka.rdkafka.{name}");
        let templated = value.template().is_some();
        // The OIDC properties the binary's own client takes never reach librdkafka.
        if oidc_property(name).is_some() {
            let text = value.to_text();
            if name == "sasl.oauthbearer.method" && !templated {
                if !matches!(text.trim().to_ascii_lowercase().as_str(), "default" | "oidc") {
                    out.push(
                        Diagnostic::error(&RULE, &path, format!("`sasl.oauthbearer.method: {text}` is not a method"))
                            .on_value()
                            .help("use `oidc` (a token endpoint with client credentials) or `default`"),
                    );
                }
            } else if !oidc && name != "sasl.oauthbearer.method" {
                out.push(
                    Diagnostic::error(
                        &RULE,
                        &path,
                        format!("`{name}` is used only with `sasl.oauthbearer.method: oidc`"),
                    )
                    .help("add `sasl.oauthbearer.method: oidc`, or remove it"),
                );
            }
            continue;
        }
        if oidc && let Some(why) = oidc_unsupported(name, &value.to_text()) {
            out.push(
                Diagnostic::error(&RULE, &path, format!("`{name}` is not supported with OIDC"))
                    .note(why)
                    .help("remove it; the binary's OIDC client sends the client credentials grant"),
            );
            continue;
        }
        if matches!(name.as_str(), "sasl.mechanism" | "sasl.mechanisms")
            && !templated
            && MISSING_MECHANISMS.iter().any(|m| value.to_text().trim().eq_ignore_ascii_case(m))
        {
            out.push(
                Diagnostic::error(
                    &RULE,
                    &path,
                    format!("this build's librdkafka has no `{}` provider", value.to_text()),
                )
                .on_value()
                .note("Kerberos (GSSAPI) needs libsasl2, which etl-rs does not link into its static binaries")
                .help("use SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN (over TLS), or `source.kafka.auth.aws_msk_iam`"),
            );
            continue;
        }
        if matches!(name.as_str(), "sasl.mechanism" | "sasl.mechanisms")
            && !templated
            && kafka.auth.is_none()
            && !oidc
            && value.to_text().trim().eq_ignore_ascii_case("OAUTHBEARER")
        {
            out.push(
                Diagnostic::error(&RULE, &path, "OAUTHBEARER without a token source")
                    .on_value()
                    .note(
                        "the binary makes OAUTHBEARER tokens for `source.kafka.auth.aws_msk_iam` and for \
                         `sasl.oauthbearer.method: oidc`",
                    )
                    .help(
                        "for Amazon MSK, remove `sasl.mechanism` and set `source.kafka.auth.aws_msk_iam.region`; for \
                         an OIDC provider, add `sasl.oauthbearer.method: oidc` with its client id, secret and token \
                         endpoint",
                    ),
            );
            continue;
        }
        // For a value read from the environment only the name can be checked; a value
        // that every string-typed property accepts is used to ask about the name.
        let probe = if templated { String::new() } else { value.to_text() };
        match librdkafka_verdict(name, &probe) {
            Verdict::Ok => {}
            Verdict::Unknown(message) => out.push(
                Diagnostic::error(&RULE, &path, format!("librdkafka does not know the property `{name}`"))
                    .note(format!("librdkafka: {message}"))
                    .help("check the spelling against librdkafka's CONFIGURATION.md"),
            ),
            // Whatever the value: the property is compiled out of this librdkafka.
            Verdict::Invalid(message)
                if templated
                    && (message.contains("not supported in this build") || message.contains("not settable")) =>
            {
                out.push(
                    Diagnostic::error(&RULE, &path, format!("this build's librdkafka does not support `{name}`"))
                        .note(format!("librdkafka: {message}"))
                        .help("remove it; docs/operations.md (TLS and SASL) lists what the binary supports"),
                )
            }
            Verdict::Invalid(_) if templated => {}
            Verdict::Invalid(message) => out.push(
                Diagnostic::error(&RULE, &path, format!("librdkafka rejects `{name}: {}`", value.to_text()))
                    .on_value()
                    .note(format!("librdkafka: {message}"))
                    .help("use a value of the type librdkafka's CONFIGURATION.md gives for this property"),
            ),
        }
    }
    if oidc_literal {
        let path = "source.kafka.rdkafka.sasl.oauthbearer.method";
        for required in OIDC_REQUIRED {
            if !kafka.rdkafka.keys().any(|k| oidc_property(k) == Some(*required)) {
                out.push(
                    Diagnostic::error(&RULE, path, format!("`sasl.oauthbearer.method: oidc` needs `{required}`"))
                        .help(format!("add `{required}:` under `source.kafka.rdkafka` (a `${{VAR}}` for a secret)")),
                );
            }
        }
        let mechanism = kafka.rdkafka.iter().find(|(k, _)| matches!(k.as_str(), "sasl.mechanism" | "sasl.mechanisms"));
        if !mechanism
            .is_some_and(|(_, v)| v.template().is_some() || v.to_text().trim().eq_ignore_ascii_case("OAUTHBEARER"))
        {
            out.push(
                Diagnostic::error(&RULE, path, "`sasl.oauthbearer.method: oidc` needs `sasl.mechanism: OAUTHBEARER`")
                    .help("add `sasl.mechanism: OAUTHBEARER` (and `security.protocol: SASL_SSL`)"),
            );
        }
    }
}

#[cfg(all(test, feature = "librdkafka"))]
mod tests {
    use super::*;

    #[test]
    fn asks_librdkafka() {
        assert_eq!(librdkafka_verdict("fetch.wait.max.ms", "100"), Verdict::Ok);
        assert!(matches!(librdkafka_verdict("fetch.wait.max.msec", "100"), Verdict::Unknown(_)));
        assert!(matches!(librdkafka_verdict("fetch.wait.max.ms", "soon"), Verdict::Invalid(_)));
        assert!(matches!(librdkafka_verdict("auto.offset.reset", "newest"), Verdict::Invalid(_)));
    }
}
