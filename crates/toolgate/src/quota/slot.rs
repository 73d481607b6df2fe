//! A quota of a compiled policy ([`Quota`]): its definition and where its state
//! lives ([`Slot`]: one cell, or a cell per tenant partition); what a call costs on
//! it; and how a reload carries its state over to a new definition, retiring the old
//! cells into successors.

use std::sync::Arc;

use super::cell::Cell;
use super::def::{Kind, QuotaDef};
use super::limiter::Limiter;
use super::partitions::{Home, Inline, NoPartition, Partitions};
use super::successor::{Link, Successor};
use crate::clock::Nanos;
use crate::vocab::Call;
use crate::vocab::CostOf;

/// A quota with its state.
#[derive(Debug)]
pub(crate) struct Quota {
    pub(crate) def: QuotaDef,
    pub(crate) slot: Slot,
}

#[derive(Debug, Clone)]
pub(crate) enum Slot {
    Single(Arc<Cell>),
    Partitioned(Arc<Partitions<Cell>>),
}

// === impl Quota ===

impl Quota {
    pub(crate) fn new(def: QuotaDef, now: Nanos) -> Self {
        let slot = if def.partitioned {
            Slot::Partitioned(Partitions::new(&def).install(&def))
        } else {
            Slot::Single(Arc::new(Cell::single(&def, Limiter::fresh(&def, now))))
        };
        Self { def, slot }
    }

    /// A quota of definition `def` carrying over the state of `old`.
    ///
    /// A concurrency limit keeps its very cells (only the limit changes), so that
    /// calls admitted before the switch release into the same count.
    pub(crate) fn converted(def: QuotaDef, old: &Quota, now: Nanos) -> Self {
        if let (Kind::Concurrency(limit), Kind::Concurrency(_)) = (def.kind, old.def.kind) {
            if def.partitioned == old.def.partitioned {
                match &old.slot {
                    Slot::Single(c) => c.lock().set_limit(limit),
                    Slot::Partitioned(p) => p.for_each(|c| c.lock().set_limit(limit)),
                }
                let slot = old.slot.clone();
                return Self { def, slot };
            }
        }
        // The old cell is retired under the same lock that reads its state, so no
        // call can charge it after the state has moved (it starts over instead), and
        // it points to the cell that carries the state now.
        let succeed = |cell: &Cell, tenant: Option<(&str, &Arc<Home<Cell>>)>| {
            let single = tenant.is_none();
            let mut g = cell.lock();
            let limiter = g.limiter.converted(&old.def, &def, now);
            let next = Arc::new(if single {
                Cell::single(&def, limiter)
            } else {
                Cell::new(limiter)
            });
            // A tenant partition links weakly: eviction must stay free to drop it (a
            // late difference then goes to the tenant's partition by key).
            let cell = match tenant {
                None => Link::Strong(next.clone()),
                Some((key, home)) => Link::Tenant {
                    cell: Arc::downgrade(&next),
                    key: key.into(),
                    home: home.clone(),
                },
            };
            g.limiter = Limiter::Retired(Box::new(Successor {
                cell,
                def: def.clone(),
            }));
            next
        };
        let slot = match (&old.slot, def.partitioned) {
            (Slot::Single(cell), false) => Slot::Single(succeed(cell, None)),
            (Slot::Partitioned(parts), true) => Slot::Partitioned(
                parts
                    .converted(&def, |key, c| succeed(c, Some((key, parts.home()))))
                    .install(&def),
            ),
            (_, true) => Slot::Partitioned(Partitions::new(&def).install(&def)),
            (_, false) => Slot::Single(Arc::new(Cell::single(&def, Limiter::fresh(&def, now)))),
        };
        Self { def, slot }
    }

    /// Whether the quota has a partition per tenant.
    #[inline]
    pub(crate) fn is_partitioned(&self) -> bool {
        matches!(self.slot, Slot::Partitioned(_))
    }

    /// Decides `call` on this quota in its tenant's slot (`Partitions::charge_inline`),
    /// where it can be decided there: a per-tenant enforced request bucket (its
    /// partitions say), at a [`Quota::word_cost`], with the tenant's hash
    /// ([`Partitions::hash`], which keys its signals too). [`Inline::General`] (and no
    /// hash, 0) when the general path must decide.
    #[inline]
    pub(crate) fn try_inline(
        &self,
        call: &Call<'_>,
        now: Nanos,
    ) -> Result<(Inline, u64), NoPartition> {
        let (Slot::Partitioned(parts), Some(cost)) = (&self.slot, self.word_cost(call)) else {
            return Ok((Inline::General, 0));
        };
        if !parts.has_inline() {
            return Ok((Inline::General, 0));
        }
        let key = call.tenant.unwrap_or("");
        let hash = parts.hash(key);
        let inline = parts.charge_inline(key, hash, &self.def, cost, now)?;
        Ok((inline, hash))
    }

    /// What `call` costs on this quota where a bucket's one-word form (the fast
    /// path's word, a tenant's slot) may decide it: from 1 to the burst, nothing of
    /// the quota reserved from the call's class. `None` leaves it to the general path
    /// (which admits a cost of 0 without a charge, names one above the burst, and
    /// fits a reserve).
    #[inline]
    pub(crate) fn word_cost(&self, call: &Call<'_>) -> Option<u64> {
        let cost = self.cost(call);
        (cost >= 1 && cost <= self.def.capacity() && self.def.hold_for(call) == 0).then_some(cost)
    }

    /// What `call` costs on this quota.
    #[inline]
    pub(crate) fn cost(&self, call: &Call<'_>) -> u64 {
        match self.def.cost_of {
            CostOf::Requests => call.count,
            CostOf::Tokens => call.tokens,
        }
    }

    /// Whether `call`'s cost is within the quota's capacity.
    #[inline]
    pub(crate) fn fits(&self, call: &Call<'_>) -> bool {
        self.cost(call).saturating_add(self.def.hold_for(call)) <= self.def.capacity()
    }
}
