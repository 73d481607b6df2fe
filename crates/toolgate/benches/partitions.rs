//! 100,000 tenant partitions: time per decision against governor's keyed limiter
//! (DashMap store), cycling through every tenant: by name (`Engine::try_admit`) and
//! through a `ToolHandle` (`try_admit`, `try_admit_scoped`). The memory each
//! partition costs is counted by the allocator in its own bench (`partition_memory`).

use criterion::{BenchmarkId, Criterion};
use toolgate::Call;

use crate::support::{engine, governor_keyed, tenant_keys, GOVERNOR, TOOLGATE};

const TENANTS: usize = 100_000;

pub(crate) fn bench(c: &mut Criterion) {
    let keys = tenant_keys(TENANTS);
    let mut g = c.benchmark_group("partitions_100k");

    let e = engine(
        "[tools.t]\nrate = \"4000000000/s\"\nburst = 4000000000\npartition = \"tenant\"\nmax_partitions = 200000",
    );
    for k in &keys {
        drop(e.try_admit(&Call::new("t").tenant(k)).unwrap());
    }
    let gov = governor_keyed();
    for k in &keys {
        gov.check_key(k).unwrap();
    }

    let mut i = 0;
    g.bench_function(BenchmarkId::new("decision", TOOLGATE), |b| {
        b.iter(|| {
            i = (i + 7919) % TENANTS;
            drop(e.try_admit(&Call::new("t").tenant(&keys[i])).unwrap());
        });
    });
    // Through a handle resolved once, as governor's keyed limiter is called: an
    // owned permit, and one that borrows the handle.
    let handle = e.tool("t");
    let mut i = 0;
    g.bench_function(BenchmarkId::new("decision_handle", TOOLGATE), |b| {
        b.iter(|| {
            i = (i + 7919) % TENANTS;
            drop(handle.try_admit(&Call::new("t").tenant(&keys[i])).unwrap());
        });
    });
    let mut i = 0;
    g.bench_function(BenchmarkId::new("decision_scoped", TOOLGATE), |b| {
        b.iter(|| {
            i = (i + 7919) % TENANTS;
            drop(
                handle
                    .try_admit_scoped(&Call::new("t").tenant(&keys[i]))
                    .unwrap(),
            );
        });
    });
    let mut j = 0;
    g.bench_function(BenchmarkId::new("decision", GOVERNOR), |b| {
        b.iter(|| {
            j = (j + 7919) % TENANTS;
            gov.check_key(&keys[j]).unwrap();
        });
    });
    g.finish();
}
