//! E0403: a chunk must fit in a batch.

use super::{Context, sink_path};
use crate::diag::{Diagnostic, Rule};

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0403",
    name: "chunk-larger-than-batch",
    summary: "`chunk.target_bytes` larger than `batch.max_bytes`",
    doc: "Pipeline threads hand encoded rows to the sink in chunks of about \
`chunk.target_bytes`; the sink merges chunks into batches of at most `batch.max_bytes`. \
A chunk larger than a batch could never be merged, so `chunk.target_bytes` must not \
exceed `batch.max_bytes`.",
};

/// Reports a `chunk.target_bytes` larger than `batch.max_bytes`: a chunk that no batch can hold.
pub(crate) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let flow = cx.model.sink.flow();
    let (chunk, batch) = (flow.chunk.target_bytes, flow.batch.max_bytes);
    if chunk > batch {
        out.push(
            Diagnostic::error(
                &RULE,
                sink_path(cx, "chunk.target_bytes"),
                format!("`chunk.target_bytes` ({chunk}) is larger than `batch.max_bytes` ({batch})"),
            )
            .on_value()
            .help(format!("lower chunk.target_bytes to at most {batch} (the default is 256KiB)")),
        );
    }
}
