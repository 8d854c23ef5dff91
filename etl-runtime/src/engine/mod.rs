//! The runtime's engine: everything between a source's lanes and a sink's writes, with no
//! knowledge of Kafka, ClickHouse or files. It imports one way, from the vocabulary up:
//!
//! 1. **Vocabulary**: [`errors`], [`headers`] (a record's Kafka headers), [`lane`] (records and lanes), [`chain`] (the generated
//!    function's contract and its row buffers), [`chunk`] (chunks and batches), [`fence`],
//!    [`ledger`] (the exactly-once contract), [`sink`] (the sink and dead-letter contracts),
//!    [`ack`], [`fatal`], and [`metrics`], [`budget`], [`checkpoint`], [`retry`], [`fault`],
//!    which need nothing above them.
//! 2. **Shared state**: [`shared`].
//! 3. **Mechanisms**: [`delivery`] (where batches end and what guards a write, at-least-once or
//!    exactly-once), [`stall`] (the stall watchdog's verdicts), [`pipeline`] (the lane loop), [`worker`] and [`write`] (the shard side).
//! 4. **Coordination**: [`handle`] (what a source drives), [`source`] (the source contract),
//!    [`start`] (starting and stopping a pipeline).
//!
//! **Invariant:** nothing in `engine` imports an adapter (`kafka`, `clickhouse`, `file_sink`,
//! `datagen`, `registry`, `codec`) or the process shell (`run`, `admin`, `entry`); they import
//! `engine`. A module imports only from its own layer's vocabulary or below, never from a layer
//! above it.

pub(crate) mod ack;
pub(crate) mod budget;
pub(crate) mod chain;
pub(crate) mod checkpoint;
pub(crate) mod chunk;
pub(crate) mod delivery;
pub(crate) mod errors;
pub(crate) mod fatal;
pub(crate) mod fault;
pub(crate) mod fence;
pub(crate) mod handle;
pub(crate) mod headers;
pub(crate) mod lane;
pub(crate) mod ledger;
pub(crate) mod metrics;
pub(crate) mod outputs;
pub(crate) mod pipeline;
pub(crate) mod retry;
pub(crate) mod shared;
pub(crate) mod sink;
pub(crate) mod source;
pub(crate) mod stall;
pub(crate) mod start;
pub(crate) mod worker;
pub(crate) mod write;
