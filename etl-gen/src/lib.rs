//! etl-gen: the pipeline.yaml model, validation rules, IR and code emission.
//!
//! The flow is one way, each step its own module: three readers → one IR → rules → plan →
//! emit. [`model`] is the typed configuration; `readers` turn the format's schema file (Avro,
//! JSON Schema, Protobuf) into `ir`'s column view; `rules` check the model (diagnostics, each
//! rule with its check); `plan` types the chain over the IR (with its type checker and the
//! chain's rules); [`load`] reads every input once and runs those steps; [`emit`] is a pure
//! function from the [`Validated`] pipeline to files in memory. [`ddl`], [`memory`] and [`docs`] read what `load` returns or the model; [`cli`]
//! (feature `cli`) is the I/O shell that `xtask` and the `etl-gen` binary share, and the only
//! place files are written. `etl-macros` calls [`load`] and [`emit`] without the `cli` feature.

#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "cli")]
mod compat;
mod contract;
pub mod ddl;
mod diag;
pub mod docs;
pub mod emit;
mod expr;
#[cfg(feature = "cli")]
mod init;
mod ir;
pub mod load;
pub mod memory;
#[cfg(feature = "cli")]
mod migrate;
pub mod model;
mod plan;
mod readers;
pub mod rules;
mod source_map;
mod template;
mod units;

pub use diag::{Anchor, Diagnostic, Report, Rule, Severity};
pub use load::{Outcome, ReadError, Validated, validate_file, validate_str};
pub use rules::Options;
pub use template::{Template, UnsetVariable};
pub use units::{Attempts, ByteSize, Duration, Ratio};
