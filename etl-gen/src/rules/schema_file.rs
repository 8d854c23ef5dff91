//! E0601 and what every format's schema rules share: the schema file must be readable, and a
//! reader's unsupported constructs become diagnostics the same way for every format.

use crate::diag::{Diagnostic, Rule};
use crate::readers::Unsupported;

/// The schema file is missing or unreadable.
pub(crate) static MISSING: Rule = Rule {
    code: "E0601",
    name: "schema-missing",
    summary: "`format.<avro|json|protobuf>.schema` names a file that cannot be read",
    doc: "The reader schema is compiled into the binary, so it must exist at gen time. The \
path is relative to the directory of pipeline.yaml.",
};

/// The diagnostic for a schema file that cannot be read (the loader reads it); `path` is the
/// key that names it.
pub(crate) fn unreadable(path: &str, relative: &str, e: &std::io::Error) -> Diagnostic {
    Diagnostic::error(&MISSING, path, format!("cannot read the schema `{relative}`: {e}"))
        .on_value()
        .note("the path is relative to the directory of pipeline.yaml")
        .help("check the path, or create the schema file")
}

/// The diagnostics of a schema's unsupported constructs (every format's), each naming the schema
/// file, the construct's place (`field` or `at` its path) and the fix.
pub(crate) fn unsupported(
    rule: &'static Rule,
    path: &str,
    relative: &str,
    place: &str,
    found: Vec<Unsupported>,
) -> Vec<Diagnostic> {
    found
        .into_iter()
        .map(|u| {
            Diagnostic::error(rule, path, format!("`{relative}`, {place} `{}`: {}", u.path, u.what))
                .on_value()
                .help(u.fix)
        })
        .collect()
}
