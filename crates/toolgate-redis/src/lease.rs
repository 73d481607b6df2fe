//! How long a concurrency lease lives in Redis when nothing releases it.
//!
//! A process releases its leases itself when its calls end (or, in the gateway, when
//! a lease expires and its reaper completes it). The TTL in Redis is the backstop for
//! a process that died with calls in flight: its slots come back after it. It must
//! therefore be at least as long as the process may hold a lease, or a live call
//! would lose its slot to another call; the gateway sets it from its own lease TTLs
//! and again on every reload (`QuotaStore::set_lease_ttl` on the engine's store).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The default lease TTL: a concurrency slot held longer is given back.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(60);

/// The shortest lease TTL; shorter ones are raised to it.
pub const MIN_LEASE_TTL: Duration = Duration::from_millis(1);

/// The longest lease TTL (10 years); longer ones are lowered to it, so that a lease's
/// expiry (Redis µs) stays an exact integer in the scripts' doubles.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(10 * 365 * 86_400);

/// A gate's lease TTL in µs, shared by the gates a reload derives from one another,
/// so that a new TTL applies to every admission from then on.
#[derive(Debug, Clone)]
pub(crate) struct LeaseTtl(Arc<AtomicU64>);

// === impl LeaseTtl ===

impl LeaseTtl {
    pub(crate) fn new(ttl: Duration) -> Self {
        Self(Arc::new(AtomicU64::new(micros(ttl))))
    }

    /// Leases admitted from now on live `ttl` (clamped to
    /// [`MIN_LEASE_TTL`]..=[`MAX_LEASE_TTL`]); those already held keep theirs.
    pub(crate) fn set(&self, ttl: Duration) {
        self.0.store(micros(ttl), Ordering::Relaxed);
    }

    /// The TTL in µs, as the admission script takes it.
    pub(crate) fn micros(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

fn micros(ttl: Duration) -> u64 {
    let ttl = ttl.clamp(MIN_LEASE_TTL, MAX_LEASE_TTL);
    u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ttl_is_clamped_to_what_the_scripts_hold_exactly_and_shared_by_clones() {
        let ttl = LeaseTtl::new(Duration::ZERO);
        assert_eq!(ttl.micros(), 1_000);
        let derived = ttl.clone();
        ttl.set(Duration::MAX);
        assert_eq!(derived.micros(), 315_360_000_000_000);
        assert!(derived.micros() < 1 << 49);
        derived.set(Duration::from_secs(65));
        assert_eq!(ttl.micros(), 65_000_000);
    }
}
