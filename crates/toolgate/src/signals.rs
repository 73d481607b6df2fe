//! What an upstream said about its own limits, kept as gates on its calls: a
//! `Retry-After` pause, and the spreading of its low remaining capacity over its reset
//! window (see [`crate::shaping`]).
//!
//! Why a type of its own: the same gates govern either a whole tool or, on a tool
//! whose own quotas are per tenant, one tenant's calls. Such a tool gives each tenant
//! its own quota, and an upstream that does the same keeps a quota per tenant too, so
//! one tenant's 429 says nothing about another's: pausing every tenant for it would let
//! one tenant (or its upstream account) stop the tool for all. Per-tenant signals live
//! in a bounded map ([`TenantSignals`]), so a flood of tenants cannot exhaust memory.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::HashMap;

use crate::clock::{nanos, Nanos};
use crate::shaping::ServerLimit;
use crate::sync::Mutex;
use crate::tenant_hash::TenantHasher;

/// The upstream's pause and spreading for one tool (or one tenant of it).
#[derive(Debug, Default)]
pub(crate) struct Signals {
    /// Until when the upstream asked not to be called (engine clock; 0: never).
    paused_until: AtomicU64,
    /// Spreading: active until this time (engine clock; 0: off), one call every
    /// `spread_every` ns, the next free slot at `spread_next`.
    spread_until: AtomicU64,
    spread_every: AtomicU64,
    spread_next: AtomicU64,
}

/// A spreading slot claimed by a call, to give back if a quota then refuses it: the
/// next free slot before and after the claim, and whose signals it was claimed on (a
/// tenant's key, on a per-tenant tool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claim {
    pub(crate) before: Nanos,
    pub(crate) after: Nanos,
    pub(crate) tenant: Option<u64>,
}

/// How a signal moved the gates, which is what waiting calls must be re-gated for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Shift {
    /// Nanoseconds of pause added (the pause started or grew by this much).
    pub(crate) paused: Nanos,
    /// Spreading started, changed its interval or ended.
    pub(crate) respread: bool,
}

/// The signals of each tenant of a per-tenant tool, at most `cap` of them.
#[derive(Debug)]
pub(crate) struct TenantSignals {
    /// The process's tenant hasher, kept here (every copy hashes alike: a tenant's
    /// key is the hash its partitions find it by).
    hasher: TenantHasher,
    /// The latest end of any tenant's pause or spreading: while it is past, no tenant
    /// has a gate in force and calls skip the lock.
    latest: AtomicU64,
    entries: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    cap: usize,
    map: HashMap<u64, Signals>,
    /// Each entry by the end of its gates, soonest first: expired entries are dropped
    /// from the front, and when the map is full the entry that ends soonest goes.
    by_end: BTreeSet<(Nanos, u64)>,
}

// === impl Shift ===

impl Shift {
    /// Whether waiting calls must be re-gated.
    pub(crate) fn moved(self) -> bool {
        self.paused > 0 || self.respread
    }
}

impl std::ops::BitOr for Shift {
    type Output = Self;

    fn bitor(self, other: Self) -> Self {
        Self {
            paused: self.paused.saturating_add(other.paused),
            respread: self.respread || other.respread,
        }
    }
}

// === impl Signals ===

impl Signals {
    /// Until when calls are paused (0 or a past time: not paused).
    #[inline]
    pub(crate) fn paused_until(&self) -> Nanos {
        self.paused_until.load(Ordering::Acquire)
    }

    /// Whether no pause or spreading applies at `now`.
    #[inline]
    pub(crate) fn unshaped(&self, now: Nanos) -> bool {
        self.paused_until.load(Ordering::Acquire) <= now
            && self.spread_until.load(Ordering::Acquire) <= now
    }

    /// When the last of the gates in force ends.
    fn ends(&self) -> Nanos {
        self.paused_until()
            .max(self.spread_until.load(Ordering::Acquire))
    }

    /// Pauses until `until` (never shortens a longer pause); the pause added.
    pub(crate) fn pause_until(&self, now: Nanos, until: Nanos) -> Shift {
        let before = self.paused_until.fetch_max(until, Ordering::SeqCst);
        Shift {
            paused: until.saturating_sub(before.max(now)),
            respread: false,
        }
    }

    /// Takes in what an upstream's rate-limit headers said at `now` (its reset already
    /// bounded): under 10 % of the limit left, calls are spread over the reset window;
    /// nothing left pauses until the reset; more room ends the spreading.
    pub(crate) fn server_limit(&self, now: Nanos, s: ServerLimit) -> Shift {
        let reset = nanos(s.reset);
        let was = self.spreading(now);
        if !s.is_low() || reset == 0 || s.remaining == 0 {
            self.spread_until.store(0, Ordering::SeqCst);
            let mut shift = Shift {
                paused: 0,
                respread: was,
            };
            if s.is_low() && reset > 0 {
                shift = shift | self.pause_until(now, now.saturating_add(reset));
            }
            return shift;
        }
        let every = reset / s.remaining;
        let old = self.spread_every.swap(every, Ordering::AcqRel);
        if !was {
            // A fresh window: its first slot is now.
            self.spread_next.store(now, Ordering::Release);
        }
        self.spread_until
            .store(now.saturating_add(reset), Ordering::SeqCst);
        Shift {
            paused: 0,
            respread: !was || old != every,
        }
    }

    /// The interval between spread calls, in ns.
    pub(crate) fn spread_every(&self) -> Nanos {
        self.spread_every.load(Ordering::Acquire)
    }

    /// Whether calls admitted at `at` are spread.
    #[inline]
    pub(crate) fn spreading(&self, at: Nanos) -> bool {
        self.spread_until.load(Ordering::Acquire) > at
    }

    /// Claims the spreading slot at `now`: `Ok(None)` when not spreading,
    /// `Ok(Some(claim))` when claimed, or `Err(next)`, the time of the next free slot.
    pub(crate) fn spread_claim(
        &self,
        now: Nanos,
        tenant: Option<u64>,
    ) -> Result<Option<Claim>, Nanos> {
        if !self.spreading(now) {
            return Ok(None);
        }
        self.claim_slot(now, now).map(|(_, before, after)| {
            Some(Claim {
                before,
                after,
                tenant,
            })
        })
    }

    /// Gives a claimed slot back (the call was then refused by a quota).
    pub(crate) fn unspread(&self, claim: Claim) {
        let _ = self.spread_next.compare_exchange(
            claim.after,
            claim.before,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// Claims the first slot at or after `at` (a waiter's admission time) unless it
    /// lies beyond `deadline`: `Ok(Some(slot))`, or `Err(slot)` unclaimed; `Ok(None)`
    /// when calls admitted at `at` are not spread.
    pub(crate) fn claim_at(&self, at: Nanos, deadline: Nanos) -> Result<Option<Nanos>, Nanos> {
        if !self.spreading(at) {
            return Ok(None);
        }
        self.claim_slot(at, deadline).map(|(t, _, _)| Some(t))
    }

    /// Makes `to` the next free slot again: the waiters' claims from `to` on are
    /// void, to be made afresh in their order (only waiters hold slots in the future:
    /// an immediate call claims a slot only when it is free now).
    pub(crate) fn rewind_spread(&self, to: Nanos) {
        self.spread_next.fetch_min(to, Ordering::AcqRel);
    }

    /// Claims the first slot at or after `at` unless it lies beyond `deadline`:
    /// `Ok((slot, next before, next after))`, or `Err(slot)` unclaimed.
    fn claim_slot(&self, at: Nanos, deadline: Nanos) -> Result<(Nanos, Nanos, Nanos), Nanos> {
        let every = self.spread_every.load(Ordering::Acquire);
        let mut next = self.spread_next.load(Ordering::Acquire);
        loop {
            let t = next.max(at);
            if t > deadline {
                return Err(t);
            }
            let new = t.saturating_add(every);
            match self.spread_next.compare_exchange_weak(
                next,
                new,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok((t, next, new)),
                Err(cur) => next = cur,
            }
        }
    }
}

// === impl TenantSignals ===

impl TenantSignals {
    /// Signals for at most `cap` tenants at once.
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            hasher: TenantHasher::get(),
            latest: AtomicU64::new(0),
            entries: Mutex::new(Entries {
                cap: cap.max(1),
                ..Entries::default()
            }),
        }
    }

    /// Keeps at most `cap` tenants from now on (a reload changed `max_partitions`).
    pub(crate) fn set_cap(&self, cap: usize) {
        self.entries.lock().cap = cap.max(1);
    }

    /// The key of `tenant`: its 64-bit hash, keyed with the process's seed (a flood
    /// of tenant ids cannot aim at one key, [`TenantHasher`]), never 0.
    pub(crate) fn key(&self, tenant: &str) -> u64 {
        Self::key_of(self.hasher.hash(tenant))
    }

    /// The key of the tenant whose hash ([`TenantHasher`]) is `hash` (as its
    /// partition was found by it).
    #[inline]
    pub(crate) fn key_of(hash: u64) -> u64 {
        hash.max(1)
    }

    /// Whether no tenant has a gate in force at `now` (read without the lock).
    #[inline]
    pub(crate) fn quiet(&self, now: Nanos) -> bool {
        self.latest.load(Ordering::Acquire) <= now
    }

    /// Runs `f` on the signals of tenant `key`, if it has any.
    pub(crate) fn with<R>(&self, key: u64, f: impl FnOnce(Option<&Signals>) -> R) -> R {
        f(self.entries.lock().map.get(&key))
    }

    /// Runs `f` on the signals of tenant `key` (to take in a signal), making room for
    /// them if the tenant has none: expired entries are dropped, and when `cap`
    /// tenants still have gates in force, the one whose gates end soonest loses them.
    pub(crate) fn update<R>(&self, key: u64, now: Nanos, f: impl FnOnce(&Signals) -> R) -> R {
        let mut e = self.entries.lock();
        let e = &mut *e;
        while let Some(&(end, k)) = e.by_end.first() {
            if end > now && e.map.len() < e.cap {
                break;
            }
            if end > now && e.map.contains_key(&key) {
                break;
            }
            e.by_end.pop_first();
            e.map.remove(&k);
        }
        let signals = e.map.entry(key).or_default();
        let before = signals.ends();
        let r = f(signals);
        let after = signals.ends();
        e.by_end.remove(&(before, key));
        if after > now {
            e.by_end.insert((after, key));
            self.latest.fetch_max(after, Ordering::SeqCst);
        } else {
            e.map.remove(&key);
        }
        r
    }

    /// Tenants with signals kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().map.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const S: Nanos = 1_000_000_000;

    #[test]
    fn a_pause_only_grows_and_says_by_how_much() {
        let s = Signals::default();
        assert_eq!(s.pause_until(0, 2 * S).paused, 2 * S);
        assert_eq!(s.pause_until(S, 2 * S).paused, 0, "no longer");
        assert_eq!(s.pause_until(S, S).paused, 0, "never shortened");
        assert_eq!(s.paused_until(), 2 * S);
        assert_eq!(s.pause_until(S, 3 * S).paused, S);
    }

    #[test]
    fn spreading_reports_a_change_only_when_its_interval_moves_or_it_ends() {
        let s = Signals::default();
        let low = |left, secs| ServerLimit::new(Some(100), left, Duration::from_secs(secs));
        assert!(s.server_limit(0, low(4, 2)).respread, "starts");
        assert!(!s.server_limit(0, low(4, 2)).respread, "the same interval");
        assert!(s.server_limit(0, low(2, 2)).respread, "a longer interval");
        assert!(s.server_limit(0, low(50, 2)).respread, "ends");
        assert!(!s.server_limit(0, low(50, 2)).respread, "nothing to end");
        let zero = s.server_limit(0, low(0, 3));
        assert_eq!((zero.paused, zero.respread), (3 * S, false));
    }

    #[test]
    fn claims_rewound_to_a_slot_are_made_afresh_from_it() {
        let s = Signals::default();
        let _ = s.server_limit(0, ServerLimit::new(Some(100), 5, Duration::from_secs(5)));
        assert_eq!(s.claim_at(0, 10 * S), Ok(Some(0)));
        assert_eq!(s.claim_at(0, 10 * S), Ok(Some(S)));
        assert_eq!(s.claim_at(0, 10 * S), Ok(Some(2 * S)));
        assert_eq!(
            s.claim_at(0, S),
            Err(3 * S),
            "beyond the deadline: unclaimed"
        );
        s.rewind_spread(S);
        assert_eq!(s.claim_at(0, 10 * S), Ok(Some(S)));
        assert_eq!(s.claim_at(6 * S, 10 * S), Ok(None), "the window is over");
    }

    #[test]
    fn tenant_signals_keep_at_most_cap_tenants_dropping_the_soonest_ending() {
        let t = TenantSignals::new(3);
        for (i, secs) in [5, 2, 9].into_iter().enumerate() {
            let _ = t.update(i as u64, 0, |s| s.pause_until(0, secs * S));
        }
        assert_eq!(t.len(), 3);
        // A fourth tenant: the one whose pause ends soonest (tenant 1, at 2 s) goes.
        let _ = t.update(3, 0, |s| s.pause_until(0, 4 * S));
        assert_eq!(t.len(), 3);
        assert_eq!(t.with(1, |s| s.map(Signals::paused_until)), None);
        assert_eq!(t.with(0, |s| s.map(Signals::paused_until)), Some(5 * S));
        // A tenant already kept is updated in place, whatever the cap.
        let _ = t.update(2, 0, |s| s.pause_until(0, 20 * S));
        assert_eq!(t.len(), 3);
        // Expired entries are dropped as soon as the map is touched.
        let _ = t.update(7, 6 * S, |s| s.pause_until(6 * S, 7 * S));
        assert_eq!(t.len(), 2, "tenants 0 and 3 ended by 6 s");
        assert!(!t.quiet(19 * S));
        assert!(t.quiet(20 * S));
    }

    #[test]
    fn a_flood_of_tenants_never_grows_the_map_past_its_cap() {
        let t = TenantSignals::new(100);
        for k in 0..10_000u64 {
            let _ = t.update(k, 0, |s| s.pause_until(0, (k % 977 + 1) * S));
        }
        assert_eq!(t.len(), 100);
        assert_eq!(t.entries.lock().by_end.len(), 100);
    }
}
