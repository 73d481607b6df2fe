//! Integration tests of the Redis store against real `redis-server` processes that
//! the tests start on free ports (never a shared server).
//!
//! Without `redis-server` these tests fail with a clear message; set
//! `TOOLGATE_SKIP_REDIS=1` to skip them locally.

#![allow(unreachable_pub)]
#![allow(
    clippy::disallowed_methods,
    reason = "tests against real Redis servers bound and measure real time"
)]

mod backend;
mod semantic;
mod support;

/// The same suite on a `toolgate::Engine` whose store is Redis, one server per
/// test: the crate's one front door, which the gateway and the Python package use.
mod engine_on_redis {
    crate::semantic_suite!(crate::backend::RedisFactory::local());
}

mod cluster;
mod coalesce;
mod expiry;
mod fairness;
mod faults;
mod grant;
mod lanes;
mod multiproc;
mod redis_only;

/// The suite on the in-memory engine: the reference the Redis runs must equal.
mod memory {
    crate::semantic_suite!(Some(crate::backend::MemoryFactory));
}
