//! `sink.file`: appends the encoded rows (NDJSON lines from the generated encoder) to one file.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::engine::chunk::Batch;
use crate::engine::errors::SinkError;
use crate::engine::sink::Sink;

/// Writes every batch to one file, whatever its shard, and calls `sync_data` before a write
/// returns: "durable" for `sink.file` means written and fsynced (Invariant 3).
///
/// The rows are written as the chain encoded them; for `sink.file` the generated encoder emits one
/// JSON object and a newline per row. A failed write is rolled back to the previous length, so a
/// retry does not leave half a batch behind.
#[derive(Debug)]
pub struct FileSink {
    path: PathBuf,
    file: Mutex<File>,
}

impl FileSink {
    /// Opens (or creates) `path` for appending; a relative path is relative to the working
    /// directory.
    pub fn open(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(FileSink { path, file: Mutex::new(file) })
    }

    fn write_sync(&self, batch: &Batch) -> Result<(), SinkError> {
        let mut file = self.file.lock().map_err(|_| SinkError::fatal("file sink lock poisoned"))?;
        let io = |e: std::io::Error| SinkError::retryable(format!("{}: {e}", self.path.display()));
        let before = file.metadata().map_err(io)?.len();
        let written =
            batch.chunks().iter().try_for_each(|chunk| file.write_all(chunk.bytes())).and_then(|()| file.sync_data());
        if let Err(error) = written {
            // Best effort: if even the truncation fails, the retry may duplicate rows (at-least-once).
            let _ = file.set_len(before);
            return Err(io(error));
        }
        Ok(())
    }
}

impl Sink for FileSink {
    async fn write(&self, _shard: usize, batch: &Batch) -> Result<(), SinkError> {
        // File I/O blocks; block_in_place lets the other worker keep serving tasks meanwhile.
        tokio::task::block_in_place(|| self.write_sync(batch))
    }

    async fn check(&self) -> Result<(), SinkError> {
        let file = self.file.lock().map_err(|_| SinkError::fatal("file sink lock poisoned"))?;
        file.metadata().map(|_| ()).map_err(|e| SinkError::retryable(format!("{}: {e}", self.path.display())))
    }

    // The write path compiles here, once; see `Sink::erase`.
    #[inline(never)]
    fn erase(self) -> crate::engine::sink::ErasedSink {
        crate::engine::sink::ErasedSink::new(self)
    }
}
