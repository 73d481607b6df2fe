//! The wire protocol of the Lua scripts: arguments in, replies out. Running them is
//! the link's (`link.rs`); what they mean, the plan's and the permit's.

use redis::{Script, ScriptInvocation};

use crate::error::StoreError;
use crate::op::Op;
use crate::plan::Step;
use crate::quota::Params;

/// The three scripts, loaded into Redis on first use (EVALSHA, then EVAL on
/// `NOSCRIPT`). Cheap to clone: a reload's gate keeps its predecessor's.
#[derive(Debug, Clone)]
pub(crate) struct Scripts {
    admit: Script,
    /// `admit.lua` specialised for one enforced bucket, now or never.
    admit_bucket: Script,
    release: Script,
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
        }
    }

    /// The admission of the `live` steps (those with a cost, at least one) at `now`
    /// (empty: Redis' clock; else Redis µs), waiting up to `max_wait_us` (< 0: now or
    /// never), for admission `id`, with leases that live `lease_ttl_us`.
    pub(crate) fn admit(
        &self,
        now: &str,
        live: &[&Step],
        id: &str,
        max_wait_us: i64,
        lease_ttl_us: u64,
    ) -> ScriptInvocation<'_> {
        // The common call — one enforced bucket, now or never — runs the specialised
        // script: the same arguments and replies, less work for Redis.
        let one_bucket = matches!(
            live,
            [s] if !s.quota.spec.is_shadow() && matches!(s.quota.params, Params::Bucket { .. })
        ) && max_wait_us < 0;
        let script = if one_bucket {
            &self.admit_bucket
        } else {
            &self.admit
        };
        let mut inv = script.prepare_invoke();
        inv.arg(now)
            .arg(max_wait_us)
            .arg(id)
            .arg(lease_ttl_us)
            .arg(live.len());
        for s in live {
            let [a, b, c, d] = s.quota.params.args();
            inv.key(&s.key)
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

    /// The release of `ops` at `now` (as for [`Scripts::admit`]).
    pub(crate) fn release(&self, now: &str, ops: &[Op]) -> ScriptInvocation<'_> {
        let mut inv = self.release.prepare_invoke();
        inv.arg(now).arg(ops.len());
        for op in ops {
            match op {
                Op::Members { key, id, from, to } => {
                    inv.key(key)
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
                    inv.key(key)
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
