//! A histogram of admission waits with fixed buckets, from which p50 and p99 are read.

use std::time::Duration;

/// The upper edge of each bucket, in milliseconds (1-2-5 steps); a wait longer than
/// the last edge falls in the last bucket. A percentile is the upper edge of its
/// bucket, never more than the longest wait counted.
pub const EDGES_MS: [u32; 16] = [
    0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000,
];

/// Counts of waits per bucket, and the longest wait (fixed size: 68 bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Waits {
    counts: [u32; EDGES_MS.len()],
    max_ms: u32,
}

// === impl Waits ===

impl Waits {
    /// Counts one wait (rounded up to whole milliseconds).
    pub fn record(&mut self, waited: Duration) {
        let ms = u32::try_from(waited.as_nanos().div_ceil(1_000_000)).unwrap_or(u32::MAX);
        let i = EDGES_MS
            .iter()
            .position(|&e| ms <= e)
            .unwrap_or(EDGES_MS.len() - 1);
        self.counts[i] = self.counts[i].saturating_add(1);
        self.max_ms = self.max_ms.max(ms);
    }

    /// Adds `other`'s counts to these.
    pub fn merge(&mut self, other: &Self) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a = a.saturating_add(b);
        }
        self.max_ms = self.max_ms.max(other.max_ms);
    }

    /// How many waits were counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|&c| u64::from(c)).sum()
    }

    /// The `q` quantile (0 < q ≤ 1) in milliseconds, `None` when nothing was counted.
    pub fn quantile_ms(&self, q: f64) -> Option<u32> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        // The rank of the quantile, 1-based: at least 1, at most n.
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "n is a count of waits, far below 2^52, and q is in (0, 1]"
        )]
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                return Some(EDGES_MS[i].min(self.max_ms));
            }
        }
        Some(self.max_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn percentiles_are_bucket_edges_capped_by_the_longest_wait() {
        let mut w = Waits::default();
        assert_eq!(w.quantile_ms(0.5), None);
        for _ in 0..98 {
            w.record(Duration::ZERO);
        }
        w.record(ms(7));
        w.record(ms(1_300));
        assert_eq!(w.count(), 100);
        assert_eq!(w.quantile_ms(0.5), Some(0));
        assert_eq!(
            w.quantile_ms(0.99),
            Some(10),
            "7 ms is in the (5, 10] bucket"
        );
        assert_eq!(
            w.quantile_ms(1.0),
            Some(1_300),
            "capped by the longest wait"
        );
        let mut other = Waits::default();
        other.record(ms(120_000));
        w.merge(&other);
        assert_eq!(w.quantile_ms(1.0), Some(60_000), "the last edge");
        assert_eq!(w.count(), 101);
    }

    #[test]
    fn a_sub_millisecond_wait_counts_as_one_millisecond() {
        let mut w = Waits::default();
        w.record(Duration::from_micros(300));
        assert_eq!(w.quantile_ms(0.5), Some(1));
    }
}
