//! The source side of the runtime: records, lanes (one per source partition) and sources.

use crate::handle::PipelineHandle;

/// One record as a lane hands it to the pipeline thread; it borrows the lane's buffers.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// The message value; `None` is a tombstone.
    pub payload: Option<&'a [u8]>,
    /// The message key, if any.
    pub key: Option<&'a [u8]>,
    /// The source partition (the lane's partition).
    pub partition: i32,
    /// The record's offset within its partition.
    pub offset: i64,
    /// The record's timestamp in milliseconds since the Unix epoch, if the source has one.
    pub timestamp_ms: Option<i64>,
}

/// One source partition, polled by exactly one pipeline thread at a time.
///
/// The pipeline thread takes one record from [`Lane::next`] and fully processes it before it takes
/// the next, so a paused lane holds no unprocessed records inside the runtime.
pub trait Lane: Send + 'static {
    /// The partition this lane reads.
    fn partition(&self) -> i32;

    /// The next record, without blocking. `None` means nothing is available right now (or a finite
    /// source has ended, see [`Lane::is_finished`]).
    fn next(&mut self) -> Option<Result<Record<'_>, SourceError>>;

    /// True once a finite lane has handed out its last record; an unbounded lane never finishes.
    fn is_finished(&self) -> bool {
        false
    }

    /// Stops fetching at the source; the pipeline thread does not call `next` while paused.
    fn pause(&mut self);

    /// Resumes fetching at the source.
    fn resume(&mut self);

    /// Stores `next_offset`, the offset of the next record to consume (last done + 1). Every record
    /// below it is durably written, intentionally dropped or dead-lettered (Invariant 3).
    fn store_offset(&mut self, next_offset: i64) -> Result<(), SourceError>;
}

/// A source of lanes. The runtime calls [`Source::start`] once with a handle through which the source
/// adds lanes (at once, or later from its own thread on assignment), drains them on revocation and
/// reports readiness; [`Source::shutdown`] runs after the final drain stored the last offsets.
pub trait Source: Send + 'static {
    /// Starts the source. Errors here are start-up errors (exit code 2).
    fn start(&mut self, pipeline: PipelineHandle) -> Result<(), SourceError>;

    /// Called once after the final drain stored the offsets of every lane, so a source can commit
    /// them synchronously and leave its group.
    fn shutdown(&mut self) -> Result<(), SourceError> {
        Ok(())
    }

    /// True when the source ends by itself once every lane has finished (datagen with a `count`).
    fn is_finite(&self) -> bool {
        false
    }
}

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
