//! Integration tests of the Redis store against real `redis-server` processes that
//! the tests start on free ports (never a shared server).
//!
//! Without `redis-server` these tests fail with a clear message; set
//! `TOOLGATE_SKIP_REDIS=1` to skip them locally.

#![allow(unreachable_pub)]

mod backend;
mod semantic;
mod support;

/// The same suite on a `toolgate::Engine` whose store is Redis (the seam the
/// gateway and the Python package use).
mod engine_on_redis {
    crate::semantic_suite!(crate::backend::EngineOnRedisFactory::local();
        burst_then_exact_refill,
        sliding_window_is_exact,
        tokens_are_reconciled,
        concurrency_is_released,
        pools_are_shared,
        tenants_have_their_own_partitions,
        a_denied_call_charges_nothing,
        a_cost_above_capacity_is_rejected_at_once,
        shadow_quotas_never_reject,
        unknown_tools_are_allowed_or_denied,
        waiters_sleep_until_their_reserved_time,
        a_cancelled_waiter_gives_its_time_back,
    );
}

mod cluster;
mod expiry;
mod faults;
mod grant;
mod multiproc;
mod redis_only;

/// The suite on the in-memory engine: the reference the Redis runs must equal.
mod memory {
    crate::semantic_suite!(Some(crate::backend::MemoryFactory);
        burst_then_exact_refill,
        sliding_window_is_exact,
        tokens_are_reconciled,
        concurrency_is_released,
        pools_are_shared,
        tenants_have_their_own_partitions,
        a_denied_call_charges_nothing,
        a_cost_above_capacity_is_rejected_at_once,
        shadow_quotas_never_reject,
        unknown_tools_are_allowed_or_denied,
        waiters_sleep_until_their_reserved_time,
        a_cancelled_waiter_gives_its_time_back,
    );
}

/// The same suite on one Redis server per test.
mod redis {
    crate::semantic_suite!(crate::backend::RedisFactory::local();
        burst_then_exact_refill,
        sliding_window_is_exact,
        tokens_are_reconciled,
        concurrency_is_released,
        pools_are_shared,
        tenants_have_their_own_partitions,
        a_denied_call_charges_nothing,
        a_cost_above_capacity_is_rejected_at_once,
        shadow_quotas_never_reject,
        unknown_tools_are_allowed_or_denied,
        waiters_sleep_until_their_reserved_time,
        a_cancelled_waiter_gives_its_time_back,
    );
}
