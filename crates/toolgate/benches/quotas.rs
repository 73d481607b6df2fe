//! One call under four quotas (tool rate + pool rate + tokens + concurrency) next to
//! one call under one.

use criterion::{BenchmarkId, Criterion};
use toolgate::{Call, Completion};

use crate::support::{engine, OPEN_BUCKET, TOOLGATE};

const FOUR: &str = r#"
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
    let four = engine(FOUR);
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
