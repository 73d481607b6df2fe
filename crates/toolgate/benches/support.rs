//! Builders shared by the benchmark scenarios.

use std::num::NonZeroU32;
use std::sync::Arc;

use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};
use toolgate::{Engine, ManualClock, Policy};

/// Names the implementations the way the report reads them.
pub(crate) const TOOLGATE: &str = "toolgate";
pub(crate) const GOVERNOR: &str = "governor";

/// A toolgate engine that always admits `tool` (huge rate and burst, frozen clock).
pub(crate) fn engine(toml: &str) -> Engine {
    Engine::with_clock(
        Policy::from_toml_str(toml).unwrap(),
        Arc::new(ManualClock::new()),
    )
}

pub(crate) const OPEN_BUCKET: &str = "[tools.t]\nrate = \"4000000000/s\"\nburst = 4000000000";

/// One tool under four quotas, all always open: its own rate, a pool's rate, a token
/// budget and a concurrency limit.
pub(crate) const FOUR_QUOTAS: &str = r#"
[pools.crm]
rate = "4000000000/s"
burst = 4000000000

[tools.t]
rate = "4000000000/s"
burst = 4000000000
tokens = "4000000000/s"
tokens_burst = 4000000000
concurrency = 64
pools = ["crm"]
"#;

pub(crate) type Direct = RateLimiter<
    governor::state::NotKeyed,
    governor::state::InMemoryState,
    FakeRelativeClock,
    governor::middleware::NoOpMiddleware<governor::nanos::Nanos>,
>;

/// governor's direct limiter on the same open quota.
pub(crate) fn governor_direct() -> Direct {
    let n = NonZeroU32::new(4_000_000_000).unwrap();
    RateLimiter::direct_with_clock(
        Quota::per_second(n).allow_burst(n),
        FakeRelativeClock::default(),
    )
}

/// governor's direct limiter of one call an hour, spent: every `check()` says when
/// to retry. With the clock it reads that time from.
pub(crate) fn governor_spent() -> (Direct, FakeRelativeClock) {
    let clock = FakeRelativeClock::default();
    let one = NonZeroU32::new(1).unwrap();
    let gov = RateLimiter::direct_with_clock(Quota::per_hour(one), clock.clone());
    gov.check().unwrap();
    (gov, clock)
}

/// A toolgate tool of one call an hour, spent: every call is refused with its
/// `retry_after`.
pub(crate) const SPENT_BUCKET: &str = "[tools.t]\nrate = \"1/h\"\nburst = 1";

pub(crate) type Keyed = RateLimiter<
    String,
    governor::state::keyed::DefaultKeyedStateStore<String>,
    FakeRelativeClock,
    governor::middleware::NoOpMiddleware<governor::nanos::Nanos>,
>;

/// governor's keyed limiter (its DashMap store) on the same open quota per key.
pub(crate) fn governor_keyed() -> Keyed {
    let n = NonZeroU32::new(4_000_000_000).unwrap();
    RateLimiter::dashmap_with_clock(
        Quota::per_second(n).allow_burst(n),
        FakeRelativeClock::default(),
    )
}

/// `n` distinct tenant ids, `tenant-000000` on.
pub(crate) fn tenant_keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("tenant-{i:06}")).collect()
}
