//! One call under four quotas (tool rate + pool rate + tokens + concurrency) next to
//! one call under one.

use criterion::{BenchmarkId, Criterion};
use toolgate::{Call, Completion};

use crate::support::{engine, FOUR_QUOTAS, OPEN_BUCKET, TOOLGATE};

pub(crate) fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("quotas_per_call");
    let one = engine(OPEN_BUCKET);
    g.bench_function(BenchmarkId::new("1_quota", TOOLGATE), |b| {
        b.iter(|| {
            one.try_admit(&Call::new("t"))
                .unwrap()
                .complete(Completion::success())
        });
    });
    let four = engine(FOUR_QUOTAS);
    let call = Call::new("t").tokens(10);
    g.bench_function(BenchmarkId::new("4_quotas", TOOLGATE), |b| {
        b.iter(|| {
            four.try_admit(&call)
                .unwrap()
                .complete(Completion::success().tokens(10))
        });
    });
    g.finish();
}
