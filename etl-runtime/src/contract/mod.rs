//! Contracts between the generator and the runtime: tables both sides apply, each in a file
//! that depends on `std` alone, so that etl-gen compiles the same file (`#[path]`) instead of
//! depending on the runtime (which would pull tokio, hyper and librdkafka into the proc
//! macro). What is secret (`crate::secret`) is shared the same way.

#[cfg(feature = "clickhouse")]
pub(crate) mod columns;
pub(crate) mod defaults;
#[cfg(feature = "kafka")]
pub(crate) mod kafka_auth;
#[cfg(feature = "kafka")]
pub(crate) mod owned_properties;
