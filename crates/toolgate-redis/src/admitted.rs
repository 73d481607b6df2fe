//! The permits of an admission: what each admitted call holds in Redis (its leases,
//! its token estimates and, for the parts of a reservation, what gives its charges
//! back), read from the steps the script ran.

use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use toolgate::compile::CostOf;

use crate::link::Link;
use crate::op::Op;
use crate::permit::{Held, RedisPermit, TokenHold};
use crate::plan::{live, Step};
use crate::quota::{Params, Quota, Tool};
use crate::script::Reply;

/// Numbers the members an admission added to sorted sets (leases, sliding entries):
/// the script numbers them `1..` per key, across every call sharing the key.
struct Members<'a> {
    /// The steps the script ran, one per key.
    merged: &'a [Step],
    id: &'a Arc<str>,
    /// The next member per merged key.
    next: SmallVec<[u64; 4]>,
}

/// What one admitted call holds, gathered step by step.
#[derive(Default)]
struct Holdings {
    leases: Vec<Op>,
    tokens: Vec<TokenHold>,
    refunds: Vec<Op>,
}

/// The permits of admitted calls, in order: `plans[i]` is call i's steps and
/// `tools[i]` its tool (`None`: an unknown tool, whose permit holds nothing);
/// `merged` the steps the script ran for admission `id`. `refundable` permits (the
/// parts of a reservation) also keep what gives their charges back, for
/// [`RedisPermit::cancel`]. Empty when `reply` is not an admission.
pub(crate) fn permits(
    link: &Arc<Link>,
    tools: &[Option<Arc<Tool>>],
    plans: &[&[Step]],
    merged: &[Step],
    id: &Arc<str>,
    reply: Reply,
    refundable: bool,
) -> Vec<RedisPermit> {
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
        shadow_rejected(tools, &live(merged)[shadow_blame - 1].quota);
    }
    let mut members = Members {
        merged,
        id,
        next: smallvec::smallvec![1; merged.len()],
    };
    let mut out = Vec::with_capacity(tools.len());
    for (tool, steps) in tools.iter().zip(plans) {
        if tool.is_none() {
            out.push(RedisPermit::new(Held::Unaccounted, Duration::ZERO));
            continue;
        }
        let mut held = Holdings::default();
        for s in steps
            .iter()
            .filter(|s| !s.quota.spec.is_shadow() || shadow_ok)
            .filter(|s| s.cost > 0)
        {
            held.add(s, &mut members, at, refundable);
        }
        out.push(RedisPermit::new(held.remote(link), Duration::ZERO));
    }
    out
}

// === impl Members ===

impl Members<'_> {
    /// The members of step `s` of one call, the next `s.cost` of its key.
    fn take(&mut self, s: &Step) -> Op {
        let m = self.merged.iter().position(|x| x.key == s.key).unwrap_or(0);
        let from = self.next[m];
        self.next[m] += s.cost;
        Op::Members {
            key: s.key.clone(),
            id: self.id.clone(),
            from,
            to: from + s.cost - 1,
        }
    }
}

// === impl Holdings ===

impl Holdings {
    /// Adds what step `s`, admitted at `at` (Redis µs), leaves to give back.
    fn add(&mut self, s: &Step, members: &mut Members<'_>, at: i64, refundable: bool) {
        match s.quota.params {
            Params::Concurrency { .. } => self.leases.push(members.take(s)),
            Params::Sliding { .. } if refundable => self.refunds.push(members.take(s)),
            Params::Sliding { .. } => {}
            Params::Bucket { pq, pr, den, burst } if refundable => {
                self.refunds.push(Op::Bucket {
                    key: s.key.clone(),
                    params: [pq, pr, den, burst],
                    delta: -i128::from(s.cost),
                    at: -1,
                    since: at,
                    // Each part keeps back the whole refill since the charge: never
                    // fuller, at the price of refunding less when several parts of
                    // one charge come back late.
                    charged: s.cost,
                });
            }
            Params::Bucket { .. } => {}
        }
        if let (Params::Bucket { pq, pr, den, burst }, CostOf::Tokens) =
            (s.quota.params, s.quota.spec.cost_of)
        {
            self.tokens.push(TokenHold {
                key: s.key.clone(),
                params: [pq, pr, den, burst],
                estimate: s.cost,
            });
        }
    }

    /// What the permit holds, given back through `link`.
    fn remote(self, link: &Arc<Link>) -> Held {
        Held::Remote {
            link: link.clone(),
            leases: self.leases,
            tokens: self.tokens,
            refunds: self.refunds,
        }
    }
}

/// Logs and counts a shadow quota that would have refused the admission.
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
