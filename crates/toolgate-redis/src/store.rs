//! The gate of the Redis store: admission against quotas kept in Redis, shared by
//! every process that uses the same Redis and key prefix. Crate-internal: the one
//! public door is the engine on it ([`crate::engine`], [`crate::RedisStore`]).
//!
//! One admission is one round trip: the call's quotas (as the core resolves them,
//! with their keys and tenant partitions) are planned here, then `scripts/admit.lua`
//! checks and charges all of them atomically on the server, on the server's clock.
//! The answers are the core's values ([`Rejection`], [`toolgate::Reason`]),
//! computed by the same rules.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::Script;
use toolgate::config::{OnLimit, OnStoreError, StoreConfig, UnknownTools, MAX_WAIT_LIMIT};
use toolgate::{Call, Clock, Engine, Policy, Reason, Rejection};

use crate::conn::Conn;
use crate::error::StoreError;
use crate::fallback::fallback_engine;
use crate::grant::Grants;
use crate::ids::Ids;
use crate::lease::LeaseTtl;
use crate::permit::{Held, RedisPermit};
use crate::plan::{denial, live, plan, Step};
use crate::quota::{Compiled, Tool};
use crate::script::Reply;

/// How often a store that stopped answering is probed.
const PROBE_EVERY: Duration = Duration::from_millis(100);

/// Admission on quotas shared through Redis, for one policy. Shared (`Arc`) by the
/// store and by the permits it hands out; a reload derives a new gate on the same
/// connection ([`Gate::reconfigured`]).
pub(crate) struct Gate {
    pub(crate) conn: Conn,
    pub(crate) compiled: Compiled,
    pub(crate) policy: Policy,
    pub(crate) timeout: Duration,
    pub(crate) on_error: OnStoreError,
    /// How long a concurrency lease lives in Redis unless released.
    pub(crate) lease_ttl: LeaseTtl,
    pub(crate) clock: Option<Arc<dyn Clock>>,
    pub(crate) fallback: Option<Engine>,
    pub(crate) down: AtomicBool,
    pub(crate) probing: AtomicBool,
    pub(crate) ids: Ids,
    pub(crate) admit_script: Script,
    /// `admit.lua` specialised for one enforced bucket, now or never.
    pub(crate) admit_bucket_script: Script,
    pub(crate) release_script: Script,
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) grants: Option<Grants>,
    /// The `[store]` section the gate was built from (for reloads).
    pub(crate) store: StoreConfig,
}

// === impl Gate ===

impl Gate {
    /// Connects to the Redis of `store` for `policy`. A single server is connected
    /// lazily, so the gate starts even while Redis is down (calls then take the
    /// `on_store_error` path). `clock` replaces Redis' clock (tests only).
    ///
    /// # Errors
    ///
    /// When the URL is not a Redis URL, the key prefix contains a brace, a quota
    /// cannot be computed exactly in Redis ([`StoreError::Precision`]), or a cluster
    /// cannot be reached.
    pub(crate) async fn connect(
        policy: Policy,
        store: StoreConfig,
        lease_ttl: Duration,
        clock: Option<Arc<dyn Clock>>,
    ) -> Result<Self, StoreError> {
        check(&store)?;
        let compiled = Compiled::new(policy.config(), &store.key_prefix)?;
        let fallback = fallback_engine(&store, &policy, clock.as_ref())?;
        let conn = Conn::connect(&store.url, store.timeout).await?;
        Ok(Self {
            conn,
            compiled,
            policy,
            timeout: store.timeout,
            on_error: store.on_store_error,
            lease_ttl: LeaseTtl::new(lease_ttl),
            clock,
            fallback,
            down: AtomicBool::new(false),
            probing: AtomicBool::new(false),
            ids: Ids::new(),
            admit_script: Script::new(include_str!("scripts/admit.lua")),
            admit_bucket_script: Script::new(include_str!("scripts/admit_bucket.lua")),
            release_script: Script::new(include_str!("scripts/release.lua")),
            handle: tokio::runtime::Handle::current(),
            grants: Grants::new(store.local_grant),
            store,
        })
    }

    /// The policy in force.
    pub(crate) fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Sets how long concurrency leases admitted from now on live in Redis unless
    /// released (clamped as [`crate::Builder::lease_ttl`]); leases already held keep
    /// theirs. The gates [`Gate::reconfigured`] derives from this one share the
    /// setting.
    pub(crate) fn set_lease_ttl(&self, ttl: Duration) {
        self.lease_ttl.set(ttl);
    }

    /// Admits `call` now, or rejects it now: never waits, whatever `on_limit` says.
    /// One round trip to Redis, never longer than the store's `timeout` (none at all
    /// when served from a local grant, see `local_grant` in `docs/redis.md`).
    ///
    /// Dropping the future after the request was sent may leave the admission
    /// charged in Redis without a permit: rate charges refill and concurrency leases
    /// expire after the lease TTL.
    ///
    /// # Errors
    ///
    /// A [`Rejection`] naming the quota that said no; nothing was charged anywhere.
    /// When Redis does not answer: under `fail_closed`,
    /// [`Rejection::store_unavailable`]; under `local`, the fallback's decision.
    pub(crate) async fn admit_now(
        self: &Arc<Self>,
        call: &Call<'_>,
    ) -> Result<RedisPermit, Rejection> {
        let Some(tool) = self.resolve(call)? else {
            return Ok(RedisPermit::new(Held::Unaccounted, Duration::ZERO));
        };
        let steps = plan(&tool, call)?;
        if let Some(p) = self.try_grant(&steps, call.request_count()).await {
            return Ok(p);
        }
        self.decide(&tool, call, &steps, -1, false).await
    }

    /// Admits `call`, waiting when the tool's `on_limit` is `"wait"` or the call sets
    /// its own `max_wait`.
    ///
    /// The script reserves the earliest time every quota fits, unless that is more
    /// than `max_wait` away (then `max_wait_exceeded` at once, with the predicted wait
    /// as `retry_after`); the caller then sleeps until its reserved time. Reservations
    /// are made in the order the scripts run on Redis, so admission times on a quota
    /// are FIFO across processes in that order. A concurrency limit cannot be
    /// predicted: a call blocked by one polls (5–50 ms) until its `max_wait` runs out,
    /// then is rejected with `concurrency_limited` (no FIFO among those).
    /// `queue_limit` counts the waiters of this process.
    ///
    /// Dropping the future while it sleeps gives its reservation back in a spawned
    /// round trip (bucket tokens refunded, sliding entries and leases removed).
    /// Waiters behind it keep their reserved times (they do not move up, unlike
    /// in-process).
    ///
    /// # Errors
    ///
    /// A [`Rejection`]; nothing was charged.
    pub(crate) async fn admit(self: &Arc<Self>, call: &Call<'_>) -> Result<RedisPermit, Rejection> {
        let Some(tool) = self.resolve(call)? else {
            return Ok(RedisPermit::new(Held::Unaccounted, Duration::ZERO));
        };
        let steps = plan(&tool, call)?;
        if tool.on_limit == OnLimit::Wait || call.max_wait_override().is_some() {
            let max_wait = call.wait_limit(tool.max_wait).min(MAX_WAIT_LIMIT);
            self.wait(&tool, call, &steps, max_wait).await
        } else {
            self.decide(&tool, call, &steps, -1, false).await
        }
    }

    /// The tool of `call`; `None` for an unknown tool that is allowed.
    pub(crate) fn resolve(&self, call: &Call<'_>) -> Result<Option<Arc<Tool>>, Rejection> {
        let Some(tool) = self.compiled.tools.get(call.tool_name()) else {
            return match self.compiled.unknown {
                UnknownTools::Deny => Err(Rejection::new(
                    call.tool_name(),
                    "unknown_tools",
                    Reason::UnknownTool,
                    None,
                )),
                _ => Ok(None),
            };
        };
        Ok(Some(tool.clone()))
    }

    /// One decision round trip (`max_wait_us` < 0: now or never), or the
    /// `on_store_error` path.
    pub(crate) async fn decide(
        self: &Arc<Self>,
        tool: &Arc<Tool>,
        call: &Call<'_>,
        steps: &[Step],
        max_wait_us: i64,
        wait: bool,
    ) -> Result<RedisPermit, Rejection> {
        if self.down.load(Ordering::Acquire) {
            return self.degraded(tool, call, wait).await;
        }
        let id: Arc<str> = self.ids.next().into();
        match self.run_admit(steps, &id, max_wait_us).await {
            Ok(Reply::Denied { blame, code, retry }) => Err(denial(
                &tool.name,
                &live(steps)[blame - 1].quota,
                code,
                retry,
            )),
            Ok(reply @ Reply::Admitted { .. }) => {
                let split = [(0, steps)];
                let mut permits =
                    self.admitted(&[Some(tool.clone())], &split, steps, &id, reply, false);
                let permit = permits.pop().flatten();
                match permit {
                    Some(p) => self.sleep_out(p, steps, &id, reply).await,
                    None => Err(Rejection::store_unavailable(tool.name.clone())),
                }
            }
            Err(e) => {
                self.failed(&e);
                self.degraded(tool, call, wait).await
            }
        }
    }

    /// The decision when Redis does not answer.
    pub(crate) async fn degraded(
        &self,
        tool: &Tool,
        call: &Call<'_>,
        wait: bool,
    ) -> Result<RedisPermit, Rejection> {
        match (self.on_error, &self.fallback) {
            (OnStoreError::FailOpen, _) => Ok(RedisPermit::new(Held::Unaccounted, Duration::ZERO)),
            (OnStoreError::Local, Some(engine)) => {
                let p = if wait {
                    engine.admit(call).await?
                } else {
                    engine.try_admit(call)?
                };
                let waited = p.waited();
                Ok(RedisPermit::new(Held::Local(p), waited))
            }
            _ => Err(Rejection::store_unavailable(tool.name.clone())),
        }
    }

    /// Marks the store down after an outage (not after a script or cluster error)
    /// and starts probing it.
    pub(crate) fn failed(self: &Arc<Self>, e: &StoreError) {
        let outage = match e {
            StoreError::Timeout { .. } => true,
            StoreError::Redis { source, .. } => {
                source.is_io_error()
                    || source.is_connection_refusal()
                    || source.is_connection_dropped()
            }
            _ => false,
        };
        tracing::warn!(error = %e, outage, "redis store error");
        if !outage {
            return;
        }
        self.down.store(true, Ordering::Release);
        if self.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        self.handle.spawn(async move {
            loop {
                tokio::time::sleep(PROBE_EVERY).await;
                if me.conn.ping(me.timeout).await.is_ok() {
                    me.down.store(false, Ordering::Release);
                    me.probing.store(false, Ordering::Release);
                    tracing::info!("redis store answers again");
                    return;
                }
            }
        });
    }
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("conn", &self.conn)
            .field("timeout", &self.timeout)
            .field("on_store_error", &self.on_error)
            .field("degraded", &self.down.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Gate {
    /// The same gate on a new policy: the connection, scripts and ids are shared,
    /// the quotas recompiled (their state is in Redis, under the same keys while a
    /// quota's definition is unchanged).
    ///
    /// # Errors
    ///
    /// When a quota of `policy` cannot be computed exactly in Redis.
    pub(crate) fn reconfigured(&self, policy: Policy) -> Result<Self, StoreError> {
        let store = &self.store;
        let compiled = Compiled::new(policy.config(), &store.key_prefix)?;
        let fallback = fallback_engine(store, &policy, self.clock.as_ref())?;
        Ok(Self {
            conn: self.conn.clone(),
            compiled,
            policy,
            timeout: self.timeout,
            on_error: self.on_error,
            lease_ttl: self.lease_ttl.clone(),
            clock: self.clock.clone(),
            fallback,
            down: AtomicBool::new(false),
            probing: AtomicBool::new(false),
            ids: Ids::new(),
            admit_script: self.admit_script.clone(),
            admit_bucket_script: self.admit_bucket_script.clone(),
            release_script: self.release_script.clone(),
            handle: self.handle.clone(),
            grants: Grants::new(store.local_grant),
            store: store.clone(),
        })
    }
}

/// Refuses a `[store]` section Redis cannot be used with: a key prefix with a brace
/// (it would override the hash tags) or a URL that is not `redis://` or `rediss://`.
fn check(store: &StoreConfig) -> Result<(), StoreError> {
    if store.key_prefix.contains(['{', '}']) {
        return Err(StoreError::Config {
            key: "key_prefix",
            message: format!(
                "{:?}: must not contain '{{' or '}}' (they would override the hash tags)",
                store.key_prefix
            ),
        });
    }
    if !store.url.starts_with("redis://") && !store.url.starts_with("rediss://") {
        return Err(StoreError::Config {
            key: "url",
            message: format!("{:?}: expected a redis:// URL", store.url),
        });
    }
    Ok(())
}
