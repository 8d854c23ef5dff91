//! E0401: the backpressure budget must hold what the sink legitimately keeps in flight.
//!
//! ```text
//! max_inflight_bytes × low_ratio ≥ 2 × ( shards × inflight.max_per_shard × batch.max_bytes
//!                                      + shards × queue.capacity × chunk.target_bytes )
//! ```
//! All arithmetic is on integers (the ratio is a decimal fraction), so the two fixes are
//! exact to the byte.

use super::{Context, sink_path};
use crate::diag::{Diagnostic, Rule};
use crate::units::Ratio;

/// The rule.
pub static RULE: Rule = Rule {
    code: "E0401",
    name: "sizing-rule",
    summary: "a backpressure budget too small for the sink's batching",
    doc: "```text\n\
max_inflight_bytes × low_ratio ≥ 2 × ( shards × inflight.max_per_shard × batch.max_bytes\n\
                                     + shards × queue.capacity × chunk.target_bytes )\n\
```\n\n\
The left side is the low watermark: paused lanes resume only below it. The right side is \
twice what the sink legitimately holds in steady state: the batches being written and the \
chunks queued for them. If the low watermark cannot hold that, a saturated pipeline stays \
above its high watermark and the pause controller duty-cycles it at `min_pause`: \
throughput collapses although nothing is wrong (a 24× collapse was measured on the system \
this rule comes from). The message prints both sides with their terms and the two exact \
fixes: the smallest `backpressure.max_inflight_bytes` that passes (rounded up to a whole \
byte) and the largest `batch.max_bytes` that passes with the current budget (rounded down). \
`shards` is the number of entries in `sink.clickhouse.shards` (1 for `sink.file`); with \
`outputs`, each (output, shard) has its own queue, batches and inserts, so `shards` counts \
outputs × shards. Under \
`sink.clickhouse.exactly_once` a lane seals whole batches, so `chunk.target_bytes` counts as \
`batch.max_bytes`. The \
defaults pass for 1 to 3 shards. Keep the rule as a comment next to the knobs in your \
pipeline.yaml.",
};

/// The terms of the rule, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizing {
    /// `backpressure.max_inflight_bytes`
    pub max_inflight_bytes: u64,
    /// `backpressure.low_ratio`
    pub low_ratio: Ratio,
    /// Number of shards.
    pub shards: u64,
    /// `inflight.max_per_shard`
    pub max_per_shard: u64,
    /// `batch.max_bytes`
    pub batch_max_bytes: u64,
    /// `queue.capacity`
    pub queue_capacity: u64,
    /// `chunk.target_bytes`
    pub chunk_target_bytes: u64,
    /// Under `exactly_once` a lane seals whole batches: the queued term grows with
    /// `batch.max_bytes` too.
    pub queued_are_batches: bool,
}

/// The rule's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Left side × 10^scale of the ratio (exact).
    pub left_scaled: u128,
    /// Right side in bytes.
    pub right: u128,
    /// The smallest budget that passes.
    pub min_inflight_bytes: u128,
    /// The largest batch size that passes with the current budget, if any does.
    pub max_batch_bytes: Option<u128>,
}

impl Verdict {
    /// Whether the rule holds.
    pub fn passes(&self, low: Ratio) -> bool {
        self.left_scaled >= self.right * u128::from(low.denominator())
    }
}

impl Sizing {
    /// The rule's inputs, read from a configuration.
    pub fn of(m: &crate::model::PipelineFile) -> Sizing {
        let flow = m.sink.flow();
        // Under exactly-once a lane cuts whole batches, so a queued chunk is a batch.
        let exactly_once = matches!(&m.sink, crate::model::Sink::Clickhouse(c) if c.exactly_once);
        Sizing {
            max_inflight_bytes: m.backpressure.max_inflight_bytes.bytes(),
            low_ratio: m.backpressure.low_ratio,
            // Each (output, shard) is a sink slot of its own: its queue, batches and inserts.
            shards: m.sink.shard_count() * m.output_count(),
            max_per_shard: flow.inflight.max_per_shard,
            batch_max_bytes: flow.batch.max_bytes.bytes(),
            queue_capacity: flow.queue.capacity,
            chunk_target_bytes: flow.chunk.target_bytes.bytes(),
            queued_are_batches: exactly_once,
        }
    }

    /// The size of one queued chunk in the rule: a whole batch under exactly-once.
    pub fn queued_bytes(&self) -> u64 {
        if self.queued_are_batches { self.batch_max_bytes } else { self.chunk_target_bytes }
    }

    /// Evaluates the rule exactly.
    pub fn evaluate(&self) -> Verdict {
        let num = u128::from(self.low_ratio.numerator());
        let den = u128::from(self.low_ratio.denominator());
        let pending = u128::from(self.shards) * u128::from(self.max_per_shard) * u128::from(self.batch_max_bytes);
        let queued = u128::from(self.shards) * u128::from(self.queue_capacity) * u128::from(self.queued_bytes());
        let right = 2 * (pending + queued);
        let left_scaled = u128::from(self.max_inflight_bytes) * num;
        // budget × num / den ≥ right  ⟺  budget ≥ right × den / num, rounded up.
        let min_inflight_bytes = if num == 0 { u128::MAX } else { (right * den).div_ceil(num) };
        // 2 × shards × per_shard × B ≤ budget × num / den − 2 × queued
        // ⟺ B ≤ (budget × num − 2 × queued × den) / (2 × shards × per_shard × den), rounded down.
        // Under exactly-once the queued chunks are batches: B appears in both terms.
        let (per_shard_batches, fixed_queued) = if self.queued_are_batches {
            (u128::from(self.max_per_shard) + u128::from(self.queue_capacity), 0)
        } else {
            (u128::from(self.max_per_shard), queued)
        };
        let divisor = 2 * u128::from(self.shards) * per_shard_batches * den;
        let room = left_scaled.checked_sub(2 * fixed_queued * den);
        let max_batch_bytes = match room {
            Some(room) if divisor > 0 && room / divisor > 0 => Some(room / divisor),
            _ => None,
        };
        Verdict { left_scaled, right, min_inflight_bytes, max_batch_bytes }
    }
}

/// `n` bytes in MiB, rounded in the safe direction for how the figure is used.
pub fn mib(n: u128, round_up: bool) -> String {
    const MIB: u128 = 1 << 20;
    if n.is_multiple_of(MIB) {
        return format!("{} MiB", n / MIB);
    }
    let hundredths = if round_up { (n * 100).div_ceil(MIB) } else { n * 100 / MIB };
    format!("{}.{:02} MiB", hundredths / 100, hundredths % 100)
}

/// Reports a budget that, at the low watermark, does not hold twice what the sink keeps in
/// flight and queued: at the knob the file sets, with the exact fixes (a warning under
/// `allow_unsafe_sizing`).
pub(crate) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let m = cx.model;
    let sizing = Sizing::of(m);
    // Zero counts and sizes are value-range errors; the rule says nothing useful about them.
    if sizing.shards == 0 || sizing.low_ratio.numerator() == 0 || sizing.max_per_shard == 0 {
        return;
    }
    let v = sizing.evaluate();
    if v.passes(sizing.low_ratio) {
        return;
    }
    let batch_path = sink_path(cx, "batch.max_bytes");
    // Point at the budget if the file sets it; otherwise at the knob the user did write.
    let path = ["backpressure.max_inflight_bytes".to_owned(), batch_path.clone(), sink_path(cx, "shards")]
        .into_iter()
        .find(|p| cx.source_map.key(p).is_some())
        .unwrap_or_else(|| "backpressure.max_inflight_bytes".to_owned());
    let den = u128::from(sizing.low_ratio.denominator());
    let left_floor = v.left_scaled / den;
    let left_exact = if v.left_scaled.is_multiple_of(den) {
        format!("{left_floor}")
    } else {
        format!("{left_floor}.{}", fraction(v.left_scaled % den, den))
    };
    let s = sizing;
    let (diag, message) = if cx.options.allow_unsafe_sizing {
        (
            Diagnostic::warning as fn(_, _, _) -> Diagnostic,
            "the backpressure budget breaks the sizing rule (allowed by --allow-unsafe-sizing)",
        )
    } else {
        (
            Diagnostic::error as fn(_, _, _) -> Diagnostic,
            "the backpressure budget is too small for the sink's batching (sizing rule)",
        )
    };
    let queued_unit = if s.queued_are_batches {
        "batch.max_bytes (exactly_once: a lane seals whole batches)"
    } else {
        "chunk.target_bytes"
    };
    let mut d = diag(&RULE, path, message)
        .on_value()
        .note(format!("rule: max_inflight_bytes × low_ratio ≥ 2 × (shards × inflight.max_per_shard × batch.max_bytes + shards × queue.capacity × {queued_unit})"))
        .note(format!(
            "left:  {} × {} = {left_exact} bytes ({})",
            s.max_inflight_bytes,
            s.low_ratio,
            mib(left_floor, false)
        ))
        .note(format!(
            "right: 2 × ({} × {} × {} + {} × {} × {}) = {} bytes ({})",
            s.shards,
            s.max_per_shard,
            s.batch_max_bytes,
            s.shards,
            s.queue_capacity,
            s.queued_bytes(),
            v.right,
            mib(v.right, true)
        ))
        .note(
            "a saturated pipeline would stay above the high watermark and be paused and resumed at min_pause: \
             throughput collapses although nothing is wrong",
        )
        .help(format!(
            "raise backpressure.max_inflight_bytes to at least {} bytes ({})",
            v.min_inflight_bytes,
            mib(v.min_inflight_bytes, true)
        ));
    d = match v.max_batch_bytes {
        Some(b) => d.help(format!("or lower {batch_path} to at most {b} bytes ({})", mib(b, false))),
        None => d.help(format!(
            "no {batch_path} fits this budget: the queued chunks alone (2 × shards × queue.capacity × chunk.target_bytes) need more than the low watermark"
        )),
    };
    if m.output_count() > 1 {
        d = d.note(format!(
            "shards counts every (output, shard): {} outputs × {} shards = {}",
            m.output_count(),
            m.sink.shard_count(),
            s.shards
        ));
    }
    if cx.options.allow_unsafe_sizing {
        d = d.note("--allow-unsafe-sizing is for measuring the collapse; never deploy such a build");
    }
    out.push(d);
}

/// The decimal digits of `rem / den` where den is a power of ten.
fn fraction(rem: u128, den: u128) -> String {
    let width = den.ilog10() as usize;
    format!("{rem:0width$}").trim_end_matches('0').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults(shards: u64) -> Sizing {
        Sizing {
            max_inflight_bytes: 512 << 20,
            low_ratio: Ratio::new(5, 1),
            shards,
            max_per_shard: 2,
            batch_max_bytes: 16 << 20,
            queued_are_batches: false,
            queue_capacity: 8,
            chunk_target_bytes: 256 << 10,
        }
    }

    #[test]
    fn defaults_pass_for_one_to_three_shards() {
        for shards in 1..=3 {
            let s = defaults(shards);
            assert!(s.evaluate().passes(s.low_ratio), "{shards} shards");
        }
        let s = defaults(4);
        let v = s.evaluate();
        assert!(!v.passes(s.low_ratio));
        assert_eq!(v.right, 4 * (68 << 20));
    }

    #[test]
    fn fixes_are_exact_and_tight() {
        let s = Sizing { max_inflight_bytes: 100_000_007, low_ratio: Ratio::new(3, 1), ..defaults(2) };
        let v = s.evaluate();
        assert!(!v.passes(s.low_ratio));
        // The smallest passing budget passes and one byte less does not.
        let fixed = Sizing { max_inflight_bytes: v.min_inflight_bytes as u64, ..s };
        assert!(fixed.evaluate().passes(s.low_ratio));
        let short = Sizing { max_inflight_bytes: v.min_inflight_bytes as u64 - 1, ..s };
        assert!(!short.evaluate().passes(s.low_ratio));
        // The largest passing batch passes and one byte more does not.
        let b = v.max_batch_bytes.unwrap() as u64;
        assert!(Sizing { batch_max_bytes: b, ..s }.evaluate().passes(s.low_ratio));
        assert!(!Sizing { batch_max_bytes: b + 1, ..s }.evaluate().passes(s.low_ratio));
    }

    // Under exactly-once the queued chunks are batches: the fixes stay exact to the byte.
    #[test]
    fn exactly_once_counts_queued_chunks_as_batches() {
        let s = Sizing { queued_are_batches: true, ..defaults(1) };
        let v = s.evaluate();
        assert_eq!(v.right, 2 * (2 + 8) * (16 << 20));
        assert!(!v.passes(s.low_ratio), "the defaults need smaller batches under exactly_once");
        let b = v.max_batch_bytes.unwrap() as u64;
        assert!(Sizing { batch_max_bytes: b, ..s }.evaluate().passes(s.low_ratio));
        assert!(!Sizing { batch_max_bytes: b + 1, ..s }.evaluate().passes(s.low_ratio));
    }

    #[test]
    fn no_batch_fits_when_queues_fill_the_budget() {
        let s = Sizing { max_inflight_bytes: 8 << 20, ..defaults(2) };
        assert_eq!(s.evaluate().max_batch_bytes, None);
    }

    #[test]
    fn mib_rounds_in_the_safe_direction() {
        assert_eq!(mib(68 << 20, true), "68 MiB");
        assert_eq!(mib((1 << 20) + 1, true), "1.01 MiB");
        assert_eq!(mib((2 << 20) - 1, false), "1.99 MiB");
    }
}
