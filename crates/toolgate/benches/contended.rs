//! One bucket quota hammered by two threads (both cores): time per decision.

use criterion::{BenchmarkId, Criterion};
use toolgate::Call;

use crate::support::{engine, governor_direct, on_two_threads, GOVERNOR, OPEN_BUCKET, TOOLGATE};

pub(crate) fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("single_quota_contended_2_threads");
    let e = engine(OPEN_BUCKET);
    let handle = e.tool("t");
    g.bench_function(BenchmarkId::new("admit+complete", TOOLGATE), |b| {
        b.iter_custom(|iters| {
            on_two_threads(iters, &|| {
                drop(handle.try_admit_scoped(&Call::new("t")).unwrap());
            })
        });
    });
    g.bench_function(
        BenchmarkId::new("admit+complete_owned_permit", TOOLGATE),
        |b| {
            b.iter_custom(|iters| {
                on_two_threads(iters, &|| drop(handle.try_admit(&Call::new("t")).unwrap()))
            });
        },
    );
    let gov = governor_direct();
    g.bench_function(BenchmarkId::new("admit+complete", GOVERNOR), |b| {
        b.iter_custom(|iters| on_two_threads(iters, &|| gov.check().unwrap()));
    });
    g.finish();
}
