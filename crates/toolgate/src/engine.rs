//! The [`Engine`]: admission by tool name against a live, reloadable policy.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use crate::admission::{charge, evaluate, CellRef, Step};
use crate::clock::{Clock, SystemClock};
use crate::permit::{HeldParts, Permit, ScopedPermit};
use crate::policy::{Compiled, Policy, ToolRuntime};
use crate::queue::Scheduler;
use crate::store::QuotaStore;
use crate::sync::{Mutex, Swap, SwapGuard};
use crate::vocab::{Call, Completion, OnLimit, Outcome, Reason, Rejection, UnknownTools};

/// The admission engine: decides, before a tool call runs, whether it may start.
///
/// Cheap to clone (a handle to shared state) and safe to use from any number of
/// threads and tasks. All time comes from its [`Clock`].
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use toolgate::{Call, Engine, ManualClock, Policy, Reason};
///
/// let clock = ManualClock::new();
/// let policy = Policy::from_toml_str(r#"
///     [tools.lookup_customer]
///     rate = "2/s"
///     burst = 2
/// "#).unwrap();
/// let engine = Engine::with_clock(policy, Arc::new(clock.clone()));
///
/// let call = Call::new("lookup_customer");
/// let admitted: Vec<_> = (0..5).filter_map(|_| engine.try_admit(&call).ok()).collect();
/// assert_eq!(admitted.len(), 2);
///
/// let no = engine.try_admit(&call).unwrap_err();
/// assert_eq!(no.reason(), Reason::RateLimited);
/// assert_eq!(no.quota(), "tools.lookup_customer.rate");
/// assert_eq!(no.retry_after(), Some(Duration::from_millis(500)));
///
/// clock.advance(Duration::from_millis(500));
/// assert!(engine.try_admit(&call).is_ok());
/// ```
#[derive(Debug, Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    core: Arc<Core>,
    compiled: Swap<Compiled>,
    reload: Mutex<()>,
    /// Whether a reload is under way, and the async callers waiting for it to end.
    reloading: Mutex<Reloading>,
    /// Bumped by every reload, so that [`ToolHandle`]s notice a new policy.
    generation: std::sync::atomic::AtomicU64,
}

/// A reload under way, as async callers that must start over on its policy see it.
#[derive(Debug, Default)]
struct Reloading {
    running: bool,
    waiters: Vec<std::task::Waker>,
}

/// Holds the reload lock; marks the reload as under way until dropped, and then
/// wakes the async callers that wait for it (on every exit, errors included).
struct ReloadGuard<'a> {
    inner: &'a Inner,
    _serial: crate::sync::MutexGuard<'a, ()>,
}

/// Resolves once no reload is under way, without blocking the thread (see
/// [`Engine::reload_done`]).
struct ReloadDone<'a> {
    inner: &'a Inner,
}

/// A tool resolved once, for callers that admit the same tool in a hot loop: skips
/// the lookup by name. Follows policy reloads (it re-resolves when the policy
/// changes).
///
/// # Examples
///
/// ```
/// use toolgate::{Call, Engine, Policy};
///
/// let engine = Engine::new(Policy::from_toml_str("[tools.t]\nrate = \"1/h\"").unwrap());
/// let t = engine.tool("t");
/// assert!(t.try_admit(&Call::new("t")).is_ok());
/// assert!(t.try_admit(&Call::new("t")).is_err());
/// ```
#[derive(Debug, Clone)]
pub struct ToolHandle {
    engine: Engine,
    name: Arc<str>,
    cached: Option<(u64, Arc<ToolRuntime>)>,
}

/// What every tool of an engine shares: the clock and the waiters' scheduler.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) clock: Arc<dyn Clock>,
    /// `clock`, read without a virtual call when it is one of toolgate's own.
    pub(crate) now: crate::clock::NowSource,
    pub(crate) sched: Mutex<Scheduler>,
    /// The shared store of the quotas, or `None` for this process's memory.
    pub(crate) store: Option<Arc<dyn QuotaStore>>,
}

/// The error of [`Engine::execute`]: rejected before the tool ran, or failed in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecuteError<E> {
    /// The call was not admitted; the tool did not run.
    Rejected(Rejection),
    /// The tool ran and failed.
    Tool(E),
}

// === impl Engine ===

impl Engine {
    /// An engine on the system clock.
    pub fn new(policy: Policy) -> Self {
        Self::with_clock(policy, Arc::new(SystemClock::new()))
    }

    /// An engine on the given clock.
    pub fn with_clock(policy: Policy, clock: Arc<dyn Clock>) -> Self {
        Self::build(policy, clock, None)
    }

    /// An engine whose quotas live in a shared `store` (see [`crate::store`]):
    /// every process on the same store obeys one quota. Retry-After pauses, circuit
    /// breakers and adaptive limits stay per process.
    ///
    /// Admit with [`Engine::admit`], [`Engine::admit_now`] and [`Engine::admit_all`];
    /// the synchronous [`Engine::try_admit`] and [`Engine::try_admit_all`] cannot ask
    /// a store and refuse every call that needs one.
    ///
    /// # Errors
    ///
    /// When the store cannot run `policy`.
    pub fn with_store(
        policy: Policy,
        clock: Arc<dyn Clock>,
        store: Arc<dyn QuotaStore>,
    ) -> Result<Self, String> {
        store.apply(&policy)?;
        Ok(Self::build(policy, clock, Some(store)))
    }

    fn build(policy: Policy, clock: Arc<dyn Clock>, store: Option<Arc<dyn QuotaStore>>) -> Self {
        let core = Arc::new(Core {
            now: crate::clock::NowSource::of(&*clock),
            clock,
            sched: Mutex::new(Scheduler::default()),
            store,
        });
        let now = core.clock.now();
        let compiled = Compiled::new(policy, &core, None, now);
        Self {
            inner: Arc::new(Inner {
                core,
                compiled: Swap::new(compiled),
                reload: Mutex::new(()),
                reloading: Mutex::new(Reloading::default()),
                generation: std::sync::atomic::AtomicU64::new(0),
            }),
        }
    }

    /// The engine's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.core.clock
    }

    /// The shared store of the quotas, or `None` when they live in this process.
    pub fn store(&self) -> Option<&Arc<dyn QuotaStore>> {
        self.inner.core.store.as_ref()
    }

    /// The policy in force.
    pub fn policy(&self) -> Policy {
        self.inner.compiled.load().policy.clone()
    }

    /// Admits `call` now, or rejects it now: never waits, whatever `on_limit` says.
    ///
    /// # Errors
    ///
    /// A [`Rejection`] naming the quota that said no; nothing was consumed.
    pub fn try_admit(&self, call: &Call<'_>) -> Result<Permit, Rejection> {
        let compiled = self.inner.compiled.load();
        match compiled.tools.get(call.tool) {
            Some(tool) => self.try_admit_tool(tool, call),
            None => self.unknown(&compiled, call),
        }
    }

    /// [`Engine::try_admit`] for a tool already looked up.
    fn try_admit_tool(
        &self,
        tool: &Arc<ToolRuntime>,
        call: &Call<'_>,
    ) -> Result<Permit, Rejection> {
        if self.inner.core.store.is_some() {
            return Err(self.needs_async(tool, call));
        }
        match tool.try_admit(call, self.inner.core.now()) {
            Err(d) if d.stale => {
                self.await_reload();
                self.try_admit(&Call {
                    tool: &tool.name,
                    ..*call
                })
            }
            r => r.map_err(|d| tool.refuse(d, call.tenant)),
        }
    }

    /// Waits for the reload in progress, if any, to put its policy in force: a call
    /// that found a cell of its plan retired by it then starts over on that policy.
    pub(crate) fn await_reload(&self) {
        drop(self.inner.reload.lock());
    }

    /// As [`Engine::await_reload`], for async callers: yields to the runtime
    /// instead of blocking its thread while the reload (which converts every
    /// partition of a changed quota) runs.
    pub(crate) fn reload_done(&self) -> impl Future<Output = ()> + '_ {
        ReloadDone { inner: &self.inner }
    }

    /// Admits `call`, waiting in FIFO order when the tool's `on_limit` is `"wait"` or
    /// the call sets its own `max_wait`.
    ///
    /// A call whose predicted wait exceeds its `max_wait` is rejected at once with
    /// `max_wait_exceeded` (it never sleeps first and fails later), and one that finds
    /// the tool's queue full with `queue_full`. Waits for a concurrency slot cannot be
    /// predicted: such a call queues for the slot until its `max_wait` runs out, then
    /// is rejected with `concurrency_limited`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future before it completes leaves the accounting
    /// exactly as if the call had never arrived: its reservations are undone and the
    /// waiters behind it move up. Once its admission time has been reached the call
    /// counts as admitted; dropping it then is like dropping a [`Permit`].
    ///
    /// # Errors
    ///
    /// A [`Rejection`]; nothing was consumed.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use std::time::Duration;
    /// use toolgate::{Call, Engine, Policy};
    ///
    /// let engine = Engine::new(Policy::from_toml_str(r#"
    ///     [tools.search]
    ///     rate = "10/s"
    ///     burst = 1
    ///     on_limit = "wait"
    ///     max_wait = "1s"
    /// "#).unwrap());
    /// let first = engine.admit(&Call::new("search")).await.unwrap();
    /// let second = engine.admit(&Call::new("search")).await.unwrap();
    /// assert_eq!(first.waited(), Duration::ZERO);
    /// assert_eq!(second.waited(), Duration::from_millis(100));
    /// # }
    /// ```
    pub async fn admit(&self, call: &Call<'_>) -> Result<Permit, Rejection> {
        let tool = match self.resolve(call) {
            Ok(t) => t,
            Err(unknown) => return unknown,
        };
        let waits = tool.on_limit == OnLimit::Wait || call.max_wait_override().is_some();
        self.admit_tool(&tool, call, waits).await
    }

    /// Admits `call` now or rejects it now, like [`Engine::try_admit`], on any store
    /// (a shared store answers after a round trip).
    ///
    /// # Errors
    ///
    /// A [`Rejection`]; nothing was consumed.
    pub async fn admit_now(&self, call: &Call<'_>) -> Result<Permit, Rejection> {
        let tool = match self.resolve(call) {
            Ok(t) => t,
            Err(unknown) => return unknown,
        };
        self.admit_tool(&tool, call, false).await
    }

    /// The runtime of the call's tool, or the answer for a tool without a policy.
    fn resolve(&self, call: &Call<'_>) -> Result<Arc<ToolRuntime>, Result<Permit, Rejection>> {
        let compiled = self.inner.compiled.load();
        match compiled.tools.get(call.tool) {
            Some(t) => Ok(t.clone()),
            None => Err(self.unknown(&compiled, call)),
        }
    }

    async fn admit_tool(
        &self,
        tool: &Arc<ToolRuntime>,
        call: &Call<'_>,
        waits: bool,
    ) -> Result<Permit, Rejection> {
        let mut tool = tool.clone();
        let result = loop {
            let now = self.inner.core.clock.now();
            let outcome = match tool.try_admit(call, now) {
                Err(denial) if !denial.stale && waits && denial.can_wait => {
                    tool.clone().wait(*call, denial).await
                }
                outcome => outcome,
            };
            match outcome {
                Ok(permit) => break Ok(permit),
                // A reload retired a cell of the plan: start over on the new policy.
                Err(denial) if denial.stale => {
                    self.reload_done().await;
                    match self.resolve(&Call {
                        tool: &tool.name,
                        ..*call
                    }) {
                        Ok(t) => tool = t,
                        Err(unknown) => return unknown,
                    }
                }
                Err(denial) => break Err(denial.rejection),
            }
        };
        let result = match (result, &self.inner.core.store) {
            (Ok(local), Some(store)) => match store.admit(*call, waits).await {
                Ok(lease) if lease.waited().is_zero() => Ok(local.with_lease(lease)),
                Ok(lease) => self.regate_stored(&tool, call, local.with_lease(lease)),
                Err(r) => {
                    // Nothing ran: the local parts (a probe slot, an adaptive
                    // concurrency slot) go back as if the call never came.
                    local.discard();
                    Err(r)
                }
            },
            (result, _) => result,
        };
        if let Err(r) = &result {
            tool.stats.on_reject(r, call.tenant);
        }
        result
    }

    /// Asks the gates again for a call a shared store admitted after it waited
    /// there: a breaker that opened meanwhile refuses it (`circuit_open`), and so
    /// does an upstream pause that began meanwhile (`rate_limited`, with the pause's
    /// end as `retry_after`) — rather than wait it out holding a store admission
    /// charged before the pause, which would release every such call at the pause's
    /// end at once. A refused call gives back what it was given, in the store too.
    fn regate_stored(
        &self,
        tool: &ToolRuntime,
        call: &Call<'_>,
        mut permit: Permit,
    ) -> Result<Permit, Rejection> {
        let now = self.inner.core.clock.now();
        let mut probe = permit.is_probe();
        let gated = tool.gates_after_store(now, call.tenant, &mut probe);
        permit.set_probe(probe);
        match gated {
            Ok(()) => Ok(permit),
            Err(d) => {
                permit.cancel();
                Err(d.rejection)
            }
        }
    }

    /// Admits every call or none (a multi-step plan): quotas shared by several calls
    /// are charged with their sum. Never waits.
    ///
    /// # Errors
    ///
    /// The rejection of the first quota that cannot fit; nothing was consumed.
    pub fn try_admit_all(&self, calls: &[Call<'_>]) -> Result<Vec<Permit>, Rejection> {
        let compiled = self.inner.compiled.load();
        if self.inner.core.store.is_some() {
            if let Some((call, tool)) = calls
                .iter()
                .find_map(|c| compiled.tools.get(c.tool).map(|t| (c, t)))
            {
                return Err(self.needs_async(tool, call));
            }
        }
        drop(compiled);
        loop {
            // `None`: a reload retired a cell of the plan; start over on its policy.
            if let Some(permits) = self.admit_all_local(&self.inner.compiled.load(), calls)? {
                return Ok(permits);
            }
            self.await_reload();
        }
    }

    /// Admits every call or none, like [`Engine::try_admit_all`], on any store (a
    /// shared store answers after a round trip). Never waits.
    ///
    /// # Errors
    ///
    /// The rejection of the first quota that cannot fit; nothing was consumed.
    pub async fn admit_all(&self, calls: &[Call<'_>]) -> Result<Vec<Permit>, Rejection> {
        let local = loop {
            // `None`: a reload retired a cell of the plan; start over on its policy.
            if let Some(permits) = self.admit_all_local(&self.inner.compiled.load(), calls)? {
                break permits;
            }
            self.reload_done().await;
        };
        let Some(store) = &self.inner.core.store else {
            return Ok(local);
        };
        // The store sees only the calls of tools with a policy.
        let known: Vec<Call<'_>> = calls
            .iter()
            .zip(&local)
            .filter(|(_, p)| p.tool().is_some())
            .map(|(c, _)| *c)
            .collect();
        match store.admit_all(&known).await {
            Ok(leases) => {
                let mut leases = leases.into_iter();
                Ok(local
                    .into_iter()
                    .map(|p| match p.tool().map(|_| leases.next()) {
                        Some(Some(lease)) => p.with_lease(lease),
                        _ => p,
                    })
                    .collect())
            }
            Err(r) => {
                let compiled = self.inner.compiled.load();
                if let Some(t) = compiled.tools.get(r.tool()) {
                    t.stats.on_reject(&r, None);
                }
                local.into_iter().for_each(Permit::discard);
                Err(r)
            }
        }
    }

    /// Decides `calls` on `compiled`; `Ok(None)` when a reload retired a cell of the
    /// plan (the caller waits for the reload to end and starts over).
    fn admit_all_local(
        &self,
        compiled: &Compiled,
        calls: &[Call<'_>],
    ) -> Result<Option<Vec<Permit>>, Rejection> {
        let now = self.inner.core.clock.now();
        let mut tools: Vec<Option<&Arc<ToolRuntime>>> = Vec::with_capacity(calls.len());
        let mut plans = Vec::with_capacity(calls.len());
        // Spreading slots claimed so far: given back unless every call is admitted.
        let mut claims = SpreadClaims(Vec::new());
        for call in calls {
            match compiled.tools.get(call.tool) {
                Some(t) => {
                    match t
                        .pause_gate(now, call.tenant)
                        .and_then(|()| t.spread_gate(now, call.tenant))
                    {
                        Ok(claim) => claims.0.extend(claim.map(|c| (&**t, c))),
                        Err(d) => return Err(t.refuse(d, call.tenant)),
                    }
                    // A reservation never runs as a half-open probe: anything but a
                    // closed (or admitting degraded) circuit refuses it.
                    match t.circuit_gate(now) {
                        Ok(false) => {}
                        Ok(true) => {
                            t.cancel_probe();
                            let r = Rejection::new(
                                t.name.clone(),
                                t.circuit_path.clone(),
                                Reason::CircuitOpen,
                                t.breaker.as_ref().map(|b| b.half_open_retry(now)),
                            );
                            t.stats.on_reject(&r, call.tenant);
                            return Err(r);
                        }
                        Err(d) => {
                            return Err(t.refuse(d, call.tenant));
                        }
                    }
                    let plan = match t.plan(call, now) {
                        Ok(plan) => plan,
                        // A reload replaced a tenant's partitions: start over.
                        Err(d) if d.stale => return Ok(None),
                        Err(d) => return Err(t.refuse(d, call.tenant)),
                    };
                    tools.push(Some(t));
                    plans.push(plan);
                }
                None => {
                    if compiled.unknown == UnknownTools::Deny {
                        return self.unknown(compiled, call).map(|_| Some(Vec::new()));
                    }
                    tools.push(None);
                    plans.push(SmallVec::new());
                }
            }
        }
        // One step per cell, costs summed.
        let mut merged: Vec<Step<'_>> = Vec::new();
        for step in plans.iter().flatten() {
            match merged
                .iter_mut()
                .find(|m| Arc::ptr_eq(m.cell.get(), step.cell.get()))
            {
                Some(m) => m.cost += step.cost,
                None => merged.push(Step {
                    quota: step.quota,
                    cell: CellRef::Owned(step.cell.get().clone()),
                    cost: step.cost,
                    rank: merged.len(),
                }),
            }
        }
        if let Some(s) = merged.iter().find(|s| s.cost > s.quota.def.capacity()) {
            let tool = owner(&tools, &plans, s);
            let r = tool.rejection(s.quota, Reason::CostExceedsCapacity, None);
            tool.stats.on_reject(&r, None);
            return Err(r);
        }
        merged.sort_unstable_by_key(|s| s.cell.get().order());
        let mut guards = crate::admission::lock_all(&merged);
        if crate::admission::retired(&guards) {
            return Ok(None);
        }
        let v = evaluate(&merged, &mut guards, now, false);
        if let Some((i, reason, retry)) = v.blame(now).filter(|_| !v.admits(now)) {
            let tool = owner(&tools, &plans, &merged[i]);
            let r = tool.rejection(merged[i].quota, reason, retry);
            tool.stats.on_reject(&r, None);
            return Err(r);
        }
        let mut scratch = HeldParts::new();
        charge(&merged, &mut guards, now, false, &mut scratch);
        let shadow_ok = evaluate(&merged, &mut guards, now, true).admits(now);
        if shadow_ok {
            charge(&merged, &mut guards, now, true, &mut scratch);
        }
        drop(guards);
        let kept: Vec<(Arc<crate::quota::Cell>, Arc<Mutex<u128>>)> = merged
            .iter()
            .filter(|s| matches!(s.quota.def.kind, crate::quota::Kind::Bucket(_)))
            .map(|s| (s.cell.get().clone(), Arc::new(Mutex::new(0))))
            .collect();
        let mut permits = Vec::with_capacity(calls.len());
        for ((call, tool), plan) in calls.iter().zip(&tools).zip(&plans) {
            let Some(tool) = tool else {
                permits.push(Permit::immediate(None, now));
                continue;
            };
            // A reservation's permits keep every part they charged, so that an unused
            // one can give it all back (`Permit::cancel`).
            let held = plan
                .iter()
                .filter(|s| {
                    (s.cost > 0 || s.quota.def.cost_of == crate::quota::CostOf::Tokens)
                        && (!s.quota.def.shadow || shadow_ok)
                })
                .map(|s| {
                    // The cell was charged once for every call of the plan on it:
                    // its parts share what a give-back keeps back.
                    let mut h = s.held();
                    h.kept = kept
                        .iter()
                        .find(|(c, _)| Arc::ptr_eq(c, s.cell.get()))
                        .map(|(_, k)| k.clone());
                    h
                })
                .collect();
            if !shadow_ok {
                if let Some(s) = plan.iter().find(|s| s.quota.def.shadow) {
                    tool.stats.on_shadow_reject(
                        &s.quota.def.path,
                        s.quota.def.reason(),
                        call.tenant,
                    );
                }
            }
            tool.on_admit(Duration::ZERO, call.tenant);
            let mut permit = Permit::new(Some((*tool).clone()), held, now, Duration::ZERO);
            permit.set_tenant(tool.tenant_key(call.tenant));
            permits.push(permit);
        }
        claims.0.clear();
        Ok(Some(permits))
    }

    /// Runs `f` if `call` is admitted (waiting as [`Engine::admit`] does), then
    /// completes the permit with the outcome and latency.
    ///
    /// # Errors
    ///
    /// [`ExecuteError::Rejected`] if the call was not admitted (`f` did not run), or
    /// [`ExecuteError::Tool`] with `f`'s own error.
    pub async fn execute<F, Fut, T, E>(&self, call: &Call<'_>, f: F) -> Result<T, ExecuteError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let permit = self.admit(call).await.map_err(ExecuteError::Rejected)?;
        let clock = self.clock().clone();
        let start = clock.now();
        let result = f().await;
        let latency = Duration::from_nanos(clock.now().saturating_sub(start));
        let outcome = if result.is_ok() {
            Outcome::Success
        } else {
            Outcome::Error
        };
        permit.complete(Completion::new(outcome).latency(latency));
        result.map_err(ExecuteError::Tool)
    }

    /// Puts a new policy in force. Quotas whose definition did not change keep their
    /// state (and waiters); changed ones start from a conversion of the old state that
    /// never grants more than the old quota had left. Calls already admitted or
    /// waiting are unaffected.
    ///
    /// On a shared store that cannot run `policy`, the error is logged and the old
    /// policy stays in force; [`Engine::try_apply`] returns it instead.
    pub fn apply(&self, policy: Policy) {
        if let Err(e) = self.try_apply(policy) {
            tracing::error!(error = %e, "the new policy was not applied");
        }
    }

    /// As [`Engine::apply`], saying when a shared store cannot run `policy` (the old
    /// policy then stays in force, in the store and here).
    ///
    /// # Errors
    ///
    /// The store's message.
    pub fn try_apply(&self, policy: Policy) -> Result<(), String> {
        let _serial = ReloadGuard::new(&self.inner);
        if let Some(store) = &self.inner.core.store {
            store.apply(&policy)?;
        }
        let old = self.inner.compiled.load_full();
        let now = self.inner.core.clock.now();
        let new = Compiled::new(policy, &self.inner.core, Some(&old), now);
        self.inner.compiled.store(Arc::new(new));
        self.inner
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        for tool in old.tools.values() {
            tool.superseded
                .store(true, std::sync::atomic::Ordering::Release);
        }
        Ok(())
    }

    /// A handle on `tool` that skips the lookup by name on every call.
    pub fn tool(&self, tool: &str) -> ToolHandle {
        let generation = self
            .inner
            .generation
            .load(std::sync::atomic::Ordering::Acquire);
        let cached = self
            .compiled()
            .tools
            .get(tool)
            .map(|t| (generation, t.clone()));
        ToolHandle {
            engine: self.clone(),
            name: tool.into(),
            cached,
        }
    }

    fn unknown(&self, compiled: &Compiled, call: &Call<'_>) -> Result<Permit, Rejection> {
        let stats = &compiled.unknown_stats;
        match compiled.unknown {
            UnknownTools::Allow => Ok(Permit::immediate(None, self.inner.core.now())),
            UnknownTools::Deny => {
                let r = Rejection::new(call.tool, "unknown_tools", Reason::UnknownTool, None);
                stats.on_reject(&r, call.tenant);
                Err(r)
            }
        }
    }

    /// The answer of the synchronous verbs on a shared store, which they cannot ask.
    fn needs_async(&self, tool: &ToolRuntime, call: &Call<'_>) -> Rejection {
        tracing::error!(
            tool = call.tool,
            "try_admit cannot ask a shared store; use admit_now or admit_all"
        );
        let r = Rejection::store_unavailable(tool.name.clone());
        tool.stats.on_reject(&r, call.tenant);
        r
    }

    pub(crate) fn compiled(&self) -> SwapGuard<Compiled> {
        self.inner.compiled.load()
    }
}

// === impl ToolHandle ===

impl ToolHandle {
    /// As [`Engine::try_admit`], for this handle's tool (the call's own tool name is
    /// not looked at).
    ///
    /// # Errors
    ///
    /// A [`Rejection`]; nothing was consumed.
    pub fn try_admit(&self, call: &Call<'_>) -> Result<Permit, Rejection> {
        match self.current() {
            Some(tool) => self.engine.try_admit_tool(tool, call),
            None => self.engine.try_admit(&Call {
                tool: &self.name,
                ..*call
            }),
        }
    }

    /// As [`ToolHandle::try_admit`], with a permit that borrows this handle instead
    /// of sharing ownership of the tool (see [`ScopedPermit`]): the fastest way to
    /// admit a call that ends before the handle goes away.
    ///
    /// # Errors
    ///
    /// A [`Rejection`]; nothing was consumed.
    #[inline(always)]
    pub fn try_admit_scoped(&self, call: &Call<'_>) -> Result<ScopedPermit<'_>, Rejection> {
        // No generation check here: a reload marks the runtimes it replaced as
        // superseded, which closes their fast path (the general path re-resolves).
        if let Some((_, tool)) = &self.cached {
            let now = self.engine.inner.core.now();
            if tool.try_admit_fast(call, now) {
                return Ok(ScopedPermit::fast(tool, now));
            }
            return self.try_admit_scoped_general(Some(now), call);
        }
        self.try_admit_scoped_general(None, call)
    }

    /// [`ToolHandle::try_admit_scoped`] past the fast path (tried on the cached tool at
    /// the time `tried`, if any), out of line so that the fast path stays small enough to
    /// inline.
    #[inline(never)]
    fn try_admit_scoped_general<'a>(
        &'a self,
        tried: Option<crate::clock::Nanos>,
        call: &Call<'_>,
    ) -> Result<ScopedPermit<'a>, Rejection> {
        let core = &self.engine.inner.core;
        let tried = tried
            .and_then(|now| Some((self.current()?, now)))
            .filter(|_| core.store.is_none());
        match tried.map(|(tool, now)| (tool, tool.try_admit_general(call, now))) {
            Some((_, Ok(permit))) => Ok(ScopedPermit::owned(permit)),
            Some((tool, Err(d))) if !d.stale => Err(tool.refuse(d, call.tenant)),
            // A reload retired a cell of the plan: start over on the new policy.
            Some((_, Err(_))) => {
                self.engine.await_reload();
                self.try_admit(call).map(ScopedPermit::owned)
            }
            None => self.try_admit(call).map(ScopedPermit::owned),
        }
    }

    /// The resolved tool, while the policy it was resolved in is still in force.
    #[inline]
    fn current(&self) -> Option<&Arc<ToolRuntime>> {
        match &self.cached {
            Some((generation, tool))
                if *generation
                    == self
                        .engine
                        .inner
                        .generation
                        .load(std::sync::atomic::Ordering::Acquire) =>
            {
                Some(tool)
            }
            _ => None,
        }
    }
}

/// The spreading slots a reservation has claimed; dropped with any left in it (a
/// refusal), it gives them back.
struct SpreadClaims<'a>(Vec<(&'a ToolRuntime, crate::signals::Claim)>);

impl Drop for SpreadClaims<'_> {
    fn drop(&mut self) {
        // Latest first: each claim gives back to the one before it.
        for (tool, claim) in self.0.drain(..).rev() {
            tool.unspread(Some(claim));
        }
    }
}

// === impl ReloadGuard ===

impl<'a> ReloadGuard<'a> {
    fn new(inner: &'a Inner) -> Self {
        let serial = inner.reload.lock();
        inner.reloading.lock().running = true;
        Self {
            inner,
            _serial: serial,
        }
    }
}

impl Drop for ReloadGuard<'_> {
    fn drop(&mut self) {
        let waiters = {
            let mut r = self.inner.reloading.lock();
            r.running = false;
            std::mem::take(&mut r.waiters)
        };
        waiters.into_iter().for_each(std::task::Waker::wake);
    }
}

// === impl ReloadDone ===

impl Future for ReloadDone<'_> {
    type Output = ();

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        let mut r = self.inner.reloading.lock();
        if !r.running {
            return std::task::Poll::Ready(());
        }
        if !r.waiters.iter().any(|w| w.will_wake(cx.waker())) {
            r.waiters.push(cx.waker().clone());
        }
        std::task::Poll::Pending
    }
}

fn owner<'a>(
    tools: &[Option<&'a Arc<ToolRuntime>>],
    plans: &[crate::admission::Plan<'_>],
    step: &Step<'_>,
) -> &'a Arc<ToolRuntime> {
    let i = plans
        .iter()
        .position(|p| p.iter().any(|s| Arc::ptr_eq(s.cell.get(), step.cell.get())))
        .unwrap_or(0);
    tools
        .get(i)
        .copied()
        .flatten()
        .or_else(|| tools.iter().flatten().next().copied())
        .expect("a merged step comes from a known tool")
}

// === impl Core ===

impl Core {
    /// The engine's time, read without a virtual call for toolgate's own clocks.
    #[inline]
    pub(crate) fn now(&self) -> crate::clock::Nanos {
        self.now.now(&*self.clock)
    }
}

impl<E: std::fmt::Display> std::fmt::Display for ExecuteError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Rejected(r) => write!(f, "{r}"),
            Self::Tool(e) => write!(f, "tool failed: {e}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for ExecuteError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Rejected(r) => Some(r),
            Self::Tool(e) => Some(e),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::task::Poll;

    use crate::clock::ManualClock;

    use super::*;

    #[test]
    fn an_async_caller_waits_for_a_reload_without_blocking_its_thread() {
        let engine = Engine::new(Policy::from_toml_str("[tools.t]\nrate = \"1/s\"").unwrap());
        let mut done = tokio_test::task::spawn(engine.reload_done());
        // No reload under way: ready at once.
        assert_eq!(done.poll(), Poll::Ready(()));

        let mut done = tokio_test::task::spawn(engine.reload_done());
        let reload = ReloadGuard::new(&engine.inner);
        // Under way: pending (the thread is free for other tasks), then woken once
        // the reload ends, on every exit of `try_apply` alike.
        assert_eq!(done.poll(), Poll::Pending);
        assert_eq!(done.poll(), Poll::Pending);
        assert!(!done.is_woken());
        drop(reload);
        assert!(done.is_woken());
        assert_eq!(done.poll(), Poll::Ready(()));
    }

    #[test]
    fn a_call_still_on_the_old_policy_cannot_create_a_partition_the_new_one_misses() {
        // A call that resolved its tool just before a reload plans on the old
        // runtime after it. For a tenant the old map did not have yet, it used to
        // create a partition there and be admitted on it, unseen by the new policy:
        // that tenant then got its burst twice.
        let toml = |burst: u32| {
            format!("[tools.a]\nrate = \"1/h\"\nburst = {burst}\npartition = \"tenant\"")
        };
        let clock = ManualClock::new();
        let engine = Engine::with_clock(
            Policy::from_toml_str(&toml(2)).unwrap(),
            Arc::new(clock.clone()),
        );
        let old = engine.compiled().tools.get("a").cloned().unwrap();
        engine.apply(Policy::from_toml_str(&toml(3)).unwrap());
        let call = Call::new("a").tenant("newcomer");
        let denial = old.try_admit(&call, clock.now()).map(drop).unwrap_err();
        assert!(
            denial.stale,
            "the old map must send the call to the new policy"
        );
        // Starting over, the tenant gets the new burst, and only that.
        let admitted = (0..5).filter(|_| engine.try_admit(&call).is_ok()).count();
        assert_eq!(admitted, 3);
    }
}
