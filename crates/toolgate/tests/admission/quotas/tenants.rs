//! Per-tenant partitions: independent, bounded in memory, each permit giving back to
//! its own tenant's partition.

use super::*;

#[test]
fn tenant_partitions_are_independent_and_idle_ones_are_evicted() {
    let (engine, clock) =
        engine("[tools.search]\nrate = \"1/s\"\npartition = \"tenant\"\nmax_partitions = 100000");
    let mut keep = Vec::new();
    for t in ["acme", "globex", "initech"] {
        assert_eq!(
            admit_n(&engine, &Call::new("search").tenant(t), 3, &mut keep),
            1,
            "{t}"
        );
    }
    assert_eq!(
        quota_of(&engine, "search", Some("acme"), "tools.search.rate").available,
        Some(0)
    );
    assert_eq!(
        quota_of(&engine, "search", Some("umbrella"), "tools.search.rate").available,
        Some(1)
    );
    assert_eq!(
        quota(&engine, "search", "tools.search.rate").partitions,
        Some(3)
    );
    clock.advance(Duration::from_secs(1));
    engine.sweep_partitions();
    assert_eq!(
        quota(&engine, "search", "tools.search.rate").partitions,
        Some(0)
    );
}

#[test]
fn a_flood_of_distinct_tenants_cannot_exhaust_memory() {
    let (engine, _clock) =
        engine("[tools.search]\nrate = \"1/h\"\npartition = \"tenant\"\nmax_partitions = 1000");
    let mut admitted = 0;
    for i in 0..20_000 {
        let tenant = format!("tenant-{i}");
        admitted += usize::from(
            engine
                .try_admit(&Call::new("search").tenant(&tenant))
                .is_ok(),
        );
    }
    let live = quota(&engine, "search", "tools.search.rate")
        .partitions
        .unwrap();
    assert!(live <= 1000, "{live} partitions live");
    assert_eq!(
        admitted, live,
        "every admitted tenant still has its partition"
    );
}

#[test]
fn available_reads_one_quota_of_one_tool_for_one_tenant() {
    let (engine, clock) = crate::support::engine(
        "[tools.t]\nrate = \"2/s\"\nburst = 2\nconcurrency = 3\n[tools.p]\nrate = \"1/s\"\nburst = 4\npartition = \"tenant\"",
    );
    let _a = engine.try_admit(&toolgate::Call::new("t")).unwrap();
    assert_eq!(engine.available("t", "tools.t.rate", None), Some(1));
    assert_eq!(engine.available("t", "tools.t.concurrency", None), Some(2));
    assert_eq!(engine.available("t", "tools.t.tokens", None), None);
    assert_eq!(engine.available("nope", "tools.nope.rate", None), None);
    let _b = engine
        .try_admit(&toolgate::Call::new("p").tenant("acme"))
        .unwrap();
    assert_eq!(engine.available("p", "tools.p.rate", Some("acme")), Some(3));
    assert_eq!(
        engine.available("p", "tools.p.rate", Some("other")),
        Some(4),
        "an unseen tenant is full"
    );
    // The same figures through the permits, at their admission's time.
    assert_eq!(_a.available("tools.t.rate", None), Some(1));
    assert_eq!(_a.available("tools.t.concurrency", None), Some(2));
    assert_eq!(_a.available("tools.t.tokens", None), None);
    assert_eq!(_b.available("tools.p.rate", Some("acme")), Some(3));
    assert_eq!(_b.available("tools.p.rate", None), None, "no tenant");
    let unknown = engine.try_admit(&toolgate::Call::new("nope")).unwrap();
    assert_eq!(unknown.available("tools.nope.rate", None), None);
    clock.advance(std::time::Duration::from_millis(500));
    assert_eq!(engine.available("t", "tools.t.rate", None), Some(2));
    assert_eq!(
        _a.available("tools.t.rate", None),
        Some(1),
        "as the admission left it"
    );
}

#[test]
fn a_permit_gives_back_to_its_own_tenants_partition() {
    let (engine, _clock) =
        engine("[tools.db]\nconcurrency = 1\ntokens = \"100/h\"\npartition = \"tenant\"");
    let a = engine
        .try_admit(&Call::new("db").tenant("a").tokens(60))
        .unwrap();
    assert_rejected(
        engine.try_admit(&Call::new("db").tenant("a").tokens(1)),
        "concurrency_limited",
        "tools.db.concurrency",
        None,
    );
    let b = engine
        .try_admit(&Call::new("db").tenant("b").tokens(60))
        .unwrap();
    // The actual count is 10: 50 tokens go back to tenant a's budget, none to b's.
    a.complete(Completion::success().tokens(10));
    assert_eq!(
        quota_of(&engine, "db", Some("a"), "tools.db.tokens").available,
        Some(90)
    );
    assert_eq!(
        quota_of(&engine, "db", Some("b"), "tools.db.tokens").available,
        Some(40)
    );
    assert_eq!(
        quota_of(&engine, "db", Some("a"), "tools.db.concurrency").available,
        Some(1)
    );
    assert_eq!(
        quota_of(&engine, "db", Some("b"), "tools.db.concurrency").available,
        Some(0)
    );
    drop(b);
    assert_eq!(
        quota_of(&engine, "db", Some("b"), "tools.db.concurrency").available,
        Some(1)
    );
    assert!(engine
        .try_admit(&Call::new("db").tenant("a").tokens(90))
        .is_ok());
}

#[test]
fn threads_racing_on_many_tenants_never_exceed_any_tenant_quota_or_the_pool() {
    // Fifty tenants on four threads, with a pool shared by all and a concurrency
    // limit per tenant. The clock stands still, so nothing refills: each tenant gets
    // at most its burst, and the pool at most its own.
    let (engine, _clock) = engine(
        "[pools.all]\nrate = \"100/s\"\nburst = 120\n\
         [tools.t]\nrate = \"3/s\"\nconcurrency = 2\npartition = \"tenant\"\npools = [\"all\"]",
    );
    let tenants: Vec<String> = (0..50).map(|i| format!("tenant-{i}")).collect();
    let counts: Vec<std::sync::atomic::AtomicU64> =
        (0..tenants.len()).map(|_| Default::default()).collect();
    std::thread::scope(|s| {
        for seed in 0..4 {
            let (engine, tenants, counts) = (&engine, &tenants, &counts);
            s.spawn(move || {
                let mut rng = fastrand::Rng::with_seed(seed);
                for _ in 0..20_000 {
                    let i = rng.usize(..tenants.len());
                    let call = Call::new("t").tenant(&tenants[i]);
                    let permit = if rng.bool() {
                        engine.try_admit(&call)
                    } else {
                        engine
                            .try_admit_all(std::slice::from_ref(&call))
                            .map(|mut p| p.remove(0))
                    };
                    if let Ok(p) = permit {
                        counts[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        p.complete(Completion::success());
                    }
                }
            });
        }
    });
    let counts: Vec<u64> = counts
        .iter()
        .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
        .collect();
    assert!(counts.iter().all(|&n| n <= 3), "{counts:?}");
    // 50 tenants could take 150: the pool's 120 is what binds.
    assert_eq!(counts.iter().sum::<u64>(), 120, "{counts:?}");
}
