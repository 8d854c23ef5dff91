//! The arithmetic of `cargo xtask bench`: rates and ratios of what a run measured, kept apart so
//! that the tests can check them without a broker or ClickHouse.

pub(crate) fn per_second(count: f64, seconds: f64) -> f64 {
    if seconds > 0.0 { count / seconds } else { 0.0 }
}

/// CPU seconds per million records.
pub(crate) fn per_million(cpu_seconds: f64, records: u64) -> f64 {
    cpu_seconds / (records as f64 / 1e6)
}

/// The rate of a counter between consecutive points, at the end of each interval.
pub(crate) fn rates(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    points.windows(2).filter(|w| w[1].0 > w[0].0).map(|w| (w[1].0, (w[1].1 - w[0].1) / (w[1].0 - w[0].0))).collect()
}

/// The rate between the first points at or past 10% and 90% of `total`.
pub(crate) fn steady_rate(points: &[(f64, f64)], total: f64) -> f64 {
    let at = |share: f64| points.iter().find(|(_, y)| *y >= share * total).copied();
    match (at(0.1), at(0.9)) {
        (Some((t1, y1)), Some((t2, y2))) if t2 > t1 => (y2 - y1) / (t2 - t1),
        _ => 0.0,
    }
}

/// The pipeline against the slower of the two raw limits.
pub(crate) fn ratio_to_limit(pipeline: f64, source: f64, sink: f64) -> f64 {
    pipeline / source.min(sink)
}

/// The CPU target docs/BENCHMARKS.md holds the pipeline to: 1.25 × (raw consumer + raw
/// inserter), per million records.
pub(crate) fn cpu_target(consumer: f64, inserter: f64) -> f64 {
    1.25 * (consumer + inserter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_and_the_cpu_target() {
        // A pipeline at 400k records/s against a source at 1.6M/s and a sink at 800k/s: half the
        // slower limit.
        assert_eq!(ratio_to_limit(400_000.0, 1_600_000.0, 800_000.0), 0.5);
        assert_eq!(per_second(10_000_000.0, 12.5), 800_000.0);
        assert_eq!(per_second(5.0, 0.0), 0.0);
        assert_eq!(per_million(3.0, 10_000_000), 0.3);
        assert_eq!(cpu_target(0.5, 0.3), 1.0);
    }

    #[test]
    fn rates_between_samples() {
        let points = [(0.0, 0.0), (0.25, 100_000.0), (0.5, 300_000.0), (0.5, 300_000.0), (1.0, 300_000.0)];
        assert_eq!(rates(&points), vec![(0.25, 400_000.0), (0.5, 800_000.0), (1.0, 0.0)]);
    }

    #[test]
    fn the_steady_rate_leaves_out_start_and_tail() {
        let done = [(0.0, 0.0), (1.0, 50.0), (2.0, 150.0), (3.0, 550.0), (4.0, 950.0), (9.0, 1000.0)];
        // 10% (100) is first reached at 2 s with 150, 90% (900) at 4 s with 950.
        assert_eq!(steady_rate(&done, 1000.0), 400.0);
        assert_eq!(steady_rate(&done[..3], 1000.0), 0.0, "never reaches 90%");
    }
}
