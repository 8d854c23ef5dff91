//! Tools the tests need that come from Debian's packages (podman, promtool), installed with
//! apt-get when they do not run yet.

use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};

/// Whether `binary --version` runs.
pub(crate) fn runs(binary: &str) -> bool {
    Command::new(binary)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `apt-get update` and `apt-get install -y -qq <install>` (packages, and options such as
/// `--no-install-recommends`); `what` names what needs them, for the error.
pub(crate) fn install(what: &str, install: &[&str]) -> anyhow::Result<()> {
    let install = [&["install", "-y", "-qq"][..], install].concat();
    for args in [&["update", "-qq"][..], &install[..]] {
        let status = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .with_context(|| format!("running apt-get ({what} is installed from Debian's packages)"))?;
        if !status.success() {
            bail!("apt-get {} failed ({status})", args.join(" "));
        }
    }
    Ok(())
}

/// Runs `apt-get install -y -qq <install>` (packages, and options such as
/// `--no-install-recommends`) unless `binary` already runs, then checks that it does.
pub(crate) fn ensure(binary: &str, install: &[&str]) -> anyhow::Result<()> {
    if runs(binary) {
        return Ok(());
    }
    self::install(binary, install)?;
    if !runs(binary) {
        bail!("apt-get {} succeeded but `{binary} --version` does not run", install.join(" "));
    }
    Ok(())
}
