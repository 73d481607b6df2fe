//! The overhead of the retry pipeline (`Engine::run`) on a call that needs no retry,
//! next to bare admission (`try_admit` + `complete`) and next to a tower
//! `ConcurrencyLimit` + `RateLimit` stack, in the same run. Every side runs a
//! trivially ready "tool", polled once with a no-op waker, so only the machinery is
//! measured. Run: `cargo bench -p toolgate --bench pipeline`.

#![allow(clippy::unwrap_used, missing_docs)]

use std::future::ready;
use std::hint::black_box;
use std::task::{Context, Waker};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use toolgate::{AttemptResult, Call, Completion, RunOptions};
use tower::{Service, ServiceBuilder};

#[path = "support.rs"]
#[allow(dead_code)]
mod support;

use support::{engine, poll_once, PIPELINE_TOOL as TOOL};

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("pipeline_no_retry");
    let engine = engine(TOOL);
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

criterion_group!(benches, bench);
criterion_main!(benches);
