//! The crate's one front door: a [`toolgate::Engine`] whose quotas live in Redis
//! ([`engine`], or [`Builder::engine`] for options), on [`RedisStore`], the core's
//! [`QuotaStore`] seam.
//!
//! The engine keeps what is per process (Retry-After pauses, circuit breakers,
//! adaptive limits) and asks the store, one round trip per admission, for every
//! quota of the call. This is how the gateway (`toolgate serve --store redis://…`)
//! and the Python package (`store="redis://…"`) share quotas.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use toolgate::config::StoreConfig;
use toolgate::store::{Level, QuotaStore, StoreFuture, StoreLease};
use toolgate::{Call, Clock, Completion, Engine, Policy, Rejection, SystemClock};

use crate::error::StoreError;
use crate::gate::Gate;
use crate::lease::DEFAULT_LEASE_TTL;
use crate::permit::RedisPermit;

/// The Redis store of a [`toolgate::Engine`]: built by [`engine`] or
/// [`Builder::engine`], and reached through the engine only
/// ([`toolgate::Engine::store`] for what the seam offers, such as
/// [`QuotaStore::set_lease_ttl`]).
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use toolgate::config::Config;
/// use toolgate::{Call, Completion, Policy};
///
/// let config = Config::from_toml_str(r#"
///     [store]
///     url = "redis://127.0.0.1:6379"
///
///     [tools.lookup_customer]
///     rate = "2/s"
/// "#)?;
/// let store = config.store.clone().expect("a [store] section");
/// let engine = toolgate_redis::engine(Policy::new(config)?, &store).await?;
/// let permit = engine.admit_now(&Call::new("lookup_customer")).await?;
/// permit.complete(Completion::success());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RedisStore {
    gate: RwLock<Arc<Gate>>,
    handle: tokio::runtime::Handle,
}

/// Options of an engine on Redis beyond the `[store]` section.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(policy: toolgate::Policy, store: toolgate::config::StoreConfig)
/// # -> Result<(), toolgate_redis::StoreError> {
/// use std::time::Duration;
///
/// let engine = toolgate_redis::Builder::new(policy, store)
///     .lease_ttl(Duration::from_secs(300))
///     .engine()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until `engine` is called"]
pub struct Builder {
    policy: Policy,
    store: StoreConfig,
    lease_ttl: Duration,
    clock: Option<Arc<dyn Clock>>,
    lanes: Vec<tokio::runtime::Handle>,
}

/// A call's fields, owned, to admit it on the store's runtime.
struct OwnedCall {
    tool: String,
    tenant: Option<String>,
    tokens: u64,
    count: u64,
    max_wait: Option<Duration>,
    wait_cap: Option<Duration>,
}

/// A spawned task that is aborted when its handle is dropped, so that dropping an
/// admission future cancels the admission as dropping it in place would.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

/// A Redis permit held by an engine's permit.
#[derive(Debug)]
struct Lease {
    permit: RedisPermit,
    handle: tokio::runtime::Handle,
}

/// Connects to the Redis of `store` and builds an engine on it (system clock, default
/// options). Must run inside a Tokio runtime, which then carries the store's I/O.
///
/// # Errors
///
/// As [`Builder::engine`].
pub async fn engine(policy: Policy, store: &StoreConfig) -> Result<Engine, StoreError> {
    Builder::new(policy, store.clone()).engine().await
}

// === impl Builder ===

impl Builder {
    /// An engine on the Redis of `store` for `policy`, with the default options.
    pub fn new(policy: Policy, store: StoreConfig) -> Self {
        Self {
            policy,
            store,
            lease_ttl: DEFAULT_LEASE_TTL,
            clock: None,
            lanes: Vec::new(),
        }
    }

    /// Gives each of `runtimes` its own connection to Redis and its own coalescing of
    /// admissions, for a process that calls the engine from several single-threaded
    /// runtimes (`new_current_thread`), each driven on a thread of its own, as
    /// `toolgate serve` does: a call's round trip and its answer then stay on its
    /// thread, and no thread wakes another. Calls from any other thread use the
    /// engine's own connection, as do those of a runtime that does not run a task
    /// within 5 s of the engine's start (nothing drives it). None by default;
    /// ignored for a cluster.
    pub fn lanes(mut self, runtimes: Vec<tokio::runtime::Handle>) -> Self {
        self.lanes = runtimes;
        self
    }

    /// How long a concurrency lease lives unless released (default 60 s, clamped to
    /// [`crate::MIN_LEASE_TTL`]..=[`crate::MAX_LEASE_TTL`]): a crashed process's
    /// in-flight calls are released after it, and a call that runs longer loses its
    /// slot. The engine's [`QuotaStore::set_lease_ttl`] changes it later.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// Replaces Redis' clock by `clock` (whole µs of it), and runs the engine on it
    /// too: for deterministic tests only. Every process sharing the quotas must then
    /// use the same clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Connects and builds an engine whose quotas live in Redis, on the builder's
    /// clock (or the system clock). Must run inside a Tokio runtime, which then
    /// carries the store's I/O (admissions from other executors are handed to it).
    /// A single server is connected lazily, so the engine starts even while Redis is
    /// down (calls then take the `on_store_error` path).
    ///
    /// # Errors
    ///
    /// When the URL is not a Redis URL, the key prefix contains a brace, a quota
    /// cannot be computed exactly in Redis ([`StoreError::Precision`]), or a cluster
    /// cannot be reached.
    pub async fn engine(self) -> Result<Engine, StoreError> {
        let clock: Arc<dyn Clock> = match &self.clock {
            Some(c) => c.clone(),
            None => Arc::new(SystemClock::new()),
        };
        self.engine_with_clock(clock).await
    }

    /// As [`Builder::engine`], with the engine (not Redis) on `clock`: the clock of
    /// the engine's per-process waits, such as an upstream's `Retry-After` pause.
    ///
    /// # Errors
    ///
    /// As [`Builder::engine`].
    pub async fn engine_with_clock(self, clock: Arc<dyn Clock>) -> Result<Engine, StoreError> {
        let gate = Gate::connect(
            self.policy,
            self.store,
            self.lease_ttl,
            self.clock,
            &self.lanes,
        )
        .await?;
        let policy = gate.policy().clone();
        let store = Arc::new(RedisStore {
            gate: RwLock::new(Arc::new(gate)),
            handle: tokio::runtime::Handle::current(),
        });
        Engine::with_store(policy, clock, store).map_err(|message| StoreError::Config {
            key: "policy",
            message,
        })
    }
}

// === impl RedisStore ===

impl RedisStore {
    fn gate(&self) -> Arc<Gate> {
        match self.gate.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Runs an admission on the store's runtime, for a caller on another executor
    /// (Python's asyncio): Redis I/O needs Tokio's reactor. Dropping the returned
    /// future aborts the task, as dropping the admission in place would.
    async fn on_runtime<T: Send + 'static>(
        &self,
        tool: &str,
        admission: impl Future<Output = Result<T, Rejection>> + Send + 'static,
    ) -> Result<T, Rejection> {
        match AbortOnDrop(self.handle.spawn(admission)).await {
            Ok(result) => result,
            Err(e) => {
                tracing::error!(error = %e, "redis admission task failed");
                Err(Rejection::store_unavailable(tool))
            }
        }
    }

    fn lease(&self, permit: RedisPermit) -> Box<dyn StoreLease> {
        Box::new(Lease {
            permit,
            handle: self.handle.clone(),
        })
    }
}

impl QuotaStore for RedisStore {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn admit<'a>(
        &'a self,
        call: Call<'a>,
        wait: bool,
    ) -> StoreFuture<'a, Result<Box<dyn StoreLease>, Rejection>> {
        let gate = self.gate();
        Box::pin(async move {
            let permit = if tokio::runtime::Handle::try_current().is_ok() {
                admit(&gate, &call, wait).await
            } else {
                // Boxed: only a caller outside any runtime goes this way.
                let owned = OwnedCall::of(&call);
                Box::pin(self.on_runtime(call.tool_name(), async move {
                    admit(&gate, &owned.call(), wait).await
                }))
                .await
            };
            permit.map(|p| self.lease(p))
        })
    }

    fn admit_all<'a>(
        &'a self,
        calls: &'a [Call<'a>],
    ) -> StoreFuture<'a, Result<Vec<Box<dyn StoreLease>>, Rejection>> {
        let gate = self.gate();
        Box::pin(async move {
            let permits = if tokio::runtime::Handle::try_current().is_ok() {
                gate.admit_all(calls).await
            } else {
                let owned: Vec<OwnedCall> = calls.iter().map(OwnedCall::of).collect();
                let tool = calls.first().map_or("", |c| c.tool_name());
                self.on_runtime(tool, async move {
                    let calls: Vec<Call<'_>> = owned.iter().map(OwnedCall::call).collect();
                    gate.admit_all(&calls).await
                })
                .await
            };
            permits.map(|ps| ps.into_iter().map(|p| self.lease(p)).collect())
        })
    }

    fn levels<'a>(
        &'a self,
        tools: &'a [&'a str],
        tenant: Option<&'a str>,
    ) -> StoreFuture<'a, Result<Vec<Vec<Level>>, String>> {
        let gate = self.gate();
        Box::pin(async move {
            // While Redis is down, say so at once rather than wait out the timeout.
            if gate.is_down() {
                return Err("redis is not answering".to_string());
            }
            let levels = if tokio::runtime::Handle::try_current().is_ok() {
                gate.levels(tools, tenant).await
            } else {
                let tools: Vec<String> = tools.iter().map(|t| (*t).to_owned()).collect();
                let tenant = tenant.map(str::to_owned);
                let task = async move {
                    let tools: Vec<&str> = tools.iter().map(String::as_str).collect();
                    gate.levels(&tools, tenant.as_deref()).await
                };
                match AbortOnDrop(self.handle.spawn(task)).await {
                    Ok(levels) => levels,
                    Err(e) => return Err(format!("redis peek task failed: {e}")),
                }
            };
            levels.map_err(|e| e.to_string())
        })
    }

    fn set_lease_ttl(&self, ttl: Duration) {
        self.gate().set_lease_ttl(ttl);
    }

    fn apply(&self, policy: &Policy) -> Result<(), String> {
        let mut gate = match self.gate.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if gate.policy() == policy {
            return Ok(());
        }
        *gate = Arc::new(
            gate.reconfigured(policy.clone())
                .map_err(|e| e.to_string())?,
        );
        Ok(())
    }
}

async fn admit(gate: &Arc<Gate>, call: &Call<'_>, wait: bool) -> Result<RedisPermit, Rejection> {
    if wait {
        gate.admit(call).await
    } else {
        gate.admit_now(call).await
    }
}

// === impl OwnedCall ===

impl OwnedCall {
    fn of(call: &Call<'_>) -> Self {
        Self {
            tool: call.tool_name().to_owned(),
            tenant: call.tenant_id().map(str::to_owned),
            tokens: call.token_estimate(),
            count: call.request_count(),
            max_wait: call.max_wait_override(),
            wait_cap: call.wait_cap(),
        }
    }

    fn call(&self) -> Call<'_> {
        let c = Call::new(&self.tool)
            .with_tenant(self.tenant.as_deref())
            .tokens(self.tokens)
            .count(self.count);
        let c = match self.max_wait {
            Some(w) => c.max_wait(w),
            None => c,
        };
        match self.wait_cap {
            Some(cap) => c.cap_wait(cap),
            None => c,
        }
    }
}

// === impl AbortOnDrop ===

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

// === impl Lease ===

impl StoreLease for Lease {
    fn waited(&self) -> Duration {
        self.permit.waited()
    }

    fn source(&self) -> &'static str {
        self.permit.source().as_str()
    }

    fn complete(self: Box<Self>, completion: Option<Completion>) {
        let Self { mut permit, handle } = *self;
        match completion {
            // Releasing leases and reconciling tokens is a round trip: it runs in the
            // background (bounded by the store's timeout; leases expire otherwise).
            // A call under request rates only has nothing to give back: no task.
            Some(c) => {
                if let Some(c) = permit.complete_here(c) {
                    handle.spawn(async move {
                        if let Err(e) = permit.complete(c).await {
                            tracing::warn!(error = %e, "redis permit not completed; its leases expire");
                        }
                    });
                }
            }
            // Dropping releases the leases in the background.
            None => drop(permit),
        }
    }

    fn cancel(self: Box<Self>) {
        let Self { permit, handle } = *self;
        handle.spawn(async move {
            if let Err(e) = permit.cancel().await {
                tracing::warn!(error = %e, "redis reservation not given back; it refills or expires");
            }
        });
    }
}
