//! Podman for the image tests: installed from Debian's packages and configured the way
//! that works on these machines (stock podman cannot raise rlimits here and crun refuses hybrid cgroups).
//!
//! Stock podman fails here: it cannot raise rlimits, crun refuses the hybrid cgroup setup,
//! and overlay storage needs kernel support the sandbox lacks. runc, cgroupfs, the file
//! events logger, fixed ulimits and vfs storage work. Also compiled into
//! `xtask/tests/image.rs` (via `#[path]`), so the test uses the same configuration.

use std::path::{Path, PathBuf};

/// containers.conf: see the module comment for why each setting.
pub(crate) const CONTAINERS_CONF: &str = r#"# Written by `cargo xtask test`; xtask/src/podman.rs says why.
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"#;

/// storage.conf: vfs, with the store under `dir` so it goes away with `cargo clean`.
pub(crate) fn storage_conf(dir: &Path) -> String {
    format!(
        "# Written by `cargo xtask test`; xtask/src/podman.rs says why.\n[storage]\ndriver = \"vfs\"\n\
         graphroot = \"{}\"\nrunroot = \"{}\"\n",
        dir.join("storage").display(),
        dir.join("run").display()
    )
}

/// Writes both files under `<target>/podman/`; returns the environment that points podman
/// at them.
pub(crate) fn configure(target_dir: &Path) -> std::io::Result<Vec<(&'static str, PathBuf)>> {
    let dir = target_dir.join("podman");
    std::fs::create_dir_all(&dir)?;
    let containers = dir.join("containers.conf");
    let storage = dir.join("storage.conf");
    std::fs::write(&containers, CONTAINERS_CONF)?;
    std::fs::write(&storage, storage_conf(&dir))?;
    Ok(vec![("CONTAINERS_CONF", containers), ("CONTAINERS_STORAGE_CONF", storage)])
}

/// Installs podman and runc from Debian's packages unless podman already runs.
pub(crate) fn install() -> anyhow::Result<()> {
    crate::apt::ensure("podman", &["podman", "runc"])
}
