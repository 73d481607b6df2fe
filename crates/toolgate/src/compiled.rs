//! A [`Policy`] compiled against an engine's state ([`Compiled`]): every tool as the
//! engine runs it ([`ToolRuntime`]) and every quota, by its path.
//!
//! Compiling turns every quota of the config into a [`Quota`] named by its config path
//! (`tools.x.rate`, `pools.crm.tokens`, …). On a reload, a quota whose definition did
//! not change is carried over as it is — state, waiters and all — and one whose
//! definition changed starts from a conversion of the old state that never grants
//! more than the old quota had left; a tool's counters, upstream signals, breaker,
//! adaptive limit and retry budget are carried over while their settings stay.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use hashbrown::HashMap;

use crate::adaptive::Adaptive;
use crate::circuit::Breaker;
use crate::clock::Nanos;
use crate::compile::{pool_quotas, tool_quotas, Limit, QuotaSpec};
use crate::config::{join_path, Config, ToolConfig};
use crate::fair::FairQueue;
use crate::names::NameMap;
use crate::observe::ToolStats;
use crate::policy::Policy;
use crate::quota::{Cell, CostOf, Kind, Quota, QuotaDef, Slot};
use crate::retry::RetryRuntime;
use crate::shared::Shared;
use crate::signals::TenantSignals;
use crate::tool::ToolRuntime;
use crate::upstream::Upstream;
use crate::vocab::{QuotaNames, UnknownTools, Window, DEFAULT_MAX_PARTITIONS};

/// A policy compiled against an engine's state.
#[derive(Debug)]
pub(crate) struct Compiled {
    pub(crate) policy: Policy,
    pub(crate) tools: NameMap<Arc<ToolRuntime>>,
    pub(crate) quotas: HashMap<Arc<str>, Arc<Quota>>,
    pub(crate) unknown: UnknownTools,
    pub(crate) unknown_stats: Arc<ToolStats>,
}

/// The quotas of a policy being compiled, each built once, by its path: a pool's is
/// shared by every tool that draws from it.
struct Quotas<'o> {
    built: HashMap<Arc<str>, Arc<Quota>>,
    old: Option<&'o Compiled>,
    now: Nanos,
}

// === impl Compiled ===

impl Compiled {
    /// Compiles `policy` against `shared` at `now`, carrying over the state of `old`
    /// (the policy in force before a reload).
    pub(crate) fn new(
        policy: Policy,
        shared: &Arc<Shared>,
        old: Option<&Compiled>,
        now: Nanos,
    ) -> Self {
        let mut quotas = Quotas {
            built: HashMap::new(),
            old,
            now,
        };
        let config = policy.config();
        let weights: Arc<std::collections::HashMap<Box<str>, u32>> = Arc::new(
            config
                .tenants
                .iter()
                .map(|(id, t)| (id.as_str().into(), t.weight))
                .collect(),
        );
        // On a shared store, the store keeps every quota; only an adaptive
        // concurrency limit (a per-process limit by nature) stays here.
        let on_store = shared.store.is_some();
        // Every pool first, used or not: a pool a reload leaves unused keeps its
        // state for the next.
        for name in config.pools.keys().filter(|_| !on_store) {
            pool_quotas(config, name).into_iter().for_each(|s| {
                quotas.build(s);
            });
        }
        let tools = config
            .tools
            .iter()
            .map(|(name, t)| {
                let old = old.and_then(|o| o.tools.get(name.as_str())).map(|t| &**t);
                let list = local_quotas(config, name, on_store)
                    .into_iter()
                    .map(|s| quotas.build(s))
                    .collect();
                let mut tool = compile_tool(name, t, list, shared, old);
                tool.fair = fair_queue(config, t, &weights, shared);
                if tool.fair.is_some() {
                    // The fast path cannot see parked calls between two turns.
                    tool.fast = None;
                }
                (name.as_str().into(), Arc::new(tool))
            })
            .collect();
        let unknown_stats = old
            .map(|o| o.unknown_stats.clone())
            .unwrap_or_else(|| Arc::new(ToolStats::new("_unknown".into())));
        Self {
            unknown: config.unknown_tools,
            policy,
            tools,
            quotas: quotas.built,
            unknown_stats,
        }
    }
}

// === impl Quotas ===

impl Quotas<'_> {
    /// The quota of `spec`: built once per path, carried over from the old policy
    /// (as it is, or converted when its definition changed).
    fn build(&mut self, spec: QuotaSpec) -> Arc<Quota> {
        if let Some(q) = self.built.get(&*spec.path) {
            return q.clone();
        }
        let def = quota_def(&spec);
        let q = match self.old.and_then(|o| o.quotas.get(&def.path)) {
            Some(p) if p.def == def => p.clone(),
            Some(p) => Arc::new(Quota::converted(def, p, self.now)),
            None => Arc::new(Quota::new(def, self.now)),
        };
        self.built.insert(spec.path, q.clone());
        q
    }
}

/// The runtime of tool `name` (config `t`) on its quotas `list`, carrying over from
/// `old` (its runtime before a reload) what outlives one policy.
fn compile_tool(
    name: &str,
    t: &ToolConfig,
    list: Vec<Arc<Quota>>,
    shared: &Arc<Shared>,
    old: Option<&ToolRuntime>,
) -> ToolRuntime {
    let prefix = join_path("tools", name);
    let stats = old.map_or_else(
        || Arc::new(ToolStats::new(name.into())),
        |o| o.stats.clone(),
    );
    // On a shared store the store decides: the synchronous fast path never applies.
    let fast = shared.store.is_none().then(|| fast_path(&list)).flatten();
    let adaptive = t.adaptive.as_ref().and_then(|cfg| {
        let quota = list
            .iter()
            .find(|q| {
                matches!(q.def.kind, Kind::Concurrency(_)) && q.def.path.starts_with(&*prefix)
            })?
            .clone();
        let a = old
            .and_then(|o| o.adaptive.as_ref())
            .filter(|(a, _)| a.config() == cfg)
            .map_or_else(
                || Arc::new(Adaptive::new(name, cfg.clone())),
                |(a, _)| a.clone(),
            );
        crate::adaptive::apply_limit(&quota, a.limit());
        Some((a, quota))
    });
    let breaker = t.circuit.as_ref().map(|cfg| {
        old.and_then(|o| o.breaker.clone())
            .filter(|b| b.config() == cfg)
            .unwrap_or_else(|| Arc::new(Breaker::new(stats.name.clone(), cfg.clone())))
    });
    let signals = old.map(|o| o.upstream.signals.clone());
    let upstream = Upstream::new(stats.clone(), (signals, tenant_signals(t, old)), &prefix);
    ToolRuntime {
        name: stats.name.clone(),
        lock_order: lock_order(&list),
        names: quota_names(&stats.name, &list),
        quotas: list,
        on_limit: t.on_limit,
        max_wait: t.max_wait,
        queue_limit: t.queue_limit,
        max_pause: t.max_pause,
        stats,
        signals: upstream.signals.clone(),
        upstream: Arc::new(upstream),
        shared: shared.clone(),
        fast,
        superseded: AtomicBool::new(false),
        fair: None,
        breaker,
        adaptive,
        circuit_path: format!("{prefix}.circuit").into(),
        idempotent: t.idempotent,
        retry: t
            .retry
            .as_ref()
            .map(|cfg| RetryRuntime::new(cfg, old.and_then(|o| o.retry.as_ref()))),
    }
}

/// The fair queue of a tool whose own table or a pool sets `fairness` or a reserve
/// (a new one per policy: the calls waiting in the old one take their turns there).
fn fair_queue(
    config: &Config,
    t: &ToolConfig,
    weights: &Arc<std::collections::HashMap<Box<str>, u32>>,
    shared: &Arc<Shared>,
) -> Option<Arc<FairQueue>> {
    let pools = t.pools.iter().filter_map(|p| config.pools.get(p));
    let by_tenant = t.quota.fairness.is_some() || pools.clone().any(|p| p.fairness.is_some());
    let reserved = !t.quota.reserve.is_empty() || pools.clone().any(|p| !p.reserve.is_empty());
    let in_tokens = t.quota.tokens.is_some() || pools.clone().any(|p| p.tokens.is_some());
    (by_tenant || reserved).then(|| {
        let clock = shared.clock.clone();
        Arc::new(FairQueue::new(by_tenant, in_tokens, weights.clone(), clock))
    })
}

/// The per-tenant signals of a tool whose own quotas are per tenant: the old
/// runtime's, with the new cap, while it was per tenant too.
fn tenant_signals(t: &ToolConfig, old: Option<&ToolRuntime>) -> Option<Arc<TenantSignals>> {
    t.quota.partition?;
    let cap = t.quota.max_partitions.unwrap_or(DEFAULT_MAX_PARTITIONS);
    match old.and_then(|o| o.upstream.tenant_signals.clone()) {
        Some(kept) => {
            kept.set_cap(cap);
            Some(kept)
        }
        None => Some(Arc::new(TenantSignals::new(cap))),
    }
}

/// The lock order of a tool's quotas, when none is partitioned.
fn lock_order(quotas: &[Arc<Quota>]) -> Option<Box<[usize]>> {
    let mut order = Vec::with_capacity(quotas.len());
    for (i, q) in quotas.iter().enumerate() {
        match &q.slot {
            Slot::Single(cell) => order.push((cell.order(), i)),
            Slot::Partitioned(_) => return None,
        }
    }
    order.sort_unstable();
    Some(order.into_iter().map(|(_, i)| i).collect())
}

/// The names each of a tool's quotas gives its rejections, made once per policy.
fn quota_names(tool: &Arc<str>, quotas: &[Arc<Quota>]) -> Box<[Arc<QuotaNames>]> {
    quotas
        .iter()
        .map(|q| {
            Arc::new(QuotaNames {
                tool: tool.clone(),
                quota: q.def.path.clone(),
            })
        })
        .collect()
}

/// The single bucket of a tool that has nothing else, for the fast path.
fn fast_path(quotas: &[Arc<Quota>]) -> Option<Arc<Cell>> {
    let [q] = quotas else {
        return None;
    };
    match (&q.slot, q.def.kind, q.def.cost_of, q.def.shadow) {
        (Slot::Single(cell), Kind::Bucket(_), CostOf::Requests, false) if cell.enable_fast() => {
            Some(cell.clone())
        }
        _ => None,
    }
}

/// The quotas this process keeps for tool `name`: its policy's (see
/// [`crate::compile`]), or none on a shared store, which keeps them all; and either
/// way, the concurrency quota an adaptive limit drives: its capacity is the
/// adaptive `max` (capped by a static `concurrency`), its current limit the learnt
/// one (on a shared store, the static limit is the store's and this one is
/// unpartitioned).
fn local_quotas(config: &Config, name: &str, shared: bool) -> Vec<QuotaSpec> {
    let mut list = match shared {
        true => Vec::new(),
        false => tool_quotas(config, name).unwrap_or_default(),
    };
    let Some(t) = config.tools.get(name) else {
        return list;
    };
    let Some(max) = t.adaptive.as_ref().map(|a| a.max) else {
        return list;
    };
    let limit = Limit::Concurrency {
        limit: t.quota.concurrency.map_or(max, |k| k.min(max)),
    };
    let own = |q: &QuotaSpec| q.pool.is_none() && matches!(q.limit, Limit::Concurrency { .. });
    if let Some(q) = list.iter_mut().find(|q| own(q)) {
        q.limit = limit;
        return list;
    }
    let at = list
        .iter()
        .position(|q| q.pool.is_some())
        .unwrap_or(list.len());
    let spec = QuotaSpec {
        path: format!("{}.concurrency", join_path("tools", name)).into(),
        limit,
        cost_of: CostOf::Requests,
        mode: t.quota.mode.unwrap_or(config.mode),
        partition: t.quota.partition.filter(|_| !shared),
        max_partitions: t.quota.max_partitions.unwrap_or(DEFAULT_MAX_PARTITIONS),
        pool: None,
        reserve: t.quota.reserve,
    };
    list.insert(at, spec);
    list
}

/// The engine's definition of a resolved quota.
fn quota_def(spec: &QuotaSpec) -> QuotaDef {
    let path = spec.path.clone();
    let def = match (spec.limit, spec.cost_of) {
        (Limit::Bucket { rate, burst }, CostOf::Tokens) => {
            QuotaDef::tokens(path, rate, Some(burst))
        }
        (Limit::Bucket { rate, burst }, CostOf::Requests) => {
            QuotaDef::rate(path, rate, Some(burst), Window::Bucket)
        }
        (Limit::Sliding { rate }, _) => QuotaDef::rate(path, rate, None, Window::Sliding),
        (Limit::Concurrency { limit }, _) => QuotaDef::concurrency(path, limit),
    };
    def.mode(spec.mode)
        .partitioned(spec.partition.is_some(), spec.max_partitions)
        .reserved(spec.reserve)
}
