//! `pipeline!` fails compilation with the generator's diagnostics, and expands a valid
//! pipeline into a program that runs.
//!
//! Each case under tests/ui/ is a binary of one scratch crate, built by cargo in the workspace's
//! target directory with the workspace's lock file and dev profile, so the dependencies the
//! workspace compiled are reused. (trybuild compiles every dependency again, librdkafka's C code
//! included, in a target directory of its own with flags of its own: five minutes of every CI
//! run.) A failing case must print exactly its `.stderr` file, where `$DIR` stands for
//! etl-macros' directory; `ETL_UI_UPDATE=1` rewrites the files from what the compiler printed.

use std::path::{Path, PathBuf};
use std::process::Command;

fn macros_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn workspace_root() -> PathBuf {
    macros_dir().parent().expect("etl-macros lives in the workspace").to_owned()
}

/// The cases: `fail_*.rs` and `pass_*.rs` under tests/ui/, by name.
fn cases(prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(macros_dir().join("tests/ui"))
        .unwrap()
        .filter_map(|entry| {
            let name = entry.unwrap().file_name().into_string().ok()?;
            let stem = name.strip_suffix(".rs")?;
            stem.starts_with(prefix).then(|| stem.to_owned())
        })
        .collect();
    names.sort();
    names
}

/// Writes the scratch crate with one binary per case; returns its manifest.
fn scratch_crate(cases: &[String]) -> PathBuf {
    let dir = workspace_root().join("target/etl-ui");
    std::fs::create_dir_all(&dir).unwrap();
    let path = |p: &Path| p.display().to_string().replace('\\', "/");
    let mut manifest = String::from(
        "# Written by etl-macros/tests/ui.rs.\n[package]\nname = \"etl-macros-ui\"\nversion = \"0.0.0\"\n\
         edition = \"2024\"\npublish = false\n\n",
    );
    for case in cases {
        let file = macros_dir().join("tests/ui").join(format!("{case}.rs"));
        manifest.push_str(&format!("[[bin]]\nname = \"{case}\"\npath = \"{}\"\n\n", path(&file)));
    }
    manifest.push_str(&format!(
        "[dependencies]\netl-macros = {{ path = \"{}\" }}\netl-runtime = {{ path = \"{}\" }}\n\n\
         [workspace]\n\n\
         # The workspace's dev profile: the same settings reuse the same compiled dependencies.\n\
         [profile.dev]\ndebug = \"line-tables-only\"\n\n[profile.dev.package.\"*\"]\ndebug = false\n",
        path(&macros_dir()),
        path(&workspace_root().join("etl-runtime")),
    ));
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    // The workspace's versions, so that the dependencies are the ones already compiled.
    std::fs::copy(workspace_root().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    dir.join("Cargo.toml")
}

fn cargo(manifest: &Path, verb: &str, case: &str) -> std::process::Output {
    Command::new(env!("CARGO"))
        .args([verb, "--quiet", "--color", "never", "--manifest-path"])
        .arg(manifest)
        .args(["--bin", case])
        .env("CARGO_TARGET_DIR", workspace_root().join("target"))
        // A passing case runs there too, and writes its output files there.
        .current_dir(manifest.parent().unwrap())
        .output()
        .unwrap()
}

/// The compiler's diagnostics as the `.stderr` files write them: cargo's own closing line
/// dropped, etl-macros' directory written `$DIR`, and `-->` locations relative to it.
fn normalize(stderr: &str) -> String {
    let dir = macros_dir().display().to_string();
    let mut out = String::new();
    for line in stderr.lines() {
        if line.starts_with("error: could not compile") {
            continue;
        }
        let line = if line.trim_start().starts_with("--> ") {
            line.replace(&format!("{dir}/"), "")
        } else {
            line.replace(&dir, "$DIR")
        };
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.trim_end().to_owned() + "\n"
}

#[test]
fn ui() {
    let fail = cases("fail_");
    let pass = cases("pass_");
    assert!(!fail.is_empty() && !pass.is_empty(), "cases under tests/ui: {fail:?} {pass:?}");
    let manifest = scratch_crate(&[fail.clone(), pass.clone()].concat());
    let update = std::env::var_os("ETL_UI_UPDATE").is_some();
    let mut mismatches = Vec::new();
    for case in &fail {
        let output = cargo(&manifest, "build", case);
        assert!(!output.status.success(), "{case} must fail to compile");
        let actual = normalize(&String::from_utf8_lossy(&output.stderr));
        let expected_path = macros_dir().join("tests/ui").join(format!("{case}.stderr"));
        if update {
            std::fs::write(&expected_path, &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if normalize(&expected) != actual {
            mismatches.push(format!("--- {case}: expected\n{expected}\n--- {case}: actual\n{actual}"));
        }
    }
    assert!(mismatches.is_empty(), "diagnostics differ (ETL_UI_UPDATE=1 rewrites them):\n{}", mismatches.join("\n"));
    for case in &pass {
        let output = cargo(&manifest, "run", case);
        assert!(
            output.status.success(),
            "{case} compiles and runs to the end:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
