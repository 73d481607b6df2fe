//! Wait mode: FIFO order, `max_wait` checked up front, queue limits, and exact
//! cancellation — all on a manual clock, polled by hand.

use std::time::Duration;

use tokio_test::task;
use tokio_test::{assert_pending, assert_ready};
use toolgate::{Call, Clock, Completion};

use crate::support::{engine, ms, quota};

const WAIT: &str = r#"
[tools.search]
rate = "10/s"
burst = 1
on_limit = "wait"
max_wait = "1s"
queue_limit = 3
"#;

#[test]
fn waiters_are_admitted_in_fifo_order_exactly_at_their_conforming_time() {
    let (engine, clock) = engine(WAIT);
    let call = Call::new("search");
    let _first = engine.try_admit(&call).unwrap();
    let mut w: Vec<_> = (0..3).map(|_| task::spawn(engine.admit(&call))).collect();
    for t in &mut w {
        assert_pending!(t.poll());
    }
    assert_eq!(clock.sleepers(), 3);
    for (i, t) in w.iter_mut().enumerate() {
        clock.advance(ms(99));
        assert!(!t.is_woken(), "waiter {i} woke early");
        assert_pending!(t.poll());
        clock.advance(ms(1));
        assert!(t.is_woken(), "waiter {i} not woken at its time");
        let p = assert_ready!(t.poll()).unwrap();
        assert_eq!(p.waited(), ms(100 * (i as u64 + 1)));
    }
    assert_eq!(clock.sleepers(), 0);
}

#[test]
fn a_call_that_would_wait_too_long_is_rejected_at_once_with_the_predicted_wait() {
    let (engine, clock) = engine(&WAIT.replace("max_wait = \"1s\"", "max_wait = \"250ms\""));
    let call = Call::new("search");
    let _p = engine.try_admit(&call).unwrap();
    let mut a = task::spawn(engine.admit(&call));
    let mut b = task::spawn(engine.admit(&call));
    assert_pending!(a.poll());
    assert_pending!(b.poll());
    // The third would be admitted at 300 ms > 250 ms: rejected now, without sleeping.
    let mut c = task::spawn(engine.admit(&call));
    let r = assert_ready!(c.poll()).unwrap_err();
    assert_eq!(r.reason().as_str(), "max_wait_exceeded");
    assert_eq!(r.quota(), "tools.search.rate");
    assert_eq!(r.retry_after(), Some(ms(300)));
    assert_eq!(clock.now(), 0);
    // A per-call override lets it wait longer.
    let longer = call.max_wait(ms(300));
    let mut d = task::spawn(engine.admit(&longer));
    assert_pending!(d.poll());
    clock.advance(ms(300));
    assert!(assert_ready!(d.poll()).is_ok());
}

#[test]
fn a_full_queue_rejects_with_queue_full() {
    let (engine, _clock) = engine(WAIT);
    let call = Call::new("search");
    let _p = engine.try_admit(&call).unwrap();
    let mut waiters: Vec<_> = (0..3).map(|_| task::spawn(engine.admit(&call))).collect();
    for w in &mut waiters {
        assert_pending!(w.poll());
    }
    let mut extra = task::spawn(engine.admit(&call));
    let r = assert_ready!(extra.poll()).unwrap_err();
    assert_eq!(r.reason().as_str(), "queue_full");
    assert_eq!(engine.tool_state("search", None).unwrap().waiting, 3);
}

#[test]
fn a_cancelled_waiter_leaves_the_accounting_as_if_it_never_came() {
    let (engine, clock) = engine(WAIT);
    let call = Call::new("search");
    let _p = engine.try_admit(&call).unwrap();
    let mut a = task::spawn(engine.admit(&call));
    let mut b = task::spawn(engine.admit(&call));
    let mut c = task::spawn(engine.admit(&call));
    assert_pending!(a.poll());
    assert_pending!(b.poll());
    assert_pending!(c.poll());

    // b (due at 200 ms) leaves; c moves up from 300 ms to 200 ms and is told so.
    drop(b);
    assert!(c.is_woken());
    assert_pending!(c.poll());
    clock.advance(ms(100));
    assert!(assert_ready!(a.poll()).is_ok());
    clock.advance(ms(100));
    let pc = assert_ready!(c.poll()).unwrap();
    assert_eq!(pc.waited(), ms(200));
    // The next slot is at 300 ms, exactly as without b.
    assert_eq!(
        engine.try_admit(&call).unwrap_err().retry_after(),
        Some(ms(100))
    );
    assert_eq!(engine.tool_state("search", None).unwrap().waiting, 0);
}

#[test]
fn cancelling_the_last_waiter_restores_the_bucket_exactly() {
    let (engine, clock) = engine(WAIT);
    let call = Call::new("search");
    let _p = engine.try_admit(&call).unwrap();
    let mut a = task::spawn(engine.admit(&call));
    assert_pending!(a.poll());
    drop(a);
    assert_eq!(clock.sleepers(), 0);
    clock.advance(ms(100));
    assert_eq!(
        quota(&engine, "search", "tools.search.rate").available,
        Some(1)
    );
}

#[test]
fn a_cancelled_waiter_leaves_its_tenants_partition_free_to_be_evicted() {
    // One partition allowed: a second tenant gets in only once the first one's is
    // idle again, which a waiter that came and went must not change.
    let (engine, clock) = engine(
        "[tools.t]\nrate = \"1/s\"\nburst = 1\npartition = \"tenant\"\nmax_partitions = 1\n\
         on_limit = \"wait\"\nmax_wait = \"5s\"",
    );
    let a = Call::new("t").tenant("a");
    drop(engine.try_admit(&a).unwrap());
    let mut w = task::spawn(engine.admit(&a));
    assert_pending!(w.poll());
    drop(w);
    let b = Call::new("t").tenant("b");
    assert_eq!(
        engine.try_admit(&b).unwrap_err().reason().as_str(),
        "rate_limited"
    );
    clock.advance(ms(1_000));
    assert!(engine.try_admit(&b).is_ok());
    assert_eq!(quota(&engine, "t", "tools.t.rate").partitions, Some(1));
}

#[test]
fn cancellation_replays_waiters_behind_it_across_shared_pools() {
    let (engine, clock) = engine(
        r#"
        [pools.p]
        rate = "10/s"
        burst = 1
        [tools.a]
        rate = "10/s"
        burst = 1
        pools = ["p"]
        on_limit = "wait"
        [tools.b]
        pools = ["p"]
        on_limit = "wait"
        "#,
    );
    let _p = engine.try_admit(&Call::new("a")).unwrap();
    let (a, b) = (Call::new("a"), Call::new("b"));
    let mut a1 = task::spawn(engine.admit(&a)); // 100 ms
    let mut b1 = task::spawn(engine.admit(&b)); // 200 ms (pool)
    let mut a2 = task::spawn(engine.admit(&a)); // 300 ms (pool after b1)
    for t in [&mut a1, &mut b1, &mut a2] {
        assert_pending!(t.poll());
    }
    drop(a1);
    // b1 moves to 100 ms on the pool; a2 to 200 ms.
    clock.advance(ms(100));
    assert!(assert_ready!(b1.poll()).is_ok());
    assert_pending!(a2.poll());
    clock.advance(ms(100));
    assert_eq!(assert_ready!(a2.poll()).unwrap().waited(), ms(200));
}

#[test]
fn a_waiter_whose_time_has_come_counts_as_admitted_even_if_dropped_unpolled() {
    let (engine, clock) = engine(WAIT);
    let call = Call::new("search");
    let _p = engine.try_admit(&call).unwrap();
    let mut a = task::spawn(engine.admit(&call));
    assert_pending!(a.poll());
    clock.advance(ms(100));
    drop(a);
    // Its slot stays consumed: the next call fits at 200 ms, not 100 ms.
    assert_eq!(
        engine.try_admit(&call).unwrap_err().retry_after(),
        Some(ms(100))
    );
}

#[test]
fn concurrency_waiters_get_slots_in_fifo_order_as_permits_complete() {
    let (engine, clock) =
        engine("[tools.db]\nconcurrency = 1\non_limit = \"wait\"\nmax_wait = \"5s\"");
    let call = Call::new("db");
    let held = engine.try_admit(&call).unwrap();
    let mut a = task::spawn(engine.admit(&call));
    let mut b = task::spawn(engine.admit(&call));
    assert_pending!(a.poll());
    assert_pending!(b.poll());
    held.complete(Completion::success());
    assert!(a.is_woken());
    assert!(!b.is_woken());
    let pa = assert_ready!(a.poll()).unwrap();
    assert_pending!(b.poll());
    drop(pa);
    assert!(assert_ready!(b.poll()).is_ok());
    assert_eq!(clock.now(), 0);
}

#[test]
fn a_concurrency_wait_ends_at_max_wait_and_a_cancelled_one_frees_its_place() {
    let (engine, clock) =
        engine("[tools.db]\nconcurrency = 1\non_limit = \"wait\"\nmax_wait = \"2s\"");
    let call = Call::new("db");
    let held = engine.try_admit(&call).unwrap();
    let mut a = task::spawn(engine.admit(&call));
    let mut b = task::spawn(engine.admit(&call));
    assert_pending!(a.poll());
    assert_pending!(b.poll());
    drop(a); // cancelled: b is now first in line
    held.complete(Completion::success());
    let _pb = assert_ready!(b.poll()).unwrap();

    let mut c = task::spawn(engine.admit(&call));
    assert_pending!(c.poll());
    clock.advance(Duration::from_secs(2));
    let r = assert_ready!(c.poll()).unwrap_err();
    assert_eq!(
        (r.reason().as_str(), r.quota()),
        ("concurrency_limited", "tools.db.concurrency")
    );
}

#[test]
fn a_reject_mode_call_never_jumps_ahead_of_waiters() {
    let (engine, clock) = engine(
        "[tools.t]\nrate = \"10/s\"\nburst = 5\non_limit = \"wait\"\n[tools.u]\nrate = \"10/s\"\nburst = 5",
    );
    let t = Call::new("t");
    let mut keep = Vec::new();
    for _ in 0..5 {
        keep.push(engine.try_admit(&t).unwrap());
    }
    let mut w = task::spawn(engine.admit(&t));
    assert_pending!(w.poll()); // reserved at 100 ms
                               // try_admit on the same tool may not take the slot the waiter is promised.
    clock.advance(ms(50));
    assert_eq!(
        engine.try_admit(&t).unwrap_err().retry_after(),
        Some(ms(50 + 100))
    );
    clock.advance(ms(50));
    assert!(assert_ready!(w.poll()).is_ok());
}

#[tokio::test(start_paused = true)]
async fn waiting_on_the_system_clock_sleeps_until_the_conforming_time() {
    let engine = toolgate::Engine::new(toolgate::Policy::from_toml_str(WAIT).unwrap());
    let call = Call::new("search");
    let start = tokio::time::Instant::now();
    let mut waited = Vec::new();
    for _ in 0..4 {
        waited.push(engine.admit(&call).await.unwrap().waited());
    }
    assert_eq!(waited, [Duration::ZERO, ms(100), ms(100), ms(100)]);
    assert_eq!(start.elapsed(), ms(300));
}

#[test]
fn a_wait_cap_bounds_the_tools_and_the_calls_max_wait_and_never_makes_a_call_wait() {
    // Issue #13, item 9: the gateway caps every wait below its request timeout.
    let (engine, clock) = engine(&WAIT.replace("max_wait = \"1s\"", "max_wait = \"20s\""));
    let call = Call::new("search");
    let _p = engine.try_admit(&call).unwrap();
    // The next slot is 100 ms away: within the tool's 20 s, beyond a 50 ms cap.
    for capped in [
        call.cap_wait(ms(50)),
        call.max_wait(ms(30_000)).cap_wait(ms(50)),
    ] {
        let mut t = task::spawn(engine.admit(&capped));
        let r = assert_ready!(t.poll()).unwrap_err();
        assert_eq!(r.reason().as_str(), "max_wait_exceeded");
        assert_eq!(r.retry_after(), Some(ms(100)));
    }
    assert_eq!(clock.now(), 0, "refused without sleeping");
    assert_eq!(call.cap_wait(ms(50)).wait_limit(ms(20_000)), ms(50));
    assert_eq!(
        call.cap_wait(ms(50)).wait_limit(ms(10)),
        ms(10),
        "a cap only lowers"
    );
    // A cap within the wait lets it wait as usual.
    let within = call.cap_wait(ms(150));
    let mut t = task::spawn(engine.admit(&within));
    assert_pending!(t.poll());
    clock.advance(ms(100));
    assert!(assert_ready!(t.poll()).is_ok());

    // On a fail-fast tool a cap does not make the call wait.
    let reject = WAIT.replace("on_limit = \"wait\"", "on_limit = \"reject\"");
    let (fast, _clock) = crate::support::engine(&reject);
    let _p = fast.try_admit(&call).unwrap();
    let capped = call.cap_wait(ms(1_000));
    let mut t = task::spawn(fast.admit(&capped));
    let r = assert_ready!(t.poll()).unwrap_err();
    assert_eq!(r.reason().as_str(), "rate_limited");
}
