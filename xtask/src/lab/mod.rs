//! The services, pipeline runs and probes that `bench` and `soak` share: the release xtask and
//! `infra up` with the tables and topics on its servers (`services`), the flagship rewritten,
//! built and started (`flagship`), and what reads a running pipeline and draws the result:
//! ClickHouse and `/metrics` over plain HTTP (`http`, `prom`), /proc (`procfs`) and SVG (`plot`).
//!
//! Neither command imports the other: what one of them alone uses stays in its own folder.

pub(crate) mod flagship;
pub(crate) mod http;
pub(crate) mod plot;
pub(crate) mod procfs;
pub(crate) mod prom;
pub(crate) mod services;
