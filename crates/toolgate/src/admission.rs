//! The immediate (never waiting) admission of one call: resolve the quotas that
//! govern it, lock their cells in a global order, check them all, charge them all.
//!
//! All-or-nothing comes from holding every lock of the call while deciding: nothing is
//! charged until every quota has said yes, so a denied call consumes nothing and no
//! rollback is ever needed. Locks are taken in address order, so calls sharing pools
//! cannot deadlock.

use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use crate::clock::Nanos;
use crate::permit::{Held, HeldParts, Permit};
use crate::policy::ToolRuntime;
use crate::quota::{Cell, CellGuard, CostOf, Fit, Kind, NoPartition, Quota, Slot};
use crate::vocab::{Call, Completion, Reason, Rejection};

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
    /// The quota's place in the tool's config (own quotas, then pools'): the
    /// deterministic tie-break for which quota a rejection names, and in a tool's
    /// plan its index in [`ToolRuntime::quotas`], by which a permit keeps its part.
    pub(crate) rank: usize,
}

pub(crate) type Plan<'a> = SmallVec<[Step<'a>; 4]>;
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

/// The engine's own "no" to a call, before a caller is told: the [`Rejection`] it
/// would be told, with what only the engine acts on — when the rate and token
/// quotas would conform, whether waiting can help, and whether the answer is no
/// answer at all because a reload retired a cell of the plan. It is not a second kind
/// of refusal: a caller only ever sees its rejection ([`ToolRuntime::refuse`]), and
/// every path that does not admit (try, wait, the gates) says it with this one type.
#[derive(Debug)]
pub(crate) struct Denial {
    pub(crate) rejection: Rejection,
    /// The earliest conforming time of the rate and token quotas.
    pub(crate) at: Nanos,
    /// Whether waiting can help.
    pub(crate) can_wait: bool,
    /// A reload retired a cell of the call's plan: start over on the policy now in
    /// force (the rejection is not an answer then).
    pub(crate) stale: bool,
}

// === impl Denial ===

impl Denial {
    /// The answer when a reload retired a cell of the plan: not a rejection, a retry.
    pub(crate) fn stale(placeholder: Rejection) -> Self {
        Self {
            rejection: placeholder,
            at: 0,
            can_wait: false,
            stale: true,
        }
    }
}

impl From<Rejection> for Denial {
    /// A rejection that waiting cannot change (`at` is then never read).
    fn from(rejection: Rejection) -> Self {
        Self {
            rejection,
            at: 0,
            can_wait: false,
            stale: false,
        }
    }
}

// === impl CellRef ===

impl CellRef<'_> {
    pub(crate) fn get(&self) -> &Arc<Cell> {
        match self {
            Self::Shared(c) => c,
            Self::Owned(c) => c,
        }
    }
}

// === impl Step ===

impl Step<'_> {
    pub(crate) fn is_concurrency(&self) -> bool {
        matches!(self.quota.def.kind, Kind::Concurrency(_))
    }

    /// Whether a permit must keep this step until the call ends.
    fn is_held(&self) -> bool {
        self.is_concurrency() || self.quota.def.cost_of == CostOf::Tokens
    }

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

/// Locks the cells of a sorted plan.
pub(crate) fn lock_all<'a>(plan: &'a [Step<'_>]) -> Guards<'a> {
    plan.iter().map(|s| s.cell.get().lock()).collect()
}

/// Whether a reload retired any of the locked cells: the call must start over on the
/// policy now in force.
pub(crate) fn retired(guards: &[CellGuard<'_>]) -> bool {
    guards.iter().any(|g| g.is_retired())
}

/// Checks the steps of one mode (enforced or shadow) at `now`.
pub(crate) fn evaluate(
    plan: &[Step<'_>],
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
        let def = &s.quota.def;
        if def.shadow != shadow {
            continue;
        }
        g.settle(def, now);
        if s.cost == 0 {
            continue;
        }
        match g.fit(def, s.cost, now) {
            Fit::At(t) if binds(t, s.rank, v.at, v.binding.map(|b| plan[b].rank), now) => {
                v.at = t;
                v.binding = Some(i);
            }
            Fit::At(_) => {}
            Fit::Full => {
                if v.full.is_none_or(|f| plan[f].rank > s.rank) {
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

impl Verdict {
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

// === impl ToolRuntime ===

impl ToolRuntime {
    /// A rejection of this tool.
    pub(crate) fn rejection(
        &self,
        quota: &Quota,
        reason: Reason,
        retry: Option<Duration>,
    ) -> Rejection {
        let reason = match reason {
            Reason::RateLimited => quota.def.reason(),
            other => other,
        };
        Rejection::new(self.name.clone(), quota.def.path.clone(), reason, retry)
    }

    /// The quotas governing `call`, sorted in lock order; a stale denial when a
    /// reload replaced a tenant's partitions meanwhile.
    pub(crate) fn plan(&self, call: &Call<'_>, now: Nanos) -> Result<Plan<'_>, Denial> {
        let mut plan = Plan::new();
        // Every quota unpartitioned: the steps cannot fail but for a cost above a
        // capacity (named in config order, by the loop below). The steps are built
        // in place: a `Result` per step went through the stack, and reading it back
        // stalled on store forwarding.
        if let Some(order) = self
            .lock_order
            .as_deref()
            .filter(|_| self.quotas.iter().all(|q| q.fits(call)))
        {
            for &rank in order {
                let q = &self.quotas[rank];
                if let Slot::Single(cell) = &q.slot {
                    plan.push(Step {
                        quota: q,
                        cell: CellRef::Shared(cell),
                        cost: q.cost(call),
                        rank,
                    });
                }
            }
            return Ok(plan);
        }
        for rank in 0..self.quotas.len() {
            plan.push(self.step(rank, call, now)?);
        }
        if plan.len() > 1 {
            plan.sort_unstable_by_key(|s| s.cell.get().order());
        }
        Ok(plan)
    }

    /// The step of `call` on the quota at `rank`.
    #[inline(always)]
    fn step(&self, rank: usize, call: &Call<'_>, now: Nanos) -> Result<Step<'_>, Denial> {
        let q = &self.quotas[rank];
        let cost = q.cost(call);
        let refuse = |reason| Denial {
            rejection: self.rejection(q, reason, None),
            at: now,
            can_wait: false,
            stale: false,
        };
        if cost > q.def.capacity() {
            return Err(refuse(Reason::CostExceedsCapacity));
        }
        let cell = match &q.slot {
            Slot::Single(c) => CellRef::Shared(c),
            Slot::Partitioned(parts) => {
                let tenant = call.tenant.unwrap_or("");
                let cell = parts.get(tenant, &q.def, now).map_err(|r| match r {
                    NoPartition::Full => refuse(Reason::RateLimited),
                    NoPartition::Retired => {
                        Denial::stale(self.rejection(q, Reason::RateLimited, None))
                    }
                })?;
                CellRef::Owned(cell)
            }
        };
        Ok(Step {
            quota: q,
            cell,
            cost,
            rank,
        })
    }

    /// Counts a refusal and hands back its rejection.
    pub(crate) fn refuse(&self, denial: Denial, tenant: Option<&str>) -> Rejection {
        self.stats.on_reject(&denial.rejection, tenant);
        denial.rejection
    }

    /// Admits `call` now or says why not; never waits.
    pub(crate) fn try_admit(
        self: &Arc<Self>,
        call: &Call<'_>,
        now: Nanos,
    ) -> Result<Permit, Denial> {
        if self.try_admit_fast(call, now) {
            return Ok(Permit::immediate(Some(self.clone()), now));
        }
        self.try_admit_general(call, now)
    }

    /// [`ToolRuntime::try_admit`] once the fast path has been tried (or cannot
    /// apply): the gates, then every quota of the call.
    pub(crate) fn try_admit_general(
        self: &Arc<Self>,
        call: &Call<'_>,
        now: Nanos,
    ) -> Result<Permit, Denial> {
        self.pause_gate(now, call.tenant)?;
        let spread = self.spread_gate(now, call.tenant)?;
        let probe = self
            .circuit_gate(now)
            .inspect_err(|_| self.unspread(spread))?;
        match self.try_quotas(call, now) {
            Ok(mut permit) => {
                permit.set_probe(probe);
                permit.set_tenant(self.tenant_key(call.tenant));
                Ok(permit)
            }
            Err(d) => {
                if probe {
                    self.cancel_probe();
                }
                self.unspread(spread);
                Err(d)
            }
        }
    }

    /// Counts an admission, unless a shared store still has to decide (the engine
    /// counts it when the store has said yes).
    #[inline]
    pub(crate) fn on_admit(&self, waited: Duration, tenant: Option<&str>) {
        if self.core.store.is_none() {
            self.stats.on_admit(waited, tenant);
        }
    }

    /// Records how an admitted call ended (`None`: dropped without an outcome) and
    /// counts it out; what the permit held is released by then.
    #[inline(always)]
    pub(crate) fn end_call(&self, completion: Option<Completion>, probe: bool) {
        self.end_call_for(completion, probe, None);
    }

    /// [`ToolRuntime::end_call`] of a call of the tenant whose key is `tenant` (see
    /// [`ToolRuntime::tenant_key`]).
    #[inline(always)]
    pub(crate) fn end_call_for(
        &self,
        completion: Option<Completion>,
        probe: bool,
        tenant: Option<std::num::NonZeroU64>,
    ) {
        match &completion {
            // Dropped without an outcome: nothing to record.
            None if !probe => self.stats.on_finish(),
            // An outcome that nothing takes in: no upstream signal, and neither a
            // breaker nor an adaptive limit to feed. Decided inline, so that a
            // completion built at the call site need not be written out.
            Some(c)
                if !probe
                    && c.server_limit.is_none()
                    && c.retry_after.is_none()
                    && self.adaptive.is_none()
                    && self.breaker.is_none() =>
            {
                self.stats.on_finish();
            }
            _ => self.end_call_with(completion, probe, tenant),
        }
    }

    #[inline(never)]
    fn end_call_with(
        &self,
        completion: Option<Completion>,
        probe: bool,
        tenant: Option<std::num::NonZeroU64>,
    ) {
        let Some(c) = completion else {
            // Dropped without an outcome: a probe slot to free.
            if probe {
                self.cancel_probe();
            }
            self.stats.on_finish();
            return;
        };
        if c.server_limit.is_some() || c.retry_after.is_some() {
            self.hear(&c, tenant.map(std::num::NonZeroU64::get));
        }
        if let Some((a, quota)) = &self.adaptive {
            if let Some(limit) = a.record(c.outcome, c.latency) {
                crate::adaptive::apply_limit(quota, limit);
            }
        }
        if let Some(b) = &self.breaker {
            if b.record(c.outcome, c.latency, probe, self.core.clock.now()) {
                self.breaker_closed();
            }
        }
        self.stats.on_finish();
    }

    /// Admits `call` by the fast path alone, when nothing else has a say: no
    /// breaker, no upstream pause or spreading, and a bucket that admits now.
    /// `false` leaves the decision to the general path.
    #[inline(always)]
    pub(crate) fn try_admit_fast(&self, call: &Call<'_>, now: Nanos) -> bool {
        let Some(bucket) = self.fast_bucket() else {
            return false;
        };
        if self.superseded.load(std::sync::atomic::Ordering::Acquire)
            || !self.ungated(now)
            || !bucket.try_charge(call.count, now)
        {
            return false;
        }
        self.stats.on_admit(Duration::ZERO, call.tenant);
        true
    }

    /// Whether no gate (breaker, upstream pause or spreading) has a say at `now`: the
    /// fast path may then decide alone.
    #[inline]
    fn ungated(&self, now: Nanos) -> bool {
        self.breaker.is_none() && self.stats.unshaped(now)
    }

    /// Gives back a half-open probe slot whose call never ran.
    pub(crate) fn cancel_probe(&self) {
        if let Some(b) = &self.breaker {
            b.cancel_probe();
        }
    }

    fn try_quotas(self: &Arc<Self>, call: &Call<'_>, now: Nanos) -> Result<Permit, Denial> {
        // The gates have let the call through: the bucket's compare-and-swap, unless
        // `try_admit_fast` tried it already (it does when no gate had a say).
        let bucket = self.fast_bucket().filter(|_| !self.ungated(now));
        if bucket.is_some_and(|b| b.try_charge(call.count, now)) {
            self.on_admit(Duration::ZERO, call.tenant);
            return Ok(Permit::immediate(Some(self.clone()), now));
        }
        let held = if self.quotas.len() == 1 {
            // One quota (a per-tenant bucket, say): its step and guard on the stack,
            // without the plan's and guards' vectors and the sort.
            let step = self.step(0, call, now)?;
            let mut guard = step.cell.get().lock();
            self.decide(
                std::slice::from_ref(&step),
                std::slice::from_mut(&mut guard),
                call,
                now,
            )?
        } else {
            let plan = self.plan(call, now)?;
            let mut guards = lock_all(&plan);
            self.decide(&plan, &mut guards, call, now)?
        };
        self.on_admit(Duration::ZERO, call.tenant);
        Ok(Permit::new(Some(self.clone()), held, now, Duration::ZERO))
    }

    /// Decides `call` on the locked cells of its plan: charges them and says what
    /// the permit keeps, or says why not (nothing charged).
    fn decide(
        &self,
        plan: &[Step<'_>],
        guards: &mut [CellGuard<'_>],
        call: &Call<'_>,
        now: Nanos,
    ) -> Result<HeldParts, Denial> {
        if retired(guards) {
            return Err(Denial::stale(self.rejection(
                plan[0].quota,
                Reason::RateLimited,
                None,
            )));
        }
        let v = evaluate(plan, guards, now, false);
        if let Some((i, reason, retry)) = v.blame(now).filter(|_| !v.admits(now)) {
            return Err(Denial {
                rejection: self.rejection(plan[i].quota, reason, retry),
                at: v.at,
                can_wait: true,
                stale: false,
            });
        }
        let mut held = HeldParts::new();
        charge(plan, guards, now, false, &mut held);
        self.shadow_pass(plan, guards, now, call.tenant, &mut held);
        Ok(held)
    }

    /// The one-word bucket of a tool governed by exactly one unpartitioned, enforced
    /// request bucket (the common case), whose `try_charge` admits with one
    /// compare-and-swap, no lock and no plan, and says false whenever the general
    /// path must decide (every rejection, and while waiters hold reservations).
    #[inline]
    fn fast_bucket(&self) -> Option<&crate::quota::FastBucket> {
        self.fast.as_deref().and_then(Cell::fast)
    }

    /// Computes the decision of the shadow quotas: charges them if they would admit,
    /// records the rejection they would have made otherwise. Never enforces.
    pub(crate) fn shadow_pass(
        &self,
        plan: &[Step<'_>],
        guards: &mut [CellGuard<'_>],
        now: Nanos,
        tenant: Option<&str>,
        held: &mut HeldParts,
    ) {
        if !plan.iter().any(|s| s.quota.def.shadow) {
            return;
        }
        let v = evaluate(plan, guards, now, true);
        match v.blame(now).filter(|_| !v.admits(now)) {
            None => charge(plan, guards, now, true, held),
            Some((i, reason, _)) => {
                let r = self.rejection(plan[i].quota, reason, None);
                self.stats.on_shadow_reject(r.quota(), r.reason(), tenant);
            }
        }
    }
}
