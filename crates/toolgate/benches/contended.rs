//! One bucket quota hammered by two threads (both cores): time per decision.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use toolgate::Call;

use crate::support::{engine, governor_direct, GOVERNOR, OPEN_BUCKET, TOOLGATE};

const THREADS: u64 = 2;

/// Runs `op` `iters` times split over two threads; returns the wall time of the
/// slower thread, so that criterion (which divides by `iters`, the decisions of both
/// threads together) reports the wall time per decision of the whole machine.
fn hammer(iters: u64, op: &(dyn Fn() + Sync)) -> Duration {
    let start = Barrier::new(THREADS as usize);
    let per = iters.div_ceil(THREADS);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
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
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap()
    })
}

pub(crate) fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("single_quota_contended_2_threads");
    let e = engine(OPEN_BUCKET);
    let handle = e.tool("t");
    g.bench_function(BenchmarkId::new("admit+complete", TOOLGATE), |b| {
        b.iter_custom(|iters| {
            hammer(iters, &|| {
                drop(handle.try_admit_scoped(&Call::new("t")).unwrap());
            })
        });
    });
    g.bench_function(
        BenchmarkId::new("admit+complete_owned_permit", TOOLGATE),
        |b| {
            b.iter_custom(|iters| {
                hammer(iters, &|| drop(handle.try_admit(&Call::new("t")).unwrap()))
            });
        },
    );
    let gov = governor_direct();
    g.bench_function(BenchmarkId::new("admit+complete", GOVERNOR), |b| {
        b.iter_custom(|iters| hammer(iters, &|| gov.check().unwrap()));
    });
    g.finish();
}
