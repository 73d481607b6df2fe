//! One bucket quota, one thread: admit + complete against governor's check.
//! `admit+complete` uses the borrowed permit (`ToolHandle::try_admit_scoped`) and
//! drops it, `_success` completes it with an outcome instead, the `_owned_permit`
//! variant uses the owned permit, `_by_name` the lookup by name. The `floor:` rows
//! time what those forms cannot do without in safe Rust, in the same run: sharing
//! the tool with the permit (one `Arc` clone and drop: two locked instructions), the
//! same after a compare-and-swap like the one that charges a bucket (the three locked
//! instructions of an owned permit, where governor's `check()` has the one) and
//! reading the policy in force, which a reload may swap (one `arc-swap` load).
//! `admit+complete_by_key/governor_keyed` is governor's own form of a call by name:
//! its keyed limiter asked by the tool's name. `spent_bucket` times a refusal on a
//! spent bucket, by name with its `retry_after`, against governor's `check()` saying
//! when to retry.

use criterion::{BenchmarkId, Criterion};
use toolgate::{Call, Completion};

use governor::clock::Clock;

use crate::support::{
    engine, governor_direct, governor_keyed, governor_spent, iter_refilled, open_engine, GOVERNOR,
    OPEN_BUCKET, REFILL, SPENT_BUCKET, TOOLGATE,
};

pub(crate) fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("single_quota_uncontended");
    let (e, clock) = open_engine(OPEN_BUCKET);
    let refill = || clock.advance(REFILL);
    let call = Call::new("t");
    let handle = e.tool("t");
    g.bench_function(BenchmarkId::new("admit+complete", TOOLGATE), |b| {
        iter_refilled(b, refill, || {
            drop(
                handle
                    .try_admit_scoped(std::hint::black_box(&call))
                    .unwrap(),
            )
        });
    });
    g.bench_function(BenchmarkId::new("admit+complete_success", TOOLGATE), |b| {
        iter_refilled(b, refill, || {
            handle
                .try_admit_scoped(std::hint::black_box(&call))
                .unwrap()
                .complete(Completion::success())
        });
    });
    g.bench_function(
        BenchmarkId::new("admit+complete_owned_permit", TOOLGATE),
        |b| {
            iter_refilled(b, refill, || {
                drop(handle.try_admit(std::hint::black_box(&call)).unwrap())
            });
        },
    );
    g.bench_function(BenchmarkId::new("admit+complete_by_name", TOOLGATE), |b| {
        iter_refilled(b, refill, || {
            drop(e.try_admit(std::hint::black_box(&call)).unwrap())
        });
    });
    let shared = std::sync::Arc::new(0u64);
    g.bench_function(BenchmarkId::new("floor: Arc clone+drop", TOOLGATE), |b| {
        b.iter(|| drop(std::hint::black_box(shared.clone())));
    });
    // What a governor-like decision does (one compare-and-swap) plus the share: the
    // three locked instructions an owned permit cannot do without, back to back.
    let word = std::sync::atomic::AtomicU64::new(0);
    g.bench_function(
        BenchmarkId::new("floor: CAS + Arc clone+drop", TOOLGATE),
        |b| {
            b.iter(|| {
                use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
                let w = std::hint::black_box(&word);
                let v = w.load(Relaxed);
                let _ = w.compare_exchange(v, v.wrapping_add(1), AcqRel, Acquire);
                drop(std::hint::black_box(shared.clone()));
            });
        },
    );
    let swap = arc_swap::ArcSwap::from_pointee(0u64);
    g.bench_function(BenchmarkId::new("floor: arc-swap load", TOOLGATE), |b| {
        b.iter(|| drop(std::hint::black_box(swap.load())));
    });
    let gov = governor_direct();
    g.bench_function(BenchmarkId::new("admit+complete", GOVERNOR), |b| {
        iter_refilled(b, || gov.clock().advance(REFILL), || gov.check().unwrap());
    });
    // governor's own form of a call by name: its keyed limiter, asked by the tool's
    // name as the key (one key, so its map holds one entry, made before the loop).
    let keyed = governor_keyed();
    let name = String::from("t");
    keyed.check_key(&name).unwrap();
    // Named `governor_keyed`, so that the `/governor` row stays the one divided by.
    g.bench_function(
        BenchmarkId::new("admit+complete_by_key", "governor_keyed"),
        |b| {
            iter_refilled(
                b,
                || keyed.clock().advance(REFILL),
                || keyed.check_key(std::hint::black_box(&name)).unwrap(),
            );
        },
    );
    g.finish();

    let mut g = c.benchmark_group("spent_bucket");
    let spent = engine(SPENT_BUCKET);
    drop(spent.try_admit(&call).unwrap());
    g.bench_function(BenchmarkId::new("rejected_by_name", TOOLGATE), |b| {
        b.iter(|| {
            let no = spent.try_admit(std::hint::black_box(&call)).unwrap_err();
            std::hint::black_box(no.retry_after())
        });
    });
    let (gov, clock) = governor_spent();
    g.bench_function(BenchmarkId::new("rejected", GOVERNOR), |b| {
        b.iter(|| {
            let no = gov.check().unwrap_err();
            std::hint::black_box(no.wait_time_from(clock.now()))
        });
    });
    g.finish();
}
