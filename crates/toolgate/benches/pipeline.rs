//! The overhead of the retry pipeline (`Engine::run`) on a call that needs no retry,
//! next to bare admission (`try_admit` + `complete`) and next to a tower
//! `ConcurrencyLimit` + `RateLimit` stack, in the same run. Every side runs a
//! trivially ready "tool", polled once with a no-op waker, so only the machinery is
//! measured. `pipeline_2_threads` runs the two toolgate rows on both cores at once,
//! on the one tool: what they write to the tool's shared state (its bucket, its
//! breaker, the count of its references) is then written from two cores. Run:
//! `cargo bench -p toolgate --bench pipeline`.

#![allow(clippy::unwrap_used, missing_docs)]

use std::future::{ready, Future};
use std::hint::black_box;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use toolgate::{AttemptResult, Call, Completion, Engine, ManualClock, Policy, RunOptions};
use tower::{Service, ServiceBuilder};

#[path = "support.rs"]
#[allow(dead_code)]
mod support;

use support::on_two_threads;

/// An always-open bucket, a closed circuit breaker and retries configured (so the
/// pipeline arms its deadline): the realistic shape of a resilient tool.
const TOOL: &str = r#"
[tools.t]
rate = "4000000000/s"
burst = 4000000000
idempotent = true
[tools.t.circuit]
[tools.t.retry]
"#;

fn poll_once<F: Future>(f: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(f).poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("a ready future was pending"),
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("pipeline_no_retry");
    let engine = Engine::with_clock(
        Policy::from_toml_str(TOOL).unwrap(),
        Arc::new(ManualClock::new()),
    );
    let call = Call::new("t");
    g.bench_function(BenchmarkId::new("try_admit+complete", "toolgate"), |b| {
        b.iter(|| {
            let permit = engine.try_admit(black_box(&call)).unwrap();
            permit.complete(Completion::success().latency(Duration::ZERO));
        });
    });
    g.bench_function(BenchmarkId::new("run", "toolgate"), |b| {
        b.iter(|| {
            let out = poll_once(engine.run(black_box(&call), RunOptions::new(), |ctx| {
                ready(AttemptResult::<u32, ()>::success(ctx.number()))
            }));
            black_box(out.unwrap().value)
        });
    });
    // tower's limits need a runtime for RateLimit's timer.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let mut svc = ServiceBuilder::new()
        .concurrency_limit(1 << 20)
        .rate_limit(u64::MAX / 2, Duration::from_secs(1))
        .service(tower::service_fn(|n: u32| ready(Ok::<_, ()>(n))));
    g.bench_function(
        BenchmarkId::new("concurrency_limit+rate_limit", "tower"),
        |b| {
            let mut cx = Context::from_waker(Waker::noop());
            b.iter(|| {
                assert!(svc.poll_ready(&mut cx).is_ready());
                black_box(poll_once(svc.call(black_box(1))).unwrap())
            });
        },
    );
    g.finish();
}

fn bench_two_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("pipeline_2_threads");
    let engine = Engine::with_clock(
        Policy::from_toml_str(TOOL).unwrap(),
        Arc::new(ManualClock::new()),
    );
    let call = Call::new("t");
    g.bench_function(BenchmarkId::new("try_admit+complete", "toolgate"), |b| {
        b.iter_custom(|iters| {
            on_two_threads(iters, &|| {
                let permit = engine.try_admit(black_box(&call)).unwrap();
                permit.complete(Completion::success().latency(Duration::ZERO));
            })
        });
    });
    g.bench_function(BenchmarkId::new("run", "toolgate"), |b| {
        b.iter_custom(|iters| {
            on_two_threads(iters, &|| {
                let out = poll_once(engine.run(black_box(&call), RunOptions::new(), |ctx| {
                    ready(AttemptResult::<u32, ()>::success(ctx.number()))
                }));
                black_box(out.unwrap().value);
            })
        });
    });
    g.finish();
}

criterion_group!(benches, bench, bench_two_threads);
criterion_main!(benches);
