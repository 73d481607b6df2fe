//! Exponential backoff with full jitter.

use std::time::Duration;

/// Delays between attempts: attempt `n` (0 for the first retry) waits a uniformly
/// random time in `[0, min(cap, base · 2^n)]` ("full jitter"), which spreads clients
/// that failed together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
}

// === impl Backoff ===

impl Backoff {
    /// Backoff between `base` and `cap`.
    ///
    /// # Errors
    ///
    /// When `base` is zero or `cap` is shorter than `base`.
    pub fn try_new(base: Duration, cap: Duration) -> Result<Self, String> {
        if base.is_zero() {
            return Err("base must be longer than zero".into());
        }
        if cap < base {
            return Err("cap must not be shorter than base".into());
        }
        Ok(Self { base, cap })
    }

    /// The ceiling of the delay before retry `attempt` (0-based).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.min(31));
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The delay before retry `attempt`, drawing from `uniform` (a source of values in
    /// `[0, 1)`; inject a fixed one in tests).
    pub fn delay(&self, attempt: u32, uniform: &mut impl FnMut() -> f64) -> Duration {
        self.ceiling(attempt).mul_f64(uniform().clamp(0.0, 1.0))
    }

    /// The delay before retry `attempt`, with a process-wide random source.
    pub fn delay_random(&self, attempt: u32) -> Duration {
        self.delay(attempt, &mut fastrand::f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_stay_within_the_full_jitter_bounds() {
        let b = Backoff::try_new(Duration::from_millis(100), Duration::from_secs(2)).unwrap();
        let ceilings: Vec<u64> = (0..7).map(|n| b.ceiling(n).as_millis() as u64).collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1600, 2000, 2000]);
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(2));
        for n in 0..10 {
            for _ in 0..100 {
                assert!(b.delay_random(n) <= b.ceiling(n));
            }
            assert_eq!(b.delay(n, &mut || 0.0), Duration::ZERO);
            assert_eq!(b.delay(n, &mut || 0.5), b.ceiling(n) / 2);
        }
        assert!(Backoff::try_new(Duration::ZERO, Duration::from_secs(1)).is_err());
        assert!(Backoff::try_new(Duration::from_secs(2), Duration::from_secs(1)).is_err());
    }
}
