//! How the sink classifies what went wrong with a ClickHouse request: retry it, stop the pipeline,
//! or isolate the rows ClickHouse refuses.

use ::clickhouse::error::Error;

/// The sink's reaction to one failed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// The server, the network or the table is unavailable or overloaded right now: the runtime
    /// retries the batch with backoff, and the replica is rotated out.
    Retryable,
    /// Retrying cannot help (credentials, a missing table or column, a type mismatch, a bad
    /// setting): the pipeline stops without storing the batch's offsets.
    Fatal,
    /// ClickHouse refused the data itself: some rows cannot be inserted, the others can.
    Data,
}

impl Class {
    /// The position of the class's counter in a shard's error counters.
    pub(crate) fn index(self) -> usize {
        match self {
            Class::Retryable => 0,
            Class::Fatal => 1,
            Class::Data => 2,
        }
    }

    /// The label of `etl_sink_errors_by_class_total`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Class::Retryable => "retryable",
            Class::Fatal => "fatal",
            Class::Data => "data",
        }
    }
}

/// ClickHouse error codes (`src/Common/ErrorCodes.cpp`) that mean the data was refused.
const DATA: &[u32] = &[
    6,   // CANNOT_PARSE_TEXT
    26,  // CANNOT_PARSE_QUOTED_STRING
    27,  // CANNOT_PARSE_INPUT_ASSERTION_FAILED
    32,  // ATTEMPT_TO_READ_AFTER_EOF
    33,  // CANNOT_READ_ALL_DATA
    38,  // CANNOT_PARSE_DATE
    41,  // CANNOT_PARSE_DATETIME
    69,  // ARGUMENT_OUT_OF_BOUND
    70,  // CANNOT_CONVERT_TYPE
    72,  // CANNOT_PARSE_NUMBER
    117, // INCORRECT_DATA
    128, // TOO_LARGE_ARRAY_SIZE
    131, // TOO_LARGE_STRING_SIZE
    321, // VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE
    349, // CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN
    395, // FUNCTION_THROW_IF_VALUE_IS_NON_ZERO (throwIf in a materialized view)
    407, // DECIMAL_OVERFLOW
    469, // VIOLATED_CONSTRAINT
    691, // UNKNOWN_ELEMENT_OF_ENUM
];

/// Codes that retrying cannot fix.
const FATAL: &[u32] = &[
    1,   // UNSUPPORTED_METHOD
    16,  // NO_SUCH_COLUMN_IN_TABLE
    20,  // NUMBER_OF_COLUMNS_DOESNT_MATCH
    36,  // BAD_ARGUMENTS
    44,  // ILLEGAL_COLUMN
    47,  // UNKNOWN_IDENTIFIER
    48,  // NOT_IMPLEMENTED
    50,  // UNKNOWN_TYPE
    53,  // TYPE_MISMATCH
    60,  // UNKNOWN_TABLE
    62,  // SYNTAX_ERROR
    73,  // UNKNOWN_FORMAT
    81,  // UNKNOWN_DATABASE
    115, // UNKNOWN_SETTING
    164, // READONLY
    192, // UNKNOWN_USER
    193, // WRONG_PASSWORD
    194, // REQUIRED_PASSWORD
    195, // IP_ADDRESS_NOT_ALLOWED
    452, // SETTING_CONSTRAINT_VIOLATION
    497, // ACCESS_DENIED
    516, // AUTHENTICATION_FAILED
];

/// Codes known to be transient. Unknown codes are retried too (like these, without limit unless
/// `retry.max_attempts` sets one); this list documents the expected ones and pins them in tests.
const RETRYABLE: &[u32] = &[
    3,    // UNEXPECTED_END_OF_FILE
    159,  // TIMEOUT_EXCEEDED
    160,  // TOO_SLOW
    202,  // TOO_MANY_SIMULTANEOUS_QUERIES
    203,  // NO_FREE_CONNECTION
    209,  // SOCKET_TIMEOUT
    210,  // NETWORK_ERROR
    225,  // NO_ZOOKEEPER
    236,  // ABORTED
    241,  // MEMORY_LIMIT_EXCEEDED
    242,  // TABLE_IS_READ_ONLY
    252,  // TOO_MANY_PARTS
    285,  // TOO_FEW_LIVE_REPLICAS
    286,  // UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE
    319,  // UNKNOWN_STATUS_OF_INSERT
    394,  // QUERY_WAS_CANCELLED
    425,  // SYSTEM_ERROR
    999,  // KEEPER_EXCEPTION
    1000, // POCO_EXCEPTION
];

/// Classifies an error of the `clickhouse` crate.
pub(crate) fn classify(error: &Error) -> Class {
    if untrusted_certificate(error).is_some() || refused_client_certificate(error).is_some() {
        // The server's certificate does not verify against the trusted roots (an unknown CA, a
        // name mismatch, an expired certificate), or the server wants a client certificate it
        // did not get or does not accept: a configuration matter that stays wrong.
        return Class::Fatal;
    }
    match error {
        Error::BadResponse(reason) => classify_response(reason),
        // Connection refused or reset, TLS failures, an unreachable host, a timeout: the replica
        // may come back, or another one can take the batch.
        Error::Network(_) | Error::TimedOut => Class::Retryable,
        // A malformed URL, an https URL the build cannot serve, a body that cannot be compressed:
        // the configuration is wrong and stays wrong.
        Error::InvalidParams(_) | Error::Unsupported(_) | Error::Compression(_) => Class::Fatal,
        // A garbled response (decompression, framing) or an I/O error: most likely the connection.
        _ => Class::Retryable,
    }
}

/// The message for an error: its text and its causes (hyper's own text hides the cause, so a
/// failed TLS handshake would read `client error (Connect)`), with advice for an untrusted
/// certificate.
pub(crate) fn describe(error: &Error) -> String {
    let mut message = error.to_string();
    for cause in causes(error) {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
    }
    if let Some(reason) = untrusted_certificate(error) {
        message.push_str(&format!(
            " (the server's TLS certificate is not trusted: {reason}; if a private CA signed it, \
             set sink.clickhouse.ca_file to that CA's PEM file)"
        ));
    }
    if let Some(alert) = refused_client_certificate(error) {
        message.push_str(&format!(
            " (the server refused the TLS client: {alert:?}; it requires mutual TLS: set sink.clickhouse.client_cert and \
             client_key to a certificate and key its CA accepts)"
        ));
    }
    message
}

/// The alert of a server that wants a client certificate and got none, or not one it accepts.
fn refused_client_certificate(error: &Error) -> Option<rustls::AlertDescription> {
    use rustls::AlertDescription as A;
    causes(error).find_map(|e| match e.downcast_ref::<rustls::Error>() {
        Some(rustls::Error::AlertReceived(
            alert @ (A::CertificateRequired | A::BadCertificate | A::UnknownCA | A::CertificateUnknown),
        )) => Some(*alert),
        _ => None,
    })
}

type DynError = dyn std::error::Error + 'static;

/// The errors behind `error`, nearest first. `io::Error::source` skips the error it wraps, so
/// an `io::Error` is looked inside.
fn causes(error: &Error) -> impl Iterator<Item = &DynError> {
    let first: &DynError = error;
    std::iter::successors(cause(first), |&e| cause(e))
}

fn cause(error: &DynError) -> Option<&DynError> {
    match error.downcast_ref::<std::io::Error>().and_then(std::io::Error::get_ref) {
        Some(inner) => Some(inner),
        None => error.source(),
    }
}

/// The rustls certificate error somewhere in the chain, if the failure was one.
fn untrusted_certificate(error: &Error) -> Option<String> {
    causes(error).find_map(|e| match e.downcast_ref::<rustls::Error>() {
        Some(rustls::Error::InvalidCertificate(reason)) => Some(format!("{reason:?}")),
        _ => None,
    })
}

/// Classifies the text of an unsuccessful HTTP response: ClickHouse's `Code: N. DB::Exception:
/// ...`, or, when the body was empty, `Code: N` from the `X-ClickHouse-Exception-Code` header or
/// the bare status line (`503 Service Unavailable`).
pub(crate) fn classify_response(reason: &str) -> Class {
    if let Some(code) = exception_code(reason) {
        return classify_code(code);
    }
    match status(reason) {
        // 408 Request Timeout and 429 Too Many Requests heal; other 4xx from a proxy in front of
        // ClickHouse (401, 403, 404) do not.
        Some(408 | 429) => Class::Retryable,
        Some(400..=499) => Class::Fatal,
        // 5xx, or a body from something that is not ClickHouse (a load balancer's error page).
        _ => Class::Retryable,
    }
}

/// The class of a ClickHouse error code.
pub(crate) fn classify_code(code: u32) -> Class {
    if DATA.contains(&code) {
        Class::Data
    } else if FATAL.contains(&code) {
        Class::Fatal
    } else {
        if !RETRYABLE.contains(&code) {
            tracing::debug!(code, "ClickHouse error code without a known class; retrying it");
        }
        Class::Retryable
    }
}

/// The `N` of a leading `Code: N`.
pub(crate) fn exception_code(reason: &str) -> Option<u32> {
    let rest = reason.trim_start().strip_prefix("Code:")?.trim_start();
    let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    rest[..digits].parse().ok()
}

/// The status of a bare status line such as `503 Service Unavailable`.
fn status(reason: &str) -> Option<u16> {
    let head = reason.split_whitespace().next()?;
    (head.len() == 3).then(|| head.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    // The error classes of the issue, pinned by code.
    #[test]
    fn codes_are_classified() {
        for code in [252, 159, 210, 209, 241, 242, 999, 3, 319] {
            assert_eq!(classify_code(code), Class::Retryable, "{code}");
        }
        for code in [516, 192, 60, 81, 16, 53, 497] {
            assert_eq!(classify_code(code), Class::Fatal, "{code}");
        }
        for code in [6, 27, 38, 41, 72, 131, 117, 33, 469] {
            assert_eq!(classify_code(code), Class::Data, "{code}");
        }
        assert_eq!(classify_code(123_456), Class::Retryable, "unknown codes are retried");
        for list in [DATA, FATAL] {
            assert!(list.iter().all(|c| !RETRYABLE.contains(c)), "a code in two lists");
        }
        assert!(DATA.iter().all(|c| !FATAL.contains(c)), "a code in two lists");
    }

    // Response texts as the crate reports them.
    #[test]
    fn responses_are_classified() {
        let constraint = "Code: 469. DB::Exception: Constraint `pos` for table default.t is violated at row 1. \
                          (VIOLATED_CONSTRAINT) (version 26.7.2.1)";
        assert_eq!(exception_code(constraint), Some(469));
        assert_eq!(classify_response(constraint), Class::Data);
        assert_eq!(classify_response("Code: 516"), Class::Fatal);
        assert_eq!(classify_response("Code: 252. DB::Exception: Too many parts"), Class::Retryable);
        assert_eq!(classify_response("503 Service Unavailable"), Class::Retryable);
        assert_eq!(classify_response("429 Too Many Requests"), Class::Retryable);
        assert_eq!(classify_response("401 Unauthorized"), Class::Fatal);
        assert_eq!(classify_response("<html>bad gateway</html>"), Class::Retryable);
        assert_eq!(classify(&Error::TimedOut), Class::Retryable);
        assert_eq!(classify(&Error::Unsupported("https".into())), Class::Fatal);
    }
}
