//! The pure half of compiling a policy: what the config says about one tool's
//! quotas, resolved into the ordered list every decision works from.
//!
//! Why one function: the engine builds its quota state from this list, and a shared
//! store (`toolgate-redis`) builds its plan from the same list, so the two cannot
//! disagree about which quotas a tool has, what they are called, what a call costs
//! on each, or which one a rejection names. No I/O, no clock, no state: the same
//! config always resolves to the same list.
//!
//! A tool's list is its own table's `rate`, `tokens` and `concurrency`, in that
//! order, then the same of each pool in the order of the tool's `pools` (a pool
//! named twice counts once). Defaults are applied (a burst is the rate's count
//! unless set; a table without `mode` has the config's), and each quota is named by
//! its config path, a name that needs quoting quoted as in config errors
//! (`tools."mcp:github/search".rate`). The order is the one the engine names
//! rejections in: of two quotas that refuse a call for equally long, the first in
//! the list is named.
//!
//! What the engine adds on top stays in the engine: an adaptive concurrency limit
//! (per process by nature) and, on a shared store, keeping only that limit locally.

use std::sync::Arc;

use crate::config::{join_path, Config, QuotaConfig};
use crate::vocab::{Call, Mode, Partition, Rate, Reason, Reserve, Window, DEFAULT_MAX_PARTITIONS};

pub use crate::vocab::CostOf;

/// One quota of a tool, resolved from its policy.
///
/// # Examples
///
/// ```
/// use toolgate::compile::{tool_quotas, CostOf, Limit};
/// use toolgate::config::Mode;
/// use toolgate::Policy;
///
/// let policy = Policy::from_toml_str(r#"
///     [pools.crm]
///     rate = "100/min"
///     mode = "shadow"
///
///     [tools.lookup_customer]
///     rate = "2/s"
///     tokens = "40000/min"
///     pools = ["crm"]
/// "#).unwrap();
/// let quotas = tool_quotas(&policy, "lookup_customer").unwrap();
/// let paths: Vec<&str> = quotas.iter().map(|q| &*q.path).collect();
/// assert_eq!(paths, ["tools.lookup_customer.rate", "tools.lookup_customer.tokens", "pools.crm.rate"]);
/// assert!(matches!(quotas[0].limit, Limit::Bucket { burst: 2, .. }));
/// assert_eq!(quotas[1].cost_of, CostOf::Tokens);
/// assert_eq!((quotas[2].mode, quotas[2].pool.as_deref()), (Mode::Shadow, Some("crm")));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct QuotaSpec {
    /// The config path rejections name, e.g. `tools.lookup_customer.rate` or
    /// `pools.crm.tokens`.
    pub path: Arc<str>,
    /// What it limits, with its parameters.
    pub limit: Limit,
    /// Which part of a call it is charged with.
    pub cost_of: CostOf,
    /// Enforced, or only observed.
    pub mode: Mode,
    /// Whether each tenant has an instance of its own.
    pub partition: Option<Partition>,
    /// Live tenant partitions kept at most in one process (when partitioned).
    pub max_partitions: usize,
    /// The pool it belongs to, or `None` for the tool's own table.
    pub pool: Option<Arc<str>>,
    /// The share of it kept for higher priority classes (its table's `reserve`).
    pub reserve: Reserve,
}

/// What a quota limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Limit {
    /// A token bucket (GCRA): at most `burst` at once, refilled at `rate`.
    Bucket {
        /// The refill rate (requests or tokens per period).
        rate: Rate,
        /// The capacity, at least 1.
        burst: u64,
    },
    /// An exact sliding window: at most `rate.count()` in any interval of
    /// `rate.period()`.
    Sliding {
        /// The window's limit and length.
        rate: Rate,
    },
    /// At most `limit` admitted calls in flight.
    Concurrency {
        /// The limit, at least 1.
        limit: u32,
    },
}

/// The quotas of `tool` in `config` (a [`crate::Policy`] derefs to its config), in
/// the order the engine evaluates them and names rejections in (see the module
/// doc); `None` when the tool has no policy. A validated config is expected: a pool
/// it does not define contributes nothing.
pub fn tool_quotas(config: &Config, tool: &str) -> Option<Vec<QuotaSpec>> {
    let t = config.tools.get(tool)?;
    let mut list = table(&join_path("tools", tool), &t.quota, config.mode, None);
    let mut seen: Vec<&String> = Vec::new();
    for pool in &t.pools {
        if !seen.contains(&pool) {
            seen.push(pool);
            list.extend(pool_quotas(config, pool));
        }
    }
    Some(list)
}

/// The quotas of pool `name` (empty when there is none): the part of
/// [`tool_quotas`] each tool drawing from it shares.
pub(crate) fn pool_quotas(config: &Config, name: &str) -> Vec<QuotaSpec> {
    let Some(q) = config.pools.get(name) else {
        return Vec::new();
    };
    table(&join_path("pools", name), q, config.mode, Some(name.into()))
}

/// The quotas of one tool or pool table: `rate`, `tokens`, `concurrency`.
fn table(prefix: &str, q: &QuotaConfig, mode: Mode, pool: Option<Arc<str>>) -> Vec<QuotaSpec> {
    let spec = |key: &str, limit: Limit, cost_of: CostOf| QuotaSpec {
        path: format!("{prefix}.{key}").into(),
        limit,
        cost_of,
        mode: q.mode.unwrap_or(mode),
        partition: q.partition,
        max_partitions: q.max_partitions.unwrap_or(DEFAULT_MAX_PARTITIONS),
        pool: pool.clone(),
        reserve: q.reserve,
    };
    let rate = q.rate.map(|rate| {
        let limit = match q.window {
            Window::Bucket => Limit::Bucket {
                rate,
                burst: q.burst.unwrap_or(rate.count()),
            },
            Window::Sliding => Limit::Sliding { rate },
        };
        spec("rate", limit, CostOf::Requests)
    });
    let tokens = q.tokens.map(|rate| {
        let burst = q.tokens_burst.unwrap_or(rate.count());
        spec("tokens", Limit::Bucket { rate, burst }, CostOf::Tokens)
    });
    let concurrency = q.concurrency.map(|limit| {
        spec(
            "concurrency",
            Limit::Concurrency { limit },
            CostOf::Requests,
        )
    });
    [rate, tokens, concurrency].into_iter().flatten().collect()
}

// === impl QuotaSpec ===

impl QuotaSpec {
    /// The reason a rejection by this quota gives when it has no room now.
    pub fn reason(&self) -> Reason {
        match (self.limit, self.cost_of) {
            (Limit::Concurrency { .. }, _) => Reason::ConcurrencyLimited,
            (_, CostOf::Tokens) => Reason::TokensLimited,
            _ => Reason::RateLimited,
        }
    }

    /// The most one admission can cost here: a call that costs more is rejected
    /// with `cost_exceeds_capacity`, never admitted.
    pub fn capacity(&self) -> u64 {
        match self.limit {
            Limit::Bucket { burst, .. } => burst,
            Limit::Sliding { rate } => rate.count(),
            Limit::Concurrency { limit } => u64::from(limit),
        }
    }

    /// Its kind as state snapshots name it: `rate`, `sliding`, `tokens` or
    /// `concurrency` ([`crate::QuotaState::kind`]).
    pub fn kind(&self) -> &'static str {
        match (self.limit, self.cost_of) {
            (Limit::Concurrency { .. }, _) => "concurrency",
            (_, CostOf::Tokens) => "tokens",
            (Limit::Sliding { .. }, _) => "sliding",
            _ => "rate",
        }
    }

    /// What `call` costs here: its request count, or its token estimate.
    pub fn cost(&self, call: &Call<'_>) -> u64 {
        match self.cost_of {
            CostOf::Requests => call.count,
            CostOf::Tokens => call.tokens,
        }
    }

    /// Whether it is only observed (`mode = "shadow"`), never enforced.
    pub fn is_shadow(&self) -> bool {
        self.mode == Mode::Shadow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(toml: &str) -> Config {
        Config::from_toml_str(toml).expect("valid config")
    }

    fn paths(c: &Config, tool: &str) -> Vec<String> {
        let list = tool_quotas(c, tool).expect("a tool");
        list.iter().map(|q| q.path.to_string()).collect()
    }

    #[test]
    fn a_tools_own_quotas_come_first_then_each_pool_once_in_its_order() {
        let c = config(
            r#"
            [pools.a]
            concurrency = 3
            rate = "5/s"
            [pools.b]
            tokens = "100/min"
            [tools.t]
            concurrency = 2
            tokens = "10/s"
            rate = "1/s"
            pools = ["b", "a", "b"]
            "#,
        );
        assert_eq!(
            paths(&c, "t"),
            [
                "tools.t.rate",
                "tools.t.tokens",
                "tools.t.concurrency",
                "pools.b.tokens",
                "pools.a.rate",
                "pools.a.concurrency",
            ]
        );
        let pools: Vec<Option<Arc<str>>> = tool_quotas(&c, "t")
            .expect("a tool")
            .into_iter()
            .map(|q| q.pool)
            .collect();
        let (a, b) = (Some(Arc::from("a")), Some(Arc::from("b")));
        assert_eq!(pools, [None, None, None, b, a.clone(), a]);
        assert_eq!(tool_quotas(&c, "nope"), None);
    }

    #[test]
    #[allow(
        clippy::too_many_lines,
        reason = "one config and the list of every quota it resolves to, read side by side"
    )]
    fn defaults_are_applied_and_each_quota_says_what_it_costs_and_why_it_refuses() {
        let c = config(
            r#"
            mode = "shadow"
            [tools.t]
            rate = "3/min"
            window = "sliding"
            tokens = "1000/min"
            tokens_burst = 200
            concurrency = 4
            partition = "tenant"
            max_partitions = 10
            [tools.u]
            rate = "2/s"
            mode = "enforce"
            "#,
        );
        let t = tool_quotas(&c, "t").expect("t");
        let per_second = |n| Rate::per_second(n).expect("a rate");
        assert_eq!(
            t.iter().map(|q| q.limit).collect::<Vec<_>>(),
            [
                Limit::Sliding {
                    rate: "3/min".parse().expect("a rate")
                },
                Limit::Bucket {
                    rate: "1000/min".parse().expect("a rate"),
                    burst: 200
                },
                Limit::Concurrency { limit: 4 },
            ]
        );
        assert!(t.iter().all(|q| q.is_shadow()
            && q.partition == Some(Partition::Tenant)
            && q.max_partitions == 10));
        assert_eq!(
            t.iter().map(QuotaSpec::reason).collect::<Vec<_>>(),
            [
                Reason::RateLimited,
                Reason::TokensLimited,
                Reason::ConcurrencyLimited
            ]
        );
        assert_eq!(
            t.iter().map(QuotaSpec::capacity).collect::<Vec<_>>(),
            [3, 200, 4]
        );
        let call = Call::new("t").count(2).tokens(150);
        assert_eq!(
            t.iter().map(|q| q.cost(&call)).collect::<Vec<_>>(),
            [2, 150, 2]
        );
        let u = tool_quotas(&c, "u").expect("u");
        assert_eq!(
            (u[0].limit, u[0].mode, u[0].partition, u[0].max_partitions),
            (
                Limit::Bucket {
                    rate: per_second(2),
                    burst: 2
                },
                Mode::Enforce,
                None,
                DEFAULT_MAX_PARTITIONS
            )
        );
    }

    #[test]
    fn a_name_that_needs_quoting_is_quoted_in_its_paths() {
        let c = config(
            r#"
            [pools."crm v2"]
            rate = "1/s"
            [tools."mcp:github/search"]
            rate = "1/s"
            pools = ["crm v2"]
            "#,
        );
        assert_eq!(
            paths(&c, "mcp:github/search"),
            [
                r#"tools."mcp:github/search".rate"#,
                r#"pools."crm v2".rate"#
            ]
        );
    }
}
