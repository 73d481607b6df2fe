//! `Engine::run` and the bare admission (`try_admit` + `complete`) on both cores at
//! once, on one tool (the `pipeline` bench's tool and ready attempt): what they write
//! to the tool's shared state (its bucket, its breaker, the count of its references)
//! is then written from two cores. Time per call of the whole machine. A bench of its
//! own: in the `pipeline` bench's binary, a second group running `Engine::run` changed
//! how the first group's run compiles (2.1-2.3 -> 2.8-2.9 times the bare admission on
//! an EPYC VM, the same code). Run: `cargo bench -p toolgate --bench pipeline_2_threads`.

#![allow(clippy::unwrap_used, missing_docs)]

use std::future::ready;
use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use toolgate::{AttemptResult, Call, Completion, RunOptions};

#[path = "support.rs"]
#[allow(dead_code)]
mod support;

use support::{engine, on_two_threads, poll_once, PIPELINE_TOOL};

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("pipeline_2_threads");
    let engine = engine(PIPELINE_TOOL);
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

criterion_group!(benches, bench);
criterion_main!(benches);
