//! The decision kernel: one call's quotas, locked in a global order, checked all at
//! once and charged all at once — or not at all.
//!
//! All-or-nothing comes from holding every lock of the call while deciding: nothing is
//! charged until every quota has said yes, so a refused call consumes nothing and no
//! rollback is ever needed. Locks are taken in address order, so calls sharing pools
//! cannot deadlock.
//!
//! Every path that decides on quotas comes here: an immediate admission
//! (`ToolRuntime::try_admit`), a reservation of several calls
//! (`Engine::try_admit_all`), the wait path (the earliest time a waiter's quotas
//! conform, and its shadow quotas once admitted) and the shadow pass of each. The
//! kernel knows quotas, not tools: its answer names a step of the plan, and the
//! caller turns it into the tool's rejection.
//!
//! The one-word fast path is the kernel's answer for a plan of one unpartitioned
//! request bucket, taken in front of it: `quota::FastBucket::try_charge` admits with
//! one compare-and-swap and says false whenever the plan path must decide (every
//! refusal, and while waiters hold reservations). `ToolRuntime::try_admit` takes it
//! only while no gate has a say, and otherwise after the gates, as the first step of
//! the call's quotas.

use std::borrow::Borrow;
use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use crate::clock::Nanos;
use crate::held::{Held, HeldParts};
use crate::quota::{Cell, CellGuard, CostOf, Fit, Kind, NoPartition, Quota, Slot};
use crate::vocab::{Call, Reason};

/// A cell, borrowed from the policy or owned (a tenant partition).
#[derive(Debug)]
pub(crate) enum CellRef<'a> {
    Shared(&'a Arc<Cell>),
    Owned(Arc<Cell>),
}

/// One quota of a call, with the cost it is charged.
#[derive(Debug)]
pub(crate) struct Step<'a> {
    pub(crate) quota: &'a Arc<Quota>,
    pub(crate) cell: CellRef<'a>,
    pub(crate) cost: u64,
    /// What the call's class may not use of the quota (its reserve for higher
    /// classes): the call fits only where `cost + hold` would, and is charged `cost`.
    pub(crate) hold: u64,
    /// The quota's place in the tool's config (own quotas, then pools'): the
    /// deterministic tie-break for which quota a rejection names, and in a tool's
    /// plan its index in the tool's quotas, by which a permit keeps its part.
    pub(crate) rank: usize,
}

/// The steps of a call, sorted in lock order.
pub(crate) type Plan<'a> = SmallVec<[Step<'a>; 4]>;
/// The locks of a plan's cells, in the plan's order.
pub(crate) type Guards<'a> = SmallVec<[CellGuard<'a>; 4]>;

/// What the quotas of a call said, under their locks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Verdict {
    /// The earliest time every rate and token quota conforms.
    pub(crate) at: Nanos,
    /// The step that sets `at`, if later than now.
    pub(crate) binding: Option<usize>,
    /// A concurrency step that is full.
    pub(crate) full: Option<usize>,
}

/// Why a call has no plan, by the rank of the quota that says so ([`plan`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum NoPlan {
    /// The call costs more than the quota could ever hold.
    TooCostly(usize),
    /// The quota's tenant partitions are all taken (none idle to evict).
    NoPartition(usize),
    /// A reload retired the quota's partitions: start over on the new policy.
    Retired(usize),
}

/// The kernel's answer on a locked plan ([`decide`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Decision {
    /// Every enforced quota admitted the call and was charged. `shadow`: the shadow
    /// step that would have refused it, and why (recorded, never enforced); the
    /// shadow quotas were charged when there is none.
    Admitted { shadow: Option<(usize, Reason)> },
    /// Refused by the step at `step` (nothing charged): its reason, when to retry,
    /// and when every rate and token quota conforms (`at`).
    Refused {
        step: usize,
        reason: Reason,
        retry: Option<Duration>,
        at: Nanos,
    },
    /// A reload retired a cell of the plan: no answer; the call starts over on the
    /// policy now in force.
    Stale,
}

// === impl CellRef ===

impl CellRef<'_> {
    /// The cell.
    pub(crate) fn get(&self) -> &Arc<Cell> {
        match self {
            Self::Shared(c) => c,
            Self::Owned(c) => c,
        }
    }
}

// === impl Step ===

impl Step<'_> {
    /// Whether the step is a concurrency slot (which waiting cannot predict).
    pub(crate) fn is_concurrency(&self) -> bool {
        matches!(self.quota.def.kind, Kind::Concurrency(_))
    }

    /// Whether a permit must keep this step until the call ends.
    fn is_held(&self) -> bool {
        self.is_concurrency() || self.quota.def.cost_of == CostOf::Tokens
    }

    /// The part a permit keeps of this step.
    pub(crate) fn held(&self) -> Held {
        Held {
            index: self.rank,
            partition: match &self.cell {
                CellRef::Shared(_) => None,
                CellRef::Owned(cell) => Some(cell.clone()),
            },
            cost: self.cost,
            kept: None,
        }
    }
}

// === impl Verdict ===

impl Verdict {
    /// Whether the call may start at `now`.
    pub(crate) fn admits(&self, now: Nanos) -> bool {
        self.full.is_none() && self.at <= now
    }

    /// The step to name in a rejection, with its reason and retry time.
    pub(crate) fn blame(&self, now: Nanos) -> Option<(usize, Reason, Option<Duration>)> {
        if let Some(i) = self.binding.filter(|_| self.at > now) {
            return Some((
                i,
                Reason::RateLimited,
                Some(Duration::from_nanos(self.at - now)),
            ));
        }
        self.full.map(|i| (i, Reason::ConcurrencyLimited, None))
    }
}

/// The plan of `call` on `quotas` (a tool's, in config order), sorted in lock order;
/// `order` is that order when every quota is unpartitioned (their cells are then
/// fixed, and the plan is built in it without sorting).
pub(crate) fn plan<'q>(
    quotas: &'q [Arc<Quota>],
    order: Option<&[usize]>,
    call: &Call<'_>,
    now: Nanos,
) -> Result<Plan<'q>, NoPlan> {
    let mut plan = Plan::new();
    // Every quota unpartitioned: the steps cannot fail but for a cost above a
    // capacity (named in config order, by the loop below). The steps are built in
    // place: a `Result` per step went through the stack, and reading it back stalled
    // on store forwarding.
    if let Some(order) = order.filter(|_| quotas.iter().all(|q| q.fits(call))) {
        for &rank in order {
            let q = &quotas[rank];
            if let Slot::Single(cell) = &q.slot {
                plan.push(Step {
                    quota: q,
                    cell: CellRef::Shared(cell),
                    cost: q.cost(call),
                    hold: q.def.hold_for(call),
                    rank,
                });
            }
        }
        return Ok(plan);
    }
    for rank in 0..quotas.len() {
        plan.push(step(quotas, rank, call, now)?);
    }
    if plan.len() > 1 {
        plan.sort_unstable_by_key(|s| s.cell.get().order());
    }
    Ok(plan)
}

/// The step of `call` on the quota at `rank` of `quotas`: its cost, and its cell (the
/// tenant's partition, created if need be, on a partitioned quota).
#[inline(always)]
pub(crate) fn step<'q>(
    quotas: &'q [Arc<Quota>],
    rank: usize,
    call: &Call<'_>,
    now: Nanos,
) -> Result<Step<'q>, NoPlan> {
    let q = &quotas[rank];
    let cost = q.cost(call);
    let hold = q.def.hold_for(call);
    if cost.saturating_add(hold) > q.def.capacity() {
        return Err(NoPlan::TooCostly(rank));
    }
    let cell = match &q.slot {
        Slot::Single(c) => CellRef::Shared(c),
        Slot::Partitioned(parts) => {
            let tenant = call.tenant.unwrap_or("");
            let cell = parts.get(tenant, &q.def, now).map_err(|r| match r {
                NoPartition::Full => NoPlan::NoPartition(rank),
                NoPartition::Retired => NoPlan::Retired(rank),
            })?;
            CellRef::Owned(cell)
        }
    };
    Ok(Step {
        quota: q,
        cell,
        cost,
        hold,
        rank,
    })
}

/// Locks the cells of a sorted plan.
pub(crate) fn lock_all<'a>(plan: &'a [Step<'_>]) -> Guards<'a> {
    plan.iter().map(|s| s.cell.get().lock()).collect()
}

/// Whether a reload retired any of the locked cells: the call must start over on the
/// policy now in force.
pub(crate) fn retired(guards: &[CellGuard<'_>]) -> bool {
    guards.iter().any(|g| g.is_retired())
}

/// Decides a call on the locked cells of its plan: checks every enforced quota, and
/// charges them all if every one admits, then runs the shadow quotas' own decision
/// (see [`shadow_pass`]); or charges nothing and names the step to blame. `held`
/// collects what the permit keeps.
#[inline]
pub(crate) fn decide(
    plan: &[Step<'_>],
    guards: &mut [CellGuard<'_>],
    now: Nanos,
    held: &mut HeldParts,
) -> Decision {
    if retired(guards) {
        return Decision::Stale;
    }
    let v = evaluate(plan, guards, now, false);
    if let Some((step, reason, retry)) = v.blame(now).filter(|_| !v.admits(now)) {
        return Decision::Refused {
            step,
            reason,
            retry,
            at: v.at,
        };
    }
    charge(plan, guards, now, false, held);
    let shadow = shadow_pass(plan, guards, now, held);
    Decision::Admitted { shadow }
}

/// The decision of the shadow quotas of a plan whose enforced quotas admitted the
/// call: charges them if they would admit it too (`None`), or says which step would
/// have refused it and why. Never enforces.
pub(crate) fn shadow_pass(
    plan: &[Step<'_>],
    guards: &mut [CellGuard<'_>],
    now: Nanos,
    held: &mut HeldParts,
) -> Option<(usize, Reason)> {
    if !plan.iter().any(|s| s.quota.def.shadow) {
        return None;
    }
    let v = evaluate(plan, guards, now, true);
    match v.blame(now).filter(|_| !v.admits(now)) {
        None => {
            charge(plan, guards, now, true, held);
            None
        }
        Some((i, reason, _)) => Some((i, reason)),
    }
}

/// Checks the steps of one mode (enforced or shadow) at `now`: the earliest time
/// every rate and token step conforms, the step that sets it and a full concurrency
/// step, each the first in config order on a tie. `plan` holds steps or references
/// to steps (the wait path checks the rate steps of its plan alone).
pub(crate) fn evaluate<'p, S: Borrow<Step<'p>>>(
    plan: &[S],
    guards: &mut [CellGuard<'_>],
    now: Nanos,
    shadow: bool,
) -> Verdict {
    let mut v = Verdict {
        at: now,
        binding: None,
        full: None,
    };
    for (i, (s, g)) in plan.iter().zip(guards.iter_mut()).enumerate() {
        let s = s.borrow();
        let def = &s.quota.def;
        if def.shadow != shadow {
            continue;
        }
        g.settle(def, now);
        if s.cost == 0 {
            continue;
        }
        let rank_of = |i: usize| plan[i].borrow().rank;
        match g.fit(def, s.cost.saturating_add(s.hold), now) {
            Fit::At(t) if binds(t, s.rank, v.at, v.binding.map(rank_of), now) => {
                v.at = t;
                v.binding = Some(i);
            }
            Fit::At(_) => {}
            Fit::Full => {
                if v.full.is_none_or(|f| rank_of(f) > s.rank) {
                    v.full = Some(i);
                }
            }
        }
    }
    v
}

/// Whether a quota that conforms at `t` (config rank `rank`) is the one to blame
/// instead of the current binding one (`at`, `current`): the later time wins, and on
/// a tie in the future the first in config order, so rejections are deterministic.
pub(crate) fn binds(t: Nanos, rank: usize, at: Nanos, current: Option<usize>, now: Nanos) -> bool {
    t > at || (t == at && t > now && current.is_some_and(|r| r > rank))
}

/// Charges the steps of one mode at `at`, collecting what the permit must keep.
pub(crate) fn charge(
    plan: &[Step<'_>],
    guards: &mut [CellGuard<'_>],
    at: Nanos,
    shadow: bool,
    held: &mut HeldParts,
) {
    for (s, g) in plan.iter().zip(guards.iter_mut()) {
        if s.quota.def.shadow != shadow {
            continue;
        }
        if s.cost > 0 {
            g.charge(&s.quota.def, s.cost, at);
        }
        if s.is_held() {
            held.push(s.held());
        }
    }
}
