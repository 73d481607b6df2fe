//! The policy config: TOML, JSON or Rust values, validated into a [`Config`].
//!
//! Every invalid value is reported with its path and the rule it breaks, every problem
//! at once, and unknown keys are errors. The same structure is read from TOML
//! ([`Config::from_toml_str`]), JSON ([`Config::from_json_str`]) and any
//! `serde_json::Value` ([`Config::from_value`], used by the Python package for dicts),
//! or built in Rust and checked with [`Config::validate`].
//!
//! # Examples
//!
//! ```
//! use toolgate::config::Config;
//!
//! let config = Config::from_toml_str(r#"
//!     [pools.crm]
//!     rate = "100/min"
//!     burst = 20
//!
//!     [tools.lookup_customer]
//!     rate = "2/s"
//!     burst = 2
//!     pools = ["crm"]
//! "#).unwrap();
//! assert_eq!(config.tools["lookup_customer"].quota.burst, Some(2));
//!
//! let err = Config::from_toml_str("[tools.x]\nrate = \"0/s\"\nbrust = 2").unwrap_err();
//! assert_eq!(err.to_string(), "tools.x.brust: unknown key (expected one of: adaptive, burst, \
//!     circuit, concurrency, fairness, idempotent, max_partitions, max_pause, max_wait, mode, on_limit, \
//!     partition, pools, queue_limit, rate, reserve, retry, tokens, tokens_burst, upstream, window)\n\
//!     tools.x.rate: \"0/s\": the request count must be at least 1");
//! ```

mod bounds;
mod error;
mod fairness;
mod parse;
mod resilience;
mod section;

use std::collections::BTreeMap;
use std::time::Duration;

pub use crate::vocab::{
    Fairness, Mode, OnLimit, Partition, Rate, Reserve, UnknownTools, Window,
    DEFAULT_MAX_PARTITIONS, DEFAULT_MAX_PAUSE, MAX_COUNT, MAX_PAUSE_LIMIT, MAX_WAIT_LIMIT,
};
pub use error::{ConfigError, ConfigErrors};
pub use fairness::{TenantConfig, MAX_WEIGHT};
pub use resilience::{
    AdaptiveAlgorithm, AdaptiveConfig, CircuitConfig, CircuitWindow, OnDegraded, OnStoreError,
    RetryConfig, StoreConfig, UpstreamConfig, MAX_RESPONSE_BYTES,
};

use crate::vocab::format_duration;

/// A validated policy config.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct Config {
    /// What to do with calls to tools that have no policy.
    pub unknown_tools: UnknownTools,
    /// Whether decisions are enforced or only observed, for the whole config.
    pub mode: Mode,
    /// Named quotas that several tools draw from.
    pub pools: BTreeMap<String, QuotaConfig>,
    /// Per-tool policies, with `[defaults]` already applied.
    pub tools: BTreeMap<String, ToolConfig>,
    /// Where quota state lives (`None`: in memory).
    pub store: Option<StoreConfig>,
    /// Per-tenant settings (`[tenants.ID]`): the weight of each under fairness.
    pub tenants: BTreeMap<String, TenantConfig>,
}

/// The quota keys shared by tools and pools.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct QuotaConfig {
    /// Requests per period.
    pub rate: Option<Rate>,
    /// Bucket capacity for `rate` (default: the rate's count).
    pub burst: Option<u64>,
    /// `bucket` (default) or an exact `sliding` window for `rate`.
    pub window: Window,
    /// A token budget charged with each call's declared token cost.
    pub tokens: Option<Rate>,
    /// Bucket capacity for `tokens` (default: the budget's count).
    pub tokens_burst: Option<u64>,
    /// At most this many admitted calls in flight.
    pub concurrency: Option<u32>,
    /// A separate instance of every quota here per tenant.
    pub partition: Option<Partition>,
    /// Enforce or only observe (default: inherited from the config).
    pub mode: Option<Mode>,
    /// Live tenant partitions kept at most (default [`DEFAULT_MAX_PARTITIONS`]).
    pub max_partitions: Option<usize>,
    /// How waiting calls share these quotas across tenants (default: FIFO).
    pub fairness: Option<Fairness>,
    /// The share of these quotas kept for higher priority classes.
    pub reserve: Reserve,
}

/// A tool's policy.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct ToolConfig {
    /// The tool's own quotas.
    pub quota: QuotaConfig,
    /// Pools the tool also draws from.
    pub pools: Vec<String>,
    /// Fail fast or wait when a quota has no room.
    pub on_limit: OnLimit,
    /// The longest predicted wait accepted in wait mode (default 1 s).
    pub max_wait: Duration,
    /// Waiters per tool at most (default 1024).
    pub queue_limit: usize,
    /// The longest pause or spreading window an upstream's signals can impose on the
    /// tool (default [`DEFAULT_MAX_PAUSE`], at most [`MAX_PAUSE_LIMIT`]): longer
    /// `Retry-After` values and rate-limit resets are cut to it.
    pub max_pause: Duration,
    /// Whether the tool may be retried without an idempotency key.
    pub idempotent: bool,
    /// Circuit breaker settings.
    pub circuit: Option<CircuitConfig>,
    /// Retry settings.
    pub retry: Option<RetryConfig>,
    /// Adaptive concurrency settings.
    pub adaptive: Option<AdaptiveConfig>,
    /// Where the gateway sends the call when it executes it itself.
    pub upstream: Option<UpstreamConfig>,
}

// === impl Config ===

impl Config {
    /// Parses and validates a TOML config.
    ///
    /// # Errors
    ///
    /// Every syntax error, unknown key and invalid value, each with its path.
    pub fn from_toml_str(s: &str) -> Result<Self, ConfigErrors> {
        let value: toml::Value =
            toml::from_str(s).map_err(|e| ConfigError::new("", format!("invalid TOML: {e}")))?;
        let json = serde_json::to_value(value)
            .map_err(|e| ConfigError::new("", format!("invalid TOML: {e}")))?;
        Self::from_value(&json)
    }

    /// Parses and validates a JSON config.
    ///
    /// # Errors
    ///
    /// As [`Config::from_toml_str`].
    pub fn from_json_str(s: &str) -> Result<Self, ConfigErrors> {
        let json: serde_json::Value = serde_json::from_str(s)
            .map_err(|e| ConfigError::new("", format!("invalid JSON: {e}")))?;
        Self::from_value(&json)
    }

    /// Reads and validates a config file, TOML unless its name ends in `.json`.
    ///
    /// # Errors
    ///
    /// When the file cannot be read, and as [`Config::from_toml_str`].
    pub fn from_path(path: &std::path::Path) -> Result<Self, ConfigErrors> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new("", format!("cannot read {}: {e}", path.display())))?;
        if path.extension().is_some_and(|e| e == "json") {
            Self::from_json_str(&text)
        } else {
            Self::from_toml_str(&text)
        }
    }

    /// Validates a config given as a JSON-like value tree.
    ///
    /// # Errors
    ///
    /// As [`Config::from_toml_str`].
    pub fn from_value(value: &serde_json::Value) -> Result<Self, ConfigErrors> {
        let mut errors = Vec::new();
        let config = parse::config(value, &mut errors);
        if let Some(c) = &config {
            c.check(&mut errors);
        }
        ConfigErrors::check(errors)?;
        config.ok_or_else(|| ConfigError::new("", "invalid config").into())
    }

    /// Adds (or replaces) a tool.
    pub fn tool(mut self, name: impl Into<String>, tool: ToolConfig) -> Self {
        self.tools.insert(name.into(), tool);
        self
    }

    /// Adds (or replaces) a pool.
    pub fn pool(mut self, name: impl Into<String>, pool: QuotaConfig) -> Self {
        self.pools.insert(name.into(), pool);
        self
    }

    /// Sets what happens to unknown tools.
    pub fn unknown_tools(mut self, unknown: UnknownTools) -> Self {
        self.unknown_tools = unknown;
        self
    }

    /// Sets the mode of the whole config.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Checks the rules that span several values (pool references, bursts against
    /// rates, bounded waits) for a config built in Rust.
    ///
    /// # Errors
    ///
    /// Every rule broken, each with its path.
    pub fn validate(&self) -> Result<(), ConfigErrors> {
        let mut errors = Vec::new();
        self.check(&mut errors);
        ConfigErrors::check(errors)
    }

    fn check(&self, errors: &mut Vec<ConfigError>) {
        for (name, pool) in &self.pools {
            pool.check(&section::join("pools", name), errors);
        }
        fairness::check_tenants(&self.tenants, errors);
        for (name, tool) in &self.tools {
            let path = section::join("tools", name);
            if name.is_empty() {
                errors.push(ConfigError::new("tools", "a tool name must not be empty"));
            }
            tool.quota.check(&path, errors);
            tool.check(&path, &self.pools, errors);
        }
    }
}

// === impl QuotaConfig ===

impl QuotaConfig {
    /// No quotas.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the request rate.
    pub fn rate(mut self, rate: Rate) -> Self {
        self.rate = Some(rate);
        self
    }

    /// Sets the bucket capacity.
    pub fn burst(mut self, burst: u64) -> Self {
        self.burst = Some(burst);
        self
    }

    /// Uses an exact sliding window for `rate`.
    pub fn sliding(mut self) -> Self {
        self.window = Window::Sliding;
        self
    }

    /// Sets a token budget.
    pub fn tokens(mut self, tokens: Rate) -> Self {
        self.tokens = Some(tokens);
        self
    }

    /// Sets the token budget's capacity.
    pub fn tokens_burst(mut self, burst: u64) -> Self {
        self.tokens_burst = Some(burst);
        self
    }

    /// Sets a concurrency limit.
    pub fn concurrency(mut self, limit: u32) -> Self {
        self.concurrency = Some(limit);
        self
    }

    /// Partitions every quota here per tenant.
    pub fn per_tenant(mut self) -> Self {
        self.partition = Some(Partition::Tenant);
        self
    }

    /// Sets the mode of these quotas.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Sets the cap on live tenant partitions.
    pub fn max_partitions(mut self, max: usize) -> Self {
        self.max_partitions = Some(max);
        self
    }

    /// Serves waiters by weighted round robin over tenants.
    pub fn fair(mut self) -> Self {
        self.fairness = Some(Fairness::Tenant);
        self
    }

    /// Keeps a share of these quotas for higher priority classes.
    pub fn reserve(mut self, reserve: Reserve) -> Self {
        self.reserve = reserve;
        self
    }

    /// Whether any quota is defined.
    pub fn is_empty(&self) -> bool {
        self.rate.is_none() && self.tokens.is_none() && self.concurrency.is_none()
    }

    fn check(&self, path: &str, errors: &mut Vec<ConfigError>) {
        let mut err = |key: &str, msg: String| {
            errors.push(ConfigError::new(section::join(path, key), msg));
        };
        if let Some(b) = self.burst {
            if self.rate.is_none() {
                err("burst", "burst needs a rate".into());
            } else if b == 0 {
                err("burst", "0: must be at least 1".into());
            } else if b > MAX_COUNT {
                err("burst", format!("{b}: must be at most {MAX_COUNT}"));
            }
        }
        if self.window == Window::Sliding && self.rate.is_none() {
            err("window", "\"sliding\" needs a rate".into());
        }
        if let Some(b) = self.tokens_burst {
            if self.tokens.is_none() {
                err("tokens_burst", "tokens_burst needs tokens".into());
            } else if b == 0 {
                err("tokens_burst", "0: must be at least 1".into());
            } else if b > MAX_COUNT {
                err("tokens_burst", format!("{b}: must be at most {MAX_COUNT}"));
            }
        }
        if self.concurrency == Some(0) {
            err("concurrency", "0: must be at least 1".into());
        }
        if self.max_partitions == Some(0) {
            err("max_partitions", "0: must be at least 1".into());
        }
        fairness::check_quota(self, &mut err);
    }
}

// === impl ToolConfig ===

impl ToolConfig {
    /// A tool with no quotas, rejecting fast, with the documented defaults.
    pub fn new() -> Self {
        Self {
            max_wait: Duration::from_secs(1),
            queue_limit: 1024,
            max_pause: DEFAULT_MAX_PAUSE,
            ..Self::default()
        }
    }

    /// A tool with these quotas.
    pub fn with_quota(quota: QuotaConfig) -> Self {
        Self {
            quota,
            ..Self::new()
        }
    }

    /// Draws also from pool `name`.
    pub fn pool(mut self, name: impl Into<String>) -> Self {
        self.pools.push(name.into());
        self
    }

    /// Waits up to `max_wait` in FIFO order instead of failing fast.
    pub fn wait(mut self, max_wait: Duration) -> Self {
        self.on_limit = OnLimit::Wait;
        self.max_wait = max_wait;
        self
    }

    /// Sets the waiter cap.
    pub fn queue_limit(mut self, limit: usize) -> Self {
        self.queue_limit = limit;
        self
    }

    /// Marks the tool idempotent.
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// Sets the longest pause an upstream's signals can impose on the tool.
    pub fn max_pause(mut self, max_pause: Duration) -> Self {
        self.max_pause = max_pause;
        self
    }

    fn check(
        &self,
        path: &str,
        pools: &BTreeMap<String, QuotaConfig>,
        errors: &mut Vec<ConfigError>,
    ) {
        for (i, pool) in self.pools.iter().enumerate() {
            if !pools.contains_key(pool) {
                errors.push(ConfigError::new(
                    format!("{path}.pools[{i}]"),
                    format!("{pool:?}: no such pool"),
                ));
            }
        }
        if self.max_wait > MAX_WAIT_LIMIT {
            errors.push(ConfigError::new(
                section::join(path, "max_wait"),
                format!(
                    "{:?}: must be at most {} (waits must be bounded)",
                    format_duration(self.max_wait),
                    format_duration(MAX_WAIT_LIMIT)
                ),
            ));
        }
        if self.queue_limit == 0 {
            errors.push(ConfigError::new(
                section::join(path, "queue_limit"),
                "0: must be at least 1",
            ));
        }
        if let Err(msg) = bounds::max_pause(self.max_pause, &format_duration(self.max_pause)) {
            errors.push(ConfigError::new(section::join(path, "max_pause"), msg));
        }
    }
}

/// Joins a config path and a key the way error messages write it.
pub(crate) fn join_path(path: &str, key: &str) -> String {
    section::join(path, key)
}
