//! A tool's observed run time ([`Latencies`]): the p90 of the latest latencies its
//! completions reported, which bounds the wait of a call with a deadline (see
//! [`crate::Call::deadline`]).
//!
//! A fixed ring of the last [`Latencies::WINDOW`] latencies, lock-free: a completion
//! writes one slot (one `fetch_add`, one store) and nothing else. The p90 is worked out
//! when a call with a deadline asks for it, and kept with the count it was worked out
//! at: asked again, it is worked out anew (a sort of a copy of the ring) while the ring
//! fills and then once every [`Latencies::REFRESH`] completions, and read from one
//! word otherwise. So completions never pay for it, calls without a deadline never
//! read it, and it follows a change of the upstream's speed within `WINDOW`
//! completions. Bounded in memory (66 words a tool). Only completions that carry a
//! latency feed it; before any did, the expected run time is zero (the deadline alone
//! bounds the wait).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::clock::{nanos, Nanos};

/// The latest latencies of one tool's completions, and their p90.
#[derive(Debug)]
pub(crate) struct Latencies {
    /// Each a latency in nanoseconds plus one (`0`: empty).
    ring: [AtomicU64; Self::WINDOW],
    /// How many latencies were recorded (the next slot, modulo `WINDOW`).
    next: AtomicUsize,
    /// The p90 of the ring at its last refresh, in nanoseconds.
    p90: AtomicU64,
    /// The count of recorded latencies `p90` was worked out at (`usize::MAX`: never).
    p90_at: AtomicUsize,
}

// === impl Latencies ===

impl Latencies {
    /// How many of the latest latencies the p90 is taken over.
    pub(crate) const WINDOW: usize = 64;
    /// Once the ring is full, the p90 is refreshed every this many completions.
    pub(crate) const REFRESH: usize = 8;

    pub(crate) fn new() -> Self {
        Self {
            ring: std::array::from_fn(|_| AtomicU64::new(0)),
            next: AtomicUsize::new(0),
            p90: AtomicU64::new(0),
            p90_at: AtomicUsize::new(usize::MAX),
        }
    }

    /// Records one completion's latency.
    pub(crate) fn record(&self, latency: Duration) {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        let stored = nanos(latency).saturating_add(1);
        self.ring[i % Self::WINDOW].store(stored, Ordering::Relaxed);
    }

    /// The expected run time of a call: the p90 latency of the latest completions
    /// (at most `REFRESH` completions old once the ring is full), zero before any
    /// reported one.
    pub(crate) fn p90(&self) -> Nanos {
        let n = self.next.load(Ordering::Relaxed);
        let at = self.p90_at.load(Ordering::Relaxed);
        let stale = at == usize::MAX
            || (n != at && (n <= Self::WINDOW || n >= at.saturating_add(Self::REFRESH)));
        if !stale {
            return self.p90.load(Ordering::Relaxed);
        }
        // Two calls may work it out at once: both store what they saw, either is right.
        let v = self.quantile_90();
        self.p90.store(v, Ordering::Relaxed);
        self.p90_at.store(n, Ordering::Relaxed);
        v
    }

    /// Whether a call started at `now` is expected to finish after its `deadline`,
    /// if it has one: less than the p90 latency is left.
    pub(crate) fn too_late(&self, now: Nanos, deadline: Option<Nanos>) -> bool {
        deadline.is_some_and(|d| now.saturating_add(self.p90()) > d)
    }

    /// The latest start a call with `deadline` accepts: the deadline less the p90.
    pub(crate) fn latest_start(&self, deadline: Nanos) -> Nanos {
        deadline.saturating_sub(self.p90())
    }

    /// The p90 of the ring now: the smallest latency at least 90 % of the recorded
    /// ones do not exceed (nearest rank).
    fn quantile_90(&self) -> Nanos {
        let mut seen = [0u64; Self::WINDOW];
        let mut n = 0;
        for slot in &self.ring {
            let v = slot.load(Ordering::Relaxed);
            if v != 0 {
                seen[n] = v - 1;
                n += 1;
            }
        }
        if n == 0 {
            return 0;
        }
        let seen = &mut seen[..n];
        seen.sort_unstable();
        // Nearest rank: ceil(0.9 n), one-based.
        seen[(9 * n).div_ceil(10) - 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_p90_is_zero_before_any_latency_and_then_the_nearest_rank() {
        let l = Latencies::new();
        assert_eq!(l.p90(), 0);
        l.record(ms(7));
        assert_eq!(l.p90(), nanos(ms(7)));
        let l = Latencies::new();
        for i in 1..=10 {
            l.record(ms(i * 10));
        }
        // Ten samples 10..100 ms: the 9th smallest is the p90.
        assert_eq!(l.p90(), nanos(ms(90)));
    }

    #[test]
    fn the_ring_forgets_old_latencies() {
        let l = Latencies::new();
        for _ in 0..Latencies::WINDOW {
            l.record(ms(500));
        }
        assert_eq!(l.p90(), nanos(ms(500)));
        // A faster upstream: after a whole window of fast calls only they count.
        for _ in 0..Latencies::WINDOW {
            l.record(ms(20));
        }
        assert_eq!(l.p90(), nanos(ms(20)));
    }
}
