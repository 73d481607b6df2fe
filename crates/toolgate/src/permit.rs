//! The RAII permit of an admitted call.

use std::fmt;
use std::mem::ManuallyDrop;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Nanos;
use crate::held::{Admission, HeldParts};
use crate::quota::{CostOf, Kind};
use crate::store::StoreLease;
use crate::tool::ToolRuntime;
use crate::vocab::{Completion, Priority};

mod scoped;
mod unadmitted;

pub use scoped::ScopedPermit;
pub(crate) use unadmitted::Unadmitted;

/// Proof that a call was admitted.
///
/// Complete it with [`Permit::complete`] when the call ends, to release its
/// concurrency, reconcile its token estimate against the actual count and feed the
/// outcome to the resilience layers. Dropping it without completing (a panic, a
/// cancelled task) still releases everything it holds; the outcome is then unknown and
/// is not counted as a failure. The engine never re-runs an admitted call.
///
/// # Examples
///
/// ```
/// use toolgate::{Call, Completion, Engine, Policy};
///
/// let engine = Engine::new(Policy::from_toml_str("[tools.t]\nconcurrency = 1").unwrap());
/// let permit = engine.try_admit(&Call::new("t")).unwrap();
/// assert!(engine.try_admit(&Call::new("t")).is_err());
/// permit.complete(Completion::success());
/// assert!(engine.try_admit(&Call::new("t")).is_ok());
/// ```
#[must_use = "a permit releases its quota when dropped"]
// In declaration order (`repr(C)`, and `Kept` too): what every permit's making writes
// (the tool, the times, the tenant, the probe flag) lies first and in order, and
// `Kept` ends with the two words it writes (its part vector's length, its box), which
// the permit's making writes in one 16-byte store. A move of the permit (out of a
// `Result`, into its caller's place) reads 16-byte pieces, and a piece read across
// smaller writes that have just been made waits for them to reach the cache: in the
// compiler's own order an owned permit made and dropped took 24.7 ns against 21.2
// (a Xeon, docs/benchmarks.md, round seventeen); with `Kept`'s box first, its piece
// took in the first, unwritten words of the part vector, and the owned permit cost
// 4.17× governor's `check()` against 3.06× (an EPYC, round twenty-one).
#[repr(C)]
pub struct Permit {
    /// `None`: a tool without a policy, or a permit whose call has ended.
    tool: Option<Arc<ToolRuntime>>,
    admitted_at: Nanos,
    /// The call's tenant, by its key, on a tool with per-tenant upstream signals: a
    /// pause the upstream reports through this call is that tenant's alone.
    tenant: Option<NonZeroU64>,
    probe: bool,
    /// What only some calls keep. Taken out (`ManuallyDrop::into_inner`) and given
    /// back only when it keeps something (see [`Kept::is_empty`]): a permit that
    /// keeps nothing, every admission of the fast path, ends inline, and its drop
    /// leaves nothing for the fields' own drop to do.
    kept: ManuallyDrop<Kept>,
}

/// What only some permits keep: parts of quotas, a wait, a shared store's lease.
#[derive(Default)]
#[repr(C)] // See `Permit`'s layout.
struct Kept {
    held: HeldParts,
    /// What only calls that waited or went to a shared store keep, boxed so that the
    /// permit stays small: it is moved on every admission.
    extra: Option<Box<Extra>>,
}

/// What only calls that waited or went to a shared store keep.
#[derive(Default)]
struct Extra {
    /// Nanoseconds waited.
    waited: Nanos,
    /// What a shared store keeps for the call (see [`crate::store`]).
    lease: Option<Box<dyn StoreLease>>,
}

// === impl Permit ===

impl Permit {
    /// The permit of a call of `tool` (`None`: a tool without a policy) admitted at
    /// `admitted_at` after waiting `waited`, keeping `held`.
    pub(crate) fn new(
        tool: Option<Arc<ToolRuntime>>,
        held: HeldParts,
        admitted_at: Nanos,
        waited: Duration,
    ) -> Self {
        let waited = crate::clock::nanos(waited);
        Self {
            tool,
            admitted_at,
            tenant: None,
            probe: false,
            kept: ManuallyDrop::new(Kept {
                held,
                extra: (waited > 0).then(|| {
                    Box::new(Extra {
                        waited,
                        lease: None,
                    })
                }),
            }),
        }
    }

    /// The permit of a call of `tool` the kernel admitted.
    #[inline]
    pub(crate) fn admitted(tool: Arc<ToolRuntime>, a: Admission) -> Self {
        let mut permit = Self::new(Some(tool), a.held, a.at, Duration::ZERO);
        permit.probe = a.probe;
        permit.set_tenant(a.tenant);
        permit
    }

    /// A permit that keeps no part of any quota, for a call admitted at `at`
    /// without waiting.
    #[inline(always)]
    pub(crate) fn immediate(tool: Option<Arc<ToolRuntime>>, at: Nanos) -> Self {
        Self {
            tool,
            admitted_at: at,
            tenant: None,
            probe: false,
            kept: ManuallyDrop::default(),
        }
    }

    /// Adds what a shared store keeps for the call; the call is now admitted.
    pub(crate) fn with_lease(mut self, lease: Box<dyn StoreLease>, p: Priority) -> Self {
        let extra = self.kept.extra.get_or_insert_with(Box::default);
        extra.waited = extra
            .waited
            .saturating_add(crate::clock::nanos(lease.waited()));
        extra.lease = Some(lease);
        if let Some(tool) = &self.tool {
            tool.stats.on_admit(self.waited(), None, p);
        }
        self
    }

    /// Marks the permit as one of the tenant whose key this is (see
    /// [`crate::upstream::Upstream::tenant_key`], never 0).
    pub(crate) fn set_tenant(&mut self, key: Option<u64>) {
        self.tenant = key.and_then(NonZeroU64::new);
    }

    /// Marks the permit as a half-open probe of the tool's circuit breaker.
    pub(crate) fn set_probe(&mut self, probe: bool) {
        self.probe = probe;
    }

    /// Whether the permit is a half-open probe of the tool's circuit breaker.
    pub(crate) fn is_probe(&self) -> bool {
        self.probe
    }

    /// The tool's name, or `None` for a tool without a policy (admitted without
    /// accounting).
    pub fn tool(&self) -> Option<&str> {
        self.tool.as_deref().map(|t| &*t.name)
    }

    /// When the call was admitted, on the engine's clock.
    pub fn admitted_at(&self) -> Nanos {
        self.admitted_at
    }

    /// What the tool's quota `quota` (by its config path, e.g. `tools.search.rate`)
    /// had left for `tenant` at the admission's time, read through the permit's own
    /// reference to its tool: [`crate::Engine::available`] without the lookup by
    /// name or another read of the clock (the gateway's `RateLimit` header after an
    /// admission). `None` for a tool without a policy or without that quota, and
    /// for a partitioned quota asked without a tenant.
    pub fn available(&self, quota: &str, tenant: Option<&str>) -> Option<u64> {
        crate::state::available_in(self.tool.as_deref()?, quota, tenant, self.admitted_at)
    }

    /// How long the call waited for admission.
    pub fn waited(&self) -> Duration {
        Duration::from_nanos(self.kept.extra.as_ref().map_or(0, |e| e.waited))
    }

    /// Who decided the admission in a shared store ([`StoreLease::source`], such
    /// as `"redis"`), or `None` when this process decided alone: an engine without
    /// a store, or a tool without a policy.
    pub fn store_source(&self) -> Option<&'static str> {
        self.kept.extra.as_ref()?.lease.as_ref().map(|l| l.source())
    }

    /// Ends the call: releases concurrency, reconciles tokens and records the outcome.
    #[inline]
    pub fn complete(mut self, completion: Completion) {
        self.finish(Some(completion));
        // Ended: its drop has nothing left to do.
        self.tool = None;
    }

    /// Gives back what admission charged, for a call that never ran (an unused part
    /// of a reservation made with [`crate::Engine::try_admit_all`]): concurrency is
    /// released, and request and token buckets are refunded — less the refill since
    /// the admission, so that a bucket never ends up fuller than if the call had
    /// never been admitted (a full bucket wastes its refill), and never above
    /// capacity. A sliding window takes the admission back out of its log unless
    /// waiters have reserved slots behind it since. No outcome is recorded.
    ///
    /// Permits from [`crate::Engine::try_admit`] and [`crate::Engine::admit`] keep
    /// only their concurrency and token parts, so for them this is like dropping.
    pub fn cancel(mut self) {
        self.give_back(true);
    }

    /// Gives back the local parts of a call that a shared store then refused: it was
    /// never admitted, so it never counted as in flight.
    pub(crate) fn discard(mut self) {
        self.give_back(false);
    }

    /// What the permit keeps, taken out of it (it keeps nothing after).
    fn take_kept(&mut self) -> Kept {
        ManuallyDrop::into_inner(std::mem::take(&mut self.kept))
    }

    fn give_back(&mut self, admitted: bool) {
        let Kept { held, extra } = self.take_kept();
        if let Some(lease) = extra.and_then(|e| e.lease) {
            lease.cancel();
        }
        let Some(tool) = self.tool.take() else {
            return;
        };
        let core = &tool.shared;
        for h in held {
            let quota = h.quota(&tool.quotas);
            match quota.def.kind {
                Kind::Concurrency(_) => h.cell(quota).lock().release(h.cost),
                Kind::Bucket(_) => {
                    let kept = h
                        .kept
                        .clone()
                        .unwrap_or_else(|| Arc::new(crate::sync::Mutex::new(0)));
                    core.reconcile(quota, &h, 0, Some((self.admitted_at, &kept)));
                }
                Kind::Sliding(_) => h.cell(quota).lock().unrecord(
                    &quota.def,
                    self.admitted_at,
                    h.cost,
                    core.clock.now(),
                ),
            }
        }
        if self.probe {
            tool.cancel_probe();
        }
        if admitted {
            tool.stats.on_finish();
        }
    }

    /// Ends the call (`completion`: how, if known): inline when the permit keeps
    /// nothing but its tool, as every admission of the fast path. Such a permit is
    /// ended through its reference, left in place: nothing is written to the permit
    /// before the reference's release (a locked instruction, which would wait for
    /// the write). So the caller ends it once, then drops it ([`Drop`]) or clears
    /// its tool ([`Permit::complete`]).
    #[inline(always)]
    fn finish(&mut self, completion: Option<Completion>) {
        if !self.kept.is_empty() {
            return self.finish_kept(completion);
        }
        if let Some(tool) = &self.tool {
            tool.end_call(completion, self.probe, self.tenant);
        }
    }

    /// [`Permit::finish`] of a permit that keeps something.
    #[inline(never)]
    fn finish_kept(&mut self, completion: Option<Completion>) {
        let Kept { held, extra } = self.take_kept();
        if let Some(lease) = extra.and_then(|e| e.lease) {
            lease.complete(completion);
        }
        let Some(tool) = self.tool.take() else {
            return;
        };
        let core = &tool.shared;
        // By reference, then dropped with the rest: moving the parts out went
        // through the stack, and reading them back stalled on store forwarding.
        for h in &held {
            let quota = h.quota(&tool.quotas);
            match (quota.def.kind, quota.def.cost_of) {
                (Kind::Concurrency(_), _) => h.cell(quota).lock().release(h.cost),
                (_, CostOf::Tokens) => {
                    if let Some(actual) = completion.and_then(|c| c.tokens) {
                        core.reconcile(quota, h, actual, None);
                    }
                }
                _ => {}
            }
        }
        tool.end_call(completion, self.probe, self.tenant);
    }

    /// [`Drop`] of a permit that keeps something or is a probe.
    #[inline(never)]
    fn drop_slow(&mut self) {
        self.finish(None);
    }
}

// === impl Kept ===

impl Kept {
    /// Whether there is nothing to give back, so that nothing needs dropping: no
    /// part (and no room for parts on the heap), no wait, no lease.
    #[inline(always)]
    fn is_empty(&self) -> bool {
        // Spilled first: inline, the length is the vector's one word, so the two
        // checks fold into one compare.
        !self.held.spilled() && self.held.is_empty() && self.extra.is_none()
    }
}

impl Drop for Permit {
    #[inline(always)]
    fn drop(&mut self) {
        // A permit that keeps nothing and is no probe (every admission of the fast
        // path) ends inline (for such a permit, dropped without an outcome, ending is
        // counting the call out); the rest ends out of line, so that the inline part
        // needs no room for a completion.
        if self.kept.is_empty() && !self.probe {
            if let Some(tool) = &self.tool {
                tool.end_call(None, false, self.tenant);
            }
            return;
        }
        self.drop_slow();
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("tool", &self.tool())
            .field("admitted_at", &self.admitted_at())
            .field("waited", &self.waited())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
