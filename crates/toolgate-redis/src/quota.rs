//! The policy compiled for Redis: each quota's key, kind and the integer parameters
//! the admission script works with, checked for exactness in Lua's doubles.
//!
//! Why a fraction: the core's GCRA scales time by the rate's count so that one token
//! is a whole number of units. Redis' clock is in microseconds and Lua numbers are
//! doubles (integers exact up to 2^53), so here one token is the *reduced* fraction
//! `period_ns / (1000 * n)` µs = `pq + pr/den` µs, and the bucket's TAT is kept as whole
//! microseconds plus a remainder in `1/den` µs. Ordinary rates (`50/s`, `100/min`,
//! `40000/min`) reduce to `den = 1`; only the bounds in [`Params::bucket`] can fail.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use toolgate::config::{Config, Mode, OnLimit, QuotaConfig, Rate, UnknownTools, Window};
use toolgate::Reason;

use crate::error::StoreError;
use crate::keys::{quota_key, SlotGroups};

/// Integers stay exact in a double up to here.
const EXACT: u128 = 1 << 53;

/// What a quota limits, in the script's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Params {
    /// One token is `pq + pr/den` µs; at most `burst` tokens.
    Bucket {
        pq: u64,
        pr: u64,
        den: u64,
        burst: u64,
    },
    /// At most `limit` in any `period_us`.
    Sliding { limit: u64, period_us: u64 },
    /// At most `limit` in flight.
    Concurrency { limit: u64 },
}

/// Which part of a call a quota is charged with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CostOf {
    Requests,
    Tokens,
}

/// One quota of the policy.
#[derive(Debug)]
pub(crate) struct RQuota {
    pub(crate) path: Arc<str>,
    pub(crate) params: Params,
    pub(crate) cost_of: CostOf,
    pub(crate) shadow: bool,
    pub(crate) partitioned: bool,
    /// The key, without a tenant suffix.
    pub(crate) key: String,
}

/// A tool as the gate runs it.
#[derive(Debug)]
pub(crate) struct RTool {
    pub(crate) name: Arc<str>,
    /// The tool's own quotas, then those of its pools.
    pub(crate) quotas: Vec<Arc<RQuota>>,
    pub(crate) on_limit: OnLimit,
    pub(crate) max_wait: Duration,
    pub(crate) queue_limit: usize,
    /// Waiters of this process.
    pub(crate) waiting: AtomicUsize,
}

/// The compiled policy.
#[derive(Debug)]
pub(crate) struct Compiled {
    pub(crate) tools: BTreeMap<String, Arc<RTool>>,
    pub(crate) unknown: UnknownTools,
    pub(crate) groups: usize,
}

// === impl Params ===

impl Params {
    /// A token bucket of `burst` tokens refilled at `rate`.
    ///
    /// # Errors
    ///
    /// When the bucket cannot be computed exactly with doubles: the reduced fraction's
    /// denominator times the burst must stay below 2^53, and so must the time to refill
    /// a full bucket must stay below 2^51 µs (about 71 years).
    pub(crate) fn bucket(path: &str, rate: Rate, burst: u64) -> Result<Self, StoreError> {
        let period_ns = rate.period().as_nanos();
        let units = 1000 * u128::from(rate.count());
        let g = gcd(period_ns, units);
        let (num, den) = (period_ns / g, units / g);
        let (pq, pr) = (num / den, num % den);
        let b = u128::from(burst);
        let fail = |message: String| StoreError::Precision {
            path: path.to_string(),
            message,
        };
        if b * den >= EXACT {
            return Err(fail(format!(
                "{rate} with burst {burst}: one token is {num}/{den} µs and burst × {den} \
                 must stay below 2^53 for exact arithmetic in Redis (use a rate whose \
                 period is a multiple of 1 µs per request, or a smaller burst)"
            )));
        }
        if b * pq + b >= EXACT / 4 {
            return Err(fail(format!(
                "{rate} with burst {burst}: refilling the bucket takes longer than 2^51 µs"
            )));
        }
        let small = |v: u128| u64::try_from(v).map_err(|_| fail("out of range".into()));
        Ok(Self::Bucket {
            pq: small(pq)?,
            pr: small(pr)?,
            den: small(den)?,
            burst,
        })
    }

    /// An exact sliding window of `rate`; the period is rounded up to whole µs.
    pub(crate) fn sliding(rate: Rate) -> Self {
        let period_us = rate.period().as_nanos().div_ceil(1000);
        Self::Sliding {
            limit: rate.count(),
            period_us: u64::try_from(period_us).unwrap_or(u64::MAX),
        }
    }

    pub(crate) fn kind(&self) -> char {
        match self {
            Self::Bucket { .. } => 'b',
            Self::Sliding { .. } => 's',
            Self::Concurrency { .. } => 'c',
        }
    }

    /// The four numeric script arguments.
    pub(crate) fn args(&self) -> [u64; 4] {
        match *self {
            Self::Bucket { pq, pr, den, burst } => [pq, pr, den, burst],
            Self::Sliding { limit, period_us } => [limit, period_us, 0, 0],
            Self::Concurrency { limit } => [limit, 0, 0, 0],
        }
    }

    /// The most one admission can cost.
    pub(crate) fn capacity(&self) -> u64 {
        match *self {
            Self::Bucket { burst, .. } => burst,
            Self::Sliding { limit, .. } | Self::Concurrency { limit } => limit,
        }
    }
}

// === impl RQuota ===

impl RQuota {
    /// The reason given when this quota says no.
    pub(crate) fn reason(&self) -> Reason {
        match (self.params, self.cost_of) {
            (Params::Concurrency { .. }, _) => Reason::ConcurrencyLimited,
            (_, CostOf::Tokens) => Reason::TokensLimited,
            _ => Reason::RateLimited,
        }
    }

    /// The cost of `call` here.
    pub(crate) fn cost(&self, count: u64, tokens: u64) -> u64 {
        match self.cost_of {
            CostOf::Requests => count,
            CostOf::Tokens => tokens,
        }
    }
}

// === impl Compiled ===

impl Compiled {
    /// Compiles `config` with keys under `prefix`.
    ///
    /// # Errors
    ///
    /// Every quota that cannot be computed exactly in Redis (the first one found).
    pub(crate) fn new(config: &Config, prefix: &str) -> Result<Self, StoreError> {
        let groups = SlotGroups::new(config);
        let mut pools = BTreeMap::new();
        for (name, q) in &config.pools {
            let tag = groups.pool(name);
            let list = quotas(&format!("pools.{name}"), q, config.mode, prefix, tag)?;
            pools.insert(name.clone(), list);
        }
        let mut tools = BTreeMap::new();
        for (name, t) in &config.tools {
            let tag = groups.tool(name);
            let mut list = quotas(&format!("tools.{name}"), &t.quota, config.mode, prefix, tag)?;
            let mut seen: Vec<&String> = Vec::new();
            for pool in &t.pools {
                if !seen.contains(&pool) {
                    seen.push(pool);
                    list.extend(pools.get(pool).into_iter().flatten().cloned());
                }
            }
            tools.insert(
                name.clone(),
                Arc::new(RTool {
                    name: name.as_str().into(),
                    quotas: list,
                    on_limit: t.on_limit,
                    max_wait: t.max_wait,
                    queue_limit: t.queue_limit,
                    waiting: AtomicUsize::new(0),
                }),
            );
        }
        Ok(Self {
            tools,
            unknown: config.unknown_tools,
            groups: groups.count(),
        })
    }
}

/// The quotas of one tool or pool table.
fn quotas(
    prefix_path: &str,
    q: &QuotaConfig,
    mode: Mode,
    key_prefix: &str,
    tag: &str,
) -> Result<Vec<Arc<RQuota>>, StoreError> {
    let shadow = q.mode.unwrap_or(mode) == Mode::Shadow;
    let partitioned = q.partition.is_some();
    let mut out = Vec::new();
    let mut push = |key: &str, params: Params, cost_of: CostOf| {
        let path = format!("{prefix_path}.{key}");
        out.push(Arc::new(RQuota {
            key: quota_key(key_prefix, tag, params.kind(), &path),
            path: path.into(),
            params,
            cost_of,
            shadow,
            partitioned,
        }));
    };
    if let Some(rate) = q.rate {
        let params = match q.window {
            Window::Sliding => Params::sliding(rate),
            _ => Params::bucket(
                &format!("{prefix_path}.rate"),
                rate,
                q.burst.unwrap_or(rate.count()),
            )?,
        };
        push("rate", params, CostOf::Requests);
    }
    if let Some(tokens) = q.tokens {
        let burst = q.tokens_burst.unwrap_or(tokens.count());
        let params = Params::bucket(&format!("{prefix_path}.tokens"), tokens, burst)?;
        push("tokens", params, CostOf::Tokens);
    }
    if let Some(limit) = q.concurrency {
        let params = Params::Concurrency {
            limit: u64::from(limit),
        };
        push("concurrency", params, CostOf::Requests);
    }
    Ok(out)
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(rate: &str, burst: u64) -> Result<Params, StoreError> {
        let r: Rate = rate.parse().expect("valid rate");
        Params::bucket("tools.x.rate", r, burst)
    }

    #[test]
    fn ordinary_rates_reduce_to_whole_microseconds() {
        let cases = [
            ("50/s", 20_000, 0, 1),
            ("2/s", 500_000, 0, 1),
            ("100/min", 600_000, 0, 1),
            ("40000/min", 1_500, 0, 1),
            ("3/s", 333_333, 1, 3),
        ];
        for (rate, pq, pr, den) in cases {
            assert_eq!(
                bucket(rate, 10).ok(),
                Some(Params::Bucket {
                    pq,
                    pr,
                    den,
                    burst: 10
                }),
                "{rate}"
            );
        }
    }

    #[test]
    fn rates_that_doubles_cannot_hold_exactly_are_refused_with_their_path() {
        // A prime count per second with a huge burst: den = 1000 × 1000003.
        let err = bucket("1000003/s", 1 << 40).expect_err("inexact");
        assert!(
            err.to_string()
                .starts_with("tools.x.rate: 1000003/s with burst"),
            "{err}"
        );
        // 1e9/s is still exact: one token is 1/1000 µs.
        assert!(bucket("1000000000/s", 1_000_000).is_ok());
    }
}
