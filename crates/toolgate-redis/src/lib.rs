//! Shared toolgate quotas on Redis: one quota obeyed by many processes and machines.
//!
//! [`RedisGate`] is the Redis twin of [`toolgate::Engine`]: the same policy, the same
//! [`toolgate::Call`], the same [`toolgate::Rejection`] values, but the quota state
//! lives in Redis, so every process sharing the Redis (and key prefix) shares the
//! quotas. Each admission is one round trip running one Lua script that checks and
//! charges every quota of the call all-or-nothing, on Redis' clock.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use toolgate::config::Config;
//! use toolgate::{Call, Completion, Policy};
//! use toolgate_redis::RedisGate;
//!
//! let config = Config::from_toml_str(r#"
//!     [store]
//!     url = "redis://127.0.0.1:6379"
//!     on_store_error = "local"
//!
//!     [tools.lookup_customer]
//!     rate = "2/s"
//!     concurrency = 4
//! "#)?;
//! let store = config.store.clone().expect("a [store] section");
//! let gate = RedisGate::connect(Policy::new(config)?, &store).await?;
//! let permit = gate.try_admit(&Call::new("lookup_customer")).await?;
//! // … run the tool …
//! permit.complete(Completion::success()).await?;
//! # Ok(()) }
//! ```
//!
//! Most users want a [`toolgate::Engine`] whose quotas live in Redis instead:
//! [`engine`] (or [`Builder::engine`]) builds one on a [`RedisStore`], the core's
//! [`toolgate::store::QuotaStore`] seam; it is what `toolgate serve --store redis://…`
//! and the Python package's `store="redis://…"` run.
//!
//! `docs/redis.md` in the repository describes the key layout, the script, Redis
//! Cluster, failure modes and what is (and is not) guaranteed across processes.

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

mod batch;
mod conn;
mod engine_store;
mod error;
mod fallback;
mod grant;
mod ids;
mod keys;
mod lease;
mod permit;
mod plan;
mod quota;
mod script;
mod store;
mod wait;

pub use engine_store::{engine, RedisStore};
pub use error::StoreError;
pub use lease::{DEFAULT_LEASE_TTL, MAX_LEASE_TTL, MIN_LEASE_TTL};
pub use permit::{RedisPermit, Source};
pub use store::{Builder, RedisGate};
