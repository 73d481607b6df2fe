//! Builders shared by the benchmark scenarios.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::Bencher;

use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};
use toolgate::{Engine, ManualClock, Policy};

/// Names the implementations the way the report reads them.
pub(crate) const TOOLGATE: &str = "toolgate";
pub(crate) const GOVERNOR: &str = "governor";

/// A toolgate engine that always admits `tool` (huge rate and burst, frozen clock).
pub(crate) fn engine(toml: &str) -> Engine {
    open_engine(toml).0
}

/// [`engine`], with its frozen clock, for [`iter_refilled`] to move on.
pub(crate) fn open_engine(toml: &str) -> (Engine, ManualClock) {
    let clock = ManualClock::new();
    let engine = Engine::with_clock(
        Policy::from_toml_str(toml).unwrap(),
        Arc::new(clock.clone()),
    );
    (engine, clock)
}

/// How far [`iter_refilled`]'s `refill` should move a frozen clock: a second, which
/// fills the open buckets here (4e9 a second, a burst of 4e9) again.
pub(crate) const REFILL: Duration = Duration::from_secs(1);

/// Times `routine` as criterion's `Bencher::iter` does, after `refill` (outside the
/// time measured) before each sample. An open bucket on a frozen clock still holds
/// only its burst, 4e9 decisions, and the rows of a group on one engine, at a few
/// nanoseconds each for criterion's default 3 s of warm-up and 5 s of samples, spent
/// it on a 2-vCPU EPYC (the group then panicked on a refusal); a sample never makes
/// that many calls.
#[allow(
    clippy::disallowed_methods,
    reason = "a benchmark measures real elapsed time"
)]
pub(crate) fn iter_refilled<R>(
    b: &mut Bencher<'_>,
    refill: impl Fn(),
    mut routine: impl FnMut() -> R,
) {
    b.iter_custom(|iters| {
        refill();
        let start = Instant::now();
        for _ in 0..iters {
            black_box(routine());
        }
        start.elapsed()
    });
}

/// Runs `op` `iters` times split over two threads (both cores); returns the wall time
/// of the slower thread, so that criterion (which divides by `iters`, the calls of
/// both threads together) reports the wall time per call of the whole machine.
#[allow(
    clippy::disallowed_methods,
    reason = "a benchmark measures real elapsed time"
)]
pub(crate) fn on_two_threads(iters: u64, op: &(dyn Fn() + Sync)) -> Duration {
    let start = Barrier::new(2);
    let per = iters.div_ceil(2);
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    let t0 = Instant::now();
                    for _ in 0..per {
                        op();
                    }
                    t0.elapsed()
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .max()
            .unwrap()
    })
}

/// An always-open bucket, a closed circuit breaker and retries configured (so the
/// pipeline arms its deadline): the realistic shape of a resilient tool, as
/// `Engine::run` is measured on it.
pub(crate) const PIPELINE_TOOL: &str = r#"
[tools.t]
rate = "4000000000/s"
burst = 4000000000
idempotent = true
[tools.t.circuit]
[tools.t.retry]
"#;

/// Polls a future that is ready at once (a ready attempt's run), with a no-op waker.
pub(crate) fn poll_once<F: std::future::Future>(f: F) -> F::Output {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::pin!(f).poll(&mut cx) {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => panic!("a ready future was pending"),
    }
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
