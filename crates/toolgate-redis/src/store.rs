//! [`RedisGate`]: admission against quotas kept in Redis, shared by every process
//! that uses the same Redis and key prefix.
//!
//! One admission is one round trip: the call's quotas (tool, pools, tokens, tenant
//! partitions) are resolved here, then `scripts/admit.lua` checks and charges all of
//! them atomically on the server, on the server's clock. The answers are the core's
//! values ([`Rejection`], [`Reason`]), computed by the same rules.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::Script;
use toolgate::config::{OnLimit, OnStoreError, StoreConfig, UnknownTools, MAX_WAIT_LIMIT};
use toolgate::{Call, Clock, Engine, Policy, Reason, Rejection};

use crate::call::CallInfo;
use crate::conn::Conn;
use crate::error::StoreError;
use crate::fallback::scaled_policy;
use crate::keys::partition_key;
use crate::permit::{Held, Op, RedisPermit, TokenHold};
use crate::quota::{Compiled, CostOf, Params, RQuota, RTool};

/// The default lease TTL: a concurrency slot held longer is given back.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(60);

/// How often a store that stopped answering is probed.
const PROBE_EVERY: Duration = Duration::from_millis(100);

/// Admission control on quotas shared through Redis.
///
/// Cheap to clone. Mirrors [`toolgate::Engine`]: [`RedisGate::try_admit`] never
/// waits, [`RedisGate::admit`] waits as the tool's `on_limit` says,
/// [`RedisGate::try_admit_all`] admits a plan all-or-nothing.
#[derive(Debug, Clone)]
pub struct RedisGate {
    inner: Arc<Inner>,
}

/// Options of a [`RedisGate`] beyond the `[store]` section.
#[derive(Debug)]
pub struct Builder {
    policy: Policy,
    store: StoreConfig,
    lease_ttl: Duration,
    clock: Option<Arc<dyn Clock>>,
}

pub(crate) struct Inner {
    conn: Conn,
    compiled: Compiled,
    policy: Policy,
    timeout: Duration,
    on_error: OnStoreError,
    lease_ttl: Duration,
    clock: Option<Arc<dyn Clock>>,
    fallback: Option<Engine>,
    down: AtomicBool,
    probing: AtomicBool,
    ids: Ids,
    admit_script: Script,
    release_script: Script,
    handle: tokio::runtime::Handle,
}

/// Unique admission ids: a per-process random prefix and a counter.
#[derive(Debug)]
struct Ids {
    prefix: String,
    next: AtomicU64,
}

/// One quota of a call, with its key and cost.
#[derive(Debug, Clone)]
struct Step {
    quota: Arc<RQuota>,
    key: String,
    cost: u64,
}

/// The admission script's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    Admitted {
        at: i64,
        wait: i64,
        shadow_ok: bool,
        shadow_blame: usize,
    },
    Denied {
        blame: usize,
        code: i64,
        retry: i64,
    },
}

/// A waiter of this process; counts against the tool's `queue_limit`.
struct QueueSlot(Arc<RTool>);

/// Gives back a reservation unless disarmed: a waiter that leaves early.
struct CancelGuard {
    gate: Arc<Inner>,
    ops: Vec<Op>,
    armed: bool,
}

// === impl Builder ===

impl Builder {
    /// How long a concurrency lease lives unless released (default 60 s): a crashed
    /// process's in-flight calls are released after it.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl.max(Duration::from_millis(1));
        self
    }

    /// Replaces Redis' clock by `clock` (whole µs of it): for deterministic tests
    /// only. Every process sharing the quotas must then use the same clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Connects. A single server is connected lazily, so the gate starts even while
    /// Redis is down (calls then take the `on_store_error` path).
    ///
    /// # Errors
    ///
    /// When the URL is not a Redis URL, the key prefix contains a brace, a quota
    /// cannot be computed exactly in Redis ([`StoreError::Precision`]), or a cluster
    /// cannot be reached.
    pub async fn connect(self) -> Result<RedisGate, StoreError> {
        let store = self.store;
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
        let compiled = Compiled::new(self.policy.config(), &store.key_prefix)?;
        let fallback = match store.on_store_error {
            OnStoreError::Local => {
                let p = scaled_policy(self.policy.config(), store.local_share)?;
                Some(match &self.clock {
                    Some(c) => Engine::with_clock(p, c.clone()),
                    None => Engine::new(p),
                })
            }
            _ => None,
        };
        let conn = Conn::connect(&store.url, store.timeout).await?;
        let inner = Inner {
            conn,
            compiled,
            policy: self.policy,
            timeout: store.timeout,
            on_error: store.on_store_error,
            lease_ttl: self.lease_ttl,
            clock: self.clock,
            fallback,
            down: AtomicBool::new(false),
            probing: AtomicBool::new(false),
            ids: Ids::new(),
            admit_script: Script::new(include_str!("scripts/admit.lua")),
            release_script: Script::new(include_str!("scripts/release.lua")),
            handle: tokio::runtime::Handle::current(),
        };
        Ok(RedisGate {
            inner: Arc::new(inner),
        })
    }
}

// === impl RedisGate ===

impl RedisGate {
    /// Connects to the Redis of `store` with the default options.
    ///
    /// # Errors
    ///
    /// As [`Builder::connect`].
    pub async fn connect(policy: Policy, store: &StoreConfig) -> Result<Self, StoreError> {
        Self::builder(policy, store.clone()).connect().await
    }

    /// A builder, for options beyond `[store]`.
    pub fn builder(policy: Policy, store: StoreConfig) -> Builder {
        Builder {
            policy,
            store,
            lease_ttl: DEFAULT_LEASE_TTL,
            clock: None,
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.inner.policy
    }

    /// Whether Redis is currently considered unreachable (calls take the
    /// `on_store_error` path until a probe succeeds).
    pub fn is_degraded(&self) -> bool {
        self.inner.down.load(Ordering::Acquire)
    }

    /// How many Redis Cluster slot groups the policy's quotas form.
    pub fn slot_groups(&self) -> usize {
        self.inner.compiled.groups
    }

    /// Admits `call` now, or rejects it now: never waits, whatever `on_limit` says.
    /// One round trip to Redis, never longer than the store's `timeout`.
    ///
    /// # Errors
    ///
    /// A [`Rejection`] naming the quota that said no; nothing was charged anywhere.
    /// When Redis does not answer: under `fail_closed`, a rejection by the quota
    /// `store` with reason `circuit_open`; under `local`, the fallback's decision.
    pub async fn try_admit(&self, call: &Call<'_>) -> Result<RedisPermit, Rejection> {
        let g = &self.inner;
        let Some((tool, info)) = g.resolve(call)? else {
            return Ok(RedisPermit::new(None, Held::Unaccounted, Duration::ZERO));
        };
        let steps = plan(&tool, &info)?;
        let result = g.decide(&tool, call, &steps, -1, false).await;
        record(&tool.name, &result);
        result
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
    /// # Cancel safety
    ///
    /// Cancel safe as far as a network allows: dropping the future while it sleeps
    /// gives its reservation back in a spawned round trip (bucket tokens refunded,
    /// sliding entries and leases removed). Waiters behind it keep their reserved
    /// times (they do not move up, unlike in-process).
    ///
    /// # Errors
    ///
    /// A [`Rejection`]; nothing was charged.
    pub async fn admit(&self, call: &Call<'_>) -> Result<RedisPermit, Rejection> {
        let g = &self.inner;
        let Some((tool, info)) = g.resolve(call)? else {
            return Ok(RedisPermit::new(None, Held::Unaccounted, Duration::ZERO));
        };
        let steps = plan(&tool, &info)?;
        let waits = tool.on_limit == OnLimit::Wait || info.max_wait.is_some();
        let result = if waits {
            let max_wait = info.max_wait.unwrap_or(tool.max_wait).min(MAX_WAIT_LIMIT);
            g.wait(&tool, call, &steps, max_wait).await
        } else {
            g.decide(&tool, call, &steps, -1, false).await
        };
        record(&tool.name, &result);
        result
    }

    /// Admits every call or none (a multi-step plan) in one round trip: quotas
    /// shared by several calls are charged with their sum. Never waits. In a Redis
    /// Cluster, the calls' tools must share one slot group.
    ///
    /// # Errors
    ///
    /// The rejection of the first quota that cannot fit; nothing was charged.
    pub async fn try_admit_all(&self, calls: &[Call<'_>]) -> Result<Vec<RedisPermit>, Rejection> {
        self.inner.admit_all(calls).await
    }
}

// === impl Inner ===

impl Inner {
    /// The tool and fields of `call`; `None` for an unknown tool that is allowed.
    fn resolve(&self, call: &Call<'_>) -> Result<Option<(Arc<RTool>, CallInfo)>, Rejection> {
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
        let info = CallInfo::read(call).ok_or_else(|| {
            tracing::error!(tool = call.tool_name(), "cannot read the call's fields");
            Rejection::new(call.tool_name(), "store", Reason::CircuitOpen, None)
        })?;
        Ok(Some((tool.clone(), info)))
    }

    /// One decision round trip (`max_wait_us` < 0: now or never), or the
    /// `on_store_error` path.
    async fn decide(
        self: &Arc<Self>,
        tool: &Arc<RTool>,
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
                let mut permits = self.admitted(&[Some(tool.clone())], &split, steps, &id, reply);
                let permit = permits.pop().flatten();
                match permit {
                    Some(p) => self.sleep_out(p, steps, &id, reply).await,
                    None => Err(Rejection::new(
                        &*tool.name,
                        "store",
                        Reason::CircuitOpen,
                        None,
                    )),
                }
            }
            Err(e) => {
                self.failed(&e);
                self.degraded(tool, call, wait).await
            }
        }
    }

    /// The wait path of [`RedisGate::admit`].
    async fn wait(
        self: &Arc<Self>,
        tool: &Arc<RTool>,
        call: &Call<'_>,
        steps: &[Step],
        max_wait: Duration,
    ) -> Result<RedisPermit, Rejection> {
        let Some(_slot) = QueueSlot::enter(tool) else {
            return self
                .decide(tool, call, steps, -1, false)
                .await
                .map_err(|r| {
                    Rejection::new(r.tool(), r.quota(), Reason::QueueFull, r.retry_after())
                });
        };
        let start = tokio::time::Instant::now();
        let mut poll = Duration::from_millis(5);
        loop {
            let left = max_wait.saturating_sub(start.elapsed());
            let left_us = i64::try_from(left.as_micros()).unwrap_or(i64::MAX);
            match self.decide(tool, call, steps, left_us, true).await {
                Err(r) if r.reason() == Reason::ConcurrencyLimited && !left.is_zero() => {
                    tokio::time::sleep(poll.min(left)).await;
                    poll = (poll * 2).min(Duration::from_millis(50));
                }
                other => return other,
            }
        }
    }

    /// Sleeps until a reserved admission time, giving the reservation back if the
    /// future is dropped first.
    async fn sleep_out(
        self: &Arc<Self>,
        permit: RedisPermit,
        steps: &[Step],
        id: &Arc<str>,
        reply: Reply,
    ) -> Result<RedisPermit, Rejection> {
        let Reply::Admitted {
            at,
            wait,
            shadow_ok,
            ..
        } = reply
        else {
            return Ok(permit);
        };
        if wait <= 0 {
            return Ok(permit);
        }
        let mut guard = CancelGuard {
            gate: self.clone(),
            ops: reservation_ops(steps, id, at, shadow_ok),
            armed: true,
        };
        let waited = Duration::from_micros(u64::try_from(wait).unwrap_or(0));
        match &self.clock {
            Some(c) => c.sleep_until(u64::try_from(at).unwrap_or(0) * 1000).await,
            None => tokio::time::sleep(waited).await,
        }
        guard.armed = false;
        Ok(permit.with_waited(waited))
    }

    /// The decision when Redis does not answer.
    async fn degraded(
        &self,
        tool: &RTool,
        call: &Call<'_>,
        wait: bool,
    ) -> Result<RedisPermit, Rejection> {
        let name = Some(tool.name.clone());
        match (self.on_error, &self.fallback) {
            (OnStoreError::FailOpen, _) => {
                Ok(RedisPermit::new(name, Held::Unaccounted, Duration::ZERO))
            }
            (OnStoreError::Local, Some(engine)) => {
                let p = if wait {
                    engine.admit(call).await?
                } else {
                    engine.try_admit(call)?
                };
                let waited = p.waited();
                Ok(RedisPermit::new(name, Held::Local(p), waited))
            }
            _ => Err(Rejection::new(
                &*tool.name,
                "store",
                Reason::CircuitOpen,
                None,
            )),
        }
    }

    /// Marks the store down after an outage (not after a script or cluster error)
    /// and starts probing it.
    fn failed(self: &Arc<Self>, e: &StoreError) {
        let outage = match e {
            StoreError::Timeout { .. } => true,
            StoreError::Redis { source, .. } => {
                source.is_io_error()
                    || source.is_connection_refusal()
                    || source.is_connection_dropped()
                    || source.is_timeout()
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

    /// The script's time argument: Redis' clock unless a test clock is set.
    fn now_arg(&self) -> String {
        self.clock
            .as_ref()
            .map(|c| (c.now() / 1000).to_string())
            .unwrap_or_default()
    }

    async fn run_admit(
        &self,
        steps: &[Step],
        id: &str,
        max_wait_us: i64,
    ) -> Result<Reply, StoreError> {
        let live = live(steps);
        if live.is_empty() {
            return Ok(Reply::Admitted {
                at: 0,
                wait: 0,
                shadow_ok: true,
                shadow_blame: 0,
            });
        }
        let mut inv = self.admit_script.prepare_invoke();
        inv.arg(self.now_arg())
            .arg(max_wait_us)
            .arg(id)
            .arg(u64::try_from(self.lease_ttl.as_micros()).unwrap_or(u64::MAX))
            .arg(live.len());
        for s in &live {
            let [a, b, c, d] = s.quota.params.args();
            inv.key(&s.key)
                .arg(s.quota.params.kind().to_string())
                .arg(u8::from(s.quota.shadow))
                .arg(s.cost)
                .arg(a)
                .arg(b)
                .arg(c)
                .arg(d);
        }
        let value = self.conn.invoke("admit", &inv, self.timeout).await?;
        parse_reply(value, live.len())
    }

    /// Runs release operations in one round trip.
    pub(crate) async fn release(&self, ops: Vec<Op>) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        let mut inv = self.release_script.prepare_invoke();
        inv.arg(self.now_arg()).arg(ops.len());
        for op in &ops {
            match op {
                Op::Members { key, id, from, to } => {
                    inv.key(key)
                        .arg("m")
                        .arg(&**id)
                        .arg(*from)
                        .arg(*to)
                        .arg(0)
                        .arg(0);
                }
                Op::Bucket {
                    key,
                    params,
                    delta,
                    at,
                } => {
                    let [pq, pr, den] = *params;
                    inv.key(key)
                        .arg("b")
                        .arg(pq)
                        .arg(pr)
                        .arg(den)
                        .arg(delta.to_string())
                        .arg(*at);
                }
            }
        }
        self.conn
            .invoke("release", &inv, self.timeout)
            .await
            .map(drop)
    }

    /// Runs release operations in a spawned task (from `Drop`).
    pub(crate) fn release_in_background(self: &Arc<Self>, ops: Vec<Op>) {
        let me = self.clone();
        let task = async move {
            if let Err(e) = me.release(ops).await {
                tracing::warn!(error = %e, "release failed; leases expire after their TTL");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) => drop(h.spawn(task)),
            Err(_) => drop(self.handle.spawn(task)),
        }
    }

    /// The permits of admitted calls: `split[i]` is call i's steps (`None` tool: an
    /// unknown tool); `merged` the steps the script ran.
    fn admitted(
        self: &Arc<Self>,
        tools: &[Option<Arc<RTool>>],
        split: &[(usize, &[Step])],
        merged: &[Step],
        id: &Arc<str>,
        reply: Reply,
    ) -> Vec<Option<RedisPermit>> {
        let Reply::Admitted {
            shadow_ok,
            shadow_blame,
            ..
        } = reply
        else {
            return Vec::new();
        };
        if shadow_blame > 0 {
            let q = &live(merged)[shadow_blame - 1].quota;
            shadow_rejected(tools, q);
        }
        // Members handed out so far per merged concurrency key.
        let mut next_member: Vec<u64> = vec![1; merged.len()];
        let mut out = Vec::with_capacity(tools.len());
        for (tool, (_, steps)) in tools.iter().zip(split) {
            let Some(tool) = tool else {
                out.push(Some(RedisPermit::new(
                    None,
                    Held::Unaccounted,
                    Duration::ZERO,
                )));
                continue;
            };
            let mut leases = Vec::new();
            let mut tokens = Vec::new();
            for s in steps.iter().filter(|s| !s.quota.shadow || shadow_ok) {
                if let (Params::Concurrency { .. }, true) = (s.quota.params, s.cost > 0) {
                    let m = merged.iter().position(|x| x.key == s.key).unwrap_or(0);
                    let from = next_member[m];
                    next_member[m] += s.cost;
                    leases.push(Op::Members {
                        key: s.key.clone(),
                        id: id.clone(),
                        from,
                        to: from + s.cost - 1,
                    });
                }
                if let (Params::Bucket { pq, pr, den, .. }, CostOf::Tokens) =
                    (s.quota.params, s.quota.cost_of)
                {
                    tokens.push(TokenHold {
                        key: s.key.clone(),
                        params: [pq, pr, den],
                        estimate: s.cost,
                    });
                }
            }
            let held = Held::Remote {
                gate: self.clone(),
                leases,
                tokens,
            };
            out.push(Some(RedisPermit::new(
                Some(tool.name.clone()),
                held,
                Duration::ZERO,
            )));
        }
        out
    }

    async fn admit_all(
        self: &Arc<Self>,
        calls: &[Call<'_>],
    ) -> Result<Vec<RedisPermit>, Rejection> {
        let mut tools = Vec::with_capacity(calls.len());
        let mut plans = Vec::with_capacity(calls.len());
        for call in calls {
            match self.resolve(call)? {
                Some((tool, info)) => {
                    plans.push(plan(&tool, &info)?);
                    tools.push(Some(tool));
                }
                None => {
                    plans.push(Vec::new());
                    tools.push(None);
                }
            }
        }
        let merged = merge(&plans);
        let owner = |key: &str| {
            let i = plans
                .iter()
                .position(|p| p.iter().any(|s| s.key == key))
                .unwrap_or(0);
            tools.get(i).cloned().flatten()
        };
        let name_of = |key: &str| owner(key).map_or_else(|| Arc::from(""), |t| t.name.clone());
        if let Some(s) = merged.iter().find(|s| s.cost > s.quota.params.capacity()) {
            let r = Rejection::new(
                name_of(&s.key),
                &*s.quota.path,
                Reason::CostExceedsCapacity,
                None,
            );
            return Err(r);
        }
        let first = tools.iter().flatten().next().cloned();
        let Some(first) = first else {
            return Ok(calls
                .iter()
                .map(|_| RedisPermit::new(None, Held::Unaccounted, Duration::ZERO))
                .collect());
        };
        let degraded = |this: &Arc<Self>| this.degraded_all(&first, calls);
        if self.down.load(Ordering::Acquire) {
            return degraded(self);
        }
        let id: Arc<str> = self.ids.next().into();
        match self.run_admit(&merged, &id, -1).await {
            Ok(Reply::Denied { blame, code, retry }) => {
                let s = live(&merged)[blame - 1];
                Err(denial(&name_of(&s.key), &s.quota, code, retry))
            }
            Ok(reply) => {
                let split: Vec<(usize, &[Step])> = plans
                    .iter()
                    .enumerate()
                    .map(|(i, p)| (i, p.as_slice()))
                    .collect();
                Ok(self
                    .admitted(&tools, &split, &merged, &id, reply)
                    .into_iter()
                    .flatten()
                    .collect())
            }
            Err(e) => {
                self.failed(&e);
                degraded(self)
            }
        }
    }

    fn degraded_all(
        &self,
        first: &RTool,
        calls: &[Call<'_>],
    ) -> Result<Vec<RedisPermit>, Rejection> {
        match (self.on_error, &self.fallback) {
            (OnStoreError::FailOpen, _) => Ok(calls
                .iter()
                .map(|c| {
                    RedisPermit::new(
                        Some(c.tool_name().into()),
                        Held::Unaccounted,
                        Duration::ZERO,
                    )
                })
                .collect()),
            (OnStoreError::Local, Some(engine)) => Ok(engine
                .try_admit_all(calls)?
                .into_iter()
                .zip(calls)
                .map(|(p, c)| {
                    RedisPermit::new(Some(c.tool_name().into()), Held::Local(p), Duration::ZERO)
                })
                .collect()),
            _ => Err(Rejection::new(
                &*first.name,
                "store",
                Reason::CircuitOpen,
                None,
            )),
        }
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisGate")
            .field("conn", &self.conn)
            .field("timeout", &self.timeout)
            .field("on_store_error", &self.on_error)
            .field("degraded", &self.down.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

// === impl Ids ===

impl Ids {
    fn new() -> Self {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u128(
            std::time::SystemTime::UNIX_EPOCH
                .elapsed()
                .map_or(0, |d| d.as_nanos()),
        );
        Self {
            prefix: format!("{:012x}", h.finish() & 0xffff_ffff_ffff),
            next: AtomicU64::new(0),
        }
    }

    fn next(&self) -> String {
        format!(
            "{}-{:x}",
            self.prefix,
            self.next.fetch_add(1, Ordering::Relaxed)
        )
    }
}

// === impl QueueSlot ===

impl QueueSlot {
    fn enter(tool: &Arc<RTool>) -> Option<Self> {
        let prev = tool.waiting.fetch_add(1, Ordering::AcqRel);
        if prev >= tool.queue_limit {
            tool.waiting.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Self(tool.clone()))
    }
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.armed {
            self.gate
                .release_in_background(std::mem::take(&mut self.ops));
        }
    }
}

// === helpers ===

/// The quotas of `call` on `tool`, with keys and costs.
fn plan(tool: &RTool, info: &CallInfo) -> Result<Vec<Step>, Rejection> {
    let mut steps = Vec::with_capacity(tool.quotas.len());
    for q in &tool.quotas {
        let cost = q.cost(info.count, info.tokens);
        if cost > q.params.capacity() {
            return Err(Rejection::new(
                &*tool.name,
                &*q.path,
                Reason::CostExceedsCapacity,
                None,
            ));
        }
        let key = if q.partitioned {
            partition_key(&q.key, info.tenant.as_deref().unwrap_or(""))
        } else {
            q.key.clone()
        };
        steps.push(Step {
            quota: q.clone(),
            key,
            cost,
        });
    }
    Ok(steps)
}

/// The steps the script runs: those with a cost.
fn live(steps: &[Step]) -> Vec<&Step> {
    steps.iter().filter(|s| s.cost > 0).collect()
}

/// One step per key, costs summed.
fn merge(plans: &[Vec<Step>]) -> Vec<Step> {
    let mut merged: Vec<Step> = Vec::new();
    for s in plans.iter().flatten() {
        match merged.iter_mut().find(|m| m.key == s.key) {
            Some(m) => m.cost += s.cost,
            None => merged.push(s.clone()),
        }
    }
    merged
}

/// What a waiter gives back if it leaves before its reserved time.
fn reservation_ops(steps: &[Step], id: &Arc<str>, at: i64, shadow_ok: bool) -> Vec<Op> {
    live(steps)
        .into_iter()
        .filter(|s| !s.quota.shadow || shadow_ok)
        .map(|s| match s.quota.params {
            Params::Bucket { pq, pr, den, .. } => Op::Bucket {
                key: s.key.clone(),
                params: [pq, pr, den],
                delta: -i128::from(s.cost),
                at,
            },
            _ => Op::Members {
                key: s.key.clone(),
                id: id.clone(),
                from: 1,
                to: s.cost,
            },
        })
        .collect()
}

fn denial(tool: &Arc<str>, quota: &RQuota, code: i64, retry_us: i64) -> Rejection {
    let retry = Some(Duration::from_micros(u64::try_from(retry_us).unwrap_or(0)));
    let (reason, retry) = match code {
        2 => (Reason::ConcurrencyLimited, None),
        3 => (Reason::MaxWaitExceeded, retry),
        _ => (quota.reason(), retry),
    };
    Rejection::new(tool.clone(), &*quota.path, reason, retry)
}

fn parse_reply(value: redis::Value, n: usize) -> Result<Reply, StoreError> {
    let bad = |v: &dyn std::fmt::Debug| StoreError::Reply {
        op: "admit",
        reply: format!("{v:?}"),
    };
    let nums: Vec<i64> = redis::from_redis_value_ref(&value).map_err(|_| bad(&value))?;
    let index = |i: i64| usize::try_from(i).ok().filter(|i| (1..=n).contains(i));
    match nums.as_slice() {
        [1, at, wait, ok, blame] => Ok(Reply::Admitted {
            at: *at,
            wait: *wait,
            shadow_ok: *ok == 1,
            shadow_blame: if *blame == 0 {
                0
            } else {
                index(*blame).ok_or_else(|| bad(&nums))?
            },
        }),
        [0, blame, code, retry] => Ok(Reply::Denied {
            blame: index(*blame).ok_or_else(|| bad(&nums))?,
            code: *code,
            retry: *retry,
        }),
        _ => Err(bad(&nums)),
    }
}

fn shadow_rejected(tools: &[Option<Arc<RTool>>], q: &RQuota) {
    let tool = tools.iter().flatten().next().map_or("", |t| &*t.name);
    tracing::info!(tool, quota = &*q.path, reason = %q.reason(), "shadow quota would have rejected");
    metrics::counter!(
        "toolgate_admissions_total",
        "tool" => tool.to_string(),
        "decision" => "shadow_rejected",
        "reason" => q.reason().as_str()
    )
    .increment(1);
}

fn record(tool: &str, result: &Result<RedisPermit, Rejection>) {
    let (decision, reason) = match result {
        Ok(_) => ("admitted", ""),
        Err(r) => ("rejected", r.reason().as_str()),
    };
    tracing::debug!(tool, decision, reason, "admission decision");
    metrics::counter!(
        "toolgate_admissions_total",
        "tool" => tool.to_string(),
        "decision" => decision,
        "reason" => reason
    )
    .increment(1);
}
