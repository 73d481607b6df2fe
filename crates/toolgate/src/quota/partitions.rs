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

use std::sync::Arc;

use hashbrown::HashTable;

use super::def::{Kind, QuotaDef};
use crate::clock::Nanos;
use crate::rate::{Gcra, Tat, WordCharge, WordForm};
use crate::sync::Mutex;
use crate::tenant_hash::TenantHasher;
use crate::vocab::CostOf;

mod home;
mod tenant;

pub(crate) use home::Home;
use tenant::{Entry, EntryRef, Tenant};

const SHARDS: usize = 16;
/// Below `SHARDS` times this many partitions allowed, one shard holds them all, so
/// that the cap is exact (with several shards each holds its share of the cap, and a
/// shard can fill while others have room).
const MIN_PER_SHARD: usize = 256;
const MIN_SWEEP: usize = 64;
/// The bits of a key's hash that pick its shard: above those a shard's own table
/// uses for a slot (the low bits) and for its tag (the top seven), so that the keys
/// of one shard spread over its table.
const SHARD_BITS_AT: u32 = 40;

/// What partitions keep per tenant: an instance of their quota.
pub(crate) trait Instance {
    /// A fresh instance of `def` at `now` (a full bucket, an empty window, nothing in
    /// flight).
    fn fresh(def: &QuotaDef, now: Nanos) -> Self;

    /// Whether the instance is indistinguishable from a fresh one at `now`, once
    /// what is due by then is settled: evicting it then changes no decision.
    fn is_idle(&self, def: &QuotaDef, now: Nanos) -> bool;

    /// An instance of a bucket whose state is `tat` and nothing else (a tenant's
    /// state taken out of its slot, see [`Partitions::charge_inline`]).
    fn of_bucket(tat: Tat) -> Self;

    /// What the instance has available of `def` at `now`, once what is due by then
    /// is settled.
    fn available(&self, def: &QuotaDef, now: Nanos) -> u64;

    /// The instance's state when it is a bucket's state and nothing else (nobody
    /// waits on it, nothing is reserved): it can then live in its slot again.
    fn bucket_state(&self) -> Option<Tat>;
}

/// The partitions of one quota: an instance `C` per tenant.
///
/// A tenant of an enforced request bucket is kept in the slot of its shard's table
/// as the bucket's state alone, one word (see `tenant`), for as long as nothing
/// needs more: a call admitted or refused there ([`Partitions::charge_inline`])
/// takes the shard's lock and changes the word. A call that needs the whole
/// instance (it waits, or is charged on several quotas at once) takes it out of the
/// slot ([`Partitions::get`]); a sweep puts it back once nothing else refers to it.
#[derive(Debug)]
pub(crate) struct Partitions<C> {
    shards: Box<[Mutex<Shard<C>>]>,
    per_shard_max: usize,
    /// The process's tenant hasher, kept here (every copy hashes alike).
    hasher: TenantHasher,
    /// The quota's bucket and its one-word form, when it is an enforced request
    /// bucket that has one: its tenants' state can then be kept in their slots.
    inline: Option<InlineForm>,
    home: Arc<Home<C>>,
}

/// A bucket and the one-word form its tenants' state takes in their slots.
#[derive(Debug, Clone, Copy)]
struct InlineForm {
    gcra: Gcra,
    form: WordForm,
}

/// What [`Partitions::charge_inline`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inline {
    /// The tenant's bucket admitted the cost and was charged.
    Admitted,
    /// The tenant's bucket does not conform before this time; nothing was charged.
    Refused(Nanos),
    /// The tenant's state is a whole instance (or has no one-word form): the
    /// general path decides on it.
    General,
}

#[derive(Debug)]
struct Shard<C> {
    map: HashTable<Tenant<C>>,
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
    /// The partitions of `def`, none made yet, at most `def.max_partitions`.
    pub(crate) fn new(def: &QuotaDef) -> Self {
        let max = def.max_partitions;
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
                    map: HashTable::new(),
                    next_sweep: MIN_SWEEP,
                    retired: false,
                })
            })
            .collect();
        // Only an enforced request bucket's calls are decided in a slot; every
        // other quota keeps its tenants as whole instances.
        let inline = match (def.kind, def.cost_of, def.shadow) {
            (Kind::Bucket(gcra), CostOf::Requests, false) => {
                gcra.word_form().map(|form| InlineForm { gcra, form })
            }
            _ => None,
        };
        Self {
            shards,
            per_shard_max: (max / n).max(1),
            hasher: TenantHasher::get(),
            inline,
            home: Arc::default(),
        }
    }

    /// These partitions, shared, made the ones in force for their quota's [`Home`]
    /// (defined by `def`).
    pub(crate) fn install(self, def: &QuotaDef) -> Arc<Self> {
        let parts = Arc::new(self);
        parts.home.set(&parts, def);
        parts
    }

    /// Where this quota's partitions live now.
    pub(crate) fn home(&self) -> &Arc<Home<C>> {
        &self.home
    }

    /// The hash of `key` ([`TenantHasher`]) and the shard it lives in (one hash
    /// serves both).
    #[inline]
    fn locate(&self, key: &str) -> (u64, &Mutex<Shard<C>>) {
        let hash = self.hash(key);
        (hash, self.shard(hash))
    }

    /// The hash of tenant `key` ([`TenantHasher`], the same in every map).
    #[inline]
    pub(crate) fn hash(&self, key: &str) -> u64 {
        self.hasher.hash(key)
    }

    /// The shard of the tenant whose hash is `hash`.
    #[inline]
    fn shard(&self, hash: u64) -> &Mutex<Shard<C>> {
        // The number of shards is 1 or `SHARDS`, a power of two.
        let i = (hash >> SHARD_BITS_AT) as usize & (self.shards.len() - 1);
        &self.shards[i]
    }

    /// Whether the tenants of these partitions can be decided in their slots
    /// ([`Partitions::charge_inline`]).
    #[inline]
    pub(crate) fn has_inline(&self) -> bool {
        self.inline.is_some()
    }

    /// The instance of `key`, created from `def` if absent, or taken out of its slot.
    pub(crate) fn get(&self, key: &str, def: &QuotaDef, now: Nanos) -> Result<Arc<C>, NoPartition> {
        let (hash, shard) = self.locate(key);
        let mut shard = shard.lock();
        if let Some(tenant) = shard.find_mut(hash, key) {
            // Retired with the map, if a reload converted it: the caller finds out
            // under the instance's lock.
            return Ok(self.instance(tenant));
        }
        shard.make_room(self, def, now)?;
        let cell = Arc::new(C::fresh(def, now));
        shard.insert(hash, key, Entry::Instance(cell.clone()), &self.hasher);
        Ok(cell)
    }

    /// Charges `cost` (≥ 1, at most the bucket's burst) to tenant `key`'s bucket at
    /// `now` in its slot, under its shard's lock alone, creating the tenant's
    /// partition if it has none: the same decision and charge as the general path's
    /// on the instance (GCRA in the word's units, which are exact), without taking it
    /// out of the slot. [`Inline::General`] when the tenant's state is a whole
    /// instance, or the quota's has no one-word form. `hash` is the key's
    /// ([`Partitions::hash`]), which the caller keeps for the tenant's signals.
    #[inline]
    pub(crate) fn charge_inline(
        &self,
        key: &str,
        hash: u64,
        def: &QuotaDef,
        cost: u64,
        now: Nanos,
    ) -> Result<Inline, NoPartition> {
        let Some(inline) = self.inline else {
            return Ok(Inline::General);
        };
        let Some(charge) = inline.form.prepare(cost, now) else {
            return Ok(Inline::General);
        };
        let mut shard = self.shard(hash).lock();
        if let Some(tenant) = shard.find_mut(hash, key) {
            return Ok(inline.decide(tenant, charge, cost, now));
        }
        let Some(full) = inline.form.to_word(inline.gcra.full(now)) else {
            return Ok(Inline::General);
        };
        shard.make_room(self, def, now)?;
        let tenant = shard.insert(hash, key, Entry::Word(full), &self.hasher);
        Ok(inline.decide(tenant, charge, cost, now))
    }

    /// The whole instance of a partition, taken out of its slot if it was there.
    fn instance(&self, tenant: &mut Tenant<C>) -> Arc<C> {
        let word = match tenant.entry() {
            EntryRef::Instance(cell) => return cell.clone(),
            EntryRef::Word(word) => word,
        };
        let cell = Arc::new(C::of_bucket(self.tat_of(word)));
        tenant.set(Entry::Instance(cell.clone()));
        cell
    }

    /// The bucket state of a word in a slot.
    fn tat_of(&self, word: u64) -> Tat {
        self.inline
            .as_ref()
            .map(|i| i.form.to_tat(word))
            .expect("only a quota with a one-word form keeps words in its slots")
    }

    /// Whether a word in a slot is a full bucket at `now`: an idle tenant.
    fn word_is_idle(&self, word: u64, now: Nanos) -> bool {
        let tat = self.tat_of(word);
        self.inline
            .as_ref()
            .is_some_and(|i| i.gcra.is_idle(tat, now))
    }

    /// The word that keeps `cell`'s state in its slot, if it can live there: nothing
    /// but the slot refers to it, and its state is a bucket's alone, with a word.
    fn word_of(&self, cell: &Arc<C>) -> Option<u64> {
        let inline = self.inline.as_ref()?;
        if Arc::strong_count(cell) > 1 {
            return None;
        }
        inline.form.to_word(cell.bucket_state()?)
    }

    /// The instance of `key` if it exists: for a tenant kept in its slot, an
    /// instance of its own holding a copy of its state (to read, not to charge).
    pub(crate) fn peek(&self, key: &str) -> Option<Arc<C>> {
        let (hash, shard) = self.locate(key);
        let shard = shard.lock();
        match shard.find(hash, key)?.entry() {
            EntryRef::Instance(cell) => Some(cell.clone()),
            EntryRef::Word(word) => Some(Arc::new(C::of_bucket(self.tat_of(word)))),
        }
    }

    /// What tenant `key` has available of `def` at `now`; `None` when it has no
    /// partition (its first call would find a fresh one). Reads a tenant kept in its
    /// slot there.
    pub(crate) fn available(&self, key: &str, def: &QuotaDef, now: Nanos) -> Option<u64> {
        let (hash, shard) = self.locate(key);
        let cell = {
            let shard = shard.lock();
            match shard.find(hash, key)?.entry() {
                EntryRef::Instance(cell) => cell.clone(),
                EntryRef::Word(word) => {
                    let g = self.inline.as_ref()?.gcra;
                    return Some(g.available(self.tat_of(word), now).min(g.burst()));
                }
            }
        };
        // The instance's lock is taken once the shard's is let go.
        Some(cell.available(def, now))
    }

    /// Live partitions.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map.len()).sum()
    }

    /// Removes every idle partition now, and puts back in their slots the instances
    /// nothing else refers to any more.
    pub(crate) fn sweep(&self, def: &QuotaDef, now: Nanos) {
        for s in self.shards.iter() {
            s.lock().sweep(self, def, now);
        }
    }

    /// Runs `f` on every live partition kept as a whole instance (those kept in
    /// their slots are a bucket's state alone: there is nothing else to change).
    pub(crate) fn for_each(&self, f: impl Fn(&C)) {
        for s in self.shards.iter() {
            for tenant in s.lock().map.iter() {
                if let EntryRef::Instance(cell) = tenant.entry() {
                    f(cell);
                }
            }
        }
    }

    /// The same partitions with each instance converted (policy reload) into
    /// partitions of `def`. Each goes into the shard the new partitions look it up
    /// in: their number of shards (which follows `def.max_partitions`) may differ
    /// from these (the hash of a key is the same in every map, [`TenantHasher`]).
    /// Each shard here is retired in the same step, so a call still on the old
    /// policy cannot create a partition the new one would not see: it starts over
    /// instead. A tenant kept in its slot is taken out of it first (so that a late
    /// call on the old policy finds its instance retired), and a converted instance
    /// that can live in a slot goes into one.
    pub(crate) fn converted(&self, def: &QuotaDef, convert: impl Fn(&str, &C) -> Arc<C>) -> Self {
        let new = Self {
            home: self.home.clone(),
            ..Self::new(def)
        };
        for old in self.shards.iter() {
            let mut old = old.lock();
            old.retired = true;
            for tenant in old.map.iter_mut() {
                let cell = self.instance(tenant);
                let key = tenant.key();
                let cell = convert(key, &cell);
                let entry = match new.word_of(&cell) {
                    Some(word) => Entry::Word(word),
                    None => Entry::Instance(cell),
                };
                let (hash, shard) = new.locate(key);
                shard.lock().insert(hash, key, entry, &new.hasher);
            }
        }
        for fresh in new.shards.iter() {
            let mut fresh = fresh.lock();
            fresh.next_sweep = (fresh.map.len() * 2).max(MIN_SWEEP);
        }
        new
    }
}

// === impl Shard ===

impl<C: Instance> Shard<C> {
    fn find(&self, hash: u64, key: &str) -> Option<&Tenant<C>> {
        self.map.find(hash, |t| t.is(key))
    }

    fn find_mut(&mut self, hash: u64, key: &str) -> Option<&mut Tenant<C>> {
        self.map.find_mut(hash, |t| t.is(key))
    }

    /// Inserts a partition `key` absent from the shard.
    fn insert(
        &mut self,
        hash: u64,
        key: &str,
        entry: Entry<C>,
        hasher: &TenantHasher,
    ) -> &mut Tenant<C> {
        self.map
            .insert_unique(hash, Tenant::new(key, entry), |t| hasher.hash(t.key()))
            .into_mut()
    }

    /// Makes room for one more partition of `parts` (defined by `def`): sweeps when
    /// the shard has doubled since the last sweep or is at its cap; refuses when the
    /// shard is retired, or still at its cap after the sweep.
    fn make_room(
        &mut self,
        parts: &Partitions<C>,
        def: &QuotaDef,
        now: Nanos,
    ) -> Result<(), NoPartition> {
        if self.retired {
            return Err(NoPartition::Retired);
        }
        if self.map.len() >= self.next_sweep || self.map.len() >= parts.per_shard_max {
            self.sweep(parts, def, now);
            self.next_sweep = (self.map.len() * 2).max(MIN_SWEEP);
            if self.map.len() >= parts.per_shard_max {
                return Err(NoPartition::Full);
            }
        }
        Ok(())
    }

    fn sweep(&mut self, parts: &Partitions<C>, def: &QuotaDef, now: Nanos) {
        // A partition still referenced elsewhere (an admission in progress, a permit,
        // a waiter) is never removed, and only idle state is: eviction is lossless.
        // Reservations already due are settled first: idleness depends on the state,
        // not on when the cell was last looked at. An instance nothing else refers to
        // that is a bucket's state alone goes back into its slot.
        self.map.retain(|tenant| {
            let back = match tenant.entry() {
                EntryRef::Word(word) => return !parts.word_is_idle(word, now),
                EntryRef::Instance(cell) if Arc::strong_count(cell) > 1 => return true,
                EntryRef::Instance(cell) if cell.is_idle(def, now) => return false,
                EntryRef::Instance(cell) => parts.word_of(cell),
            };
            if let Some(word) = back {
                tenant.set(Entry::Word(word));
            }
            true
        });
    }
}

// === impl InlineForm ===

impl InlineForm {
    /// [`Partitions::charge_inline`] on the tenant's `entry`, with `charge` its cost
    /// at `now` prepared in the word's units.
    #[inline]
    fn decide<C>(
        &self,
        tenant: &mut Tenant<C>,
        charge: WordCharge,
        cost: u64,
        now: Nanos,
    ) -> Inline {
        let Some(word) = tenant.word_mut() else {
            return Inline::General;
        };
        if let Some(next) = charge.apply(*word) {
            *word = next;
            return Inline::Admitted;
        }
        // `None`: the word's arithmetic ran out where the scaled form's does not.
        self.form
            .refusal(*word, cost, now)
            .map_or(Inline::General, Inline::Refused)
    }
}

#[cfg(test)]
mod tests;
