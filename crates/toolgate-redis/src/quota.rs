//! The policy compiled for Redis: each quota the core resolves for a tool
//! ([`toolgate::compile::tool_quotas`]), with the key it lives under and the integer
//! parameters the admission script works with, checked for exactness in Lua's
//! doubles. Which quotas a tool has, in which order, what a call costs on each and
//! which reason a refusal gives are the core's answers, not restated here.
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

use toolgate::compile::{tool_quotas, Limit, QuotaSpec};
use toolgate::config::{Config, OnLimit, Rate, UnknownTools};
use toolgate::{Call, Reason, Rejection};

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

/// One quota as Redis keeps it: the core's resolution, its key and its script
/// parameters.
#[derive(Debug)]
pub(crate) struct Quota {
    pub(crate) spec: QuotaSpec,
    pub(crate) params: Params,
    /// The key, without a tenant suffix.
    pub(crate) key: Arc<str>,
}

/// A tool as the store runs it.
#[derive(Debug)]
pub(crate) struct Tool {
    pub(crate) name: Arc<str>,
    /// Its quotas, in the core's order.
    pub(crate) quotas: Vec<Arc<Quota>>,
    pub(crate) on_limit: OnLimit,
    pub(crate) max_wait: Duration,
    pub(crate) queue_limit: usize,
    /// Waiters of this process.
    pub(crate) waiting: AtomicUsize,
}

/// The compiled policy.
#[derive(Debug)]
pub(crate) struct Compiled {
    tools: BTreeMap<String, Arc<Tool>>,
    unknown: UnknownTools,
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

    /// The letter of the quota's keys: `g` for a bucket (a string since the
    /// coalesced admissions; `b` was its former hash), else the script's kind.
    pub(crate) fn key_letter(&self) -> char {
        match self {
            Self::Bucket { .. } => 'g',
            _ => self.kind(),
        }
    }

    /// The quota's kind in the admission script's arguments.
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
}

// === impl Quota ===

impl Quota {
    /// `spec` under `key_prefix`, in the slot group tagged `tag`.
    ///
    /// # Errors
    ///
    /// When the quota cannot be computed exactly in Redis, or is of a kind this store
    /// does not know.
    fn new(spec: QuotaSpec, key_prefix: &str, tag: &str) -> Result<Self, StoreError> {
        let params = match spec.limit {
            Limit::Bucket { rate, burst } => Params::bucket(&spec.path, rate, burst)?,
            Limit::Sliding { rate } => Params::sliding(rate),
            Limit::Concurrency { limit } => Params::Concurrency {
                limit: u64::from(limit),
            },
            other => {
                return Err(StoreError::Config {
                    key: "policy",
                    message: format!("{}: {other:?} cannot run on Redis", spec.path),
                })
            }
        };
        Ok(Self {
            key: quota_key(key_prefix, tag, params.key_letter(), &spec.path).into(),
            spec,
            params,
        })
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
        let mut tools = BTreeMap::new();
        for (name, t) in &config.tools {
            let quotas = tool_quotas(config, name)
                .unwrap_or_default()
                .into_iter()
                .map(|spec| {
                    let tag = match &spec.pool {
                        Some(pool) => groups.pool(pool),
                        None => groups.tool(name),
                    };
                    Quota::new(spec, prefix, tag).map(Arc::new)
                })
                .collect::<Result<_, _>>()?;
            let tool = Tool {
                name: name.as_str().into(),
                quotas,
                on_limit: t.on_limit,
                max_wait: t.max_wait,
                queue_limit: t.queue_limit,
                waiting: AtomicUsize::new(0),
            };
            tools.insert(name.clone(), Arc::new(tool));
        }
        Ok(Self {
            tools,
            unknown: config.unknown_tools,
        })
    }

    /// The tool named `name`, if it has a policy.
    pub(crate) fn tool(&self, name: &str) -> Option<&Arc<Tool>> {
        self.tools.get(name)
    }

    /// The tool of `call`; `None` for an unknown tool that is allowed.
    ///
    /// # Errors
    ///
    /// An unknown tool under `unknown_tools = "deny"`.
    pub(crate) fn resolve(&self, call: &Call<'_>) -> Result<Option<Arc<Tool>>, Rejection> {
        let Some(tool) = self.tools.get(call.tool_name()) else {
            return match self.unknown {
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
