//! examples/ci/github-actions.yml, run locally: every `run:` step but the push, in order,
//! the way GitHub runs them (`bash --noprofile --norc -eo pipefail`, `$GITHUB_ENV` carried
//! from step to step), from the repository root. Then the same steps on a copy of the
//! flagship whose budget breaks the sizing rule: the first step fails with exit 1 and no
//! later step runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_yaml::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("etl-gen lives in the workspace").to_owned()
}

/// One `run:` step.
#[derive(Debug)]
struct Step {
    id: String,
    run: String,
}

struct Workflow {
    env: BTreeMap<String, String>,
    steps: Vec<Step>,
}

fn workflow() -> Workflow {
    let text = std::fs::read_to_string(root().join("examples/ci/github-actions.yml")).unwrap();
    let yaml: Value = serde_yaml::from_str(&text).unwrap();
    // `${{ ... }}` expressions are GitHub's; locally they stand for `local`.
    let expr = |s: &str| {
        let mut out = s.to_owned();
        while let (Some(a), Some(b)) = (out.find("${{"), out.find("}}")) {
            out.replace_range(a..b + 2, "local");
        }
        out
    };
    let env = yaml["env"]
        .as_mapping()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.as_str().unwrap().to_owned(), expr(v.as_str().unwrap())))
        .collect();
    let jobs = yaml["jobs"].as_mapping().unwrap();
    assert_eq!(jobs.len(), 1, "one job");
    let steps = jobs.values().next().unwrap()["steps"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|s| {
            let run = s.get("run")?.as_str()?;
            assert!(!run.contains("${{"), "run scripts read variables, not expressions: {run}");
            Some(Step { id: s["id"].as_str().expect("every run step has an id").to_owned(), run: run.to_owned() })
        })
        .collect();
    Workflow { env, steps }
}

/// What running the steps did.
#[derive(Debug)]
struct Ran {
    /// (step id, exit code) of each step that ran.
    steps: Vec<(String, i32)>,
    /// `$GITHUB_ENV` after the last step.
    env: BTreeMap<String, String>,
    output: String,
}

/// Runs the steps (but the push) until one fails, like a job does.
fn run_steps(workflow: &Workflow, pipeline: &str, work: &Path) -> Ran {
    std::fs::create_dir_all(work).unwrap();
    let github_env = work.join("github_env");
    std::fs::write(&github_env, "").unwrap();
    // `cargo` in the scripts is the toolchain running this test.
    let cargo = PathBuf::from(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    let path = match cargo.parent() {
        Some(dir) if dir.is_dir() => format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default()),
        _ => std::env::var("PATH").unwrap_or_default(),
    };
    let mut ran = Ran { steps: Vec::new(), env: BTreeMap::new(), output: String::new() };
    for step in workflow.steps.iter().filter(|s| s.id != "push") {
        let output = Command::new("bash")
            .args(["--noprofile", "--norc", "-eo", "pipefail", "-c", &step.run])
            .current_dir(root())
            .envs(&workflow.env)
            .envs(&ran.env)
            // The registry and migration steps compare live servers, which this test has not:
            // they take their `not set` branch (their commands are tested in tests/cli.rs and
            // etl-runtime/tests/clickhouse.rs).
            .env_remove("SCHEMA_REGISTRY_URL")
            .env_remove("CLICKHOUSE_MIGRATE_URL")
            .env("PIPELINE", pipeline)
            .env("PATH", &path)
            .env("GITHUB_ENV", &github_env)
            .env("GITHUB_SHA", "0123456789abcdef0123456789abcdef01234567")
            // Where the steps keep their files (table.sql, build.txt, image.txt).
            .env("RUNNER_TEMP", work)
            .output()
            .unwrap();
        let code = output.status.code().unwrap_or(-1);
        ran.output.push_str(&format!(
            "--- {} (exit {code})\n{}{}",
            step.id,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
        ran.steps.push((step.id.clone(), code));
        for line in std::fs::read_to_string(&github_env).unwrap().lines() {
            if let Some((k, v)) = line.split_once('=') {
                ran.env.insert(k.to_owned(), v.to_owned());
            }
        }
        if code != 0 {
            break;
        }
    }
    ran
}

/// Both cases in one test, one after the other: the second builds, and builds run one at
/// a time.
#[test]
fn the_workflow_builds_and_images_the_flagship_and_fails_on_a_broken_sizing() {
    let workflow = workflow();
    let ids: Vec<&str> = workflow.steps.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["check", "registry", "memory", "ddl", "migrate", "image", "test", "push"]);
    let push = &workflow.steps.last().unwrap().run;
    assert!(push.contains("skopeo copy") && push.contains("oci-archive:$ARCHIVE"), "{push}");
    let work = root().join("target").join("ci-workflow-test");
    let _ = std::fs::remove_dir_all(&work);

    // A broken budget: 64MiB × 0.5 is below the 136MiB the sizing rule asks for.
    let broken = work.join("broken");
    std::fs::create_dir_all(broken.join("schemas")).unwrap();
    let example = root().join("examples/kafka_avro_to_clickhouse");
    std::fs::copy(example.join("schemas/order.avsc"), broken.join("schemas/order.avsc")).unwrap();
    let yaml = std::fs::read_to_string(example.join("pipeline.yaml")).unwrap();
    assert!(yaml.contains("max_inflight_bytes: 512MiB"));
    std::fs::write(
        broken.join("pipeline.yaml"),
        yaml.replace("max_inflight_bytes: 512MiB", "max_inflight_bytes: 64MiB"),
    )
    .unwrap();
    let failed = run_steps(&workflow, broken.join("pipeline.yaml").to_str().unwrap(), &work.join("run-broken"));
    assert_eq!(failed.steps, [("check".to_owned(), 1)], "the job stops at the check:\n{}", failed.output);
    assert!(failed.output.contains("max_inflight_bytes"), "the diagnostic names the key:\n{}", failed.output);

    let ok = run_steps(&workflow, "examples/kafka_avro_to_clickhouse/pipeline.yaml", &work.join("run-ok"));
    let table = std::fs::read_to_string(work.join("run-ok/table.sql")).unwrap_or_default();
    assert!(ok.steps.iter().all(|(_, code)| *code == 0), "{}", ok.output);
    assert_eq!(ok.steps.len(), 7, "every step but the push ran:\n{}", ok.output);
    assert!(ok.output.contains("registry compatibility not checked"), "{}", ok.output);
    assert!(ok.output.contains("the live table was not compared"), "{}", ok.output);
    assert!(ok.output.contains("total: "), "the memory step prints the bound:\n{}", ok.output);
    assert!(table.contains("CREATE TABLE IF NOT EXISTS `default`.`orders`"), "{table}");
    assert!(ok.output.contains("orders 0.1.0 (config "), "the binary's --version:\n{}", ok.output);
    let binary = PathBuf::from(&ok.env["BINARY"]);
    assert!(
        binary.ends_with("x86_64-unknown-linux-gnu/release/orders")
            || binary.ends_with("aarch64-unknown-linux-gnu/release/orders"),
        "the tested binary is the image's static one: {binary:?}"
    );
    let archive = PathBuf::from(&ok.env["ARCHIVE"]);
    assert!(archive.is_absolute() && archive.exists(), "{archive:?}");
    assert!(ok.env["DIGEST"].starts_with("sha256:"), "{:?}", ok.env);
    assert!(
        ok.output.contains("ghcr.io/local/orders:0123456789abcdef0123456789abcdef01234567"),
        "tagged with the commit:\n{}",
        ok.output
    );
}
