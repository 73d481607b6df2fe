//! The wire protocol of the Lua scripts: arguments in, replies out.

use std::sync::Arc;

use crate::error::StoreError;
use crate::permit::Op;
use crate::plan::{live, Step};
use crate::quota::Params;
use crate::store::Gate;

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

// === impl Gate ===

impl Gate {
    /// The script's time argument: Redis' clock unless a test clock is set.
    pub(crate) fn now_arg(&self) -> String {
        self.clock
            .as_ref()
            .map(|c| (c.now() / 1000).to_string())
            .unwrap_or_default()
    }

    pub(crate) async fn run_admit(
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
        // The common call — one enforced bucket, now or never — runs the specialised
        // script: the same arguments and replies, less work for Redis.
        let one_bucket = matches!(
            live.as_slice(),
            [s] if !s.quota.spec.is_shadow() && matches!(s.quota.params, Params::Bucket { .. })
        ) && max_wait_us < 0;
        let script = if one_bucket {
            &self.admit_bucket_script
        } else {
            &self.admit_script
        };
        let mut inv = script.prepare_invoke();
        inv.arg(self.now_arg())
            .arg(max_wait_us)
            .arg(id)
            .arg(self.lease_ttl.micros())
            .arg(live.len());
        for s in &live {
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
}

pub(crate) fn parse_reply(value: redis::Value, n: usize) -> Result<Reply, StoreError> {
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
