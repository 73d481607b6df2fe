//! Where quota state lives: the `--store` URL (or `[store] url`).
//!
//! `memory` keeps quotas in this process. `redis://…` keeps them in Redis
//! (crate `toolgate-redis`), so every gateway on the same Redis and key prefix
//! obeys one quota; the rest of `[store]` (key prefix, timeout, `on_store_error`,
//! `local_share`, `local_grant`) applies.

use std::time::Duration;

use toolgate::config::StoreConfig;
use toolgate::{Engine, Policy};

use crate::settings::Settings;

/// How much longer than the gateway's longest lease a store keeps a lease that
/// nothing releases: the gateway's reaper (every 20 ms) and its release round trip
/// (bounded by `[store] timeout`) fit in it many times over, even on a loaded host,
/// so a live gateway's lease never ends in the store before it ends in the gateway.
pub const STORE_LEASE_MARGIN: Duration = Duration::from_secs(5);

/// A parsed store choice.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Store {
    /// Quota state in this process.
    Memory,
    /// Quota state in Redis, shared by every gateway on it.
    Redis(StoreConfig),
}

/// A store URL or connection that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError(pub String);

// === impl Store ===

impl Store {
    /// Parses `memory` or `redis://…`; `section` is the config's `[store]` table,
    /// whose other keys apply to a Redis URL given on the command line too.
    ///
    /// # Errors
    ///
    /// For any other scheme.
    pub fn parse(url: &str, section: Option<&StoreConfig>) -> Result<Self, StoreError> {
        match url {
            "memory" | "memory://" => Ok(Self::Memory),
            u if u.starts_with("redis://") || u.starts_with("rediss://") => {
                let mut cfg = section
                    .cloned()
                    .unwrap_or_else(|| StoreConfig::new(u.to_string()));
                cfg.url = u.to_string();
                Ok(Self::Redis(cfg))
            }
            other => Err(StoreError(format!(
                "store {:?}: unknown store (expected memory or redis://host:port)",
                redact(other)
            ))),
        }
    }

    /// Builds the engine on this store (connecting to Redis lazily: a gateway
    /// starts while Redis is down, and calls then follow `on_store_error`).
    ///
    /// # Errors
    ///
    /// When the Redis URL or options are unusable, or a quota cannot be computed
    /// exactly in Redis.
    pub async fn engine(&self, policy: Policy) -> Result<Engine, StoreError> {
        self.engine_for(policy, Vec::new()).await
    }

    /// As [`Store::engine`], for an engine called from each of `runtimes` (the
    /// gateway's connections' runtimes): on Redis, each gets a connection and a
    /// coalescing of admissions of its own ([`toolgate_redis::Builder::lanes`]).
    ///
    /// # Errors
    ///
    /// As [`Store::engine`].
    pub async fn engine_for(
        &self,
        policy: Policy,
        runtimes: Vec<tokio::runtime::Handle>,
    ) -> Result<Engine, StoreError> {
        match self {
            Self::Memory => Ok(Engine::new(policy)),
            Self::Redis(cfg) => toolgate_redis::Builder::new(policy, cfg.clone())
                .lanes(runtimes)
                .engine()
                .await
                .map_err(|e| StoreError(format!("store {:?}: {e}", redact(&cfg.url)))),
        }
    }

    /// What to show in logs: the scheme and host, never a password.
    pub fn describe(&self) -> String {
        match self {
            Self::Memory => "memory".into(),
            Self::Redis(cfg) => redact(&cfg.url),
        }
    }
}

/// How long the store keeps a lease that nothing releases (its gateway died): the
/// longest lease this gateway hands out, plus [`STORE_LEASE_MARGIN`]. A live gateway
/// releases each lease itself when it is completed or expires; this is the backstop
/// for a replica that is gone, whose slots come back after it.
pub fn store_lease_ttl(settings: &Settings) -> Duration {
    settings
        .limits
        .reservation_ttl_cap(settings.lease_ttl)
        .saturating_add(STORE_LEASE_MARGIN)
}

/// Puts the store lease TTL of `settings` in force in `engine`'s shared store (the
/// Redis store; the memory store's leases live in this process): at start and on
/// every reload, for leases admitted from then on.
pub fn keep_leases(engine: &Engine, settings: &Settings) {
    if let Some(store) = engine.store() {
        store.set_lease_ttl(store_lease_ttl(settings));
    }
}

/// Hides a password in a URL such as `redis://:secret@host`.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***@{}", &url[..s], &url[at + 1..]),
        _ => url.to_string(),
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StoreError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_and_redis_urls_parse_and_others_are_refused() {
        assert_eq!(Store::parse("memory", None), Ok(Store::Memory));
        let Ok(Store::Redis(cfg)) = Store::parse("redis://:pw@127.0.0.1:6379", None) else {
            panic!("a redis store");
        };
        assert_eq!(cfg.key_prefix, "toolgate:");
        let e = Store::parse("postgres://:pw@h/db", None).expect_err("unknown");
        assert!(e.0.contains("unknown store"), "{e}");
        assert!(!e.0.contains("pw"), "{e}");
        let r = Store::parse("redis://:pw@h:1", None).expect("redis");
        assert_eq!(r.describe(), "redis://***@h:1");
    }

    #[test]
    fn a_command_line_url_keeps_the_other_store_keys_of_the_config() {
        let mut section = StoreConfig::new("redis://a:1");
        section.key_prefix = "team:".into();
        let Ok(Store::Redis(cfg)) = Store::parse("redis://b:2", Some(&section)) else {
            panic!("a redis store");
        };
        assert_eq!(
            (cfg.url.as_str(), cfg.key_prefix.as_str()),
            ("redis://b:2", "team:")
        );
    }

    #[test]
    fn store_leases_outlive_the_longest_lease_the_gateway_hands_out() {
        let l = crate::settings::Loaded::from_toml_str("[gateway]\nlease_ttl = \"30s\"\n")
            .expect("valid");
        assert_eq!(store_lease_ttl(&l.settings), Duration::from_secs(35));
        let l = crate::settings::Loaded::from_toml_str(
            "[gateway]\nlease_ttl = \"30s\"\nmax_reservation_ttl = \"10m\"\n",
        )
        .expect("valid");
        assert_eq!(store_lease_ttl(&l.settings), Duration::from_secs(605));
    }
}
