//! The validation corpus: every invalid file is rejected with exactly the rules its
//! `# expect:` line names, and its rendered diagnostics are snapshot-tested; every valid
//! file and every example passes.

use std::path::Path;

use etl_gen::{Options, validate_file, validate_str};

fn expected_codes(text: &str) -> Vec<String> {
    let line = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("# expect:"))
        .expect("an invalid case starts with `# expect: CODE ...`");
    let mut codes: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
    codes.sort();
    codes
}

#[test]
fn invalid_files_are_rejected_by_the_expected_rules() {
    insta::glob!("corpus/invalid/*.yaml", |path| {
        let text = std::fs::read_to_string(path).unwrap();
        let name = format!("corpus/invalid/{}", path.file_name().unwrap().to_string_lossy());
        let outcome = validate_str(&name, &text, path.parent().unwrap(), &Options::default());
        let rendered = outcome.report.render();
        let mut codes: Vec<String> = outcome.report.errors().map(|d| d.rule.code.to_owned()).collect();
        codes.sort();
        assert_eq!(codes, expected_codes(&text), "{name}:\n{rendered}");
        assert!(outcome.pipeline.is_none(), "{name} must not produce a pipeline");
        // Every error names the line and column it is about.
        assert!(rendered.contains(&format!("{name}:")), "{rendered}");
        insta::assert_snapshot!(rendered);
    });
}

#[test]
fn valid_files_pass() {
    insta::glob!("corpus/valid/*.yaml", |path| {
        let outcome = validate_file(path, &Options::default()).unwrap();
        assert!(!outcome.report.has_errors(), "{}:\n{}", path.display(), outcome.report.render());
        assert!(outcome.pipeline.is_some());
    });
}

#[test]
fn every_example_passes() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&examples).unwrap() {
        let file = entry.unwrap().path().join("pipeline.yaml");
        if !file.exists() {
            continue;
        }
        let outcome = validate_file(&file, &Options::default()).unwrap();
        assert!(!outcome.report.has_errors(), "{}:\n{}", file.display(), outcome.report.render());
        seen += 1;
    }
    assert!(seen >= 2, "expected the examples to be found, saw {seen}");
}

#[test]
fn unsafe_sizing_is_a_warning_only_when_asked_for() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/invalid/sizing_four_shards.yaml");
    let strict = validate_file(&path, &Options::default()).unwrap();
    assert!(strict.report.has_errors());
    let lax = validate_file(&path, &Options { allow_unsafe_sizing: true }).unwrap();
    assert!(!lax.report.has_errors(), "{}", lax.report.render());
    assert!(lax.report.render().contains("warning[E0401]"));
    assert!(lax.pipeline.is_some());
}

/// The sizing message's fixes, read back from the rendered text, are right to the byte:
/// each passes when applied, and one byte the other way fails.
#[test]
fn sizing_fixes_in_the_message_are_exact() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/invalid/sizing_small_budget.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let rendered = validate_file(&path, &Options::default()).unwrap().report.render();
    let number_after = |marker: &str| -> u64 {
        let at = rendered.find(marker).unwrap_or_else(|| panic!("`{marker}` in:\n{rendered}")) + marker.len();
        rendered[at..].split_whitespace().next().unwrap().parse().unwrap()
    };
    let budget = number_after("max_inflight_bytes to at least ");
    let batch = number_after("batch.max_bytes to at most ");
    let check = |budget: u64, batch: u64| {
        let edited = text
            .replace("max_inflight_bytes: 100000007", &format!("max_inflight_bytes: {budget}"))
            .replace("max_bytes: 32MiB", &format!("max_bytes: {batch}"));
        let outcome = validate_str("x.yaml", &edited, path.parent().unwrap(), &Options::default());
        !outcome.report.errors().any(|d| d.rule.code == "E0401")
    };
    assert!(check(budget, 32 << 20), "the smallest budget passes");
    assert!(!check(budget - 1, 32 << 20), "one byte less fails");
    assert!(check(100_000_007, batch), "the largest batch passes");
    assert!(!check(100_000_007, batch + 1), "one byte more fails");
}

/// E0304 warns, without failing the file, when `startup_timeout` is not above the session
/// timeout: the written one, or librdkafka's 45 s default; a `${VAR}` session timeout is not
/// judged, and the defaults pass.
#[test]
fn startup_timeout_not_above_the_session_timeout_is_a_warning() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/valid/kafka_everything.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let warns = |startup: Option<&str>, session: Option<&str>| {
        let mut edited = match startup {
            Some(s) => text.replace("startup_timeout: 2m", &format!("startup_timeout: {s}")),
            None => text.replace("    startup_timeout: 2m\n", ""),
        };
        if let Some(session) = session {
            edited = edited.replace(
                "      fetch.wait.max.ms: 100\n",
                &format!("      fetch.wait.max.ms: 100\n      session.timeout.ms: {session}\n"),
            );
        }
        let outcome = validate_str("x.yaml", &edited, path.parent().unwrap(), &Options::default());
        assert!(!outcome.report.has_errors(), "{}", outcome.report.render());
        let rendered = outcome.report.render();
        let warned = rendered.contains("warning[E0304]");
        if warned {
            assert!(rendered.contains("help: set `source.kafka.startup_timeout:"), "{rendered}");
        }
        warned
    };
    assert!(!warns(None, None), "the defaults (60 s against 45 s) pass");
    assert!(warns(Some("30s"), None), "30 s against librdkafka's 45 s");
    assert!(warns(Some("45s"), None), "equal is not above");
    assert!(!warns(Some("46s"), None));
    assert!(warns(Some("2m"), Some("120000")), "against a written session timeout");
    assert!(!warns(Some("30s"), Some("6000")));
    assert!(!warns(Some("30s"), Some("\"${SESSION_MS:-45000}\"")), "only known at run time");
}

/// With `outputs`, the sizing rule counts every (output, shard): the smallest budget of three
/// outputs is three times that of one, and both fixes stay exact to the byte.
#[test]
fn sizing_counts_every_output_and_its_fixes_stay_exact() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/valid/outputs.yaml");
    let text =
        std::fs::read_to_string(&path).unwrap().replace("max_inflight_bytes: 4GiB", "max_inflight_bytes: 100000007");
    let validate = |text: &str| validate_str("x.yaml", text, path.parent().unwrap(), &Options::default());
    let fixes = |text: &str| -> (u64, u64) {
        let rendered = validate(text).report.render();
        let number_after = |marker: &str| -> u64 {
            let at = rendered.find(marker).unwrap_or_else(|| panic!("`{marker}` in:\n{rendered}")) + marker.len();
            rendered[at..].split_whitespace().next().unwrap().parse().unwrap()
        };
        (number_after("max_inflight_bytes to at least "), number_after("batch.max_bytes to at most "))
    };
    let (budget, batch) = fixes(&text);
    let passes = |budget: u64, batch: u64| {
        let edited = text.replace("max_inflight_bytes: 100000007", &format!("max_inflight_bytes: {budget}")).replace(
            "    exactly_once: true\n",
            &format!("    exactly_once: true\n    batch: {{ max_bytes: {batch} }}\n"),
        );
        !validate(&edited).report.errors().any(|d| d.rule.code == "E0401")
    };
    const DEFAULT_BATCH: u64 = 16 << 20;
    assert!(passes(budget, DEFAULT_BATCH), "the smallest budget passes");
    assert!(!passes(budget - 1, DEFAULT_BATCH), "one byte less fails");
    assert!(passes(100_000_007, batch), "the largest batch passes");
    assert!(!passes(100_000_007, batch + 1), "one byte more fails");
    // The same file with one output: a third of the right side.
    let start = text.find("  lines:\n").unwrap();
    let end = text.find("sink:\n").unwrap();
    let one_output = format!("{}{}", &text[..start], &text[end..]);
    let (one_budget, _) = fixes(&one_output);
    assert_eq!(budget, 3 * one_budget, "three outputs need three times one output's budget");
}
