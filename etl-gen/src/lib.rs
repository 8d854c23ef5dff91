//! etl-gen: the pipeline.yaml model, validation rules, IR and code emission.
//!
//! The flow is model → validation → IR → emission, one module each; `xtask`, the
//! `etl-gen` binary and `etl-macros` are thin shells over [`cli`] and [`load`].

pub mod cli;
pub mod ddl;
pub mod diag;
pub mod docs;
pub mod emit;
pub mod expr;
pub mod image;
pub mod ir;
pub mod load;
pub mod memory;
pub mod model;
pub mod plan;
pub mod rules;
pub mod schema;
/// What is secret: the runtime's own definition, compiled here from the same file (it needs
/// only `std`), so `--check`, logs and the generated README can never disagree about it.
#[path = "../../etl-runtime/src/secret.rs"]
#[allow(dead_code, unreachable_pub)]
pub(crate) mod secret;
pub mod source_map;
pub mod template;
pub mod units;

pub use load::{Outcome, ReadError, Validated, validate_file, validate_str};
pub use rules::Options;
