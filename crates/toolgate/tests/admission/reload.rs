//! Applying a new policy to a running engine.

use std::time::Duration;

use toolgate::{Call, Clock, Policy, ScopedPermit};

use crate::support::{admit_n, engine, ms, quota};

#[test]
fn a_reload_keeps_the_state_of_unchanged_quotas() {
    let (engine, _clock) = engine("[tools.a]\nrate = \"2/s\"\n[tools.b]\nrate = \"5/s\"");
    assert_eq!(admit_n(&engine, &Call::new("a"), 5, &mut Vec::new()), 2);
    engine.apply(
        Policy::from_toml_str(
            "[tools.a]\nrate = \"2/s\"\n[tools.b]\nrate = \"50/s\"\n[tools.c]\nrate = \"1/s\"",
        )
        .unwrap(),
    );
    assert_eq!(admit_n(&engine, &Call::new("a"), 5, &mut Vec::new()), 0);
    assert_eq!(quota(&engine, "b", "tools.b.rate").capacity, 50);
    assert_eq!(admit_n(&engine, &Call::new("c"), 5, &mut Vec::new()), 1);
}

#[test]
fn a_changed_quota_never_over_admits_across_the_switch() {
    let (engine, clock) = engine("[tools.a]\nrate = \"10/s\"");
    assert_eq!(admit_n(&engine, &Call::new("a"), 8, &mut Vec::new()), 8);
    // Raising the burst does not hand out a fresh, full bucket.
    engine.apply(Policy::from_toml_str("[tools.a]\nrate = \"10/s\"\nburst = 100").unwrap());
    assert_eq!(admit_n(&engine, &Call::new("a"), 100, &mut Vec::new()), 2);
    // Lowering it caps what was left.
    clock.advance(Duration::from_secs(1));
    engine.apply(Policy::from_toml_str("[tools.a]\nrate = \"1/s\"\nburst = 3").unwrap());
    assert_eq!(admit_n(&engine, &Call::new("a"), 100, &mut Vec::new()), 3);
    // Switching to a sliding window carries the recent admissions over.
    engine.apply(Policy::from_toml_str("[tools.a]\nrate = \"4/s\"\nwindow = \"sliding\"").unwrap());
    assert_eq!(admit_n(&engine, &Call::new("a"), 100, &mut Vec::new()), 1);
    clock.advance(ms(1000));
    assert_eq!(admit_n(&engine, &Call::new("a"), 100, &mut Vec::new()), 4);
}

#[test]
fn a_changed_partitioned_quota_keeps_every_tenant_state_across_the_switch() {
    let (engine, _clock) =
        engine("[tools.a]\nrate = \"2/s\"\npartition = \"tenant\"\nmax_partitions = 1000");
    let tenants: Vec<String> = (0..200).map(|i| format!("tenant-{i}")).collect();
    for t in &tenants {
        assert_eq!(
            admit_n(&engine, &Call::new("a").tenant(t), 5, &mut Vec::new()),
            2
        );
    }
    // A changed definition, and a different cap (so a different number of shards
    // too): every tenant's bucket carries over empty, none starts afresh.
    for cap in ["1000", "8"] {
        engine.apply(
            Policy::from_toml_str(&format!(
                "[tools.a]\nrate = \"2/s\"\nburst = 3\npartition = \"tenant\"\nmax_partitions = {cap}"
            ))
            .unwrap(),
        );
        let admitted: usize = tenants
            .iter()
            .map(|t| admit_n(&engine, &Call::new("a").tenant(t), 5, &mut Vec::new()))
            .sum();
        assert_eq!(admitted, 0, "max_partitions = {cap}");
    }
}

#[test]
fn admissions_racing_reloads_never_exceed_what_the_quota_holds() {
    // The clock stands still, so nothing refills: whatever the reloads, no more than
    // the largest burst may ever be admitted. Each reload changes the definition, so
    // the bucket's state is carried into a new cell while calls keep arriving.
    for (toml, pooled) in [
        ("[tools.a]\nrate = \"10/s\"\nburst = {B}", false),
        ("[pools.p]\nrate = \"10/s\"\nburst = {B}\n[tools.a]\nconcurrency = 100\npools = [\"p\"]", true),
    ] {
        let policy = |b: u64| Policy::from_toml_str(&toml.replace("{B}", &b.to_string())).unwrap();
        let (engine, _clock) = engine(&toml.replace("{B}", "200"));
        let admitted = std::sync::atomic::AtomicU64::new(0);
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            // Every verb: the scoped and owned permits of a handle, by name, and a
            // reservation of one call.
            for verb in 0..4 {
                let (engine, admitted, stop) = (&engine, &admitted, &stop);
                s.spawn(move || {
                    let handle = engine.tool("a");
                    let call = Call::new("a");
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let ok = match verb {
                            0 => handle.try_admit_scoped(&call).map(|p| p.into_owned()).is_ok(),
                            1 => handle.try_admit(&call).is_ok(),
                            2 => engine.try_admit(&call).is_ok(),
                            _ => engine.try_admit_all(std::slice::from_ref(&call)).is_ok(),
                        };
                        if ok {
                            admitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                });
            }
            for i in 0..400 {
                engine.apply(policy(200 + i % 2));
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let n = admitted.load(std::sync::atomic::Ordering::Relaxed);
        assert!(n <= 201, "{n} admitted, at most 201 allowed (pooled: {pooled})");
    }
}

#[test]
fn a_token_estimate_reconciled_after_a_reload_reaches_the_new_budget() {
    // Two reloads that change the budget while calls are in flight: the difference
    // between estimate and actual count lands in the budget now in force, whether
    // the call used more (charged) or less (refunded).
    let (engine, _clock) = engine("[tools.llm]\ntokens = \"1000/min\"");
    let tokens = |e: &toolgate::Engine| quota(e, "llm", "tools.llm.tokens").available;
    let more = engine.try_admit(&Call::new("llm").tokens(300)).unwrap();
    let less = engine.try_admit(&Call::new("llm").tokens(200)).unwrap();
    assert_eq!(tokens(&engine), Some(500));
    for burst in [1200, 1100] {
        let toml = format!("[tools.llm]\ntokens = \"1000/min\"\ntokens_burst = {burst}");
        engine.apply(Policy::from_toml_str(&toml).unwrap());
    }
    assert_eq!(tokens(&engine), Some(500));
    more.complete(toolgate::Completion::success().tokens(450));
    assert_eq!(tokens(&engine), Some(350));
    less.complete(toolgate::Completion::success().tokens(50));
    assert_eq!(tokens(&engine), Some(500));
}

/// Tokens left in `tenant`'s partition of the `llm` tool's budget.
fn tenant_tokens(e: &toolgate::Engine, tenant: &str) -> Option<u64> {
    e.tool_state("llm", Some(tenant))
        .and_then(|s| s.quotas.into_iter().find(|q| q.quota == "tools.llm.tokens"))
        .and_then(|q| q.available)
}

/// A call of the `llm` tool by `tenant`, estimated at `n` tokens.
fn tenant_call(tenant: &str, n: u64) -> Call<'_> {
    Call::new("llm").tenant(tenant).tokens(n)
}

#[test]
fn a_per_tenant_token_estimate_reconciled_after_a_reload_reaches_the_tenants_new_budget() {
    // The same through a tenant partition: the retired partition links (weakly, so
    // that eviction stays free to drop the new one) to the partition that carries
    // its state now.
    let (engine, _clock) = engine("[tools.llm]\ntokens = \"1000/min\"\npartition = \"tenant\"");
    let more = engine.try_admit(&tenant_call("acme", 300)).unwrap();
    let less = engine.try_admit(&tenant_call("acme", 200)).unwrap();
    let other = engine.try_admit(&tenant_call("globex", 100)).unwrap();
    let toml = "[tools.llm]\ntokens = \"1000/min\"\ntokens_burst = 1100\npartition = \"tenant\"";
    engine.apply(Policy::from_toml_str(toml).unwrap());
    assert_eq!(tenant_tokens(&engine, "acme"), Some(500));
    more.complete(toolgate::Completion::success().tokens(450));
    assert_eq!(tenant_tokens(&engine, "acme"), Some(350));
    less.complete(toolgate::Completion::success().tokens(50));
    assert_eq!(tenant_tokens(&engine, "acme"), Some(500));
    other.complete(toolgate::Completion::success().tokens(400));
    assert_eq!(tenant_tokens(&engine, "globex"), Some(600));
    assert_eq!(tenant_tokens(&engine, "acme"), Some(500));
}

#[test]
fn a_per_tenant_token_difference_finds_the_tenant_once_its_new_partition_is_gone() {
    // The partition a reload converted a tenant's into may be gone by the time a
    // late difference comes: evicted once idle, or dropped with the policy of a
    // further reload. The difference then goes to the tenant's partition under the
    // policy in force, looked up (or created) by the tenant's key.
    let (engine, clock) = engine("[tools.llm]\ntokens = \"1000/min\"\npartition = \"tenant\"");
    let policy = |burst: u64| {
        Policy::from_toml_str(&format!(
            "[tools.llm]\ntokens = \"1000/min\"\ntokens_burst = {burst}\npartition = \"tenant\""
        ))
        .unwrap()
    };
    let partitions = |e: &toolgate::Engine| quota(e, "llm", "tools.llm.tokens").partitions;

    // Evicted: the tenant's new partition refills while the call runs, and goes.
    let evicted = engine.try_admit(&tenant_call("acme", 300)).unwrap();
    engine.apply(policy(1100));
    clock.advance(Duration::from_secs(60));
    engine.sweep_partitions();
    assert_eq!(partitions(&engine), Some(0));
    evicted.complete(toolgate::Completion::success().tokens(450));
    assert_eq!(partitions(&engine), Some(1));
    assert_eq!(tenant_tokens(&engine, "acme"), Some(950));

    // Two reloads: the partition in between went with the policy between them.
    let twice = engine.try_admit(&tenant_call("globex", 200)).unwrap();
    let more = engine.try_admit(&tenant_call("globex", 100)).unwrap();
    assert_eq!(tenant_tokens(&engine, "globex"), Some(800));
    engine.apply(policy(1200));
    engine.apply(policy(1300));
    assert_eq!(tenant_tokens(&engine, "globex"), Some(800));
    twice.complete(toolgate::Completion::success().tokens(50));
    assert_eq!(tenant_tokens(&engine, "globex"), Some(950));
    more.complete(toolgate::Completion::success().tokens(400));
    assert_eq!(tenant_tokens(&engine, "globex"), Some(650));
    assert_eq!(tenant_tokens(&engine, "acme"), Some(950));
}

#[test]
fn calls_in_flight_across_a_reload_still_count_against_concurrency() {
    let (engine, _clock) = engine("[tools.db]\nconcurrency = 2");
    let held: Vec<_> = (0..2)
        .map(|_| engine.try_admit(&Call::new("db")).unwrap())
        .collect();
    engine.apply(Policy::from_toml_str("[tools.db]\nconcurrency = 3").unwrap());
    assert_eq!(admit_n(&engine, &Call::new("db"), 5, &mut Vec::new()), 1);
    drop(held);
    assert_eq!(
        quota(&engine, "db", "tools.db.concurrency").available,
        Some(3)
    );
}

#[test]
fn a_tool_handle_follows_a_reload() {
    let (engine, clock) = engine("[tools.a]\nrate = \"1/s\"");
    let handle = engine.tool("a");
    assert_eq!(
        (0..3)
            .filter(|_| handle.try_admit(&Call::new("a")).is_ok())
            .count(),
        1
    );
    engine.apply(Policy::from_toml_str("[tools.a]\nrate = \"5/s\"").unwrap());
    // The changed quota starts with what the old one had left (nothing), then
    // refills at the new rate.
    assert!(handle.try_admit(&Call::new("a")).is_err());
    clock.advance(ms(400));
    assert_eq!(
        (0..9)
            .filter(|_| handle.try_admit(&Call::new("a")).is_ok())
            .count(),
        2
    );
}

#[test]
fn a_handle_resolved_before_a_reload_obeys_the_new_policy_owned_or_scoped() {
    // The bucket's definition is unchanged, so its cell (and its lock-free word)
    // carries over; the reload adds a concurrency limit, which takes the tool off
    // the fast path. A handle resolved before the reload must not keep admitting
    // through the old runtime's fast path, whose permits neither `try_admit` nor
    // `try_admit_scoped` checks against the policy's generation: the reload closes
    // that fast path, and the handle's general path re-resolves.
    for scoped in [false, true] {
        let (engine, _clock) = engine("[tools.a]\nrate = \"100/s\"\nburst = 100");
        let handle = engine.tool("a");
        let call = Call::new("a");
        let admit = || {
            if scoped {
                handle.try_admit_scoped(&call).map(ScopedPermit::into_owned)
            } else {
                handle.try_admit(&call)
            }
        };
        drop(admit().unwrap());
        engine.apply(
            Policy::from_toml_str("[tools.a]\nrate = \"100/s\"\nburst = 100\nconcurrency = 1")
                .unwrap(),
        );
        let held = admit().unwrap();
        assert_eq!(
            admit()
                .map(|_| ())
                .map_err(|r| (r.reason().as_str(), r.quota().to_owned())),
            Err(("concurrency_limited", "tools.a.concurrency".to_owned())),
            "scoped: {scoped}"
        );
        drop(held);
        assert!(admit().is_ok(), "scoped: {scoped}");
        // The bucket kept its state: 1 + 2 + 1 taken of 100.
        assert_eq!(quota(&engine, "a", "tools.a.rate").available, Some(97));
    }
}

#[test]
fn waiters_racing_reloads_and_cancellations_never_exceed_the_rate() {
    // Waiters on a multi-threaded runtime, a third of them cancelled, while the
    // policy flips at every step (a changed definition each time: a bucket's burst
    // between 2 and 3, or a bucket and a sliding window of 2 per 200 ms) and the
    // clock moves in steps. However it interleaves, the admissions up to any time t
    // never exceed 3 plus what 10/s refills by t, which bounds both policies.
    let head = "[tools.w]\non_limit = \"wait\"\nmax_wait = \"60s\"\nqueue_limit = 10000\n";
    // The last pair partitions by tenant: each of three tenants has its own bound.
    let pairs = [
        ["rate = \"10/s\"\nburst = 2", "rate = \"10/s\"\nburst = 3"],
        [
            "rate = \"10/s\"\nburst = 2",
            "rate = \"2/200ms\"\nwindow = \"sliding\"",
        ],
        [
            "rate = \"10/s\"\nburst = 2\npartition = \"tenant\"",
            "rate = \"10/s\"\nburst = 3\npartition = \"tenant\"",
        ],
    ];
    for (pair, policies) in pairs.iter().enumerate() {
        let toml = |i: u64| format!("{head}{}", policies[(i % 2) as usize]);
        let (engine, clock) = engine(&toml(0));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let admitted = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut rng = fastrand::Rng::with_seed(7);
        let tenants = if pair == 2 { 3 } else { 1 };
        let tasks: Vec<_> = (0..300)
            .map(|i| {
                let (engine, admitted) = (engine.clone(), admitted.clone());
                rt.spawn(async move {
                    let tenant = format!("t{}", i % tenants);
                    if let Ok(p) = engine.admit(&Call::new("w").tenant(&tenant)).await {
                        admitted
                            .lock()
                            .unwrap()
                            .push((i % tenants, p.admitted_at()));
                    }
                })
            })
            .collect();
        for step in 1..=400u64 {
            if rng.u8(..3) == 0 {
                tasks[rng.usize(..tasks.len())].abort();
            }
            engine.apply(Policy::from_toml_str(&toml(step)).unwrap());
            clock.advance(ms(10));
            std::thread::yield_now();
        }
        drain(&rt, &clock, tasks);
        let admitted = admitted.lock().unwrap().clone();
        for tenant in 0..tenants {
            let mut at: Vec<u64> = admitted
                .iter()
                .filter(|&&(t, _)| t == tenant)
                .map(|&(_, at)| at)
                .collect();
            at.sort_unstable();
            // About 4 s of clock at 10/s: the waiters kept being admitted throughout.
            assert!(at.len() >= 20, "pair {pair}: {} admitted", at.len());
            for (i, &t) in at.iter().enumerate() {
                let allowed = 3 + t / 100_000_000;
                assert!(
                    (i as u64) < allowed,
                    "pair {pair}, tenant {tenant}: {} admitted by {t} ns, at most {allowed}: {:?}",
                    i + 1,
                    &at[..at.len().min(12)]
                );
            }
        }
    }
}

/// Moves the clock on in steps until every task has finished (on a busy machine a
/// task may only start after the clock last moved, and would then sleep forever),
/// failing rather than hanging.
#[allow(
    clippy::disallowed_methods,
    reason = "a bound on the real time the test may take"
)]
fn drain(
    rt: &tokio::runtime::Runtime,
    clock: &toolgate::ManualClock,
    tasks: Vec<tokio::task::JoinHandle<()>>,
) {
    let give_up = std::time::Instant::now() + Duration::from_secs(60);
    while !tasks.iter().all(|t| t.is_finished()) {
        assert!(
            std::time::Instant::now() < give_up,
            "tasks still running after 60 s"
        );
        clock.advance(ms(100));
        std::thread::sleep(Duration::from_millis(1));
    }
    for t in tasks {
        let _ = rt.block_on(t);
    }
}

/// Counts a call out of a counter when dropped.
struct Out<'a>(&'a std::sync::atomic::AtomicU64);

impl Drop for Out<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn concurrency_waiters_racing_reloads_and_cancellations_never_exceed_the_limit() {
    // Calls hold their slot across several clock steps; a third of the waiting ones
    // are cancelled, and the limit flips between 2 and 3 (the cells are kept). At no
    // moment are more than 3 calls in flight, and every slot comes back at the end.
    let toml = |k: u64| {
        format!("[tools.c]\nconcurrency = {k}\non_limit = \"wait\"\nmax_wait = \"60s\"\nqueue_limit = 10000")
    };
    let (engine, clock) = engine(&toml(2));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let inside = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let most = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut rng = fastrand::Rng::with_seed(11);
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let (engine, clock) = (engine.clone(), clock.clone());
            let (inside, most, done) = (inside.clone(), most.clone(), done.clone());
            rt.spawn(async move {
                if let Ok(_permit) = engine.admit(&Call::new("c")).await {
                    let n = inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                    most.fetch_max(n, std::sync::atomic::Ordering::SeqCst);
                    // Counted out before the permit goes, even when the task is
                    // cancelled while it holds it (drop order: this, then the permit).
                    let _out = Out(&inside);
                    let until = clock.now() + 20_000_000;
                    clock.sleep_until(until).await;
                    done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            })
        })
        .collect();
    for step in 1..=600u64 {
        if rng.u8(..4) == 0 {
            tasks[rng.usize(..tasks.len())].abort();
        }
        if step % 7 == 0 {
            engine.apply(Policy::from_toml_str(&toml(2 + step % 2)).unwrap());
        }
        clock.advance(ms(10));
        std::thread::yield_now();
    }
    drain(&rt, &clock, tasks);
    let most = most.load(std::sync::atomic::Ordering::SeqCst);
    assert!(most <= 3, "{most} in flight at once");
    assert!(done.load(std::sync::atomic::Ordering::SeqCst) >= 20);
    assert_eq!(engine.tool_state("c", None).unwrap().in_flight, 0);
    // The last reload (step 595) set the limit to 3: every slot is free again.
    assert_eq!(
        quota(&engine, "c", "tools.c.concurrency").available,
        Some(3)
    );
}
