//! Where xtask runs things: the workspace root and the cargo that runs this xtask, for every
//! subcommand that starts cargo or reads the checkout.

use std::path::{Path, PathBuf};

/// The workspace root (xtask lives one level below it).
pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_owned()
}

/// The cargo that runs this xtask, so a toolchain override applies to every step.
pub(crate) fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}
