//! The wire protocol of the Lua scripts: arguments in, replies out. Running them is
//! the link's (`link.rs`); what they mean, the plan's and the permit's.

use std::sync::Arc;

use redis::{Script, ScriptInvocation};

use crate::error::StoreError;
use crate::op::Op;
use crate::plan::Step;
use crate::quota::Params;

/// A call's cost on a bucket, in µs: `cw + cr/den`, and that cost less the
/// bucket's burst, `dw + dr/den` (`0 <= cr, dr < den`): what `admit_bucket.lua`
/// needs of the quota, computed once on the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Costs {
    pub(crate) cw: i64,
    pub(crate) cr: i64,
    pub(crate) dw: i64,
    pub(crate) dr: i64,
}

/// A call that `admit_bucket.lua` can decide: one enforced bucket, now or never.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BucketCall {
    pub(crate) key: Arc<str>,
    pub(crate) den: u64,
    pub(crate) costs: Costs,
}

/// What `admit_bucket.lua` decided for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Admitted at `now` (Redis µs).
    Admitted { now: i64 },
    /// Denied: not before `retry` µs from now.
    Denied { retry: i64 },
}

/// The four scripts, loaded into Redis on first use (EVALSHA, then EVAL on
/// `NOSCRIPT`). Cheap to clone: a reload's gate keeps its predecessor's.
#[derive(Debug, Clone)]
pub(crate) struct Scripts {
    admit: Script,
    /// `admit.lua` specialised for one enforced bucket, now or never.
    admit_bucket: Script,
    release: Script,
    /// What quotas have left, read only (`/v1/tools`).
    peek: Script,
}

/// The admission script's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
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

// === impl Scripts ===

impl Scripts {
    pub(crate) fn new() -> Self {
        Self {
            admit: Script::new(include_str!("scripts/admit.lua")),
            admit_bucket: Script::new(include_str!("scripts/admit_bucket.lua")),
            release: Script::new(include_str!("scripts/release.lua")),
            peek: Script::new(include_str!("scripts/peek.lua")),
        }
    }

    /// The admission of the `live` steps (those with a cost, at least one) at `now`
    /// (empty: Redis' clock; else Redis µs), waiting up to `max_wait_us` (< 0: now or
    /// never), for admission `id`, with leases that live `lease_ttl_us`. The common
    /// call (one enforced bucket, now or never) runs [`Scripts::admit_bucket`]
    /// instead: see [`BucketCall::of`].
    pub(crate) fn admit(
        &self,
        now: &str,
        live: &[&Step],
        id: &str,
        max_wait_us: i64,
        lease_ttl_us: u64,
    ) -> ScriptInvocation<'_> {
        let mut inv = self.admit.prepare_invoke();
        inv.arg(now)
            .arg(max_wait_us)
            .arg(id)
            .arg(lease_ttl_us)
            .arg(live.len());
        for s in live {
            let [a, b, c, d] = s.quota.params.args();
            inv.key(&*s.key)
                .arg(s.quota.params.kind().to_string())
                .arg(u8::from(s.quota.spec.is_shadow()))
                .arg(s.cost)
                .arg(a)
                .arg(b)
                .arg(c)
                .arg(d);
        }
        inv
    }

    /// The admission of calls on one bucket `key` of denominator `den`, at `now` (as
    /// for [`Scripts::admit`]), in order: `runs` of calls of the same cost, each
    /// with its count (`admit_bucket.lua`: the numbers as little-endian doubles).
    pub(crate) fn admit_bucket(
        &self,
        now: &str,
        key: &str,
        den: u64,
        runs: &[(Costs, u64)],
    ) -> ScriptInvocation<'_> {
        let mut nums = Vec::with_capacity(8 * (1 + 5 * runs.len()));
        let mut push = |v: f64| nums.extend_from_slice(&v.to_le_bytes());
        push(exact(den));
        for (c, n) in runs {
            for v in [c.cw, c.cr, c.dw, c.dr] {
                push(exact(v));
            }
            push(exact(*n));
        }
        let mut inv = self.admit_bucket.prepare_invoke();
        inv.key(key).arg(now).arg(nums);
        inv
    }

    /// The release of `ops` at `now` (as for [`Scripts::admit`]).
    pub(crate) fn release(&self, now: &str, ops: &[Op]) -> ScriptInvocation<'_> {
        let mut inv = self.release.prepare_invoke();
        inv.arg(now).arg(ops.len());
        for op in ops {
            match op {
                Op::Members { key, id, from, to } => {
                    inv.key(&**key)
                        .arg("m")
                        .arg(&**id)
                        .arg(*from)
                        .arg(*to)
                        .arg(0)
                        .arg(0)
                        .arg(0)
                        .arg(0)
                        .arg(0);
                }
                Op::Bucket {
                    key,
                    params,
                    delta,
                    at,
                    since,
                    charged,
                } => {
                    let [pq, pr, den, burst] = *params;
                    inv.key(&**key)
                        .arg("b")
                        .arg(pq)
                        .arg(pr)
                        .arg(den)
                        .arg(burst)
                        .arg(delta.to_string())
                        .arg(*at)
                        .arg(*since)
                        .arg(*charged);
                }
            }
        }
        inv
    }

    /// What each of `quotas` (a key and its parameters) has left at `now` (as for
    /// [`Scripts::admit`]): `peek.lua`, which writes nothing.
    pub(crate) fn peek<'k>(
        &self,
        now: &str,
        quotas: impl IntoIterator<Item = (&'k str, Params)>,
    ) -> ScriptInvocation<'_> {
        let mut inv = self.peek.prepare_invoke();
        inv.arg(now);
        for (key, params) in quotas {
            let [a, b, c, d] = params.args();
            inv.key(key)
                .arg(params.kind().to_string())
                .arg(a)
                .arg(b)
                .arg(c)
                .arg(d);
        }
        inv
    }
}

/// Reads `peek.lua`'s reply for `n` quotas: what each has left, in order.
///
/// # Errors
///
/// [`StoreError::Reply`] for anything the script never returns.
pub(crate) fn parse_levels(value: &redis::Value, n: usize) -> Result<Vec<u64>, StoreError> {
    let levels: Vec<u64> = redis::from_redis_value_ref(value)
        .ok()
        .filter(|l: &Vec<u64>| l.len() == n)
        .ok_or_else(|| StoreError::Reply {
            op: "peek",
            reply: format!("{value:?}"),
        })?;
    Ok(levels)
}

/// 2^53: below it, doubles (Lua's numbers) hold every integer exactly.
const EXACT: u64 = 1 << 53;

/// `v` as a double: exact, since every number passed is below 2^53 in magnitude
/// ([`BucketCall::of`], a batch's size).
fn exact<T: Into<i128>>(v: T) -> f64 {
    #[allow(
        clippy::cast_precision_loss,
        reason = "below 2^53 in magnitude, so exact"
    )]
    let f = v.into() as f64;
    f
}

// === impl BucketCall ===

impl BucketCall {
    /// The call of `live` steps, when `admit_bucket.lua` can decide it: a single
    /// enforced bucket, now or never (`max_wait_us` < 0).
    pub(crate) fn of(live: &[&Step], max_wait_us: i64) -> Option<Self> {
        let [s] = live else { return None };
        let Params::Bucket { pq, pr, den, burst } = s.quota.params else {
            return None;
        };
        if s.quota.spec.is_shadow() || max_wait_us >= 0 || den == 0 || den >= EXACT {
            return None;
        }
        // Exact: the quota's precision checks keep burst × den and the burst's
        // time below 2^53, and a planned cost is at most the burst.
        let units = |n: u64| {
            let (n, pq, pr, den) = (
                i128::from(n),
                i128::from(pq),
                i128::from(pr),
                i128::from(den),
            );
            (n * pq + n * pr / den, n * pr % den)
        };
        let (cw, cr) = units(s.cost);
        let (bw, br) = units(burst);
        let (mut dw, mut dr) = (cw - bw, cr - br);
        if dr < 0 {
            dr += i128::from(den);
            dw -= 1;
        }
        // Within Lua's exact integers (the precision checks keep them far below).
        let int = |v: i128| i64::try_from(v).ok().filter(|v| v.unsigned_abs() < EXACT);
        Some(Self {
            key: s.key.clone(),
            den,
            costs: Costs {
                cw: int(cw)?,
                cr: int(cr)?,
                dw: int(dw)?,
                dr: int(dr)?,
            },
        })
    }
}

// === impl Decision ===

impl Decision {
    /// The decision as the general script's reply (blame on the one step).
    pub(crate) fn reply(self) -> Reply {
        match self {
            Self::Admitted { now } => Reply::Admitted {
                at: now,
                wait: 0,
                shadow_ok: true,
                shadow_blame: 0,
            },
            Self::Denied { retry } => Reply::Denied {
                blame: 1,
                code: 1,
                retry,
            },
        }
    }

    /// Reads `admit_bucket.lua`'s reply to `runs` (calls of one cost, with their
    /// count), one decision per call, in order.
    ///
    /// # Errors
    ///
    /// [`StoreError::Reply`] for anything the script never returns.
    pub(crate) fn parse(
        value: &redis::Value,
        runs: &[(Costs, u64)],
    ) -> Result<Vec<Self>, StoreError> {
        let bad = || StoreError::Reply {
            op: "admit",
            reply: format!("{value:?}"),
        };
        if let ([(_, 1)], redis::Value::Int(v)) = (runs, value) {
            return Ok(vec![if *v >= 0 {
                Self::Admitted { now: *v }
            } else {
                Self::Denied { retry: -*v }
            }]);
        }
        let nums: Vec<i64> = redis::from_redis_value_ref(value).map_err(|_| bad())?;
        let [now, pairs @ ..] = nums.as_slice() else {
            return Err(bad());
        };
        if pairs.len() != 2 * runs.len() {
            return Err(bad());
        }
        let calls: u64 = runs.iter().map(|r| r.1).sum();
        let mut out = Vec::with_capacity(calls.try_into().unwrap_or(0));
        for (pair, (_, n)) in pairs.chunks_exact(2).zip(runs) {
            let (admitted, retry) = (pair[0], pair[1]);
            let admitted = u64::try_from(admitted)
                .ok()
                .filter(|a| a <= n)
                .ok_or_else(bad)?;
            if admitted < *n && retry <= 0 {
                return Err(bad());
            }
            for i in 0..*n {
                out.push(if i < admitted {
                    Self::Admitted { now: *now }
                } else {
                    Self::Denied { retry }
                });
            }
        }
        Ok(out)
    }
}

// === impl Reply ===

impl Reply {
    /// Reads the admission script's reply for `n` live steps.
    ///
    /// # Errors
    ///
    /// [`StoreError::Reply`] for anything the script never returns (a blamed step
    /// outside `1..=n` included).
    pub(crate) fn parse(value: redis::Value, n: usize) -> Result<Self, StoreError> {
        let bad = |v: &dyn std::fmt::Debug| StoreError::Reply {
            op: "admit",
            reply: format!("{v:?}"),
        };
        let nums: Vec<i64> = redis::from_redis_value_ref(&value).map_err(|_| bad(&value))?;
        let index = |i: i64| usize::try_from(i).ok().filter(|i| (1..=n).contains(i));
        match nums.as_slice() {
            [1, at, wait, ok, blame] => Ok(Self::Admitted {
                at: *at,
                wait: *wait,
                shadow_ok: *ok == 1,
                shadow_blame: if *blame == 0 {
                    0
                } else {
                    index(*blame).ok_or_else(|| bad(&nums))?
                },
            }),
            [0, blame, code, retry] => Ok(Self::Denied {
                blame: index(*blame).ok_or_else(|| bad(&nums))?,
                code: *code,
                retry: *retry,
            }),
            _ => Err(bad(&nums)),
        }
    }
}
