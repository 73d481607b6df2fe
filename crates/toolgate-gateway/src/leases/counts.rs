//! How many leases are open: in all, per tenant and per tool of a tenant, kept as
//! counters so that the caps (`max_leases`, `max_leases_per_tenant`) are checked in
//! O(1) and a tenant's own figures are read without scanning the lease map.
//!
//! Places are taken *before* an admission ([`Counts::take`]) and each is either
//! used by a lease or given back when the [`Places`] are dropped, so a call refused
//! for want of a place was never admitted (nothing charged), and the caps are exact:
//! the total is a compare-and-swap and a tenant's count changes under its shard's
//! lock, so concurrent takes never exceed either cap. (When the total fits but the
//! tenant's count does not, the total is given back at once; a take racing with
//! that moment may be refused although it would just have fit, never the other way.)
//! Leases without a tenant (a gateway without auth, a call naming none) count
//! towards the total only.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::ApiError;
use crate::settings::Limits;

const SHARDS: usize = 16;

/// Open leases (and places taken for leases about to open).
#[derive(Debug)]
pub struct Counts {
    total: AtomicUsize,
    tenants: [Mutex<HashMap<Arc<str>, Held>>; SHARDS],
    /// Tenant ids come from clients: the shard and the maps hash them with a keyed
    /// hasher.
    hasher: RandomState,
}

/// What one tenant holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    /// Its places: open leases and leases about to open.
    pub total: usize,
    /// Its open leases by tool.
    pub by_tool: HashMap<Arc<str>, usize>,
}

/// The caps in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Most places in all.
    pub total: usize,
    /// Most places per tenant.
    pub per_tenant: usize,
}

/// Why no place was given: `asked` more would pass the cap, `held` being held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Full {
    /// Every tenant's places together (`max_leases`).
    Total {
        /// Places asked for.
        asked: usize,
        /// Places held.
        held: usize,
        /// The cap.
        cap: usize,
    },
    /// The tenant's places (`max_leases_per_tenant`).
    Tenant {
        /// Places asked for.
        asked: usize,
        /// Places held.
        held: usize,
        /// The cap.
        cap: usize,
    },
}

/// Places for leases about to open, all of one tenant: each lease opened takes one,
/// and those left are given back on drop.
#[derive(Debug)]
pub struct Places<'a> {
    counts: &'a Counts,
    tenant: Option<Arc<str>>,
    left: usize,
}

// === impl Counts ===

impl Default for Counts {
    fn default() -> Self {
        Self {
            total: AtomicUsize::new(0),
            tenants: std::array::from_fn(|_| Mutex::default()),
            hasher: RandomState::new(),
        }
    }
}

impl Counts {
    fn shard(&self, tenant: &str) -> &Mutex<HashMap<Arc<str>, Held>> {
        &self.tenants[(self.hasher.hash_one(tenant) % SHARDS as u64) as usize]
    }

    /// Takes `n` places for `tenant`'s leases, or says which cap they would exceed.
    ///
    /// # Errors
    ///
    /// [`Full`] when the total or the tenant's count would pass its cap; nothing is
    /// taken then.
    pub fn take(&self, tenant: Option<&str>, n: usize, caps: Caps) -> Result<Places<'_>, Full> {
        self.total
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(n).filter(|&after| after <= caps.total)
            })
            .map_err(|held| Full::Total {
                asked: n,
                held,
                cap: caps.total,
            })?;
        let mut places = Places {
            counts: self,
            tenant: None,
            left: n,
        };
        let Some(t) = tenant else {
            return Ok(places);
        };
        let mut shard = self.shard(t).lock();
        let held = shard.get(t).map_or(0, |h| h.total);
        if held.saturating_add(n) > caps.per_tenant {
            drop(shard);
            // `places` has no tenant yet: dropping it gives back the total only.
            return Err(Full::Tenant {
                asked: n,
                held,
                cap: caps.per_tenant,
            });
        }
        let key = match shard.get_key_value(t) {
            Some((k, _)) => k.clone(),
            None => Arc::from(t),
        };
        shard.entry(key.clone()).or_default().total += n;
        places.tenant = Some(key);
        Ok(places)
    }

    /// A lease of `tenant` on `tool` opened (with a place already taken); returns
    /// the tool's key, which [`Counts::close`] wants back.
    fn open(&self, tenant: &Arc<str>, tool: &str) -> Arc<str> {
        let mut shard = self.shard(tenant).lock();
        let held = shard.entry(tenant.clone()).or_default();
        if let Some((k, _)) = held.by_tool.get_key_value(tool) {
            let k = k.clone();
            *held.by_tool.entry(k.clone()).or_default() += 1;
            return k;
        }
        let k: Arc<str> = Arc::from(tool);
        held.by_tool.insert(k.clone(), 1);
        k
    }

    /// Counts one more place whatever the caps (a lease opened beyond the places
    /// taken for it, which callers never do: the counts stay right all the same).
    fn add(&self, tenant: Option<&Arc<str>>) {
        self.total.fetch_add(1, Ordering::AcqRel);
        if let Some(t) = tenant {
            self.shard(t).lock().entry(t.clone()).or_default().total += 1;
        }
    }

    /// A lease closed: gives its place back (`tool` is the key `Places::open`
    /// returned, for a lease with a tenant).
    pub fn close(&self, tenant: Option<&Arc<str>>, tool: Option<&Arc<str>>) {
        self.give_back(tenant, tool, 1);
    }

    fn give_back(&self, tenant: Option<&Arc<str>>, tool: Option<&Arc<str>>, n: usize) {
        if n == 0 {
            return;
        }
        // Saturating: a count that wrapped would refuse every lease from then on.
        let _ = self
            .total
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                Some(held.saturating_sub(n))
            });
        let Some(t) = tenant else { return };
        let mut shard = self.shard(t).lock();
        let Some(held) = shard.get_mut(&**t) else {
            return;
        };
        held.total = held.total.saturating_sub(n);
        if let Some(tool) = tool {
            if let Some(c) = held.by_tool.get_mut(&**tool) {
                *c = c.saturating_sub(n);
                if *c == 0 {
                    held.by_tool.remove(&**tool);
                }
            }
        }
        if held.total == 0 {
            shard.remove(&**t);
        }
    }

    /// What `tenant` holds now.
    pub fn held_by(&self, tenant: &str) -> Held {
        self.shard(tenant)
            .lock()
            .get(tenant)
            .cloned()
            .unwrap_or_default()
    }

    /// Places held in all.
    pub fn total(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }
}

// === impl Caps ===

impl From<&Limits> for Caps {
    fn from(l: &Limits) -> Self {
        Self {
            total: l.max_leases,
            per_tenant: l.max_leases_per_tenant,
        }
    }
}

// === impl Full ===

impl From<Full> for ApiError {
    fn from(f: Full) -> Self {
        let (asked, held, cap, whose, key) = match f {
            Full::Total { asked, held, cap } => (asked, held, cap, "the gateway", "max_leases"),
            Full::Tenant { asked, held, cap } => {
                (asked, held, cap, "this tenant", "max_leases_per_tenant")
            }
        };
        ApiError::TooManyLeases(format!(
            "{whose} holds {held} open leases and {asked} more would pass its cap of {cap} \
             ([gateway] {key}); nothing was admitted: complete or release leases first"
        ))
    }
}

// === impl Places ===

impl Places<'_> {
    /// Uses one place for a lease on `tool`; returns the lease's tenant and tool keys
    /// for [`Counts::close`].
    pub(super) fn open(&mut self, tool: &str) -> (Option<Arc<str>>, Option<Arc<str>>) {
        match self.left.checked_sub(1) {
            Some(left) => self.left = left,
            None => {
                debug_assert!(false, "a lease opened without a place");
                self.counts.add(self.tenant.as_ref());
            }
        }
        let tool = self.tenant.as_ref().map(|t| self.counts.open(t, tool));
        (self.tenant.clone(), tool)
    }
}

impl Drop for Places<'_> {
    fn drop(&mut self) {
        self.counts
            .give_back(self.tenant.as_ref(), None, std::mem::take(&mut self.left));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: Caps = Caps {
        total: 5,
        per_tenant: 3,
    };

    #[test]
    fn caps_are_exact_and_unused_places_come_back() {
        let c = Counts::default();
        let mut a = c.take(Some("a"), 3, CAPS).expect("fits");
        assert_eq!(
            c.take(Some("a"), 1, CAPS).map(drop),
            Err(Full::Tenant {
                asked: 1,
                held: 3,
                cap: 3
            })
        );
        assert_eq!(c.total(), 3, "the refused take gave its total back");
        let _b = c.take(Some("b"), 2, CAPS).expect("fits");
        assert_eq!(
            c.take(None, 1, CAPS).map(drop),
            Err(Full::Total {
                asked: 1,
                held: 5,
                cap: 5
            })
        );
        let (tenant, tool) = a.open("t");
        assert_eq!(c.held_by("a").by_tool.get("t"), Some(&1));
        drop(a);
        assert_eq!(c.total(), 3, "two unused places of a came back");
        assert_eq!(c.held_by("a").total, 1);
        c.close(tenant.as_ref(), tool.as_ref());
        assert_eq!(
            c.held_by("a"),
            Held::default(),
            "an empty tenant is forgotten"
        );
        assert_eq!(c.total(), 2);
    }

    #[test]
    fn concurrent_takes_never_pass_a_cap() {
        let c = Counts::default();
        let caps = Caps {
            total: 1000,
            per_tenant: 100,
        };
        let taken = AtomicUsize::new(0);
        let kept = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..200 {
                        if let Ok(p) = c.take(Some("a"), 1, caps) {
                            taken.fetch_add(1, Ordering::Relaxed);
                            kept.lock().push(p);
                        }
                    }
                });
            }
        });
        assert_eq!(taken.load(Ordering::Relaxed), 100);
        assert_eq!(c.held_by("a").total, 100);
    }
}
