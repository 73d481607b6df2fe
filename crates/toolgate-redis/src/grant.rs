//! Local grants (`local_grant = G`): a process takes up to G admissions' worth of a
//! hot quota in one round trip and spends them without asking Redis again.
//!
//! Why: a quota hit by one process thousands of times a second costs a round trip per
//! call. With grants, Redis is asked once per batch. The batch is charged in Redis up
//! front, so the processes together still never exceed the quota. The price is
//! accuracy of *who* gets the capacity: tokens held in one process's grant are
//! unavailable to the others until spent or returned, and a caller served from a grant
//! is admitted at the time the batch was charged, not at its own time. Unused grant
//! units return (refunded in Redis, never above full) when the grant expires, after
//! the time the batch takes to refill (at least 20 ms, at most 1 s).
//!
//! Scope: only `try_admit` on tools whose every quota (own and pools') is an enforced
//! `rate` bucket: no sliding windows, token budgets, concurrency or shadow quotas,
//! whose exactness a batch would change.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use toolgate::compile::CostOf;

use crate::link::Link;
use crate::op::Op;
use crate::permit::{Held, RedisPermit};
use crate::plan::Step;
use crate::quota::Params;
use crate::script::Reply;

/// The grants of one gate, by the keys of the quota instances they cover, taken
/// and given back through the gate's link.
#[derive(Debug)]
pub(crate) struct Grants {
    size: u64,
    map: Mutex<HashMap<String, Grant>>,
    link: Arc<Link>,
}

/// A batch taken from Redis for one call's keys, and what is left of it.
#[derive(Debug)]
struct Grant {
    left: u64,
    expires: Instant,
    /// Waiting for Redis after a batch did not fit: no new batch before this time.
    cooldown: bool,
    generation: u64,
}

/// What a grant can do for a call.
enum Take {
    /// Served from the grant.
    Granted,
    /// Ask Redis for a new batch.
    Batch,
    /// Ask Redis for this call alone (a batch did not fit recently).
    Ask,
}

// === impl Grants ===

impl Grants {
    /// Grants of `size` admissions taken through `link`; `None` when `size` is 0 or
    /// 1 (`local_grant` off).
    pub(crate) fn new(size: u64, link: &Arc<Link>) -> Option<Arc<Self>> {
        (size > 1).then(|| {
            Arc::new(Self {
                size,
                map: Mutex::new(HashMap::new()),
                link: link.clone(),
            })
        })
    }

    /// Spends `count` from a live grant of `key`.
    fn take(&self, key: &str, count: u64) -> Take {
        let now = Instant::now();
        let Ok(mut map) = self.map.lock() else {
            return Take::Ask;
        };
        match map.get_mut(key) {
            Some(g) if g.expires > now && g.cooldown => Take::Ask,
            Some(g) if g.expires > now && g.left >= count => {
                g.left -= count;
                Take::Granted
            }
            _ => Take::Batch,
        }
    }

    /// Stores a new grant (or a cooldown when `left` is `None`); returns its generation.
    fn put(&self, key: &str, left: Option<u64>, ttl: Duration) -> u64 {
        static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let generation = GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Ok(mut map) = self.map.lock() {
            map.insert(
                key.to_string(),
                Grant {
                    left: left.unwrap_or(0),
                    expires: Instant::now() + ttl,
                    cooldown: left.is_none(),
                    generation,
                },
            );
        }
        generation
    }

    /// Removes the grant `generation` of `key`, returning what was left of it.
    fn expire(&self, key: &str, generation: u64) -> u64 {
        let Ok(mut map) = self.map.lock() else {
            return 0;
        };
        match map.get(key) {
            Some(g) if g.generation == generation => map.remove(key).map_or(0, |g| g.left),
            _ => 0,
        }
    }

    /// Admits `count` from a local grant, taking a new batch when none is left;
    /// `None` when the call must go to Redis on its own.
    pub(crate) async fn admit(self: &Arc<Self>, steps: &[Step], count: u64) -> Option<RedisPermit> {
        if count == 0 || !grantable(steps) {
            return None;
        }
        let key = steps.iter().map(|s| &*s.key).collect::<Vec<_>>().join("\n");
        match self.take(&key, count) {
            Take::Granted => {
                return Some(RedisPermit::new(Held::Granted, Duration::ZERO));
            }
            Take::Ask => return None,
            Take::Batch if self.link.is_down() => return None,
            Take::Batch => {}
        }
        let capacity = steps.iter().map(|s| s.quota.spec.capacity()).min()?;
        let batch = self.size.min(capacity);
        if batch <= count {
            return None;
        }
        let batched: Vec<Step> = steps
            .iter()
            .map(|s| Step {
                cost: batch,
                ..s.clone()
            })
            .collect();
        let id = self.link.id_for(&batched);
        let ttl = grant_ttl(steps, batch);
        match self.link.run_admit(&batched, &id, -1).await {
            Ok(Reply::Admitted { .. }) => {
                let generation = self.put(&key, Some(batch - count), ttl);
                self.return_later(key, generation, batched, ttl);
                Some(RedisPermit::new(Held::Granted, Duration::ZERO))
            }
            Ok(Reply::Denied { retry, .. }) => {
                // Not enough for a batch: single calls until enough has refilled.
                let wait = Duration::from_micros(u64::try_from(retry).unwrap_or(0));
                self.put(&key, None, wait.clamp(Duration::from_millis(1), ttl));
                None
            }
            Err(e) => {
                self.link.failed(&e);
                None
            }
        }
    }

    /// Returns the unused part of a grant when it expires.
    fn return_later(
        self: &Arc<Self>,
        key: String,
        generation: u64,
        steps: Vec<Step>,
        ttl: Duration,
    ) {
        let me = self.clone();
        self.link.spawn(async move {
            tokio::time::sleep(ttl).await;
            let left = me.expire(&key, generation);
            if left == 0 {
                return;
            }
            let ops: Vec<Op> = steps
                .iter()
                .filter_map(|s| match s.quota.params {
                    Params::Bucket { pq, pr, den, burst } => Some(Op::Bucket {
                        key: s.key.clone(),
                        params: [pq, pr, den, burst],
                        delta: -i128::from(left),
                        at: -1,
                        since: -1,
                        charged: 0,
                    }),
                    _ => None,
                })
                .collect();
            if let Err(e) = me.link.release(ops).await {
                tracing::warn!(error = %e, "returning an unused grant failed; it refills instead");
            }
        });
    }
}

/// Whether a batch keeps these quotas exact: enforced request-rate buckets only.
fn grantable(steps: &[Step]) -> bool {
    !steps.is_empty()
        && steps.iter().all(|s| {
            matches!(s.quota.params, Params::Bucket { .. })
                && s.quota.spec.cost_of == CostOf::Requests
                && !s.quota.spec.is_shadow()
        })
}

/// How long a grant lives: the time its batch takes to refill on the slowest quota,
/// between 20 ms and 1 s.
fn grant_ttl(steps: &[Step], batch: u64) -> Duration {
    let us = steps
        .iter()
        .map(|s| match s.quota.params {
            Params::Bucket { pq, pr, den, .. } => {
                u128::from(batch) * (u128::from(pq) + u128::from(pr).div_ceil(u128::from(den)))
            }
            _ => 0,
        })
        .max()
        .unwrap_or(0);
    Duration::from_micros(u64::try_from(us).unwrap_or(u64::MAX))
        .clamp(Duration::from_millis(20), Duration::from_secs(1))
}
