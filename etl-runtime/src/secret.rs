//! The one definition of what is secret: which settings' values are never shown, and how a URL is
//! shown without its credentials.
//!
//! Everything that prints a value the user configured goes through here: the generated binary's
//! `--check`, the runtime's logs and error messages, the metric labels, and the README the
//! generator writes. The generator compiles this same file (it has no dependencies beyond `std`,
//! see docs/ARCHITECTURE.md), so the two can never disagree again.

/// The mask that stands in for a secret value.
pub const MASK: &str = "********";

/// The librdkafka properties whose values librdkafka itself marks sensitive (`_RK_SENSITIVE` in
/// its `rdkafka_conf.c`; CONFIGURATION.md). A test compares this list with the bundled source, so
/// a librdkafka upgrade that marks another property fails the build until it is added here.
pub const SENSITIVE_RDKAFKA_PROPERTIES: &[&str] = &[
    "sasl.oauthbearer.assertion.private.key.file",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.assertion.private.key.pem",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.config",
    "sasl.password",
    "sasl.username",
    "ssl.ca.pem",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.key.pem",
    "ssl.keystore.password",
    "ssl_key",
];

/// Whether the value of the librdkafka property `name` must never be shown: librdkafka's own list,
/// and, as a safety net for properties of plugins or later versions, any name that says it holds a
/// password, a secret or a private key.
pub fn is_secret_property(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SENSITIVE_RDKAFKA_PROPERTIES.contains(&name.as_str())
        || name.contains("password")
        || name.contains("secret")
        || name.contains("private.key")
}

/// Whether the value of the setting at `key` (a full key path such as `sink.clickhouse.password`
/// or `source.kafka.rdkafka.sasl.password`) must never be shown.
pub fn is_secret_setting(key: &str) -> bool {
    match key.strip_prefix("source.kafka.rdkafka.") {
        Some(property) => is_secret_property(property),
        None => key == "sink.clickhouse.password",
    }
}

/// How the value of the setting at `key` may be shown: masked when it is a secret, any URL in it
/// without its userinfo (`user:password@`) otherwise.
pub fn shown_value(key: &str, value: &str) -> String {
    if value.is_empty() {
        String::new()
    } else if is_secret_setting(key) {
        MASK.to_owned()
    } else {
        mask_userinfo(value)
    }
}

/// `text` with the credentials of every URL in it masked: the userinfo (`https://u:pw@host/x`
/// becomes `https://********@host/x`) and the values of query parameters whose names say they
/// hold one (`?password=…`, `secret`, `token`, `key`). A password need not be percent-encoded
/// to be masked: everything up to the last `@` of the URL counts as userinfo, even past a `#`,
/// `?` or `/` (which over-masks a URL whose path holds an `@`, never under-masks).
/// Text without `://` comes back unchanged.
pub fn mask_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        // The URL ends where the text around it resumes.
        let end = tail.find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>')).unwrap_or(tail.len());
        let url = &tail[..end];
        let url = match url.rfind('@') {
            Some(userinfo_end) => {
                out.push_str(MASK);
                &url[userinfo_end..]
            }
            None => url,
        };
        out.push_str(&mask_query(url));
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// `url` (from its host on) with the values of credential-bearing query parameters masked.
fn mask_query(url: &str) -> String {
    let Some((before, query)) = url.split_once('?') else { return url.to_owned() };
    let (query, fragment) = match query.split_once('#') {
        Some((q, f)) => (q, Some(f)),
        None => (query, None),
    };
    let params: Vec<String> = query
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((name, value)) if is_credential_name(name) && !value.is_empty() => format!("{name}={MASK}"),
            _ => param.to_owned(),
        })
        .collect();
    let mut out = format!("{before}?{}", params.join("&"));
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
    out
}

/// Whether a query parameter's name says its value is a credential.
fn is_credential_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["password", "passwd", "secret", "token", "key"].iter().any(|word| name.contains(word))
}

/// `url` without credentials, query string or fragment, for logs and metric labels:
/// `https://user:pw@host:8443/?password=x` becomes `https://host:8443/`. As in
/// [`mask_userinfo`], everything up to the last `@` is userinfo.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    if scheme.is_empty() { rest.to_owned() } else { format!("{scheme}://{rest}") }
}

/// `message` with every non-empty secret value of `values` replaced by the mask, and the userinfo
/// of any URL in it masked: for error messages that may quote what they were given (librdkafka
/// quotes values in some of its configuration errors; HTTP clients quote URLs).
pub fn redact_message<'a>(message: &str, values: impl IntoIterator<Item = &'a str>) -> String {
    let mut message = message.to_owned();
    for value in values {
        if !value.is_empty() {
            message = message.replace(value, MASK);
        }
    }
    mask_userinfo(&message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_of_every_kind_are_secret() {
        for key in [
            "source.kafka.rdkafka.sasl.password",
            "source.kafka.rdkafka.sasl.oauthbearer.config",
            "source.kafka.rdkafka.sasl.oauthbearer.client.secret",
            "source.kafka.rdkafka.ssl.key.password",
            "source.kafka.rdkafka.ssl.keystore.password",
            "source.kafka.rdkafka.ssl.key.pem",
            "source.kafka.rdkafka.ssl_key",
            "source.kafka.rdkafka.SASL.PASSWORD",
            "sink.clickhouse.password",
        ] {
            assert!(is_secret_setting(key), "{key}");
            assert_eq!(shown_value(key, "marker"), MASK, "{key}");
        }
        for key in ["source.kafka.rdkafka.client.id", "sink.clickhouse.user", "source.kafka.topic"] {
            assert!(!is_secret_setting(key), "{key}");
        }
    }

    #[test]
    fn urls_lose_their_userinfo() {
        assert_eq!(mask_userinfo("http://u:pw@h:8123"), "http://********@h:8123");
        assert_eq!(
            mask_userinfo("a https://u:p@x/y?z and http://plain:1/ too"),
            "a https://********@x/y?z and http://plain:1/ too"
        );
        assert_eq!(mask_userinfo("no url"), "no url");
        assert_eq!(mask_userinfo("error for \"http://a:b@c\""), "error for \"http://********@c\"");
        assert_eq!(shown_value("sink.clickhouse.shards[0].replicas[0]", "https://u:pw@h/"), "https://********@h/");
        assert_eq!(redact_url("https://u:hunter2@ch.example:8443/?password=x"), "https://ch.example:8443/");
        assert_eq!(redact_url("http://127.0.0.1:8123"), "http://127.0.0.1:8123");
    }

    #[test]
    fn credentials_in_queries_and_unencoded_passwords_are_masked() {
        assert_eq!(
            mask_userinfo("https://ch:8443/?user=etl&password=hunter2"),
            "https://ch:8443/?user=etl&password=********"
        );
        assert_eq!(mask_userinfo("http://r/?api_key=k1&x=1#f"), "http://r/?api_key=********&x=1#f");
        assert_eq!(mask_userinfo("http://user:pa#ss@reg:8081/x"), "http://********@reg:8081/x");
        assert_eq!(mask_userinfo("http://user:p/w?d@reg:8081"), "http://********@reg:8081");
        assert_eq!(redact_url("http://user:pa#ss@reg:8081/x?token=t"), "http://reg:8081/x");
        assert_eq!(
            shown_value("format.avro.registry", "https://u:p@r/?secret=s"),
            "https://********@r/?secret=********"
        );
    }

    #[test]
    fn messages_lose_secret_values() {
        let shown = redact_message("bad value \"hunter2\" at http://me:pw@h/", ["hunter2", ""]);
        assert_eq!(shown, "bad value \"********\" at http://********@h/");
    }
}
