//! Admitting several calls at once (a plan), and building permits from an admission.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use toolgate::config::OnStoreError;
use toolgate::{Call, Reason, Rejection};

use crate::permit::{Held, Op, RedisPermit, TokenHold};
use crate::plan::{denial, live, merge, plan, Step};
use toolgate::compile::CostOf;

use crate::quota::{Params, Quota, Tool};
use crate::script::Reply;
use crate::store::Gate;

// === impl Gate ===

impl Gate {
    /// The permits of admitted calls: `split[i]` is call i's steps (`None` tool: an
    /// unknown tool); `merged` the steps the script ran. `refundable` permits (the
    /// parts of a reservation) also keep what gives their charges back, for
    /// [`RedisPermit::cancel`].
    pub(crate) fn admitted(
        self: &Arc<Self>,
        tools: &[Option<Arc<Tool>>],
        split: &[(usize, &[Step])],
        merged: &[Step],
        id: &Arc<str>,
        reply: Reply,
        refundable: bool,
    ) -> Vec<Option<RedisPermit>> {
        let Reply::Admitted {
            at,
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
            if tool.is_none() {
                out.push(Some(RedisPermit::new(Held::Unaccounted, Duration::ZERO)));
                continue;
            }
            let mut leases = Vec::new();
            let mut tokens = Vec::new();
            let mut refunds = Vec::new();
            for s in steps
                .iter()
                .filter(|s| !s.quota.spec.is_shadow() || shadow_ok)
            {
                if s.cost == 0 {
                    continue;
                }
                // This call's members of a sorted set (leases, sliding entries): the
                // script numbers them 1.. across every call sharing the key.
                let mut members = || {
                    let m = merged.iter().position(|x| x.key == s.key).unwrap_or(0);
                    let from = next_member[m];
                    next_member[m] += s.cost;
                    Op::Members {
                        key: s.key.clone(),
                        id: id.clone(),
                        from,
                        to: from + s.cost - 1,
                    }
                };
                match s.quota.params {
                    Params::Concurrency { .. } => leases.push(members()),
                    Params::Sliding { .. } if refundable => refunds.push(members()),
                    Params::Sliding { .. } => {}
                    Params::Bucket { pq, pr, den, burst } if refundable => {
                        refunds.push(Op::Bucket {
                            key: s.key.clone(),
                            params: [pq, pr, den, burst],
                            delta: -i128::from(s.cost),
                            at: -1,
                            since: at,
                            // Each part keeps back the whole refill since the
                            // charge: never fuller, at the price of refunding less
                            // when several parts of one charge come back late.
                            charged: s.cost,
                        });
                    }
                    Params::Bucket { .. } => {}
                }
                if let (Params::Bucket { pq, pr, den, burst }, CostOf::Tokens) =
                    (s.quota.params, s.quota.spec.cost_of)
                {
                    tokens.push(TokenHold {
                        key: s.key.clone(),
                        params: [pq, pr, den, burst],
                        estimate: s.cost,
                    });
                }
            }
            let held = Held::Remote {
                gate: self.clone(),
                leases,
                tokens,
                refunds,
            };
            out.push(Some(RedisPermit::new(held, Duration::ZERO)));
        }
        out
    }

    pub(crate) async fn admit_all(
        self: &Arc<Self>,
        calls: &[Call<'_>],
    ) -> Result<Vec<RedisPermit>, Rejection> {
        let mut tools = Vec::with_capacity(calls.len());
        let mut plans = Vec::with_capacity(calls.len());
        for call in calls {
            match self.resolve(call)? {
                Some(tool) => {
                    plans.push(plan(&tool, call)?);
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
        if let Some(s) = merged.iter().find(|s| s.cost > s.quota.spec.capacity()) {
            let r = Rejection::new(
                name_of(&s.key),
                &*s.quota.spec.path,
                Reason::CostExceedsCapacity,
                None,
            );
            return Err(r);
        }
        let first = tools.iter().flatten().next().cloned();
        let Some(first) = first else {
            return Ok(calls
                .iter()
                .map(|_| RedisPermit::new(Held::Unaccounted, Duration::ZERO))
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
                    .admitted(&tools, &split, &merged, &id, reply, true)
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

    pub(crate) fn degraded_all(
        &self,
        first: &Tool,
        calls: &[Call<'_>],
    ) -> Result<Vec<RedisPermit>, Rejection> {
        match (self.on_error, &self.fallback) {
            (OnStoreError::FailOpen, _) => Ok(calls
                .iter()
                .map(|_| RedisPermit::new(Held::Unaccounted, Duration::ZERO))
                .collect()),
            (OnStoreError::Local, Some(engine)) => Ok(engine
                .try_admit_all(calls)?
                .into_iter()
                .map(|p| RedisPermit::new(Held::Local(p), Duration::ZERO))
                .collect()),
            _ => Err(Rejection::store_unavailable(first.name.clone())),
        }
    }
}

fn shadow_rejected(tools: &[Option<Arc<Tool>>], q: &Quota) {
    let tool = tools.iter().flatten().next().map_or("", |t| &*t.name);
    let reason = q.spec.reason();
    tracing::info!(tool, quota = &*q.spec.path, %reason, "shadow quota would have rejected");
    metrics::counter!(
        "toolgate_admissions_total",
        "tool" => tool.to_string(),
        "decision" => "shadow_rejected",
        "reason" => reason.as_str()
    )
    .increment(1);
}
