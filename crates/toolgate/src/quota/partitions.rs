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
//!
//! The partitions keep instances of a quota (`C`: in the engine, its cells) and ask
//! of them only to be made afresh and to say whether they are idle ([`Instance`]).

use std::hash::BuildHasher;
use std::sync::{Arc, Weak};

use hashbrown::HashMap;

use super::def::QuotaDef;
use crate::clock::Nanos;
use crate::sync::Mutex;

const SHARDS: usize = 16;
/// Below `SHARDS` times this many partitions allowed, one shard holds them all, so
/// that the cap is exact (with several shards each holds its share of the cap, and a
/// shard can fill while others have room).
const MIN_PER_SHARD: usize = 256;
const MIN_SWEEP: usize = 64;

/// What partitions keep per tenant: an instance of their quota.
pub(crate) trait Instance {
    /// A fresh instance of `def` at `now` (a full bucket, an empty window, nothing in
    /// flight).
    fn fresh(def: &QuotaDef, now: Nanos) -> Self;

    /// Whether the instance is indistinguishable from a fresh one at `now`, once
    /// what is due by then is settled: evicting it then changes no decision.
    fn is_idle(&self, def: &QuotaDef, now: Nanos) -> bool;
}

/// The partitions of one quota: an instance `C` per tenant.
#[derive(Debug)]
pub(crate) struct Partitions<C> {
    shards: Box<[Mutex<Shard<C>>]>,
    per_shard_max: usize,
    hasher: hashbrown::DefaultHashBuilder,
    home: Arc<Home<C>>,
}

/// Where a quota's tenant partitions live now. Every generation of one quota's
/// partitions shares it (a reload that converts them hands it on), so that a token
/// difference that comes late to a partition a reload retired finds the tenant's
/// partition under the policy in force, even after the partition it was converted
/// into is gone (evicted once idle, or replaced by a further reload).
#[derive(Debug)]
pub(crate) struct Home<C> {
    current: Mutex<Option<(Weak<Partitions<C>>, QuotaDef)>>,
}

#[derive(Debug)]
struct Shard<C> {
    map: HashMap<Box<str>, Arc<C>>,
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

impl<C: Instance> Partitions<C> {
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
    pub(crate) fn home(&self) -> &Arc<Home<C>> {
        &self.home
    }

    fn shard(&self, key: &str) -> &Mutex<Shard<C>> {
        let i = (self.hasher.hash_one(key) as usize) % self.shards.len();
        &self.shards[i]
    }

    /// The cell of `key`, created from `def` if absent.
    pub(crate) fn get(&self, key: &str, def: &QuotaDef, now: Nanos) -> Result<Arc<C>, NoPartition> {
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
        let cell = Arc::new(C::fresh(def, now));
        shard.map.insert(key.into(), cell.clone());
        Ok(cell)
    }

    /// The cell of `key` if it exists.
    pub(crate) fn peek(&self, key: &str) -> Option<Arc<C>> {
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
    pub(crate) fn for_each(&self, f: impl Fn(&C)) {
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
    pub(crate) fn converted(&self, max: usize, convert: impl Fn(&str, &C) -> Arc<C>) -> Self {
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

impl<C> Default for Home<C> {
    fn default() -> Self {
        Self {
            current: Mutex::new(None),
        }
    }
}

impl<C: Instance> Home<C> {
    /// The partition of tenant `key` under the policy in force, with its definition:
    /// created afresh if it was evicted, as a call would create it. `None` when the
    /// quota is no longer partitioned in force, or no partition can be had now (all
    /// busy, or a reload is replacing them).
    pub(crate) fn partition(&self, key: &str, now: Nanos) -> Option<(Arc<C>, QuotaDef)> {
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

impl<C: Instance> Shard<C> {
    fn sweep(&mut self, def: &QuotaDef, now: Nanos) {
        // A partition still referenced elsewhere (an admission in progress, a permit,
        // a waiter) is never removed, and only idle state is: eviction is lossless.
        // Reservations already due are settled first: idleness depends on the state,
        // not on when the cell was last looked at.
        self.map
            .retain(|_, cell| Arc::strong_count(cell) > 1 || !cell.is_idle(def, now));
    }
}

#[cfg(test)]
mod tests;
