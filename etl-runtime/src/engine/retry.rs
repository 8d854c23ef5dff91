//! Retry timing: exponential backoff with full jitter, for sink writes and ledger records.

use std::time::Duration;

use rand::Rng;

use crate::config::RetryConfig;

/// Full jitter: a uniform wait in `[0, min(max_backoff, initial_backoff × 2^(attempt-1))]`.
pub(crate) fn backoff(retry: &RetryConfig, attempt: u32) -> Duration {
    let factor = 1u32.checked_shl(attempt.saturating_sub(1).min(31)).unwrap_or(u32::MAX);
    let cap = retry.initial_backoff.saturating_mul(factor).min(retry.max_backoff);
    let nanos = cap.as_nanos().min(u128::from(u64::MAX)) as u64;
    Duration::from_nanos(rand::rng().random_range(0..=nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The backoff stays within its exponential cap and never exceeds max_backoff.
    #[test]
    fn backoff_is_bounded_by_exponential_cap() {
        let retry = RetryConfig {
            max_attempts: Some(10),
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        };
        for attempt in 1..40 {
            let cap = Duration::from_millis(100).saturating_mul(1 << (attempt - 1).min(20)).min(Duration::from_secs(1));
            for _ in 0..50 {
                assert!(backoff(&retry, attempt) <= cap);
            }
        }
    }
}
