//! Shared toolgate quotas on Redis: one quota obeyed by many processes and machines.
//!
//! The crate has one front door: a [`toolgate::Engine`] whose quotas live in Redis
//! ([`engine`], or [`Builder`] for options). It is the engine of the core — the same
//! policy, [`toolgate::Call`], [`toolgate::Permit`] and [`toolgate::Rejection`]
//! values, the same verbs — but the quota state lives in Redis, so every process
//! sharing the Redis (and key prefix) shares the quotas. Each admission is one round
//! trip running one Lua script that checks and charges every quota of the call
//! all-or-nothing, on Redis' clock. It is what `toolgate serve --store redis://…` and
//! the Python package's `store="redis://…"` run.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use toolgate::config::Config;
//! use toolgate::{Call, Completion, Policy};
//! use toolgate_redis::Source;
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
//! let engine = toolgate_redis::engine(Policy::new(config)?, &store).await?;
//! let permit = engine.admit_now(&Call::new("lookup_customer")).await?;
//! assert_eq!(Source::of(&permit), Some(Source::Redis)); // or Local while Redis is away
//! // … run the tool …
//! permit.complete(Completion::success()); // the release runs in the background
//! # Ok(()) }
//! ```
//!
//! The store plans each call from the quotas the core resolves
//! ([`toolgate::compile::tool_quotas`]); what is its own is the key layout, the
//! scripts' arguments and the checks that Lua's doubles hold every number exactly.
//! `docs/redis.md` in the repository describes the key layout, the script, Redis
//! Cluster, failure modes and what is (and is not) guaranteed across processes.

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

// The modules import one way (`scripts/check-layers` fails on an import circle), in
// five layers, lowest first; a module imports only from the layers below its own and
// from the modules before it in its layer:
//
// 1. `error`, `ids`, `lease`, `keys`, `conn`: the words (errors, admission ids, lease
//    TTLs, the key layout) and the connection;
// 2. `quota`, `op`, `plan`: the policy as Redis runs it (the compiled quotas, what is
//    given back to Redis, a call's plan);
// 3. `script`, `link`: Redis as a gate sees it (the scripts' wire protocol, and the
//    link that runs them: connection, scripts, ids, lease TTL, clock, health);
// 4. `permit`, `fallback`, `admitted`, `grant`, `wait`, `batch`: what an admission
//    hands out, and the parts of a gate, each of which takes the link, not the gate;
// 5. `gate`, `engine_store`: the gate that composes the parts, and the engine's
//    store on it, the one front door.
mod admitted;
mod batch;
mod coalesce;
mod conn;
mod engine_store;
mod error;
mod fallback;
mod gate;
mod grant;
mod ids;
mod keys;
mod latency;
mod lease;
mod link;
#[cfg(doctest)]
mod must_use;
mod op;
mod permit;
mod plan;
mod quota;
mod script;
mod wait;

pub use engine_store::{engine, Builder, RedisStore};
pub use error::StoreError;
pub use lease::{DEFAULT_LEASE_TTL, MAX_LEASE_TTL, MIN_LEASE_TTL};
pub use permit::Source;
