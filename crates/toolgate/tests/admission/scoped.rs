//! Borrowed permits (`ToolHandle::try_admit_scoped`) and the lock-free fast path
//! behind them: the same decisions, counts and outcomes as owned permits.

use std::time::Duration;

use toolgate::{Call, Completion, Engine, Outcome};

use crate::support::{assert_rejected, engine, ms, quota};

/// The tool's admitted total and calls in flight.
fn counts(engine: &Engine, tool: &str) -> (u64, u64) {
    let state = engine.tool_state(tool, None).unwrap();
    (state.admitted, state.in_flight)
}

#[test]
fn the_fast_path_admits_and_refills_exactly_as_the_policy_says() {
    let (engine, clock) = engine("[tools.lookup]\nrate = \"2/s\"\nburst = 2");
    let t = engine.tool("lookup");
    let call = Call::new("lookup");
    let admitted = (0..5).filter(|_| t.try_admit_scoped(&call).is_ok()).count();
    assert_eq!(admitted, 2);
    assert_rejected(
        t.try_admit_scoped(&call).map(|p| p.into_owned()),
        "rate_limited",
        "tools.lookup.rate",
        Some(ms(500)),
    );
    clock.advance(ms(499));
    assert!(t.try_admit_scoped(&call).is_err());
    clock.advance(ms(1));
    assert!(t.try_admit_scoped(&call).is_ok());
    assert!(t.try_admit_scoped(&call).is_err());
    clock.advance(ms(1000));
    assert_eq!(
        quota(&engine, "lookup", "tools.lookup.rate").available,
        Some(2)
    );
    // Owned and borrowed permits draw on the same bucket.
    assert!(engine.try_admit(&call).is_ok());
    assert!(t.try_admit_scoped(&call).is_ok());
    assert!(engine.try_admit(&call).is_err());
    assert_eq!(counts(&engine, "lookup"), (5, 0));
}

#[test]
fn a_scoped_permit_counts_in_flight_until_dropped_or_completed() {
    let (engine, _clock) = engine("[tools.t]\nrate = \"100/s\"\nburst = 100");
    let t = engine.tool("t");
    let call = Call::new("t");
    let a = t.try_admit_scoped(&call).unwrap();
    let b = t.try_admit_scoped(&call).unwrap();
    assert_eq!(a.tool(), Some("t"));
    assert_eq!(a.waited(), Duration::ZERO);
    assert_eq!(counts(&engine, "t"), (2, 2));
    a.complete(Completion::success());
    assert_eq!(counts(&engine, "t"), (2, 1));
    let owned = b.into_owned();
    assert_eq!(counts(&engine, "t"), (2, 1));
    drop(owned);
    assert_eq!(counts(&engine, "t"), (2, 0));
}

#[test]
fn a_fast_path_permit_completed_with_retry_after_pauses_its_tool() {
    // No breaker and no adaptive limit: the completion is decided inline unless it
    // carries an upstream signal, which must still reach the tool.
    let (engine, clock) =
        engine("[tools.t]\nrate = \"100/s\"\nburst = 100\n[tools.u]\nrate = \"100/s\"");
    let t = engine.tool("t");
    let call = Call::new("t");
    t.try_admit_scoped(&call)
        .unwrap()
        .complete(Completion::success());
    assert_eq!(counts(&engine, "t"), (1, 0));
    t.try_admit_scoped(&call)
        .unwrap()
        .complete(Completion::new(Outcome::Error).retry_after(Duration::from_secs(2)));
    assert_eq!(counts(&engine, "t"), (2, 0));
    assert_rejected(
        t.try_admit_scoped(&call).map(|p| p.into_owned()),
        "rate_limited",
        "tools.t.retry_after",
        Some(Duration::from_secs(2)),
    );
    assert!(engine.tool("u").try_admit_scoped(&Call::new("u")).is_ok());
    clock.advance(Duration::from_secs(2));
    assert!(t.try_admit_scoped(&call).is_ok());
}

#[test]
fn a_tool_the_fast_path_cannot_serve_gets_the_general_path_behind_the_same_permit() {
    let (engine, _clock) = engine("[tools.db]\nrate = \"10/s\"\nconcurrency = 1");
    let t = engine.tool("db");
    let call = Call::new("db");
    let held = t.try_admit_scoped(&call).unwrap();
    assert_rejected(
        t.try_admit_scoped(&call).map(|p| p.into_owned()),
        "concurrency_limited",
        "tools.db.concurrency",
        None,
    );
    drop(held);
    assert!(t.try_admit_scoped(&call).is_ok());
}

#[test]
fn outcomes_of_scoped_permits_feed_the_circuit_breaker() {
    let (engine, _clock) = engine(
        "[tools.t]\nrate = \"100/s\"\nburst = 100\n[tools.t.circuit]\nfailure_rate = 0.5\nmin_calls = 2\nwindow = 4\nopen_for = \"10s\"",
    );
    let t = engine.tool("t");
    for _ in 0..2 {
        t.try_admit_scoped(&Call::new("t"))
            .unwrap()
            .complete(Completion::new(Outcome::Error).latency(ms(5)));
    }
    assert_rejected(
        t.try_admit_scoped(&Call::new("t")).map(|p| p.into_owned()),
        "circuit_open",
        "tools.t.circuit",
        Some(Duration::from_secs(10)),
    );
}

#[test]
fn waiters_keep_their_fifo_turn_against_the_fast_path() {
    // A waiter's reservation holds the bucket's state under its lock, so an
    // immediate call behind it cannot take the token it is waiting for.
    let (engine, clock) =
        engine("[tools.t]\nrate = \"1/s\"\nburst = 1\non_limit = \"wait\"\nmax_wait = \"5s\"");
    let t = engine.tool("t");
    let call = Call::new("t");
    drop(t.try_admit_scoped(&call).unwrap());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let e2 = engine.clone();
    let waiter = rt.spawn(async move { e2.admit(&Call::new("t")).await.map(|p| p.admitted_at()) });
    rt.block_on(tokio::task::yield_now());
    assert!(t.try_admit_scoped(&call).is_err());
    clock.advance(ms(1000));
    assert_eq!(rt.block_on(waiter).unwrap().unwrap(), 1_000_000_000);
    // Its turn taken, the bucket is empty until the next refill, then fast again.
    assert!(t.try_admit_scoped(&call).is_err());
    clock.advance(ms(1000));
    assert!(t.try_admit_scoped(&call).is_ok());
}

#[test]
fn threads_racing_on_the_fast_path_while_the_lock_is_taken_admit_exactly_the_burst() {
    let (engine, _clock) = engine("[tools.t]\nrate = \"500/h\"\nburst = 500");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let admitted: usize = std::thread::scope(|s| {
        // Takes the bucket's lock over and over: the state leaves the word and
        // comes back while the others admit by compare-and-swap.
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = engine.tool_state("t", None);
            }
        });
        let racers: Vec<_> = (0..8)
            .map(|i| {
                let engine = &engine;
                s.spawn(move || {
                    let t = engine.tool("t");
                    let call = Call::new("t");
                    let (mut n, mut kept) = (0, Vec::new());
                    for _ in 0..1000 {
                        if let Ok(p) = t.try_admit_scoped(&call) {
                            n += 1;
                            // Half keep their permits (owned), half drop them at once.
                            if i % 2 == 0 {
                                kept.push(p.into_owned());
                            }
                        }
                    }
                    n
                })
            })
            .collect();
        let n = racers.into_iter().map(|r| r.join().unwrap()).sum();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        n
    });
    assert_eq!(admitted, 500);
    assert_eq!(quota(&engine, "t", "tools.t.rate").available, Some(0));
    assert_eq!(counts(&engine, "t").0, 500);
}

#[test]
fn a_scoped_permit_of_a_tenant_decides_in_its_slot_and_reports_for_that_tenant_only() {
    let (engine, clock) = engine("[tools.t]\nrate = \"10/s\"\nburst = 2\npartition = \"tenant\"");
    let t = engine.tool("t");
    let (a, b) = (Call::new("t").tenant("a"), Call::new("t").tenant("b"));
    // Each tenant has its own burst of 2, counted in flight while its permits live.
    let held: Vec<_> = (0..2).map(|_| t.try_admit_scoped(&a).unwrap()).collect();
    assert_rejected(
        t.try_admit_scoped(&a).map(|p| p.into_owned()),
        "rate_limited",
        "tools.t.rate",
        Some(ms(100)),
    );
    assert_eq!(counts(&engine, "t"), (2, 2));
    let b1 = t.try_admit_scoped(&b).unwrap();
    assert_eq!((b1.tool(), b1.admitted_at()), (Some("t"), 0));
    drop(held);
    assert_eq!(counts(&engine, "t"), (3, 1));

    // A Retry-After through a scoped permit pauses its own tenant only.
    clock.advance(ms(200));
    t.try_admit_scoped(&a)
        .unwrap()
        .complete(Completion::new(Outcome::Error).retry_after(Duration::from_secs(2)));
    assert_rejected(
        t.try_admit_scoped(&a).map(|p| p.into_owned()),
        "rate_limited",
        "tools.t.retry_after",
        Some(Duration::from_secs(2)),
    );
    let b2 = t.try_admit_scoped(&b).unwrap();
    // Made owned, it keeps its tenant: b is paused now, a still, the tenant "" not.
    b2.into_owned()
        .complete(Completion::new(Outcome::Error).retry_after(Duration::from_secs(1)));
    assert_rejected(
        t.try_admit_scoped(&b).map(|p| p.into_owned()),
        "rate_limited",
        "tools.t.retry_after",
        Some(Duration::from_secs(1)),
    );
    assert!(t.try_admit_scoped(&Call::new("t")).is_ok());
    drop(b1);
    assert_eq!(counts(&engine, "t"), (6, 0));
    clock.advance(ms(1_000));
    assert!(t.try_admit_scoped(&b).is_ok());
    assert!(t.try_admit_scoped(&a).is_err());
}
