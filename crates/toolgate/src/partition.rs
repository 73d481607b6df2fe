//! Per-tenant instances of a quota, with bounded memory.
//!
//! Keyed limiters commonly grow without bound: every distinct key ever seen keeps its
//! state. Here a partition is evicted as soon as it is *idle* — its state is
//! indistinguishable from a fresh one (a full bucket, an empty window, nothing in
//! flight, nobody waiting) — so eviction never changes a decision. Sweeps run when a
//! shard doubles, which amortises them to O(1) per insert, and a hard cap
//! (`max_partitions`) bounds memory even when every partition is busy: past it, new
//! tenants are refused until old ones go idle, rather than evicting live state (which
//! would hand out fresh quota and over-admit).

use std::hash::BuildHasher;
use std::sync::{Arc, Weak};

use hashbrown::HashMap;

use crate::clock::Nanos;
use crate::quota::{Cell, QuotaDef};
use crate::sync::Mutex;

const SHARDS: usize = 16;
/// Below `SHARDS` times this many partitions allowed, one shard holds them all, so
/// that the cap is exact (with several shards each holds its share of the cap, and a
/// shard can fill while others have room).
const MIN_PER_SHARD: usize = 256;
const MIN_SWEEP: usize = 64;

/// The partitions of one quota.
#[derive(Debug)]
pub(crate) struct Partitions {
    shards: Box<[Mutex<Shard>]>,
    per_shard_max: usize,
    hasher: hashbrown::DefaultHashBuilder,
    home: Arc<Home>,
}

/// Where a quota's tenant partitions live now. Every generation of one quota's
/// partitions shares it (a reload that converts them hands it on), so that a token
/// difference that comes late to a partition a reload retired finds the tenant's
/// partition under the policy in force, even after the partition it was converted
/// into is gone (evicted once idle, or replaced by a further reload).
#[derive(Debug, Default)]
pub(crate) struct Home {
    current: Mutex<Option<(Weak<Partitions>, QuotaDef)>>,
}

#[derive(Debug, Default)]
struct Shard {
    map: HashMap<Box<str>, Arc<Cell>>,
    next_sweep: usize,
    /// A reload converted this shard's partitions into a new map: no partition may
    /// be created here any more (a charge on it would be invisible to the new policy).
    retired: bool,
}

/// Why no partition was handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoPartition {
    /// Every partition slot (of the shard, for a large cap) is held by a busy tenant.
    Full,
    /// A reload replaced these partitions: start over on the policy in force.
    Retired,
}

// === impl Partitions ===

impl Partitions {
    pub(crate) fn new(max: usize) -> Self {
        // The per-shard caps add up to at most `max`. A small cap is kept exactly, in
        // one shard; a large one is split over `SHARDS` shards of at least
        // `MIN_PER_SHARD` each (a flood of tenants spreads evenly over them, so
        // refusals begin at most a few percent before `max`).
        let n = if max < SHARDS * MIN_PER_SHARD {
            1
        } else {
            SHARDS
        };
        let shards = (0..n)
            .map(|_| {
                Mutex::new(Shard {
                    map: HashMap::new(),
                    next_sweep: MIN_SWEEP,
                    retired: false,
                })
            })
            .collect();
        Self {
            shards,
            per_shard_max: (max / n).max(1),
            hasher: hashbrown::DefaultHashBuilder::default(),
            home: Arc::default(),
        }
    }

    /// These partitions, shared, made the ones in force for their quota's [`Home`]
    /// (defined by `def`).
    pub(crate) fn install(self, def: &QuotaDef) -> Arc<Self> {
        let parts = Arc::new(self);
        *parts.home.current.lock() = Some((Arc::downgrade(&parts), def.clone()));
        parts
    }

    /// Where this quota's partitions live now.
    pub(crate) fn home(&self) -> &Arc<Home> {
        &self.home
    }

    fn shard(&self, key: &str) -> &Mutex<Shard> {
        let i = (self.hasher.hash_one(key) as usize) % self.shards.len();
        &self.shards[i]
    }

    /// The cell of `key`, created from `def` if absent.
    pub(crate) fn get(
        &self,
        key: &str,
        def: &QuotaDef,
        now: Nanos,
    ) -> Result<Arc<Cell>, NoPartition> {
        let mut shard = self.shard(key).lock();
        if let Some(cell) = shard.map.get(key) {
            // Retired with the map, if a reload converted it: the caller finds out
            // under the cell's lock.
            return Ok(cell.clone());
        }
        if shard.retired {
            return Err(NoPartition::Retired);
        }
        if shard.map.len() >= shard.next_sweep || shard.map.len() >= self.per_shard_max {
            shard.sweep(def, now);
            shard.next_sweep = (shard.map.len() * 2).max(MIN_SWEEP);
            if shard.map.len() >= self.per_shard_max {
                return Err(NoPartition::Full);
            }
        }
        let cell = Arc::new(Cell::new(def.fresh(now)));
        shard.map.insert(key.into(), cell.clone());
        Ok(cell)
    }

    /// The cell of `key` if it exists.
    pub(crate) fn peek(&self, key: &str) -> Option<Arc<Cell>> {
        self.shard(key).lock().map.get(key).cloned()
    }

    /// Live partitions.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map.len()).sum()
    }

    /// Removes every idle partition now.
    pub(crate) fn sweep(&self, def: &QuotaDef, now: Nanos) {
        for s in self.shards.iter() {
            s.lock().sweep(def, now);
        }
    }

    /// Runs `f` on every live partition.
    pub(crate) fn for_each(&self, f: impl Fn(&Cell)) {
        for s in self.shards.iter() {
            for cell in s.lock().map.values() {
                f(cell);
            }
        }
    }

    /// The same partitions with each cell converted (policy reload). Each goes into
    /// the shard the new partitions look it up in: their hasher and their number of
    /// shards (which follows `max`) both differ from these. Each shard here is
    /// retired in the same step, so a call still on the old policy cannot create a
    /// partition the new one would not see: it starts over instead.
    pub(crate) fn converted(&self, max: usize, convert: impl Fn(&str, &Cell) -> Arc<Cell>) -> Self {
        let new = Self {
            home: self.home.clone(),
            ..Self::new(max)
        };
        for old in self.shards.iter() {
            let mut old = old.lock();
            old.retired = true;
            for (k, cell) in &old.map {
                new.shard(k).lock().map.insert(k.clone(), convert(k, cell));
            }
        }
        for fresh in new.shards.iter() {
            let mut fresh = fresh.lock();
            fresh.next_sweep = (fresh.map.len() * 2).max(MIN_SWEEP);
        }
        new
    }
}

// === impl Home ===

impl Home {
    /// The partition of tenant `key` under the policy in force, with its definition:
    /// created afresh if it was evicted, as a call would create it. `None` when the
    /// quota is no longer partitioned in force, or no partition can be had now (all
    /// busy, or a reload is replacing them).
    pub(crate) fn partition(&self, key: &str, now: Nanos) -> Option<(Arc<Cell>, QuotaDef)> {
        let (parts, def) = {
            let current = self.current.lock();
            let (parts, def) = current.as_ref()?;
            (parts.upgrade()?, def.clone())
        };
        let cell = parts.get(key, &def, now).ok()?;
        Some((cell, def))
    }
}

// === impl Shard ===

impl Shard {
    fn sweep(&mut self, def: &QuotaDef, now: Nanos) {
        // A partition still referenced elsewhere (an admission in progress, a permit,
        // a waiter) is never removed, and only idle state is: eviction is lossless.
        // Reservations already due are settled first: idleness depends on the state,
        // not on when the cell was last looked at.
        self.map.retain(|_, cell| {
            Arc::strong_count(cell) > 1 || {
                let mut g = cell.lock();
                g.settle(def, now);
                !g.is_idle(def, now)
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::{Rate, Window};

    fn def() -> QuotaDef {
        let rate = Rate::per_second(1).unwrap_or_else(|e| panic!("{e}"));
        QuotaDef::rate("tools.t.rate".into(), rate, Some(1), Window::Bucket)
    }

    #[test]
    fn idle_partitions_are_evicted_and_busy_ones_are_kept() {
        let def = def();
        let parts = Partitions::new(1_000_000);
        for i in 0..10_000 {
            let cell = parts
                .get(&format!("tenant-{i}"), &def, 0)
                .unwrap_or_else(|_| panic!("full"));
            let mut st = cell.lock();
            if i % 2 == 0 {
                st.charge(&def, 1, 0);
            }
        }
        // At t=0 the charged half is busy; sweeps kept them.
        parts.sweep(&def, 0);
        assert_eq!(parts.len(), 5_000);
        // One second later every bucket is full again: all idle.
        parts.sweep(&def, 1_000_000_000);
        assert_eq!(parts.len(), 0);
    }

    /// Offers `tenants` new busy tenants to partitions capped at `max`; how many
    /// got a partition.
    fn fill(max: usize, tenants: usize) -> (Partitions, usize) {
        let def = def();
        let parts = Partitions::new(max);
        let mut admitted = 0;
        for i in 0..tenants {
            match parts.get(&format!("t{i}"), &def, 0) {
                Ok(cell) => {
                    cell.lock().charge(&def, 1, 0);
                    admitted += 1;
                }
                Err(NoPartition::Full) => {}
                Err(NoPartition::Retired) => panic!("not converted"),
            }
        }
        assert_eq!(parts.len(), admitted);
        (parts, admitted)
    }

    #[test]
    fn a_small_cap_is_exact_whatever_the_tenants_hash_to() {
        // Each map hashes with a seed of its own: many maps, many layouts.
        for max in [1, 2, 3, 5, 64, SHARDS * MIN_PER_SHARD - 1] {
            for _ in 0..20 {
                let (parts, admitted) = fill(max, max + 10);
                assert_eq!(admitted, max, "cap {max}");
                // Once they are idle, new tenants get in again.
                assert!(parts.get("newcomer", &def(), 1_000_000_000).is_ok());
            }
        }
    }

    #[test]
    fn a_large_cap_is_never_exceeded_and_nearly_reached() {
        let max = SHARDS * MIN_PER_SHARD * 2;
        let (parts, admitted) = fill(max, max * 2);
        assert!(admitted <= max, "{admitted} partitions, cap {max}");
        // Spread evenly enough over the shards that refusals begin late.
        assert!(admitted >= max * 9 / 10, "{admitted} of {max}");
        assert!(parts.get("newcomer", &def(), 1_000_000_000).is_ok());
    }

    #[test]
    fn converted_partitions_refuse_new_tenants_in_the_old_map() {
        let def = def();
        let old = Partitions::new(1_000);
        let known = old.get("known", &def, 0).unwrap_or_else(|_| panic!("full"));
        let new = old.converted(1_000, |_, _| Arc::new(Cell::new(def.fresh(0))));
        // A known tenant still finds its (now converted) cell; a new one is refused,
        // so that nobody charges a partition the new map does not have.
        assert!(old
            .get("known", &def, 0)
            .is_ok_and(|c| Arc::ptr_eq(&c, &known)));
        assert_eq!(
            old.get("newcomer", &def, 0).err(),
            Some(NoPartition::Retired)
        );
        assert!(new.get("newcomer", &def, 0).is_ok());
        assert_eq!(new.len(), 2);
    }
}
