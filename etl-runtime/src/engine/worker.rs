//! The shard worker: merges the chunks of its queue into batches, as its delivery's batching
//! says, and spawns each batch's write once a write slot is free.

use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use tokio::sync::Semaphore;

use crate::engine::ack::{Ack, abandon};
use crate::engine::chunk::{Batch, Chunk};
use crate::engine::delivery::{BatchPolicy, Delivery};
use crate::engine::shared::Shared;
use crate::engine::sink::DynSink;
use crate::engine::write::write_batch;

/// One shard's worker thread.
pub(crate) struct ShardWorker<D> {
    pub(crate) shard: usize,
    pub(crate) rx: Receiver<Chunk>,
    pub(crate) sink: Arc<dyn DynSink>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) permits: Arc<Semaphore>,
    pub(crate) acks: Arc<Vec<Sender<Ack>>>,
    pub(crate) delivery: Arc<D>,
}

impl<D: Delivery> ShardWorker<D> {
    /// Receives chunks until every pipeline thread has dropped its sender, writing a batch when it is
    /// full, when its linger expires, or when a drain sealed one of its chunks.
    pub(crate) fn run(self) {
        let policy = self.delivery.batching();
        let mut open: Option<(Batch, Instant)> = None;
        let mut sequence = 0u64;
        loop {
            let received = match &open {
                None => self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some((_, started)) => self.rx.recv_deadline(*started + policy.linger()),
            };
            match received {
                Ok(chunk) if chunk.rows == 0 => {
                    // A drain's marker: write what is open now, and drop the marker itself.
                    if let Some((batch, _)) = open.take()
                        && !self.write(batch, &mut sequence)
                    {
                        return;
                    }
                }
                Ok(chunk) => {
                    if let Some((batch, _)) = &open
                        && !policy.fits(batch, &chunk)
                    {
                        let (batch, _) = open.take().expect("checked above");
                        if !self.write(batch, &mut sequence) {
                            return;
                        }
                    }
                    let urgent = chunk.urgent;
                    let (batch, _) = open.get_or_insert_with(|| (self.empty_batch(), Instant::now()));
                    batch.rows += u64::from(chunk.rows);
                    batch.bytes += chunk.bytes.len() as u64;
                    batch.held += chunk.held_bytes();
                    batch.chunks.push(chunk);
                    if urgent || policy.is_full(batch) {
                        let (batch, _) = open.take().expect("just inserted");
                        if !self.write(batch, &mut sequence) {
                            return;
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    if let Some((batch, _)) = open.take()
                        && !self.write(batch, &mut sequence)
                    {
                        return;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    if let Some((batch, _)) = open.take() {
                        self.write(batch, &mut sequence);
                    }
                    return;
                }
            }
        }
    }

    fn empty_batch(&self) -> Batch {
        Batch { shard: self.shard, token: String::new(), chunks: Vec::new(), rows: 0, bytes: 0, held: 0, span: None }
    }

    /// Waits for a write slot — while it waits it does not receive, so the shard queue fills and the
    /// pipeline threads see rejections: that is the backpressure — then spawns the write. Returns
    /// false when the pipeline is closing and the worker must end.
    fn write(&self, mut batch: Batch, sequence: &mut u64) -> bool {
        self.delivery.name(&mut batch, self.shard, sequence);
        if self.delivery.handed_over(&batch) {
            // Not worth a write slot: it would be given up.
            abandon(&self.shared.budget, &self.acks, &batch);
            return true;
        }
        let permit = match self.runtime.block_on(self.permits.clone().acquire_owned()) {
            Ok(permit) => permit,
            Err(_) => return false,
        };
        let task = write_batch(
            self.sink.clone(),
            self.delivery.clone(),
            batch,
            self.shared.clone(),
            self.acks.clone(),
            permit,
        );
        self.runtime.spawn(task);
        true
    }
}
