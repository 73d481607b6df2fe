//! A validated [`Config`] ([`Policy`]) and its compiled, runnable form.
//!
//! Compiling turns every quota of the config into a [`Quota`] named by its config path
//! (`tools.x.rate`, `pools.crm.tokens`, …). On a reload, a quota whose definition did
//! not change is carried over as it is — state, waiters and all — and one whose
//! definition changed starts from a conversion of the old state that never grants
//! more than the old quota had left.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use hashbrown::HashMap;

use crate::clock::Nanos;
use crate::compile::{pool_quotas, tool_quotas, Limit, QuotaSpec};
use crate::config::{Config, ConfigErrors, ToolConfig};
use crate::engine::Core;
use crate::observe::ToolStats;
use crate::quota::{CostOf, Kind, Quota, QuotaDef, Slot};
use crate::vocab::{OnLimit, UnknownTools, Window, DEFAULT_MAX_PARTITIONS};

/// A validated config, ready to run.
///
/// # Examples
///
/// ```
/// use toolgate::Policy;
///
/// let policy = Policy::from_toml_str("[tools.lookup_customer]\nrate = \"2/s\"").unwrap();
/// assert!(policy.tools.contains_key("lookup_customer"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Policy(Config);

/// A policy compiled against an engine's state.
#[derive(Debug)]
pub(crate) struct Compiled {
    pub(crate) policy: Policy,
    pub(crate) tools: HashMap<Box<str>, Arc<ToolRuntime>>,
    pub(crate) quotas: HashMap<Arc<str>, Arc<Quota>>,
    pub(crate) unknown: UnknownTools,
    pub(crate) unknown_stats: Arc<ToolStats>,
}

/// A tool as the engine runs it.
#[derive(Debug)]
pub(crate) struct ToolRuntime {
    pub(crate) name: Arc<str>,
    /// The tool's own quotas, then those of its pools.
    pub(crate) quotas: Vec<Arc<Quota>>,
    pub(crate) on_limit: OnLimit,
    pub(crate) max_wait: Duration,
    pub(crate) queue_limit: usize,
    /// The longest pause or spreading window an upstream's signals impose.
    pub(crate) max_pause: Duration,
    pub(crate) stats: Arc<ToolStats>,
    /// On a tool whose own quotas are per tenant (`partition = "tenant"`), each
    /// tenant's pause and spreading (the whole tool's are in `stats`, unused then);
    /// kept across reloads while the tool stays per tenant.
    pub(crate) tenant_signals: Option<Arc<crate::signals::TenantSignals>>,
    pub(crate) core: Arc<Core>,
    /// Set when the tool is governed by exactly one unpartitioned, enforced request
    /// bucket that has the one-word form: admission then takes the lock-free fast
    /// path (one compare-and-swap).
    pub(crate) fast: Option<Arc<crate::quota::Cell>>,
    /// Set by the reload that replaced this runtime: closes the fast path of
    /// [`crate::ToolHandle`]s still holding it, which then re-resolve the tool
    /// (checked on the fast path instead of the engine's generation, which lies a
    /// pointer further away).
    pub(crate) superseded: std::sync::atomic::AtomicBool,
    /// The indices of `quotas` in lock order, when none is partitioned (their cells
    /// are then fixed): a call's plan is built in that order without sorting.
    pub(crate) lock_order: Option<Box<[usize]>>,
    /// The tool's circuit breaker, kept across reloads while its config is unchanged.
    pub(crate) breaker: Option<Arc<crate::circuit::Breaker>>,
    /// The tool's adaptive concurrency limit and the quota it drives.
    pub(crate) adaptive: Option<(Arc<crate::adaptive::Adaptive>, Arc<Quota>)>,
    /// `tools.<name>.circuit`, the quota path of circuit rejections.
    pub(crate) circuit_path: Arc<str>,
    /// `tools.<name>.retry_after`, the quota path of rejections during an upstream's
    /// `Retry-After` pause.
    pub(crate) pause_path: Arc<str>,
    /// `tools.<name>.server_limit`, the quota path of rejections while the
    /// upstream's low remaining capacity is spread over its reset window.
    pub(crate) spread_path: Arc<str>,
    /// `idempotent = true`: the tool's calls may be retried without a key.
    pub(crate) idempotent: bool,
    /// `[tools.<name>.retry]` and the tool's retry budget, kept across reloads while
    /// the budget's settings are unchanged.
    pub(crate) retry: Option<crate::pipeline::RetryRuntime>,
}

// === impl Policy ===

impl Policy {
    /// Validates `config`.
    ///
    /// # Errors
    ///
    /// Every rule the config breaks, each with its path.
    pub fn new(config: Config) -> Result<Self, ConfigErrors> {
        config.validate()?;
        Ok(Self(config))
    }

    /// Parses and validates a TOML policy.
    ///
    /// # Errors
    ///
    /// As [`Config::from_toml_str`].
    pub fn from_toml_str(s: &str) -> Result<Self, ConfigErrors> {
        Config::from_toml_str(s).map(Self)
    }

    /// Parses and validates a JSON policy.
    ///
    /// # Errors
    ///
    /// As [`Config::from_json_str`].
    pub fn from_json_str(s: &str) -> Result<Self, ConfigErrors> {
        Config::from_json_str(s).map(Self)
    }

    /// The config.
    pub fn config(&self) -> &Config {
        &self.0
    }
}

impl Deref for Policy {
    type Target = Config;

    fn deref(&self) -> &Config {
        &self.0
    }
}

impl TryFrom<Config> for Policy {
    type Error = ConfigErrors;

    fn try_from(config: Config) -> Result<Self, ConfigErrors> {
        Self::new(config)
    }
}

// === impl Compiled ===

impl Compiled {
    pub(crate) fn new(
        policy: Policy,
        core: &Arc<Core>,
        old: Option<&Compiled>,
        now: Nanos,
    ) -> Self {
        let mut quotas: HashMap<Arc<str>, Arc<Quota>> = HashMap::new();
        let config = policy.config();
        // Each quota is built once, by its path: a pool's is shared by every tool
        // that draws from it.
        let mut build = |spec: QuotaSpec| -> Arc<Quota> {
            if let Some(q) = quotas.get(&*spec.path) {
                return q.clone();
            }
            let def = quota_def(&spec);
            let q = match old.and_then(|o| o.quotas.get(&def.path)) {
                Some(p) if p.def == def => p.clone(),
                Some(p) => Arc::new(Quota::converted(def, p, now)),
                None => Arc::new(Quota::new(def, now)),
            };
            quotas.insert(spec.path, q.clone());
            q
        };
        // On a shared store, the store keeps every quota; only an adaptive
        // concurrency limit (a per-process limit by nature) stays here.
        let shared = core.store.is_some();
        // Every pool first, used or not: a pool a reload leaves unused keeps its
        // state for the next.
        for name in config.pools.keys().filter(|_| !shared) {
            pool_quotas(config, name).into_iter().for_each(|s| {
                build(s);
            });
        }
        let stats_of = |name: &str| -> Arc<ToolStats> {
            old.and_then(|o| o.tools.get(name).map(|t| t.stats.clone()))
                .unwrap_or_else(|| Arc::new(ToolStats::new(name.into())))
        };
        let mut tools = HashMap::new();
        for (name, t) in &config.tools {
            let prefix = crate::config::join_path("tools", name);
            let list: Vec<Arc<Quota>> = local_quotas(config, name, shared)
                .into_iter()
                .map(&mut build)
                .collect();
            let stats = stats_of(name);
            // On a shared store the store decides: the synchronous fast path never applies.
            let fast = core.store.is_none().then(|| fast_path(&list)).flatten();
            let adaptive = t.adaptive.as_ref().and_then(|cfg| {
                let quota = list
                    .iter()
                    .find(|q| {
                        matches!(q.def.kind, Kind::Concurrency(_))
                            && q.def.path.starts_with(&*prefix)
                    })?
                    .clone();
                let a = old
                    .and_then(|o| o.tools.get(name.as_str()))
                    .and_then(|o| o.adaptive.as_ref())
                    .filter(|(a, _)| a.config() == cfg)
                    .map_or_else(
                        || Arc::new(crate::adaptive::Adaptive::new(name, cfg.clone())),
                        |(a, _)| a.clone(),
                    );
                crate::adaptive::apply_limit(&quota, a.limit());
                Some((a, quota))
            });
            let breaker = t.circuit.as_ref().map(|cfg| {
                old.and_then(|o| o.tools.get(name.as_str()))
                    .and_then(|o| o.breaker.clone())
                    .filter(|b| b.config() == cfg)
                    .unwrap_or_else(|| {
                        Arc::new(crate::circuit::Breaker::new(
                            stats.name.clone(),
                            cfg.clone(),
                        ))
                    })
            });
            let tenant_signals = tenant_signals(t, old.and_then(|o| o.tools.get(name.as_str())));
            let retry = t.retry.as_ref().map(|cfg| {
                crate::pipeline::RetryRuntime::new(
                    cfg,
                    old.and_then(|o| o.tools.get(name.as_str()))
                        .and_then(|o| o.retry.as_ref()),
                )
            });
            tools.insert(
                name.as_str().into(),
                Arc::new(ToolRuntime {
                    name: stats.name.clone(),
                    lock_order: lock_order(&list),
                    quotas: list,
                    on_limit: t.on_limit,
                    max_wait: t.max_wait,
                    queue_limit: t.queue_limit,
                    max_pause: t.max_pause,
                    stats,
                    tenant_signals,
                    core: core.clone(),
                    fast,
                    superseded: std::sync::atomic::AtomicBool::new(false),
                    breaker,
                    adaptive,
                    circuit_path: format!("{prefix}.circuit").into(),
                    pause_path: format!("{prefix}.retry_after").into(),
                    spread_path: format!("{prefix}.server_limit").into(),
                    idempotent: t.idempotent,
                    retry,
                }),
            );
        }
        let unknown_stats = old
            .map(|o| o.unknown_stats.clone())
            .unwrap_or_else(|| Arc::new(ToolStats::new("_unknown".into())));
        let unknown = config.unknown_tools;
        Self {
            unknown,
            policy,
            tools,
            quotas,
            unknown_stats,
        }
    }
}

/// The per-tenant signals of a tool whose own quotas are per tenant: the old
/// runtime's, with the new cap, while it was per tenant too.
fn tenant_signals(
    t: &ToolConfig,
    old: Option<&Arc<ToolRuntime>>,
) -> Option<Arc<crate::signals::TenantSignals>> {
    t.quota.partition?;
    let cap = t.quota.max_partitions.unwrap_or(DEFAULT_MAX_PARTITIONS);
    match old.and_then(|o| o.tenant_signals.clone()) {
        Some(kept) => {
            kept.set_cap(cap);
            Some(kept)
        }
        None => Some(Arc::new(crate::signals::TenantSignals::new(cap))),
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

/// The single bucket of a tool that has nothing else, for the fast path.
fn fast_path(quotas: &[Arc<Quota>]) -> Option<Arc<crate::quota::Cell>> {
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
        path: format!("{}.concurrency", crate::config::join_path("tools", name)).into(),
        limit,
        cost_of: CostOf::Requests,
        mode: t.quota.mode.unwrap_or(config.mode),
        partition: t.quota.partition.filter(|_| !shared),
        max_partitions: t.quota.max_partitions.unwrap_or(DEFAULT_MAX_PARTITIONS),
        pool: None,
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
}
