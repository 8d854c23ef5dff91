//! E0402: the watermarks must be ordered: 0 < low_ratio < high_ratio <= 1.

use super::Context;
use crate::diag::{Diagnostic, Rule};
use crate::units::Ratio;

/// The rule.
pub(crate) static RULE: Rule = Rule {
    code: "E0402",
    name: "watermark-order",
    summary: "backpressure ratios not ordered as 0 < low_ratio < high_ratio <= 1",
    doc: "Lanes pause when in-flight bytes cross `max_inflight_bytes × high_ratio` and resume \
below `max_inflight_bytes × low_ratio`. The gap between the two is the hysteresis that \
keeps the controller from flapping, so `low_ratio` must be strictly below `high_ratio`, \
above 0, and `high_ratio` at most 1.",
};

/// Reports watermarks outside 0 < low_ratio < high_ratio <= 1.
pub(crate) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let bp = &cx.model.backpressure;
    let (low, high) = (bp.low_ratio, bp.high_ratio);
    let one = Ratio::new(1, 0);
    if low.numerator() == 0 {
        out.push(
            Diagnostic::error(&RULE, "backpressure.low_ratio", "`low_ratio` is 0: paused lanes would never resume")
                .on_value()
                .help("use a ratio such as 0.5"),
        );
    }
    if one.lt(high) {
        out.push(
            Diagnostic::error(&RULE, "backpressure.high_ratio", format!("`high_ratio` {high} is above 1"))
                .on_value()
                .help("use a ratio in (low_ratio, 1], such as 0.9"),
        );
    }
    if !low.lt(high) {
        out.push(
            Diagnostic::error(
                &RULE,
                "backpressure.low_ratio",
                format!("`low_ratio` {low} is not below `high_ratio` {high}"),
            )
            .on_value()
            .note("the gap between the watermarks is the hysteresis that stops the pause controller from flapping")
            .help("make low_ratio smaller than high_ratio (the defaults are 0.5 and 0.9)"),
        );
    }
}
