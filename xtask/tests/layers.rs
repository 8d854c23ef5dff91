//! The import structure of the two library crates, read from the `crate::` paths of their
//! sources: in each, modules import one way (no circle); the runtime's engine never imports an
//! adapter or the process shell; in the generator no stage imports a later one (model, ir,
//! readers, rules, plan, load, emit, cli), Avro's types stay in the Avro reader and its
//! decoder, and emitter functions stay short. xtask's modules import one way too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What the engine may not import: the adapters and the process shell around it.
const OUTSIDE_THE_ENGINE: &[&str] =
    &["kafka", "clickhouse", "file_sink", "datagen", "registry", "codec", "run", "admin", "entry", "chain_harness"];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `engine/pipeline/mod.rs` → `engine::pipeline`; `lib.rs` → ``.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src").with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts.join("::")
}

/// The module graph of `crate_dir` (`etl-runtime`, `etl-gen`): each module and the modules its
/// non-test code names by a `crate::` path (its own ancestors and descendants are one family, not
/// an edge).
fn graph(crate_dir: &str) -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(crate_dir).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let modules: BTreeMap<String, PathBuf> = files.iter().map(|f| (module_of(&src, f), f.clone())).collect();
    let mut names: Vec<&String> = modules.keys().filter(|m| !m.is_empty()).collect();
    names.sort_by_key(|m| std::cmp::Reverse(m.len()));
    let mut graph = BTreeMap::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).expect("a source file");
        let code = text.split("\n#[cfg(test)]\nmod tests").next().unwrap_or_default();
        let mut edges = BTreeSet::new();
        for path in imported_paths(module, code) {
            let Some(target) = names.iter().find(|n| path == ***n || path.starts_with(&format!("{n}::"))) else {
                continue;
            };
            let family = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}::"));
            if !family(module, target) && !family(target, module) {
                edges.insert((*target).clone());
            }
        }
        graph.insert(module.clone(), edges);
    }
    graph
}

/// The module paths `code` (of `module`) names, from the crate root: `crate::a::b` as `a::b`, and
/// `super::b` (any number of `super`s) from the module's parent.
fn imported_paths(module: &str, code: &str) -> Vec<String> {
    let path_at = |at: usize| -> String {
        code[at..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_' || *c == ':')
            .collect()
    };
    let mut out: Vec<String> = code.match_indices("crate::").map(|(at, _)| path_at(at + "crate::".len())).collect();
    let segments: Vec<&str> = if module.is_empty() { Vec::new() } else { module.split("::").collect() };
    for (at, _) in code.match_indices("super::") {
        if code[..at].ends_with("super::") {
            continue;
        }
        let mut rest = at;
        let mut up = 0;
        while code[rest..].starts_with("super::") {
            rest += "super::".len();
            up += 1;
        }
        let Some(base) = segments.len().checked_sub(up) else { continue };
        let tail = path_at(rest);
        let full =
            segments[..base].iter().copied().chain(std::iter::once(tail.as_str())).collect::<Vec<_>>().join("::");
        out.push(full);
    }
    out
}

/// A path of imports from `from` back to itself, if there is one.
fn circle_through(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    let mut stack = vec![(from.to_owned(), vec![from.to_owned()])];
    let mut seen = BTreeSet::new();
    while let Some((at, path)) = stack.pop() {
        for next in graph.get(&at).into_iter().flatten() {
            if next == from {
                return Some([path.clone(), vec![next.clone()]].concat());
            }
            if seen.insert(next.clone()) {
                stack.push((next.clone(), [path.clone(), vec![next.clone()]].concat()));
            }
        }
    }
    None
}

/// Every circle of `graph`, each as a path of imports.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    graph.keys().filter_map(|m| circle_through(graph, m)).map(|path| path.join(" -> ")).collect()
}

#[test]
fn runtime_modules_import_one_way() {
    let graph = graph("etl-runtime");
    assert!(graph.len() > 30, "the runtime's source tree was not found: {graph:?}");
    let circles = circles(&graph);
    assert!(circles.is_empty(), "runtime modules that import each other:\n{}", circles.join("\n"));
}

#[test]
fn the_engine_never_imports_an_adapter() {
    let graph = graph("etl-runtime");
    let mut wrong = Vec::new();
    for (module, imports) in graph.iter().filter(|(m, _)| m.starts_with("engine")) {
        for import in imports {
            let top = import.split("::").next().unwrap_or_default();
            if OUTSIDE_THE_ENGINE.contains(&top) {
                wrong.push(format!("{module} imports {import}"));
            }
        }
    }
    assert!(graph.contains_key("engine::delivery::exactly_once"), "the engine's modules were not found");
    assert!(wrong.is_empty(), "the engine reaches out:\n{}", wrong.join("\n"));
}

#[test]
fn generator_stages_run_one_way() {
    let graph = graph("etl-gen");
    assert!(graph.contains_key("load") && graph.contains_key("emit"), "the generator's modules were not found");
    let circles = circles(&graph);
    assert!(circles.is_empty(), "generator modules that import each other:\n{}", circles.join("\n"));
    // Each stage may use the ones before it, never one after it.
    let stages = ["model", "ir", "readers", "rules", "plan", "load", "emit", "cli"];
    let mut wrong = Vec::new();
    for (i, stage) in stages.iter().enumerate() {
        let later = &stages[i + 1..];
        for (module, imports) in graph.iter().filter(|(m, _)| *m == stage || m.starts_with(&format!("{stage}::"))) {
            for import in imports {
                let top = import.split("::").next().unwrap_or_default();
                if later.contains(&top) {
                    wrong.push(format!("{module} imports {import}, a later stage"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "the generator runs backwards:\n{}", wrong.join("\n"));
}

/// The non-test code of each `.rs` file under `etl-gen/src/<dir>`, by path relative to `src`.
fn generator_code(dir: &str) -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../etl-gen/src");
    let mut files = Vec::new();
    sources(&src.join(dir), &mut files);
    files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).expect("a source file");
            // The unit tests at the end of a file, not a `#[cfg(test)]` inside generated tokens.
            let code = text.split("\n#[cfg(test)]\nmod tests").next().unwrap_or_default().to_owned();
            (f.strip_prefix(&src).expect("under src").display().to_string(), code)
        })
        .collect()
}

// The IR is format-neutral: Avro's own types are read by its reader and its decoder's emitter,
// and nothing else (the rules, the planner, the JSON and Protobuf emitters) sees them.
#[test]
fn avro_types_stay_in_the_avro_reader_and_decoder() {
    let files = generator_code("");
    assert!(files.len() > 40, "the generator's sources were not found");
    let allowed = ["readers/avro.rs", "emit/avro.rs"];
    let wrong: Vec<&str> = files
        .iter()
        .filter(|(path, code)| {
            !allowed.contains(&path.as_str())
                && code.lines().any(|l| !l.trim_start().starts_with("//") && l.contains("AvroType"))
        })
        .map(|(path, _)| path.as_str())
        .collect();
    assert!(wrong.is_empty(), "AvroType outside the Avro reader and decoder: {wrong:?}");
}

/// The name of the function a trimmed line declares (`fn f(`, `pub fn f(`, `pub(super) fn f(`,
/// `const fn f(`), if it declares one.
fn declared_fn(trimmed: &str) -> Option<String> {
    let rest = match trimmed.strip_prefix("pub") {
        Some(r) if r.starts_with('(') => r.split_once(") ").map_or(r, |(_, r)| r),
        Some(r) => r.trim_start(),
        None => trimmed,
    };
    let rest = rest.strip_prefix("const ").unwrap_or(rest);
    let rest = rest.strip_prefix("fn ")?;
    Some(rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect())
}

/// The functions of `code` with their lengths in lines: from the line that declares one to the
/// first line after it that is its indentation and `}` (a one-line function counts one).
fn function_lengths(code: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let Some(name) = declared_fn(trimmed) else { continue };
        if trimmed.ends_with('}') {
            out.push((name, 1));
            continue;
        }
        let close = format!("{}}}", &line[..line.len() - trimmed.len()]);
        if let Some(end) = lines[i + 1..].iter().position(|l| *l == close) {
            out.push((name, end + 2));
        }
    }
    out
}

// Emission reads as a set of small functions: none longer than about a screen and a half.
#[test]
fn emitter_functions_stay_short() {
    const MOST_LINES: usize = 120;
    let files = generator_code("emit");
    assert!(files.iter().any(|(p, _)| p == "emit/main_fn.rs"), "the emitters were not found");
    let mut long = Vec::new();
    for (path, code) in &files {
        let lengths = function_lengths(code);
        assert!(!lengths.is_empty() || code.len() < 200, "no function found in {path}");
        for (name, lines) in lengths {
            if lines > MOST_LINES {
                long.push(format!("{path}: {name} has {lines} lines"));
            }
        }
    }
    assert!(long.is_empty(), "emitter functions over {MOST_LINES} lines:\n{}", long.join("\n"));
}

#[test]
fn xtask_modules_import_one_way() {
    let graph = graph("xtask");
    assert!(graph.contains_key("soak::sampling") && graph.contains_key("lab"), "xtask's modules were not found");
    let circles = circles(&graph);
    assert!(circles.is_empty(), "xtask modules that import each other:\n{}", circles.join("\n"));
}
