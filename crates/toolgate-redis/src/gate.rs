//! The gate of the Redis store: admission against quotas kept in Redis, shared by
//! every process that uses the same Redis and key prefix. Crate-internal: the one
//! public door is the engine on it ([`crate::engine`], [`crate::RedisStore`]).
//!
//! One admission is one round trip: the call's quotas (as the core resolves them,
//! with their keys and tenant partitions) are planned here, then `scripts/admit.lua`
//! checks and charges all of them atomically on the server, on the server's clock.
//! The answers are the core's values ([`Rejection`], [`toolgate::Reason`]),
//! computed by the same rules.
//!
//! The gate composes its parts, each of which knows nothing of it: the link to Redis
//! (`link.rs`), the compiled quotas (`quota.rs`), the fallback while Redis does not
//! answer (`fallback.rs`) and the local grants (`grant.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use toolgate::config::{OnLimit, StoreConfig, MAX_WAIT_LIMIT};
use toolgate::store::Level;
use toolgate::{Call, Clock, Policy, Reason, Rejection};

use crate::admitted::permits;
use crate::batch::Batch;
use crate::error::StoreError;
use crate::fallback::Fallback;
use crate::grant::Grants;
use crate::keys::partition_key;
use crate::link::Link;
use crate::permit::{Held, RedisPermit};
use crate::plan::{denial, live, plan, Step};
use crate::quota::{Compiled, Params, Tool};
use crate::script::Reply;
use crate::wait::{sleep_out, QueueSlot};

/// The most quotas one read of what they have left (`peek.lua`) reads: a script
/// blocks Redis while it runs, so a state endpoint over a large policy reads it in
/// several short runs (each about a microsecond per quota).
const PEEK_BATCH: usize = 128;

/// Admission on quotas shared through Redis, for one policy. Shared (`Arc`) by the
/// store; a reload derives a new gate on the same connection
/// ([`Gate::reconfigured`]).
pub(crate) struct Gate {
    link: Arc<Link>,
    compiled: Compiled,
    policy: Policy,
    fallback: Fallback,
    grants: Option<Arc<Grants>>,
    /// The `[store]` section the gate was built from (for reloads).
    store: StoreConfig,
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
        lanes: &[tokio::runtime::Handle],
    ) -> Result<Self, StoreError> {
        check(&store)?;
        let compiled = Compiled::new(policy.config(), &store.key_prefix)?;
        let fallback = Fallback::new(&store, &policy, clock.as_ref())?;
        let link = Arc::new(Link::connect(&store, lease_ttl, clock, lanes).await?);
        Ok(Self {
            grants: Grants::new(store.local_grant, &link),
            link,
            compiled,
            policy,
            fallback,
            store,
        })
    }

    /// The same gate on a new policy: the link's connection, scripts and lease TTL
    /// are shared, the quotas recompiled (their state is in Redis, under the same
    /// keys while a quota's definition is unchanged).
    ///
    /// # Errors
    ///
    /// When a quota of `policy` cannot be computed exactly in Redis.
    pub(crate) fn reconfigured(&self, policy: Policy) -> Result<Self, StoreError> {
        let store = &self.store;
        let compiled = Compiled::new(policy.config(), &store.key_prefix)?;
        let fallback = Fallback::new(store, &policy, self.link.clock())?;
        let link = Arc::new(self.link.derived());
        Ok(Self {
            grants: Grants::new(store.local_grant, &link),
            link,
            compiled,
            policy,
            fallback,
            store: store.clone(),
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
        self.link.set_lease_ttl(ttl);
    }

    /// Whether Redis is believed down (until a probe answers).
    pub(crate) fn is_down(&self) -> bool {
        self.link.is_down()
    }

    /// What each quota of each of `tools` has left in Redis now, by path, one list
    /// per tool (see [`toolgate::store::QuotaStore::levels`]), charging nothing.
    /// With `tenant`, its partitions; without, partitioned quotas are left out. A
    /// tool without a policy has an empty list. One round trip on a single server,
    /// for [`PEEK_BATCH`] quotas at a time; on a cluster, one per hash slot group,
    /// each group's quotas living in one slot. The round trips run together.
    ///
    /// # Errors
    ///
    /// When Redis did not answer within the store's timeout.
    pub(crate) async fn levels(
        &self,
        tools: &[&str],
        tenant: Option<&str>,
    ) -> Result<Vec<Vec<Level>>, StoreError> {
        // (tool's index, path, key, parameters) of every quota with a figure.
        let mut quotas = Vec::new();
        for (i, name) in tools.iter().enumerate() {
            let Some(tool) = self.compiled.tool(name) else {
                continue;
            };
            for q in &tool.quotas {
                let key: Arc<str> = match (q.spec.partition, tenant) {
                    (None, _) => q.key.clone(),
                    (Some(_), Some(t)) => partition_key(&q.key, t).into(),
                    (Some(_), None) => continue,
                };
                quotas.push((i, q.spec.path.clone(), key, q.params));
            }
        }
        // Batches that one script may read: a slot group's keys on a cluster (its
        // hash tag is the key's first `{…}`: the prefix has no braces), any keys
        // on a single server.
        let mut batches: Vec<Vec<usize>> = Vec::new();
        if self.link.is_cluster() {
            let mut by_tag: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
            for (j, (_, _, key, _)) in quotas.iter().enumerate() {
                by_tag.entry(hash_tag(key)).or_default().push(j);
            }
            for group in by_tag.into_values() {
                batches.extend(group.chunks(PEEK_BATCH).map(<[usize]>::to_vec));
            }
        } else {
            let all: Vec<usize> = (0..quotas.len()).collect();
            batches.extend(all.chunks(PEEK_BATCH).map(<[usize]>::to_vec));
        }
        let reads = batches.iter().map(|batch| {
            let keys: Vec<(Arc<str>, Params)> = batch
                .iter()
                .map(|&j| (quotas[j].2.clone(), quotas[j].3))
                .collect();
            async move { self.link.peek(&keys).await }
        });
        let answers = join_all(reads).await;
        let mut out = vec![Vec::new(); tools.len()];
        for (batch, answer) in batches.iter().zip(answers) {
            for (&j, n) in batch.iter().zip(answer?) {
                let (i, path, _, _) = &quotas[j];
                out[*i].push(Level::new(path.clone(), n));
            }
        }
        Ok(out)
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
    pub(crate) async fn admit_now(&self, call: &Call<'_>) -> Result<RedisPermit, Rejection> {
        let Some(tool) = self.compiled.resolve(call)? else {
            return Ok(RedisPermit::new(Held::Unaccounted, Duration::ZERO));
        };
        let steps = plan(&tool, call)?;
        if let Some(grants) = &self.grants {
            if let Some(p) = grants.admit(&steps, call.request_count()).await {
                return Ok(p);
            }
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
    pub(crate) async fn admit(&self, call: &Call<'_>) -> Result<RedisPermit, Rejection> {
        let Some(tool) = self.compiled.resolve(call)? else {
            return Ok(RedisPermit::new(Held::Unaccounted, Duration::ZERO));
        };
        let steps = plan(&tool, call)?;
        if tool.on_limit == OnLimit::Wait || call.max_wait_override().is_some() {
            let max_wait = call.wait_limit(tool.max_wait).min(MAX_WAIT_LIMIT);
            // Boxed: a call that may wait carries its sleep and retries; one that
            // may not stays small.
            Box::pin(self.wait(&tool, call, &steps, max_wait)).await
        } else {
            self.decide(&tool, call, &steps, -1, false).await
        }
    }

    /// Admits `calls` together, now or never: one round trip charges all of them or
    /// none (a reservation). The permits are refundable ([`RedisPermit::cancel`]).
    ///
    /// # Errors
    ///
    /// The [`Rejection`] of the first quota that said no (see [`Batch::new`]);
    /// nothing was charged. When Redis does not answer, as [`Gate::admit_now`].
    pub(crate) async fn admit_all(
        &self,
        calls: &[Call<'_>],
    ) -> Result<Vec<RedisPermit>, Rejection> {
        let batch = Batch::new(&self.compiled, calls)?;
        let Some(first) = batch.first() else {
            return Ok(calls
                .iter()
                .map(|_| RedisPermit::new(Held::Unaccounted, Duration::ZERO))
                .collect());
        };
        if self.link.is_down() {
            return self.fallback.admit_all(&first.name, calls);
        }
        let id = self.link.id_for(batch.merged());
        match self.link.run_admit(batch.merged(), &id, -1).await {
            Ok(Reply::Denied { blame, code, retry }) => Err(batch.denial(blame, code, retry)),
            Ok(reply) => {
                let (tools, plans) = (batch.tools(), batch.plans());
                let merged = batch.merged();
                Ok(permits(&self.link, tools, &plans, merged, &id, reply, true))
            }
            Err(e) => {
                self.link.failed(&e);
                self.fallback.admit_all(&first.name, calls)
            }
        }
    }

    /// The wait path of [`Gate::admit`]: asks again, with the time left, while a
    /// concurrency limit blocks.
    async fn wait(
        &self,
        tool: &Arc<Tool>,
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
        let mut polled = false;
        loop {
            let left = max_wait.saturating_sub(start.elapsed());
            let left_us = i64::try_from(left.as_micros()).unwrap_or(i64::MAX);
            match self.decide(tool, call, steps, left_us, true).await {
                Err(r) if r.reason() == Reason::ConcurrencyLimited && !left.is_zero() => {
                    tokio::time::sleep(poll.min(left)).await;
                    poll = (poll * 2).min(Duration::from_millis(50));
                    polled = true;
                }
                // Time spent polling for a concurrency slot counts as waiting too.
                Ok(p) if polled => return Ok(p.with_waited(start.elapsed())),
                other => return other,
            }
        }
    }

    /// One decision round trip (`max_wait_us` < 0: now or never), or the
    /// `on_store_error` path (`wait`: the fallback may wait too).
    async fn decide(
        &self,
        tool: &Arc<Tool>,
        call: &Call<'_>,
        steps: &[Step],
        max_wait_us: i64,
        wait: bool,
    ) -> Result<RedisPermit, Rejection> {
        if self.link.is_down() {
            return self.fallback.admit(&tool.name, call, wait).await;
        }
        let id = self.link.id_for(steps);
        match self.link.run_admit(steps, &id, max_wait_us).await {
            Ok(Reply::Denied { blame, code, retry }) => Err(denial(
                &tool.name,
                &live(steps)[blame - 1].quota,
                code,
                retry,
            )),
            Ok(reply @ Reply::Admitted { .. }) => {
                let tools = [Some(tool.clone())];
                let permit = permits(&self.link, &tools, &[steps], steps, &id, reply, false).pop();
                match permit {
                    Some(p) => Ok(sleep_out(&self.link, p, steps, &id, reply).await),
                    None => Err(Rejection::store_unavailable(tool.name.clone())),
                }
            }
            Err(e) => {
                self.link.failed(&e);
                self.fallback.admit(&tool.name, call, wait).await
            }
        }
    }
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("link", &self.link)
            .field("on_store_error", &self.fallback.on_error())
            .finish_non_exhaustive()
    }
}

/// The hash tag of a quota's key: what its first `{…}` holds.
fn hash_tag(key: &str) -> &str {
    key.split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map_or("", |(tag, _)| tag)
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
