//! A tool as the engine runs it ([`ToolRuntime`]): its quotas, its gates (the fair
//! queue, the upstream's pause and spreading, the circuit breaker; in `gates`) and
//! the immediate admission of one of its calls — while no gate has a say, the
//! one-word fast path or a per-tenant bucket's slot; else gates first, then the
//! decision kernel on its quotas — and the end of an admitted call.

use std::num::NonZeroU64;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use crate::adaptive::Adaptive;
use crate::circuit::Breaker;
use crate::clock::Nanos;
use crate::denial::Denial;
use crate::fair::FairQueue;
use crate::held::{Admission, HeldParts};
use crate::kernel::{self, Decision, NoPlan, Plan, Step};
use crate::observe::ToolStats;
use crate::queue::Regate;
use crate::quota::{Cell, CellGuard, FastBucket, Inline, NoPartition, Quota};
use crate::retry::RetryRuntime;
use crate::shared::Shared;
use crate::signals::Signals;
use crate::upstream::Upstream;
use crate::vocab::{Call, Completion, OnLimit, Priority, QuotaNames, Reason, Rejection};

mod gates;

/// A tool as the engine runs it.
#[derive(Debug)]
pub(crate) struct ToolRuntime {
    pub(crate) name: Arc<str>,
    /// The tool's own quotas, then those of its pools.
    pub(crate) quotas: Vec<Arc<Quota>>,
    /// The names a rejection by each of `quotas` gives, in the same order.
    pub(crate) names: Box<[Arc<QuotaNames>]>,
    pub(crate) on_limit: OnLimit,
    pub(crate) max_wait: Duration,
    pub(crate) queue_limit: usize,
    /// The longest pause or spreading window an upstream's signals impose.
    pub(crate) max_pause: Duration,
    pub(crate) stats: Arc<ToolStats>,
    /// The upstream's pause and spreading, and the quota paths they are named by.
    pub(crate) upstream: Arc<Upstream>,
    /// The whole tool's upstream signals (`upstream.signals`), read by the fast path
    /// one pointer nearer.
    pub(crate) signals: Arc<Signals>,
    pub(crate) shared: Arc<Shared>,
    /// One unpartitioned enforced request bucket in one word: the fast path.
    pub(crate) fast: Option<Arc<Cell>>,
    /// Set by the reload that replaced it: closes its handles' fast path.
    pub(crate) superseded: AtomicBool,
    /// The order of its waiting calls, when it or a pool sets fairness or a reserve.
    pub(crate) fair: Option<Arc<FairQueue>>,
    /// The indices of `quotas` in lock order, when none is partitioned (their cells
    /// are then fixed): a call's plan is built in that order without sorting.
    pub(crate) lock_order: Option<Box<[usize]>>,
    /// The tool's circuit breaker, kept across reloads while its config is unchanged.
    pub(crate) breaker: Option<Arc<Breaker>>,
    /// The tool's adaptive concurrency limit and the quota it drives.
    pub(crate) adaptive: Option<(Arc<Adaptive>, Arc<Quota>)>,
    /// `tools.<name>.circuit`, the quota path of circuit rejections.
    pub(crate) circuit_path: Arc<str>,
    /// `idempotent = true`: the tool's calls may be retried without a key.
    pub(crate) idempotent: bool,
    /// `[tools.<name>.retry]` and the tool's retry budget, kept across reloads while
    /// the budget's settings are unchanged.
    pub(crate) retry: Option<RetryRuntime>,
}

// === impl ToolRuntime ===

impl ToolRuntime {
    /// Admits `call` now or says why not; never waits. The one-word fast path first,
    /// when nothing else has a say; then the deadline, the gates and the kernel.
    /// (`admit::try_admit` takes the same steps, making the permit itself.)
    #[inline]
    pub(crate) fn try_admit(&self, call: &Call<'_>, now: Nanos) -> Result<Admission, Denial> {
        if self.try_admit_fast(call, now) {
            return Ok(Admission::immediate(now));
        }
        self.try_admit_general(call, now)
    }

    /// A call no gate has a say on, decided without the gates: decided in the
    /// tenant's slot on a per-tenant bucket (`Ok(Some(hash))`: admitted, the caller
    /// counts it; the tenant's hash, [`crate::tenant_hash::TenantHasher`]), or refused by
    /// the fast bucket's word (the time it conforms read off it, as the general path
    /// would find it under the lock). `Ok(None)` when the general path must decide.
    /// Out of line, so that the other tools' general path stays as it was.
    #[inline(never)]
    fn decide_quiet(&self, call: &Call<'_>, now: Nanos) -> Result<Option<u64>, Denial> {
        let Some(bucket) = self.fast_bucket() else {
            return self.try_partition_inline(call, now);
        };
        let q = &self.quotas[0];
        match q.word_cost(call).and_then(|cost| bucket.refusal(cost, now)) {
            Some(at) => Err(self.refused_until(q, at, now)),
            None => Ok(None),
        }
    }

    /// The denial of a call that `q` refuses until `at` (after `now`), as the
    /// kernel gives it.
    fn refused_until(&self, q: &Quota, at: Nanos, now: Nanos) -> Denial {
        let retry = Duration::from_nanos(at - now);
        Denial::until(self.rejection(q, Reason::RateLimited, Some(retry)), at)
    }

    /// Whether nothing but the quotas has a say on `call` at `now`: no deadline, no
    /// reload superseding the tool, no fair queue, no breaker, no upstream pause or
    /// spreading (of the whole tool or of any tenant). A call found quiet skips
    /// [`ToolRuntime::gates`]: a new gate there must make this say no while it has a
    /// say.
    #[inline(always)]
    fn quiet(&self, call: &Call<'_>, now: Nanos) -> bool {
        self.fast_may_decide(call, now) && self.fair.is_none() && self.upstream.quiet(now)
    }

    /// What the fast path asks before its word decides alone: no deadline, no
    /// reload superseding the tool, no breaker, no pause or spreading of the whole
    /// tool (a tool with a fast path has no fair queue and no per-tenant signals).
    #[inline(always)]
    fn fast_may_decide(&self, call: &Call<'_>, now: Nanos) -> bool {
        call.deadline_at().is_none()
            && !self.superseded.load(std::sync::atomic::Ordering::Acquire)
            && self.ungated(now)
    }

    /// Admits `call` by the fast path alone, when nothing else has a say: no
    /// deadline, no breaker, no upstream pause or spreading, and a bucket that admits
    /// now. `false` leaves the decision to the general path.
    #[inline(always)]
    pub(crate) fn try_admit_fast(&self, call: &Call<'_>, now: Nanos) -> bool {
        let Some(bucket) = self.fast_bucket() else {
            return false;
        };
        if !self.fast_may_decide(call, now) || !bucket.try_charge(call.count, now) {
            return false;
        }
        self.stats
            .on_admit(Duration::ZERO, call.tenant, Priority::Default);
        true
    }

    /// [`ToolRuntime::try_admit`] once the fast path has been tried (or cannot
    /// apply): while no gate has a say, the fast bucket's word or the tenant's slot
    /// ([`ToolRuntime::try_admit_quiet`]); else the gates, then every quota of the
    /// call ([`ToolRuntime::try_admit_gated`]).
    pub(crate) fn try_admit_general(
        &self,
        call: &Call<'_>,
        now: Nanos,
    ) -> Result<Admission, Denial> {
        if let Some(tenant) = self.try_admit_quiet(call, now)? {
            let mut admission = Admission::immediate(now);
            admission.tenant = tenant;
            return Ok(admission);
        }
        self.try_admit_gated(call, now)
    }

    /// A call decided while no gate has a say ([`ToolRuntime::decide_quiet`]):
    /// `Some` when admitted keeping nothing (counted), with the tenant's key for the
    /// permit ([`crate::upstream::Upstream::tenant_key`]); `None` when the gates and
    /// the quotas must decide ([`ToolRuntime::try_admit_gated`]).
    #[inline(always)]
    pub(crate) fn try_admit_quiet(
        &self,
        call: &Call<'_>,
        now: Nanos,
    ) -> Result<Option<Option<u64>>, Denial> {
        // `Ok(None)` from `decide_quiet`: the general path decides.
        if (self.fast.is_some() || self.has_tenant_slot()) && self.quiet(call, now) {
            if let Some(hash) = self.decide_quiet(call, now)? {
                self.on_admit(Duration::ZERO, call);
                // The tenant's signals are keyed by the hash its slot was found by.
                return Ok(Some(self.upstream.tenant_key_of(hash)));
            }
        }
        Ok(None)
    }

    /// The deadline, the gates, then every quota of `call`: the general path of a
    /// call that [`ToolRuntime::try_admit_quiet`] left undecided.
    pub(crate) fn try_admit_gated(&self, call: &Call<'_>, now: Nanos) -> Result<Admission, Denial> {
        if self.stats.latency.too_late(now, call.deadline_at()) {
            return Err(Rejection::past_deadline(self.name.clone()).into());
        }
        let pass = self.gates(now, call)?;
        match self.try_quotas(call, now) {
            Ok(mut admission) => {
                admission.probe = pass.probe;
                admission.tenant = self.upstream.tenant_key(call.tenant);
                Ok(admission)
            }
            Err(d) => {
                self.ungate(pass);
                Err(d)
            }
        }
    }

    /// Every quota of `call`, once the gates have let it through: the bucket's
    /// compare-and-swap, unless `try_admit_fast` tried it already (when no gate nor
    /// deadline had a say), else the kernel on the call's plan (or, for a partitioned
    /// quota alone, the tenant's slot first).
    fn try_quotas(&self, call: &Call<'_>, now: Nanos) -> Result<Admission, Denial> {
        let bucket = self
            .fast_bucket()
            .filter(|_| call.deadline_at().is_some() || !self.ungated(now));
        if bucket.is_some_and(|b| b.try_charge(call.count, now)) {
            self.on_admit(Duration::ZERO, call);
            return Ok(Admission::immediate(now));
        }
        let held = if self.quotas.len() == 1 {
            if self.has_tenant_slot() {
                self.try_tenant_quota(call, now)?
            } else {
                self.decide_one(call, now)?
            }
        } else {
            let plan = self.plan(call, now)?;
            let mut guards = kernel::lock_all(&plan);
            self.decide(&plan, &mut guards, call.tenant, now)?
        };
        self.on_admit(Duration::ZERO, call);
        Ok(Admission::new(held, now))
    }

    /// The decision on the tool's one quota, its step and guard on the stack,
    /// without the plan's and guards' vectors and the sort.
    #[inline(always)]
    fn decide_one(&self, call: &Call<'_>, now: Nanos) -> Result<HeldParts, Denial> {
        let step = self.step(0, call, now)?;
        let mut guard = step.cell.get().lock();
        self.decide(
            std::slice::from_ref(&step),
            std::slice::from_mut(&mut guard),
            call.tenant,
            now,
        )
    }

    /// The decision on the tool's one quota, a partitioned one: in the tenant's slot
    /// (tried again if it was tried before the gates: rarely, only for a tenant whose
    /// partition is a whole instance), else on the partition's cell. Out of line, so
    /// that the other tools' general path stays as it was.
    #[inline(never)]
    fn try_tenant_quota(&self, call: &Call<'_>, now: Nanos) -> Result<HeldParts, Denial> {
        if self.try_partition_inline(call, now)?.is_some() {
            return Ok(HeldParts::new());
        }
        self.decide_one(call, now)
    }

    /// Whether the tool's one quota is partitioned: its calls may be decided in the
    /// tenant's slot ([`ToolRuntime::try_partition_inline`]).
    #[inline(always)]
    fn has_tenant_slot(&self) -> bool {
        self.quotas.len() == 1 && self.quotas[0].is_partitioned()
    }

    /// A call whose one quota is a per-tenant request bucket, decided in the tenant's
    /// slot ([`Quota::try_inline`]): `Ok(Some(hash))` when admitted (the caller counts
    /// it; the tenant's hash, for its signals' key), the denial the kernel would give,
    /// or `Ok(None)` when the general path must decide.
    #[inline]
    fn try_partition_inline(&self, call: &Call<'_>, now: Nanos) -> Result<Option<u64>, Denial> {
        let q = &self.quotas[0];
        match q.try_inline(call, now) {
            Ok((Inline::Admitted, hash)) => Ok(Some(hash)),
            Ok((Inline::Refused(at), _)) => Err(self.refused_until(q, at, now)),
            Ok((Inline::General, _)) => Ok(None),
            Err(NoPartition::Full) => Err(self.no_plan(NoPlan::NoPartition(0), now)),
            Err(NoPartition::Retired) => Err(self.no_plan(NoPlan::Retired(0), now)),
        }
    }

    /// The kernel's decision on the locked cells of a plan of this tool, in the
    /// tool's words: what the permit keeps, or the denial naming the quota to blame
    /// (nothing charged).
    #[inline]
    fn decide(
        &self,
        plan: &[Step<'_>],
        guards: &mut [CellGuard<'_>],
        tenant: Option<&str>,
        now: Nanos,
    ) -> Result<HeldParts, Denial> {
        let mut held = HeldParts::new();
        match kernel::decide(plan, guards, now, &mut held) {
            Decision::Admitted { shadow } => {
                if let Some((i, reason)) = shadow {
                    self.shadow_refused(&plan[i], reason, tenant);
                }
                Ok(held)
            }
            Decision::Refused {
                step,
                reason,
                retry,
                at,
            } => {
                let r = self.rejection(plan[step].quota, reason, retry);
                Err(Denial::until(r, at))
            }
            Decision::Stale => {
                let r = self.rejection(plan[0].quota, Reason::RateLimited, None);
                Err(Denial::stale(r))
            }
        }
    }

    /// Records that the shadow quota of `step` would have refused a call.
    pub(crate) fn shadow_refused(&self, step: &Step<'_>, reason: Reason, tenant: Option<&str>) {
        let r = self.rejection(step.quota, reason, None);
        self.stats.on_shadow_reject(r.quota(), r.reason(), tenant);
    }

    /// The quotas governing `call`, sorted in lock order (see [`kernel::plan`]); a
    /// stale denial when a reload replaced a tenant's partitions meanwhile.
    pub(crate) fn plan(&self, call: &Call<'_>, now: Nanos) -> Result<Plan<'_>, Denial> {
        kernel::plan(&self.quotas, self.lock_order.as_deref(), call, now)
            .map_err(|no| self.no_plan(no, now))
    }

    /// The step of `call` on the quota at `rank`.
    #[inline(always)]
    fn step(&self, rank: usize, call: &Call<'_>, now: Nanos) -> Result<Step<'_>, Denial> {
        kernel::step(&self.quotas, rank, call, now).map_err(|no| self.no_plan(no, now))
    }

    /// Why a call of this tool has no plan, as a denial.
    #[inline(always)]
    fn no_plan(&self, no: NoPlan, now: Nanos) -> Denial {
        let rejection = |rank: usize, reason| self.rejection(&self.quotas[rank], reason, None);
        match no {
            NoPlan::TooCostly(rank) => {
                Denial::final_at(rejection(rank, Reason::CostExceedsCapacity), now)
            }
            NoPlan::NoPartition(rank) => {
                Denial::final_at(rejection(rank, Reason::RateLimited), now)
            }
            NoPlan::Retired(rank) => Denial::stale(rejection(rank, Reason::RateLimited)),
        }
    }

    /// A rejection of this tool by `quota`.
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
        let mut names = self.quotas.iter().zip(self.names.iter());
        match names.find(|(q, _)| std::ptr::eq(&***q, quota)) {
            Some((_, names)) => Rejection::named(names, reason, retry),
            // A quota not among the tool's (an adaptive limit's, say).
            None => Rejection::new(self.name.clone(), quota.def.path.clone(), reason, retry),
        }
    }

    /// Counts a refusal and hands back its rejection.
    pub(crate) fn refuse(&self, denial: Denial, tenant: Option<&str>) -> Rejection {
        self.stats.on_reject(&denial.rejection, tenant);
        denial.rejection
    }

    /// Counts an admission, unless a shared store still has to decide (and counts).
    #[inline]
    pub(crate) fn on_admit(&self, waited: Duration, call: &Call<'_>) {
        if self.shared.store.is_none() {
            self.stats
                .on_admit(waited, call.tenant, call.priority_class());
        }
    }

    /// The one-word bucket (see `fast`): `try_charge` admits with one CAS, no lock
    /// and no plan, or says false when the general path must decide.
    #[inline]
    fn fast_bucket(&self) -> Option<&FastBucket> {
        self.fast.as_deref().and_then(Cell::fast)
    }

    /// Whether no gate (breaker, upstream pause or spreading) has a say at `now`: the
    /// fast path may then decide alone.
    #[inline]
    fn ungated(&self, now: Nanos) -> bool {
        self.breaker.is_none() && self.signals.unshaped(now)
    }

    // --- the end of a call ---

    /// Records how an admitted call ended (`None`: dropped without an outcome) and
    /// counts it out; what the permit held is released by then. `tenant`: the key
    /// of the call's tenant on a tool with per-tenant signals (see
    /// [`Upstream::tenant_key`]).
    #[inline(always)]
    pub(crate) fn end_call(
        &self,
        completion: Option<Completion>,
        probe: bool,
        tenant: Option<NonZeroU64>,
    ) {
        match &completion {
            // Dropped without an outcome: nothing to record.
            None if !probe => self.stats.on_finish(),
            // An outcome that nothing takes in: no latency, no upstream signal, and
            // neither a breaker nor an adaptive limit to feed. Decided inline, so that a
            // completion built at the call site need not be written out.
            Some(c)
                if !probe
                    && c.latency.is_none()
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
        tenant: Option<NonZeroU64>,
    ) {
        let Some(c) = completion else {
            // Dropped without an outcome: a probe slot to free.
            if probe {
                self.cancel_probe();
            }
            self.stats.on_finish();
            return;
        };
        if let Some(latency) = c.latency {
            self.stats.latency.record(latency);
        }
        if c.server_limit.is_some() || c.retry_after.is_some() {
            self.hear(&c, tenant.map(NonZeroU64::get));
        }
        if let Some((a, quota)) = &self.adaptive {
            if let Some(limit) = a.record(c.outcome, c.latency) {
                crate::adaptive::apply_limit(quota, limit);
            }
        }
        if let Some(b) = &self.breaker {
            if b.record(c.outcome, c.latency, probe, self.shared.clock.now()) {
                self.breaker_closed();
            }
        }
        self.stats.on_finish();
    }

    /// Takes in the upstream's signals in a completion (of a call of the tenant whose
    /// key is `tenant`, on a per-tenant tool; see [`Upstream::hear`]), and re-gates
    /// the calls waiting when a gate moved.
    fn hear(&self, c: &Completion, tenant: Option<u64>) {
        let clock = &*self.shared.clock;
        let (moved, key) = self.upstream.hear(c, tenant, clock.now(), self.max_pause);
        if moved && self.stats.has_waiters() {
            let how = Regate::Signals;
            self.shared
                .sched
                .lock()
                .regate(clock, &self.upstream, key, &how);
        }
    }
}
