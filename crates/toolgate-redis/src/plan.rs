//! The plan of a call: the keys of its quotas with their costs, and how the script's
//! answers map back to the core's [`Rejection`] values.

use std::sync::Arc;

use smallvec::SmallVec;
use std::time::Duration;

use toolgate::{Call, Reason, Rejection};

use crate::keys::partition_key;
use crate::op::Op;
use crate::quota::{Params, Quota, Tool};

/// One quota of a call, with its key and cost.
#[derive(Debug, Clone)]
pub(crate) struct Step {
    pub(crate) quota: Arc<Quota>,
    pub(crate) key: Arc<str>,
    pub(crate) cost: u64,
}

/// The quotas of `call` on `tool`, with keys and costs.
pub(crate) fn plan(tool: &Tool, call: &Call<'_>) -> Result<Vec<Step>, Rejection> {
    let mut steps = Vec::with_capacity(tool.quotas.len());
    for q in &tool.quotas {
        let cost = q.spec.cost(call);
        if cost > q.spec.capacity() {
            return Err(Rejection::new(
                &*tool.name,
                &*q.spec.path,
                Reason::CostExceedsCapacity,
                None,
            ));
        }
        let key = match q.spec.partition {
            Some(_) => partition_key(&q.key, call.tenant_id().unwrap_or("")).into(),
            None => q.key.clone(),
        };
        steps.push(Step {
            quota: q.clone(),
            key,
            cost,
        });
    }
    Ok(steps)
}

/// The steps the script runs: those with a cost (inline up to four: a call's
/// quotas are few).
pub(crate) fn live(steps: &[Step]) -> SmallVec<[&Step; 4]> {
    steps.iter().filter(|s| s.cost > 0).collect()
}

/// One step per key, costs summed.
pub(crate) fn merge(plans: &[Vec<Step>]) -> Vec<Step> {
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
pub(crate) fn reservation_ops(steps: &[Step], id: &Arc<str>, at: i64, shadow_ok: bool) -> Vec<Op> {
    live(steps)
        .into_iter()
        .filter(|s| !s.quota.spec.is_shadow() || shadow_ok)
        .map(|s| match s.quota.params {
            Params::Bucket { pq, pr, den, burst } => Op::Bucket {
                key: s.key.clone(),
                params: [pq, pr, den, burst],
                delta: -i128::from(s.cost),
                at,
                since: at,
                charged: s.cost,
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

/// The rejection the script's denial `code` on `quota` means.
pub(crate) fn denial(tool: &Arc<str>, quota: &Quota, code: i64, retry_us: i64) -> Rejection {
    let retry = Some(Duration::from_micros(u64::try_from(retry_us).unwrap_or(0)));
    let (reason, retry) = match code {
        2 => (Reason::ConcurrencyLimited, None),
        3 => (Reason::MaxWaitExceeded, retry),
        _ => (quota.spec.reason(), retry),
    };
    Rejection::new(tool.clone(), &*quota.spec.path, reason, retry)
}
