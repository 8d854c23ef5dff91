//! What a source hands the runtime: records, and lanes (one per source partition).

use crate::engine::errors::SourceError;

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
