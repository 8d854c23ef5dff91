//! The seeded random numbers of the crash scenarios.

/// A small deterministic generator for the random moments of the crash test (the seed is
/// printed, so a failing run can be replayed).
pub struct Rng(u64);

impl Rng {
    pub fn from_time() -> Self {
        let seed = std::env::var("E2E_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
        });
        eprintln!("random seed {seed} (E2E_SEED={seed} replays it)");
        Rng(seed | 1)
    }

    /// Uniform in [lo, hi).
    pub fn between(&mut self, lo: f64, hi: f64) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        lo + (hi - lo) * ((self.0 >> 11) as f64 / (1u64 << 53) as f64)
    }
}
