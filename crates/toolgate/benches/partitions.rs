//! 100,000 tenant partitions: time per decision against governor's keyed limiter
//! (DashMap store), cycling through every tenant, and the memory each partition costs
//! (resident set growth while creating them, map and key included).

use criterion::{BenchmarkId, Criterion};
use toolgate::Call;

use crate::support::{engine, governor_keyed, tenant_keys, GOVERNOR, TOOLGATE};

const TENANTS: usize = 100_000;

fn rss_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

pub(crate) fn bench(c: &mut Criterion) {
    let keys = tenant_keys(TENANTS);
    let mut g = c.benchmark_group("partitions_100k");

    let before = rss_bytes();
    let e = engine(
        "[tools.t]\nrate = \"4000000000/s\"\nburst = 4000000000\npartition = \"tenant\"\nmax_partitions = 200000",
    );
    for k in &keys {
        drop(e.try_admit(&Call::new("t").tenant(k)).unwrap());
    }
    let toolgate_bytes = rss_bytes()
        .zip(before)
        .map(|(a, b)| a.saturating_sub(b) / TENANTS);

    let before = rss_bytes();
    let gov = governor_keyed();
    for k in &keys {
        gov.check_key(k).unwrap();
    }
    let governor_bytes = rss_bytes()
        .zip(before)
        .map(|(a, b)| a.saturating_sub(b) / TENANTS);
    eprintln!(
        "partitions_100k memory: toolgate {toolgate_bytes:?} B/partition, governor {governor_bytes:?} B/partition (RSS growth, keys and maps included)"
    );

    let mut i = 0;
    g.bench_function(BenchmarkId::new("decision", TOOLGATE), |b| {
        b.iter(|| {
            i = (i + 7919) % TENANTS;
            drop(e.try_admit(&Call::new("t").tenant(&keys[i])).unwrap());
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
