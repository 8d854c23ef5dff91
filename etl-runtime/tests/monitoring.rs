//! examples/monitoring against the metrics the binary exports: every metric and label the alert
//! rules and the dashboard query is in the runtime's catalogue (which `catalogue_matches_registry`
//! holds equal to the registry), and every alert has a promtool test in which it fires.
//! promtool's own checks (`promtool check rules`, `promtool test rules`) run in `cargo xtask test`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use etl_runtime::metric_catalogue;

fn monitoring(file: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/monitoring").join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The series names a metric exports, with the labels each may carry: a histogram's `_bucket`
/// (with `le`), `_sum` and `_count`; Prometheus adds `job` and `instance` to all of them. `up` is
/// Prometheus' own.
fn exported() -> BTreeMap<String, BTreeSet<String>> {
    let mut series = BTreeMap::new();
    let scrape = ["job", "instance"];
    for doc in metric_catalogue() {
        let labels: BTreeSet<String> = doc.labels.iter().chain(&scrape).map(|l| (*l).to_owned()).collect();
        if doc.kind == "histogram" {
            let mut bucket = labels.clone();
            bucket.insert("le".to_owned());
            series.insert(format!("{}_bucket", doc.name), bucket);
            series.insert(format!("{}_sum", doc.name), labels.clone());
            series.insert(format!("{}_count", doc.name), labels);
        } else {
            series.insert(doc.name.to_owned(), labels);
        }
    }
    series.insert("up".to_owned(), scrape.iter().map(|l| (*l).to_owned()).collect());
    series
}

/// A metric named in a query, with the labels its selector matches on.
#[derive(Debug)]
struct Selector {
    name: String,
    labels: Vec<String>,
}

/// The selectors of a PromQL expression whose names are ours (`etl_`, `process_`) or `up`.
/// Enough of PromQL for this: identifiers outside strings, and the `{label op "value", ...}`
/// right after one.
fn selectors(expr: &str) -> Vec<Selector> {
    let bytes = expr.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'"' || c == b'\'' {
            i += 1;
            while i < bytes.len() && bytes[i] != c {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b':') {
                i += 1;
            }
            let name = &expr[start..i];
            let ours = name.starts_with("etl_") || name.starts_with("process_") || name == "up";
            // `up` is also a word in label_values(...) and in templates; only a selector counts.
            let preceded_by_dot_or_dollar = start > 0 && matches!(bytes[start - 1], b'$' | b'.');
            if ours && !preceded_by_dot_or_dollar {
                let mut labels = Vec::new();
                let mut j = i;
                while j < bytes.len() && bytes[j] == b' ' {
                    j += 1;
                }
                if j < bytes.len() && bytes[j] == b'{' {
                    let end = expr[j..].find('}').map_or(expr.len(), |e| j + e);
                    for matcher in split_matchers(&expr[j + 1..end]) {
                        let label: String =
                            matcher.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                        if !label.is_empty() {
                            labels.push(label);
                        }
                    }
                    i = end;
                }
                found.push(Selector { name: name.to_owned(), labels });
            }
            continue;
        }
        i += 1;
    }
    found
}

/// Splits `a="x", b=~"y,z"` at the commas outside quotes.
fn split_matchers(inside: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quote) = (0, None);
    for (i, c) in inside.char_indices() {
        match (c, quote) {
            ('"' | '\'', None) => quote = Some(c),
            (q, Some(open)) if q == open => quote = None,
            (',', None) => {
                parts.push(&inside[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inside[start..]);
    parts
}

/// Checks every selector of `expr` against what the binary exports; returns the problems.
fn check(place: &str, expr: &str, exported: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut problems = Vec::new();
    for selector in selectors(expr) {
        match exported.get(&selector.name) {
            None => problems.push(format!("{place}: `{}` is not a metric the binary exports", selector.name)),
            Some(labels) => {
                for label in selector.labels.iter().filter(|l| !labels.contains(*l)) {
                    problems.push(format!("{place}: `{}` has no label `{label}`", selector.name));
                }
            }
        }
    }
    problems
}

/// Checks every `(place, expression)` of `file` against what the binary exports, failing with
/// all the problems at once; returns the series the expressions use.
fn check_file(file: &str, queries: &[(String, String)]) -> BTreeSet<String> {
    let exported = exported();
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    for (place, expr) in queries {
        problems.extend(check(place, expr, &exported));
        used.extend(selectors(expr).into_iter().map(|s| s.name));
    }
    assert!(problems.is_empty(), "{file}:\n{}", problems.join("\n"));
    used
}

/// The alert rules: `(alert name, expression)`.
fn alert_rules() -> Vec<(String, String)> {
    let rules: serde_yaml::Value = serde_yaml::from_str(&monitoring("alerts.yaml")).expect("alerts.yaml is YAML");
    let mut alerts = Vec::new();
    for group in rules["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let name = rule["alert"].as_str().expect("only alerting rules").to_owned();
            alerts.push((name, rule["expr"].as_str().expect("an expr").to_owned()));
        }
    }
    alerts
}

#[test]
fn the_alert_rules_query_only_exported_metrics_and_labels() {
    let alerts = alert_rules();
    assert!(alerts.len() >= 10, "alerts.yaml has the operator's alerts");
    let queries: Vec<_> = alerts.into_iter().map(|(name, expr)| (format!("alert {name}"), expr)).collect();
    let used = check_file("alerts.yaml", &queries);
    // What the issue asks the alerts to cover, by the metric each one needs.
    for needed in [
        "etl_sink_shard_failing_seconds",
        "etl_backpressure_paused",
        "etl_backpressure_pause_events_total",
        "etl_source_lag_records",
        "etl_source_lag_seconds",
        "etl_source_abandoned_records_total",
        "etl_source_commit_failures_total",
        "etl_exactly_once_replayed_batches_total",
        "process_start_time_seconds",
        "process_resident_memory_bytes",
        "etl_memory_bound_bytes",
        "etl_source_stalled_partitions",
    ] {
        assert!(used.contains(needed), "no alert watches {needed}");
    }
}

#[test]
fn every_alert_fires_in_a_promtool_test() {
    let tests: serde_yaml::Value =
        serde_yaml::from_str(&monitoring("alerts_test.yaml")).expect("alerts_test.yaml is YAML");
    let mut fired = BTreeSet::new();
    let mut silent = BTreeSet::new();
    for test in tests["tests"].as_sequence().expect("tests") {
        for case in test["alert_rule_test"].as_sequence().into_iter().flatten() {
            let name = case["alertname"].as_str().expect("alertname").to_owned();
            if case["exp_alerts"].as_sequence().is_some_and(|a| !a.is_empty()) {
                fired.insert(name);
            } else {
                silent.insert(name);
            }
        }
    }
    for (name, _) in alert_rules() {
        assert!(fired.contains(&name), "alerts_test.yaml has no case in which {name} fires");
        assert!(silent.contains(&name), "alerts_test.yaml has no case in which {name} stays silent");
    }
}

#[test]
fn the_dashboard_queries_only_exported_metrics_and_labels() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&monitoring("dashboard.json")).expect("dashboard.json is JSON");
    let mut queries = Vec::new();
    collect_queries(&dashboard, "dashboard", &mut queries);
    assert!(queries.len() >= 20, "the dashboard's panels have queries: {}", queries.len());
    let used = check_file("dashboard.json", &queries);
    // What the issue asks the dashboard to show, by the series each panel needs.
    for needed in [
        "etl_records_in_total",
        "etl_records_out_total",
        "etl_source_lag_records",
        "etl_backpressure_inflight_bytes",
        "etl_backpressure_high_watermark_bytes",
        "etl_backpressure_low_watermark_bytes",
        "etl_backpressure_paused",
        "etl_queue_depth",
        "etl_sink_insert_duration_seconds_bucket",
        "etl_sink_errors_by_class_total",
        "process_resident_memory_bytes",
        "etl_end_to_end_latency_seconds_bucket",
        "etl_checkpoint_watermark_age_seconds",
    ] {
        assert!(used.contains(needed), "no dashboard panel shows {needed}");
    }
}

/// Every `expr` of the dashboard (panel targets) and every template variable's query, with
/// where it is (the panel's title).
fn collect_queries(value: &serde_json::Value, place: &str, out: &mut Vec<(String, String)>) {
    match value {
        serde_json::Value::Object(map) => {
            let place = map.get("title").and_then(|t| t.as_str()).map_or(place.to_owned(), |t| format!("panel {t:?}"));
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr" | "query" | "definition", serde_json::Value::String(expr)) => {
                        out.push((place.clone(), expr.clone()));
                    }
                    _ => collect_queries(value, &place, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|item| collect_queries(item, place, out)),
        _ => {}
    }
}

// The scanner itself: names inside strings are not selectors, labels are read past commas in
// quoted values, and a name without braces has no labels.
#[test]
fn the_selector_scanner_reads_names_and_labels() {
    let found = selectors(
        r#"sum by (shard) (rate(etl_sink_errors_total{job="$job", class=~"a,b"}[5m])) / up and label_values(etl_build_info, "etl_x")"#,
    );
    let names: Vec<_> = found.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["etl_sink_errors_total", "up", "etl_build_info"]);
    assert_eq!(found[0].labels, ["job", "class"]);
    let problems = check("t", r#"etl_sink_errors_total{class="x"} + etl_nope"#, &exported());
    assert_eq!(
        problems,
        ["t: `etl_sink_errors_total` has no label `class`", "t: `etl_nope` is not a metric the binary exports"]
    );
}
