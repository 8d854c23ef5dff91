//! Several output tables behind one sink (docs/adr/0002-topics-and-outputs.md, 2, 4-6): the
//! engine sees `outputs × shards` sink slots, slot `output × shards + shard`, each with its own
//! queue, batches and in-flight inserts; [`Outputs`] writes a slot's batch to its output's
//! shard, and its ledger keeps each output's spans in that output's own ledger.
//! The generated `main` of a pipeline with `outputs:` builds one `ClickhouseSink` per output and
//! hands them over here; its chain pushes each output's rows to that output's slots.

use std::sync::Arc;

use crate::engine::chunk::Batch;
use crate::engine::errors::SinkError;
use crate::engine::lane::LaneKey;
use crate::engine::ledger::{Ledger, LedgerFuture, Newest, Recorded, Span};
use crate::engine::sink::Sink;

/// Sinks of one shape (one per output, each with `shards` shards), seen as one sink of
/// `outputs × shards` slots. Each output must write a table of its own: two outputs of one
/// table would share its ledger, and one's recorded spans would be taken for the other's.
#[derive(Debug)]
pub struct Outputs<K> {
    outputs: Vec<K>,
    /// The outputs' names, for the `output` label of per-slot metrics.
    names: Vec<String>,
    shards: usize,
    ledger: Option<Arc<SlotLedger>>,
}

impl<K: Sink> Outputs<K> {
    /// `outputs` (name, sink), each with `shards` shards. Under exactly-once every output has a
    /// ledger, or the pipeline could not replay its batches; a mix is refused.
    pub fn new(outputs: Vec<(String, K)>, shards: usize) -> Result<Self, SinkError> {
        let (names, outputs): (Vec<String>, Vec<K>) = outputs.into_iter().unzip();
        if outputs.is_empty() || shards == 0 {
            return Err(SinkError::fatal("outputs: at least one output of at least one shard"));
        }
        let ledgers: Vec<Arc<dyn Ledger>> = outputs.iter().filter_map(Sink::ledger).collect();
        let ledger = match ledgers.len() {
            0 => None,
            n if n == outputs.len() => Some(Arc::new(SlotLedger { ledgers, shards })),
            n => {
                return Err(SinkError::fatal(format!(
                    "outputs: {n} of {} outputs have an exactly-once ledger; it is all or none",
                    outputs.len()
                )));
            }
        };
        Ok(Outputs { outputs, names, shards, ledger })
    }

    /// The number of sink slots: what `RuntimeConfig::shards` must be.
    pub fn slots(&self) -> usize {
        self.outputs.len() * self.shards
    }
}

impl<K: Sink> Sink for Outputs<K> {
    async fn write(&self, slot: usize, batch: &Batch) -> Result<(), SinkError> {
        match self.outputs.get(slot / self.shards) {
            Some(output) => output.write(slot % self.shards, batch).await,
            None => Err(SinkError::fatal(format!("a batch for slot {slot}, but there are {} slots", self.slots()))),
        }
    }

    async fn check(&self) -> Result<(), SinkError> {
        for output in &self.outputs {
            output.check().await?;
        }
        Ok(())
    }

    fn ledger(&self) -> Option<Arc<dyn Ledger>> {
        self.ledger.clone().map(|l| l as Arc<dyn Ledger>)
    }

    fn slot_output(&self, slot: usize) -> (String, usize) {
        (self.names.get(slot / self.shards).cloned().unwrap_or_default(), slot % self.shards)
    }
}

/// The ledgers of the outputs, one per table, as one ledger over slots. A lane's epoch is one
/// for all outputs: claimed above the highest of every ledger and written to each, so each
/// answers the owner check of its own batches by itself (a table that is down delays only its
/// own). A span's slot is translated to its output's shard; output 0's tokens are the ones a
/// single-output pipeline has, the others' name their output.
pub(crate) struct SlotLedger {
    ledgers: Vec<Arc<dyn Ledger>>,
    shards: usize,
}

impl std::fmt::Debug for SlotLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotLedger").field("outputs", &self.ledgers.len()).field("shards", &self.shards).finish()
    }
}

impl SlotLedger {
    /// The output of `span`'s slot, and the span as that output's ledger knows it.
    fn local(&self, span: &Span) -> (usize, Span) {
        (span.shard / self.shards, Span { shard: span.shard % self.shards, ..span.clone() })
    }

    fn of(&self, output: usize) -> Result<&Arc<dyn Ledger>, SinkError> {
        self.ledgers.get(output).ok_or_else(|| SinkError::fatal(format!("no output {output} in the ledger")))
    }
}

impl Ledger for SlotLedger {
    fn highest_epoch<'a>(&'a self, lane: &'a LaneKey) -> LedgerFuture<'a, u64> {
        Box::pin(async move {
            let mut highest = 0;
            for ledger in &self.ledgers {
                highest = highest.max(ledger.highest_epoch(lane).await?);
            }
            Ok(highest)
        })
    }

    fn write_claim<'a>(&'a self, lane: &'a LaneKey, epoch: u64) -> LedgerFuture<'a, ()> {
        Box::pin(async move {
            for ledger in &self.ledgers {
                ledger.write_claim(lane, epoch).await?;
            }
            Ok(())
        })
    }

    fn owner<'a>(&'a self, span: &'a Span) -> LedgerFuture<'a, u64> {
        Box::pin(async move {
            let (output, local) = self.local(span);
            self.of(output)?.owner(&local).await
        })
    }

    fn record<'a>(&'a self, span: &'a Span, epoch: u64) -> LedgerFuture<'a, ()> {
        Box::pin(async move {
            let (output, local) = self.local(span);
            self.of(output)?.record(&local, epoch).await
        })
    }

    fn recorded<'a>(&'a self, lane: &'a LaneKey, watermark: Option<i64>) -> LedgerFuture<'a, Recorded> {
        Box::pin(async move {
            let mut all = Recorded::default();
            for (output, ledger) in self.ledgers.iter().enumerate() {
                let recorded = ledger.recorded(lane, watermark).await?;
                // A span its ledger says is on a shard past `shards` belongs to no slot of this
                // output; it keeps a slot past every output's, which `Replay::new` ignores.
                let slot = |(span, epoch): (Span, u64)| {
                    let shard = if span.shard < self.shards { output * self.shards + span.shard } else { usize::MAX };
                    (Span { shard, ..span }, epoch)
                };
                all.spans.extend(recorded.spans.into_iter().map(slot));
                all.others.extend(recorded.others.into_iter().map(slot));
            }
            Ok(all)
        })
    }

    fn retire<'a>(&'a self, lane: &'a LaneKey, epoch: u64) -> LedgerFuture<'a, ()> {
        Box::pin(async move {
            for ledger in &self.ledgers {
                ledger.retire(lane, epoch).await?;
            }
            Ok(())
        })
    }

    fn newest<'a>(&'a self, lane: &'a LaneKey) -> LedgerFuture<'a, Vec<Newest>> {
        Box::pin(async move {
            let mut all = Vec::new();
            for ledger in &self.ledgers {
                all.extend(ledger.newest(lane).await?);
            }
            Ok(all)
        })
    }

    fn token(&self, span: &Span) -> String {
        let (output, local) = self.local(span);
        match self.ledgers.get(output) {
            Some(ledger) if output == 0 => ledger.token(&local),
            Some(ledger) => format!("{}:output{output}", ledger.token(&local)),
            None => format!("no-output-{output}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A ledger in memory: claims per lane, spans with their epochs.
    #[derive(Default)]
    struct MemLedger {
        name: &'static str,
        claims: Mutex<Vec<(LaneKey, u64)>>,
        spans: Mutex<Vec<(Span, u64)>>,
    }

    impl MemLedger {
        fn named(name: &'static str) -> Arc<MemLedger> {
            Arc::new(MemLedger { name, ..MemLedger::default() })
        }
    }

    impl MemLedger {
        fn highest(&self, lane: &LaneKey) -> u64 {
            self.claims.lock().unwrap().iter().filter(|(l, _)| l == lane).map(|(_, e)| *e).max().unwrap_or(0)
        }
    }

    impl Ledger for MemLedger {
        fn highest_epoch<'a>(&'a self, lane: &'a LaneKey) -> LedgerFuture<'a, u64> {
            let highest = self.highest(lane);
            Box::pin(async move { Ok(highest) })
        }

        fn write_claim<'a>(&'a self, lane: &'a LaneKey, epoch: u64) -> LedgerFuture<'a, ()> {
            self.claims.lock().unwrap().push((lane.clone(), epoch));
            Box::pin(async { Ok(()) })
        }

        fn owner<'a>(&'a self, span: &'a Span) -> LedgerFuture<'a, u64> {
            let highest = self.highest(&LaneKey { topic: span.topic.clone(), partition: span.partition });
            Box::pin(async move { Ok(highest) })
        }

        fn record<'a>(&'a self, span: &'a Span, epoch: u64) -> LedgerFuture<'a, ()> {
            self.spans.lock().unwrap().push((span.clone(), epoch));
            Box::pin(async { Ok(()) })
        }

        fn recorded<'a>(&'a self, lane: &'a LaneKey, _watermark: Option<i64>) -> LedgerFuture<'a, Recorded> {
            let spans = self
                .spans
                .lock()
                .unwrap()
                .iter()
                .filter(|(s, _)| *s.topic == *lane.topic && s.partition == lane.partition)
                .cloned()
                .collect();
            Box::pin(async move { Ok(Recorded { spans, others: Vec::new() }) })
        }

        fn token(&self, span: &Span) -> String {
            format!("{}:{}:{}:{}-{}", self.name, span.partition, span.shard, span.first, span.last)
        }
    }

    fn batch() -> Batch {
        Batch { shard: 0, token: String::new(), chunks: Vec::new(), rows: 0, bytes: 0, held: 0, span: None }
    }

    fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(future)
    }

    fn span(shard: usize, first: i64, last: i64) -> Span {
        Span { topic: "orders".into(), partition: 3, shard, first, last }
    }

    // ADR 0002 §5-6: slots map to their output's shard in that output's ledger; one epoch per
    // lane above every output's, written to each; spans come back at their slots; tokens of
    // output 0 are the single-output ones, the others' name their output.
    #[test]
    fn slots_reach_their_outputs_ledger_and_come_back_at_their_slot() {
        let (orders, refunds) = (MemLedger::named("orders"), MemLedger::named("refunds"));
        let lane = LaneKey::new("orders", 3);
        refunds.claims.lock().unwrap().push((lane.clone(), 7));
        let ledger = SlotLedger { ledgers: vec![orders.clone(), refunds.clone()], shards: 2 };
        block_on(async {
            let epoch = ledger.claim(&lane).await.unwrap();
            assert_eq!(epoch, 8, "one epoch above the highest of every output");
            assert_eq!(orders.highest_epoch(&lane).await.unwrap(), 8);
            assert_eq!(refunds.highest_epoch(&lane).await.unwrap(), 8);
            ledger.record(&span(1, 10, 20), epoch).await.unwrap();
            ledger.record(&span(3, 10, 25), epoch).await.unwrap();
            assert_eq!(orders.spans.lock().unwrap()[0].0, span(1, 10, 20));
            assert_eq!(refunds.spans.lock().unwrap()[0].0, span(1, 10, 25), "slot 3 is the second output's shard 1");
            assert_eq!(ledger.owner(&span(3, 10, 25)).await.unwrap(), 8);
            let mut recorded = ledger.recorded(&lane, None).await.unwrap().spans;
            recorded.sort();
            assert_eq!(recorded, vec![(span(1, 10, 20), 8), (span(3, 10, 25), 8)]);
        });
        assert_eq!(ledger.token(&span(1, 10, 20)), "orders:3:1:10-20");
        assert_eq!(ledger.token(&span(3, 10, 20)), "refunds:3:1:10-20:output1");
    }

    /// A sink that remembers which shard each write went to.
    #[derive(Default)]
    struct Shards(Mutex<Vec<usize>>, Option<Arc<MemLedger>>);

    impl Sink for Shards {
        async fn write(&self, shard: usize, _batch: &Batch) -> Result<(), SinkError> {
            self.0.lock().unwrap().push(shard);
            Ok(())
        }

        async fn check(&self) -> Result<(), SinkError> {
            Ok(())
        }

        fn ledger(&self) -> Option<Arc<dyn Ledger>> {
            self.1.clone().map(|l| l as Arc<dyn Ledger>)
        }
    }

    #[test]
    fn a_slot_is_written_to_its_outputs_shard_and_ledgers_are_all_or_none() {
        let outputs =
            Outputs::new(["a", "b", "c"].into_iter().map(|name| (name.to_owned(), Shards::default())).collect(), 2)
                .unwrap();
        assert_eq!(outputs.slots(), 6);
        assert!(outputs.ledger().is_none());
        assert_eq!(outputs.slot_output(3), ("b".to_owned(), 1), "slot 3 is output 1's shard 1");
        block_on(async {
            for slot in [0, 3, 5, 4] {
                outputs.write(slot, &batch()).await.unwrap();
            }
            assert!(outputs.write(6, &batch()).await.is_err(), "no slot 6");
        });
        let written: Vec<Vec<usize>> = outputs.outputs.iter().map(|o| o.0.lock().unwrap().clone()).collect();
        assert_eq!(written, vec![vec![0], vec![1], vec![1, 0]]);

        let with = || Shards(Mutex::default(), Some(MemLedger::named("t")));
        assert!(Outputs::new(vec![("a".into(), with()), ("b".into(), with())], 1).unwrap().ledger().is_some());
        let Err(mixed) = Outputs::new(vec![("a".into(), with()), ("b".into(), Shards::default())], 1) else {
            panic!("a mix of ledgers")
        };
        assert!(mixed.message.contains("all or none"), "{mixed}");
    }
}
