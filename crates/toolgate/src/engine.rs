//! The [`Engine`]: admission by tool name against a live, reloadable policy — the
//! public face of the engine. Each verb hands over to the module that does the work,
//! in the order a call goes: [`crate::admit`] (one call: the tool's gates and the
//! decision kernel, waiting in [`crate::wait`]), [`crate::reserve`] (every call of a
//! plan or none), the [`Permit`] that completes it, and [`crate::pipeline`] (admit,
//! attempt, complete, retry); [`crate::live`] keeps the policy in force and reloads
//! it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::admit::Waits;
use crate::clock::{Clock, SystemClock};
use crate::handle::ToolHandle;
use crate::live::Live;
use crate::permit::Permit;
use crate::pipeline::{AttemptCtx, AttemptResult, RunFailure, RunOptions, RunOutput};
use crate::policy::Policy;
use crate::state::ToolState;
use crate::store::QuotaStore;
use crate::vocab::{Call, Completion, ExecuteError, Outcome, Rejection};

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
    live: Arc<Live>,
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
        Self {
            live: Arc::new(Live::new(policy, clock, store)),
        }
    }

    /// The engine's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.live.shared.clock
    }

    /// The shared store of the quotas, or `None` when they live in this process.
    pub fn store(&self) -> Option<&Arc<dyn QuotaStore>> {
        self.live.shared.store.as_ref()
    }

    /// The quotas the policy in force gives `tool` (its own, then its pools'), as
    /// [`crate::compile::tool_quotas`] resolves them, wherever they are kept: without
    /// copying the policy as [`Engine::policy`] does. `None` for a tool without a
    /// policy.
    pub fn tool_quotas(&self, tool: &str) -> Option<Vec<crate::compile::QuotaSpec>> {
        crate::compile::tool_quotas(&self.live.compiled().policy, tool)
    }

    /// The policy in force.
    pub fn policy(&self) -> Policy {
        self.live.compiled().policy.clone()
    }

    /// Admits `call` now, or rejects it now: never waits, whatever `on_limit` says.
    ///
    /// # Errors
    ///
    /// A [`Rejection`] naming the quota that said no; nothing was consumed.
    #[inline]
    pub fn try_admit(&self, call: &Call<'_>) -> Result<Permit, Rejection> {
        crate::admit::try_admit(&self.live, call)
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
        crate::admit::admit_by_name(&self.live, call, Waits::AsTheToolSays).await
    }

    /// Admits `call` now or rejects it now, like [`Engine::try_admit`], on any store
    /// (a shared store answers after a round trip).
    ///
    /// # Errors
    ///
    /// A [`Rejection`]; nothing was consumed.
    pub async fn admit_now(&self, call: &Call<'_>) -> Result<Permit, Rejection> {
        crate::admit::admit_by_name(&self.live, call, Waits::Never).await
    }

    /// Admits every call or none (a multi-step plan): quotas shared by several calls
    /// are charged with their sum. Never waits.
    ///
    /// # Errors
    ///
    /// The rejection of the first quota that cannot fit; nothing was consumed.
    pub fn try_admit_all(&self, calls: &[Call<'_>]) -> Result<Vec<Permit>, Rejection> {
        crate::reserve::try_admit_all(&self.live, calls)
    }

    /// Admits every call or none, like [`Engine::try_admit_all`], on any store (a
    /// shared store answers after a round trip). Never waits.
    ///
    /// # Errors
    ///
    /// The rejection of the first quota that cannot fit; nothing was consumed.
    pub async fn admit_all(&self, calls: &[Call<'_>]) -> Result<Vec<Permit>, Rejection> {
        crate::reserve::admit_all(&self.live, calls).await
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

    /// Runs a tool call through the whole pipeline — admission, execution under the
    /// call's deadline, classification, completion, retries — and returns its value or
    /// one terminal failure.
    ///
    /// `attempt` performs **one** attempt and reports how it ended
    /// ([`AttemptResult`]); it is called again for each retry, with the attempt's
    /// [`AttemptCtx`] (its number and the idempotency key to send).
    ///
    /// Retries happen only when the tool has `[tools.X.retry]` and is `idempotent`
    /// or the call has an idempotency key; at most `max_attempts` attempts run. A
    /// 429 or 503 with `Retry-After` is retried exactly that long after it ended
    /// (the tool is paused until then for every caller); one longer than
    /// `max_retry_after` ends the call (`retry_after_too_long`), and one that ends
    /// after the deadline ends it at once (`retry_after_beyond_deadline`). Other
    /// retryable results wait a full-jitter backoff between `base` and `cap`. Each
    /// retry takes one retry from the tool's budget (successful calls fill it) and
    /// passes admission again: a rejected retry ends the call with that rejection —
    /// it is never replayed silently.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops any permit it holds (released, no
    /// outcome recorded) and any timer it waits on.
    ///
    /// # Errors
    ///
    /// [`ExecuteError::Rejected`] when the first admission was refused (the tool never
    /// ran), or [`ExecuteError::Tool`] with a [`RunFailure`] listing every attempt.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use toolgate::{AttemptResult, Call, Engine, Policy, RunOptions};
    ///
    /// let engine = Engine::new(Policy::from_toml_str(r#"
    ///     [tools.lookup]
    ///     rate = "10/s"
    ///     idempotent = true
    ///     [tools.lookup.retry]
    ///     base = "1ms"
    ///     cap = "2ms"
    /// "#).unwrap());
    /// let out = engine
    ///     .run(&Call::new("lookup"), RunOptions::new(), |ctx| async move {
    ///         if ctx.number() == 1 {
    ///             AttemptResult::failure("unavailable").status(503)
    ///         } else {
    ///             AttemptResult::success("found").status(200)
    ///         }
    ///     })
    ///     .await
    ///     .unwrap();
    /// assert_eq!((out.value, out.attempts()), ("found", 2));
    /// # }
    /// ```
    pub fn run<'a, 'k, T, E, F, Fut>(
        &'a self,
        call: &'a Call<'_>,
        options: RunOptions<'k>,
        attempt: F,
    ) -> impl Future<Output = Result<RunOutput<T>, ExecuteError<RunFailure<E>>>>
           + use<'a, 'k, T, E, F, Fut>
    where
        F: FnMut(AttemptCtx<'k>) -> Fut,
        Fut: Future<Output = AttemptResult<T, E>>,
    {
        // The run's own future (nothing happens before it is polled): no layer
        // of future of this method's own around it.
        crate::pipeline::run(&self.live, None, call, options, attempt)
    }

    /// [`Engine::run`] for a call already admitted: its first attempt runs on
    /// `permit` (from [`Engine::admit`] of the same `call`) instead of being admitted
    /// again; retries are admitted as usual. For a consumer that admits before it
    /// takes work in (the event mesh pulls a call only once it holds its admission).
    ///
    /// # Cancel safety
    ///
    /// As [`Engine::run`]; dropping the future drops `permit` (released, no outcome).
    ///
    /// # Errors
    ///
    /// As [`Engine::run`] (never [`ExecuteError::Rejected`]: the first attempt is
    /// admitted already).
    pub fn run_admitted<'a, 'k, T, E, F, Fut>(
        &'a self,
        permit: Permit,
        call: &'a Call<'_>,
        options: RunOptions<'k>,
        attempt: F,
    ) -> impl Future<Output = Result<RunOutput<T>, ExecuteError<RunFailure<E>>>>
           + use<'a, 'k, T, E, F, Fut>
    where
        F: FnMut(AttemptCtx<'k>) -> Fut,
        Fut: Future<Output = AttemptResult<T, E>>,
    {
        crate::pipeline::run(&self.live, Some(permit), call, options, attempt)
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
        self.live.try_apply(policy)
    }

    /// A handle on `tool` that skips the lookup by name on every call.
    pub fn tool(&self, tool: &str) -> ToolHandle {
        ToolHandle::new(self.live.clone(), tool)
    }

    /// The state of `tool` (of `tenant`'s partitions, when given), or `None` for a
    /// tool without a policy.
    pub fn tool_state(&self, tool: &str, tenant: Option<&str>) -> Option<ToolState> {
        crate::state::tool_state(&self.live, tool, tenant)
    }

    /// As [`Engine::tool_state`], with what each quota has left read from the shared
    /// store when there is one ([`QuotaStore::levels`]: one round trip, bounded by
    /// the store's timeout, that charges nothing). The quotas are then those the
    /// policy gives the tool (its own, then its pools'), plus an adaptive limit the
    /// engine keeps itself; a quota whose figure the store did not give (it did not
    /// answer, or the quota is partitioned and no tenant was given) has `available:
    /// None`. The counters (`in_flight`, `admitted`, ...) stay this process's own.
    /// Without a store, the same as [`Engine::tool_state`].
    pub async fn fetch_tool_state(&self, tool: &str, tenant: Option<&str>) -> Option<ToolState> {
        let state = self.tool_state(tool, tenant)?;
        self.with_store_levels(vec![state], tenant).await.pop()
    }

    /// As [`Engine::fetch_tool_state`] for every tool with a policy, sorted by name
    /// (of `tenant`'s partitions, when given): the store is asked for all of them at
    /// once, which it may answer in one round trip. Without a store and a tenant,
    /// the same as [`Engine::tool_states`].
    pub async fn fetch_tool_states(&self, tenant: Option<&str>) -> Vec<ToolState> {
        let all = self.tool_states();
        let states = match tenant {
            None => all,
            Some(_) => all
                .iter()
                .filter_map(|s| self.tool_state(&s.tool, tenant))
                .collect(),
        };
        self.with_store_levels(states, tenant).await
    }

    /// `states` with the shared store's figures, when there is a store.
    async fn with_store_levels(
        &self,
        states: Vec<ToolState>,
        tenant: Option<&str>,
    ) -> Vec<ToolState> {
        let Some(store) = self.store() else {
            return states;
        };
        let specs: Vec<_> = states
            .iter()
            .map(|s| self.tool_quotas(&s.tool).unwrap_or_default())
            .collect();
        let tools: Vec<&str> = states.iter().map(|s| s.tool.as_str()).collect();
        let levels = match store.levels(&tools, tenant).await {
            Ok(levels) if levels.len() == tools.len() => levels,
            Ok(_) => {
                tracing::warn!("the store answered quota figures for other tools");
                Vec::new()
            }
            // Debug only: the store counts the failure in its own metrics (the Redis
            // store's `toolgate_store_errors_total{op="peek"}`, its outages logged by
            // its admissions), and a dashboard polling through an outage would repeat
            // this every second.
            Err(message) => {
                tracing::debug!(%message, "the store gave no quota figures");
                Vec::new()
            }
        };
        states
            .into_iter()
            .zip(specs)
            .enumerate()
            .map(|(i, (state, specs))| {
                let levels = levels.get(i).map_or(&[][..], Vec::as_slice);
                crate::state::with_levels(state, &specs, levels)
            })
            .collect()
    }

    /// What quota `quota` (a config path such as `tools.lookup_customer.rate`) of
    /// `tool` has left now, for `tenant`'s partition when it is partitioned: the
    /// one figure of [`Engine::tool_state`] that a `RateLimit` response header needs,
    /// read under one lock without building the whole state. `None` when the tool
    /// has no such quota (or it lives in a shared store).
    pub fn available(&self, tool: &str, quota: &str, tenant: Option<&str>) -> Option<u64> {
        crate::state::available(&self.live, tool, quota, tenant)
    }

    /// Evicts every idle tenant partition now (an idle partition is one whose state
    /// equals a fresh one, so this never changes a decision). Eviction also happens
    /// on its own as partitions are created; this is for callers that want memory
    /// back at a moment of their choosing.
    pub fn sweep_partitions(&self) {
        crate::state::sweep_partitions(&self.live);
    }

    /// The state of every tool with a policy, sorted by name.
    pub fn tool_states(&self) -> Vec<ToolState> {
        crate::state::tool_states(&self.live)
    }

    /// The state behind the engine, for the core's own tests.
    #[cfg(test)]
    pub(crate) fn live(&self) -> &Arc<Live> {
        &self.live
    }
}
