//! Reading a pipeline's `/metrics` (the Prometheus text format) for `bench` and `soak`: the
//! sum of a metric over its label sets, which is all they need.

/// One scrape: `(series, value)` for every sample line, in order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scrape(Vec<(String, f64)>);

impl Scrape {
    /// Parses the text format; comments, blank lines and unparsable values are skipped.
    pub(crate) fn parse(text: &str) -> Scrape {
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|line| {
                // A label value may contain spaces, so the value is after the last one.
                let (series, value) = line.trim_end().rsplit_once(' ')?;
                Some((series.trim_end().to_owned(), value.parse::<f64>().ok()?))
            })
            .collect();
        Scrape(samples)
    }

    /// The sum of `metric` over all its label sets; 0 when absent. The name must match whole:
    /// `etl_sink_batch_rows` does not include `etl_sink_batch_rows_sum`.
    pub(crate) fn sum(&self, metric: &str) -> f64 {
        self.0.iter().filter(|(series, _)| series.split('{').next() == Some(metric)).map(|(_, value)| value).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# HELP etl_records_out_total Rows durably written by the sink.
# TYPE etl_records_out_total counter
etl_records_out_total 6666
etl_records_dropped_total{reason=\"filtered\"} 3333
etl_records_dropped_total{reason=\"error\"} 1
etl_sink_batch_rows_bucket{shard=\"0\",le=\"+Inf\"} 7
etl_sink_batch_rows_sum{shard=\"0\"} 500000
etl_sink_batch_rows_count{shard=\"0\"} 7
etl_backpressure_inflight_bytes 1.6777216e7
etl_build_info{pipeline=\"a b\",config_hash=\"x\",version=\"0.1.0\"} 1
";

    #[test]
    fn sums_a_metric_over_its_labels() {
        let s = Scrape::parse(TEXT);
        assert_eq!(s.sum("etl_records_out_total"), 6666.0);
        assert_eq!(s.sum("etl_records_dropped_total"), 3334.0);
        assert_eq!(s.sum("etl_backpressure_inflight_bytes"), 16_777_216.0);
        assert_eq!(s.sum("etl_build_info"), 1.0, "a label value with a space");
    }

    #[test]
    fn a_name_matches_whole_and_absent_is_zero() {
        let s = Scrape::parse(TEXT);
        assert_eq!(s.sum("etl_sink_batch_rows"), 0.0, "histogram series have suffixes");
        assert_eq!(s.sum("etl_sink_batch_rows_sum"), 500_000.0);
        assert_eq!(s.sum("etl_records_out"), 0.0);
        assert_eq!(s.sum("etl_backpressure_pause_events_total"), 0.0);
    }
}
