//! The errors every part of the runtime speaks: a source's, a record's and a sink's.

/// An error raised by a source or a lane.
#[derive(Debug, Clone, thiserror::Error)]
#[error("source error ({kind:?}): {message}")]
pub struct SourceError {
    /// Whether the pipeline can go on.
    pub kind: SourceErrorKind,
    /// What happened.
    pub message: String,
}

/// Whether a [`SourceError`] stops the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceErrorKind {
    /// Logged and counted; the lane is polled again.
    Transient,
    /// Stops the pipeline with exit code 1.
    Fatal,
}

impl SourceError {
    /// A transient error: logged, and the lane is polled again.
    pub fn transient(message: impl Into<String>) -> Self {
        SourceError { kind: SourceErrorKind::Transient, message: message.into() }
    }

    /// A fatal error: the pipeline stops with exit code 1.
    pub fn fatal(message: impl Into<String>) -> Self {
        SourceError { kind: SourceErrorKind::Fatal, message: message.into() }
    }
}

/// A per-record error: the runtime applies `errors.policy` to it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{kind:?} error: {message}")]
pub struct RecordError {
    /// Which stage failed.
    pub kind: RecordErrorKind,
    /// What happened, for logs and the dead-letter record.
    pub message: String,
}

/// The stage a [`RecordError`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordErrorKind {
    /// The payload could not be decoded with the schema.
    Decode,
    /// An operator failed (for example an integer division by zero).
    Operator,
    /// The payload is larger than `format.max_message_bytes`.
    Oversize,
    /// The row could not be encoded for the sink.
    Encode,
    /// Something the record needs is unavailable (the schema registry cannot be reached).
    /// Not the record's fault: the pipeline stops whatever `errors.policy` says.
    Unavailable,
}

impl RecordError {
    /// A new error of `kind`.
    pub fn new(kind: RecordErrorKind, message: impl Into<String>) -> Self {
        RecordError { kind, message: message.into() }
    }
}

/// An error from a sink write or check.
#[derive(Debug, Clone, thiserror::Error)]
#[error("sink error ({kind:?}): {message}")]
pub struct SinkError {
    /// How the runtime reacts.
    pub kind: SinkErrorKind,
    /// What happened.
    pub message: String,
}

/// How the runtime reacts to a [`SinkError`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkErrorKind {
    /// Retried with backoff, without limit unless `retry.max_attempts` sets one (then fatal).
    Retryable,
    /// Stops the pipeline at once with exit code 1; the batch's offsets are never stored.
    Fatal,
    /// Some rows were rejected (their indexes within the batch); every other row of the batch is
    /// durable. Under `errors.policy: skip` the runtime counts them and completes the batch;
    /// otherwise it stops the pipeline.
    Data {
        /// Indexes of the rejected rows within the batch.
        rows: Vec<u64>,
    },
}

impl SinkError {
    /// A retryable error.
    pub fn retryable(message: impl Into<String>) -> Self {
        SinkError { kind: SinkErrorKind::Retryable, message: message.into() }
    }

    /// A fatal error.
    pub fn fatal(message: impl Into<String>) -> Self {
        SinkError { kind: SinkErrorKind::Fatal, message: message.into() }
    }

    pub(crate) fn is_retryable(&self) -> bool {
        self.kind == SinkErrorKind::Retryable
    }
}
