//! Read-only snapshots of live state, for dashboards and state endpoints.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::clock::Nanos;
use crate::compile::QuotaSpec;
use crate::live::Live;
use crate::quota::{Cell, CostOf, Instance, Kind, Quota, Slot};
use crate::store::Level;
use crate::tool::ToolRuntime;
use crate::vocab::{Mode, OnLimit};

/// The live state of one tool.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolState {
    /// The tool's name.
    pub tool: String,
    /// Fail fast or wait.
    pub on_limit: OnLimit,
    /// Each quota governing the tool: its own, then its pools'.
    pub quotas: Vec<QuotaState>,
    /// Admitted calls not yet completed.
    pub in_flight: u64,
    /// Calls waiting for admission.
    pub waiting: usize,
    /// Calls admitted since the engine started.
    pub admitted: u64,
    /// Calls rejected since the engine started.
    pub rejected: u64,
    /// Calls shadow quotas would have rejected.
    pub shadow_rejected: u64,
    /// The circuit breaker's state, if the tool has one.
    pub circuit: Option<crate::CircuitState>,
    /// The current adaptive concurrency limit, if the tool has one.
    pub adaptive_limit: Option<u64>,
}

/// The live state of one quota (of one partition when a tenant was given).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QuotaState {
    /// Its config path, e.g. `pools.crm.rate`.
    pub quota: String,
    /// `rate`, `sliding`, `tokens` or `concurrency`.
    pub kind: &'static str,
    /// Burst, window limit, token capacity or concurrency limit.
    pub capacity: u64,
    /// What is left now (`None` for a partitioned quota asked without a tenant).
    pub available: Option<u64>,
    /// Reservations and concurrency waiters queued on it.
    pub waiters: usize,
    /// Live partitions, for a partitioned quota.
    pub partitions: Option<usize>,
    /// Enforced or shadow.
    pub mode: Mode,
}

/// The state of `tool` (of `tenant`'s partitions, when given), or `None` for a tool
/// without a policy (see [`crate::Engine::tool_state`]).
pub(crate) fn tool_state(live: &Live, tool: &str, tenant: Option<&str>) -> Option<ToolState> {
    let t = live.tool(tool).ok()?;
    Some(snapshot(&t, tenant, live.shared.clock.now()))
}

/// What quota `quota` of `tool` has left now (see [`crate::Engine::available`]).
pub(crate) fn available(live: &Live, tool: &str, quota: &str, tenant: Option<&str>) -> Option<u64> {
    // Found as a call by name finds it.
    let t = live.tool(tool).ok()?;
    available_in(&t, quota, tenant, live.shared.clock.now())
}

/// What quota `quota` of `t` has left at `now` (see [`crate::Permit::available`]).
pub(crate) fn available_in(
    t: &ToolRuntime,
    quota: &str,
    tenant: Option<&str>,
    now: Nanos,
) -> Option<u64> {
    let q = t.quotas.iter().find(|q| &*q.def.path == quota)?;
    match (&q.slot, tenant) {
        (Slot::Single(cell), _) => Some(cell.available(&q.def, now)),
        // An unseen tenant has a fresh, full partition.
        (Slot::Partitioned(p), Some(key)) => {
            Some(p.available(key, &q.def, now).unwrap_or(q.def.capacity()))
        }
        (Slot::Partitioned(_), None) => None,
    }
}

/// Evicts every idle tenant partition now (see [`crate::Engine::sweep_partitions`]).
pub(crate) fn sweep_partitions(live: &Live) {
    let compiled = live.compiled();
    let now = live.shared.clock.now();
    for q in compiled.quotas.values() {
        if let Slot::Partitioned(p) = &q.slot {
            p.sweep(&q.def, now);
        }
    }
}

/// The state of every tool with a policy, sorted by name.
pub(crate) fn tool_states(live: &Live) -> Vec<ToolState> {
    let compiled = live.compiled();
    let now = live.shared.clock.now();
    let mut all: Vec<ToolState> = compiled
        .tools
        .values()
        .map(|t| snapshot(t, None, now))
        .collect();
    all.sort_by(|a, b| a.tool.cmp(&b.tool));
    all
}

fn snapshot(t: &ToolRuntime, tenant: Option<&str>, now: u64) -> ToolState {
    let quotas = t
        .quotas
        .iter()
        .map(|q| {
            let def = &q.def;
            let kind = match (def.kind, def.cost_of) {
                (Kind::Concurrency(_), _) => "concurrency",
                (_, CostOf::Tokens) => "tokens",
                (Kind::Sliding(_), _) => "sliding",
                _ => "rate",
            };
            let partitions = match &q.slot {
                Slot::Single(_) => None,
                Slot::Partitioned(p) => Some(p.len()),
            };
            let cell = cell_of(q, tenant);
            let (available, waiters, capacity) = match &cell {
                Some(c) => {
                    let mut g = c.lock();
                    g.settle(def, now);
                    let cap = match &g.limiter {
                        crate::quota::Limiter::Concurrency { limit, .. } => *limit,
                        _ => def.capacity(),
                    };
                    (Some(g.limiter.available(def, now)), g.waiters(now), cap)
                }
                // An unseen tenant has a fresh, full partition.
                None if tenant.is_some() => (Some(def.capacity()), 0, def.capacity()),
                None => (None, 0, def.capacity()),
            };
            QuotaState {
                quota: def.path.to_string(),
                kind,
                capacity,
                available,
                waiters,
                partitions,
                mode: if def.shadow {
                    Mode::Shadow
                } else {
                    Mode::Enforce
                },
            }
        })
        .collect();
    ToolState {
        tool: t.name.to_string(),
        on_limit: t.on_limit,
        quotas,
        in_flight: t.stats.calls.in_flight(),
        waiting: t.stats.waiting.load(Ordering::Relaxed),
        admitted: t.stats.calls.admitted(),
        rejected: t.stats.rejected.load(Ordering::Relaxed),
        shadow_rejected: t.stats.shadow_rejected.load(Ordering::Relaxed),
        circuit: t.breaker.as_ref().map(|b| b.state()),
        adaptive_limit: t.adaptive.as_ref().map(|(a, _)| a.limit()),
    }
}

/// `state` with its quotas as a shared store keeps them: each of `specs` (the
/// tool's quotas as the policy resolves them, its own then its pools'), with the
/// figure `levels` gives it (`None` without one), then the quotas the engine keeps
/// itself whose path the store does not have (an adaptive concurrency limit). The
/// store's partitions and waiters are not counted here: `partitions` and `waiters`
/// are `None` and 0.
pub(crate) fn with_levels(
    mut state: ToolState,
    specs: &[QuotaSpec],
    levels: &[Level],
) -> ToolState {
    let mut quotas: Vec<QuotaState> = specs
        .iter()
        .map(|spec| QuotaState {
            quota: spec.path.to_string(),
            kind: spec.kind(),
            capacity: spec.capacity(),
            available: levels
                .iter()
                .find(|l| l.quota == spec.path)
                .map(|l| l.available.min(spec.capacity())),
            waiters: 0,
            partitions: None,
            mode: spec.mode,
        })
        .collect();
    let own = std::mem::take(&mut state.quotas);
    quotas.extend(
        own.into_iter()
            .filter(|q| specs.iter().all(|s| *s.path != *q.quota)),
    );
    state.quotas = quotas;
    state
}

/// The cell of `q` that `tenant`'s calls use, if it exists yet (a partition is
/// created by the tenant's first call).
fn cell_of(q: &Quota, tenant: Option<&str>) -> Option<Arc<Cell>> {
    match &q.slot {
        Slot::Single(c) => Some(c.clone()),
        Slot::Partitioned(p) => tenant.and_then(|k| p.peek(k)),
    }
}
