//! The contract a source implements: it starts with a [`PipelineHandle`] and adds, drains and
//! fences lanes through it.

use crate::engine::errors::SourceError;
use crate::engine::handle::PipelineHandle;

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

    /// Whether the source reads `topic`: the runtime refuses to start when it is the dead-letter
    /// topic, whose every record would be read again, fail again and be written again.
    fn reads_topic(&self, topic: &str) -> bool {
        let _ = topic;
        false
    }
}
