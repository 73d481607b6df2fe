//! Model checks (loom) of the engine's shared state: every interleaving of the
//! threads below is explored. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p toolgate --test loom --release`.

#![cfg(loom)]
#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use loom::thread;
use toolgate::{Call, Engine, ManualClock, Policy};

fn engine(toml: &str) -> Engine {
    Engine::with_clock(
        Policy::from_toml_str(toml).unwrap(),
        Arc::new(ManualClock::new()),
    )
}

fn available(engine: &Engine, tool: &str, quota: &str) -> Option<u64> {
    let state = engine.tool_state(tool, None).unwrap();
    state
        .quotas
        .into_iter()
        .find(|q| q.quota == quota)
        .unwrap()
        .available
}

#[test]
fn two_tools_racing_for_the_last_pool_token_admit_exactly_one() {
    loom::model(|| {
        let engine = engine(
            "[pools.p]\nrate = \"1/h\"\n[tools.a]\nrate = \"1/h\"\npools = [\"p\"]\n[tools.b]\nrate = \"1/h\"\npools = [\"p\"]",
        );
        let (e1, e2) = (engine.clone(), engine.clone());
        let t1 = thread::spawn(move || e1.try_admit(&Call::new("a")).map(drop).is_ok());
        let t2 = thread::spawn(move || e2.try_admit(&Call::new("b")).map(drop).is_ok());
        let admitted = usize::from(t1.join().unwrap()) + usize::from(t2.join().unwrap());
        assert_eq!(admitted, 1);
        // The loser consumed nothing of its own quota.
        let left = available(&engine, "a", "tools.a.rate").unwrap()
            + available(&engine, "b", "tools.b.rate").unwrap();
        assert_eq!(left, 1);
    });
}

#[test]
fn releasing_and_acquiring_concurrency_never_loses_or_duplicates_a_slot() {
    loom::model(|| {
        let engine = engine("[tools.db]\nconcurrency = 1");
        let held = engine.try_admit(&Call::new("db")).unwrap();
        let e2 = engine.clone();
        let releaser = thread::spawn(move || drop(held));
        let taker = thread::spawn(move || e2.try_admit(&Call::new("db")).ok());
        releaser.join().unwrap();
        let second = taker.join().unwrap();
        let expected = if second.is_some() { 0 } else { 1 };
        assert_eq!(
            available(&engine, "db", "tools.db.concurrency"),
            Some(expected)
        );
        drop(second);
        assert_eq!(available(&engine, "db", "tools.db.concurrency"), Some(1));
    });
}

#[test]
fn a_concurrency_waiter_cancelled_while_being_granted_gives_the_slot_back() {
    loom::model(|| {
        let engine = engine("[tools.db]\nconcurrency = 1\non_limit = \"wait\"\nmax_wait = \"1s\"");
        let held = engine.try_admit(&Call::new("db")).unwrap();
        let e = engine.clone();
        let mut waiter = Box::pin(async move { e.admit(&Call::new("db")).await.map(drop) });
        let mut cx = Context::from_waker(Waker::noop());
        assert!(waiter.as_mut().poll(&mut cx).is_pending());
        let releaser = thread::spawn(move || drop(held));
        let canceller = thread::spawn(move || drop(waiter));
        releaser.join().unwrap();
        canceller.join().unwrap();
        assert_eq!(available(&engine, "db", "tools.db.concurrency"), Some(1));
    });
}

#[test]
fn a_waiter_cancelled_while_another_completes_leaves_exact_accounting() {
    loom::model(|| {
        roomy(waiter_cancelled_while_another_completes)
            .join()
            .unwrap()
    });
}

/// A loom thread with room for the wait path's frames (loom's default stack is
/// 32 KiB, which polling and dropping a waiting admission can outgrow).
fn roomy<T: Send + 'static, F: FnOnce() -> T + Send + 'static>(f: F) -> thread::JoinHandle<T> {
    thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(f)
        .expect("a loom thread")
}

fn waiter_cancelled_while_another_completes() {
    {
        let engine =
            engine("[tools.s]\nrate = \"10/s\"\nburst = 1\non_limit = \"wait\"\nmax_wait = \"1s\"");
        let _first = engine.try_admit(&Call::new("s")).unwrap();
        let (e1, e2) = (engine.clone(), engine.clone());
        let mut a = Box::pin(async move { e1.admit(&Call::new("s")).await.map(drop) });
        let mut b = Box::pin(async move { e2.admit(&Call::new("s")).await.map(drop) });
        let mut cx = Context::from_waker(Waker::noop());
        assert!(a.as_mut().poll(&mut cx).is_pending());
        assert!(b.as_mut().poll(&mut cx).is_pending());
        let t1 = roomy(move || drop(a));
        let t2 = roomy(move || {
            let mut cx = Context::from_waker(Waker::noop());
            let r = b.as_mut().poll(&mut cx);
            (r, b)
        });
        t1.join().unwrap();
        let (r, b) = t2.join().unwrap();
        assert!(matches!(r, Poll::Pending));
        drop(b);
        // Both waiters gone before their time: the bucket is as after `_first` alone.
        let next = engine.try_admit(&Call::new("s")).unwrap_err();
        assert_eq!(
            next.retry_after(),
            Some(std::time::Duration::from_millis(100))
        );
    }
}
#[test]
fn two_calls_racing_for_the_last_token_of_a_tool_and_its_pool_admit_exactly_one() {
    loom::model(|| {
        let engine =
            engine("[pools.p]\nrate = \"1/h\"\n[tools.a]\nrate = \"1/h\"\npools = [\"p\"]");
        let (e1, e2) = (engine.clone(), engine.clone());
        let t1 = thread::spawn(move || e1.try_admit(&Call::new("a")).map(drop).is_ok());
        let t2 = thread::spawn(move || e2.try_admit(&Call::new("a")).map(drop).is_ok());
        assert!(t1.join().unwrap() ^ t2.join().unwrap());
    });
}

/// An engine on `toml` whose tool `crm` has just been told by its upstream that 1 of
/// 100 calls is left for 10 s (the telling call took the tool's first rate token).
fn spreading(toml: &str) -> Engine {
    let engine = engine(toml);
    let limit =
        toolgate::shaping::ServerLimit::new(Some(100), 1, std::time::Duration::from_secs(10));
    engine
        .try_admit(&Call::new("crm"))
        .unwrap()
        .complete(toolgate::Completion::success().server_limit(limit));
    engine
}

#[test]
fn two_calls_racing_for_one_spread_slot_admit_exactly_one() {
    loom::model(|| {
        // The upstream said 1 of 100 is left for 10 s: one slot now, the next in 10 s.
        let engine = spreading("[tools.crm]\nrate = \"1000/s\"");
        let (e1, e2) = (engine.clone(), engine.clone());
        let t1 = thread::spawn(move || e1.try_admit(&Call::new("crm")).map(drop).is_ok());
        let t2 = thread::spawn(move || e2.try_admit(&Call::new("crm")).map(drop).is_ok());
        let admitted = usize::from(t1.join().unwrap()) + usize::from(t2.join().unwrap());
        assert_eq!(admitted, 1);
    });
}

#[test]
fn spread_slots_given_back_by_refused_calls_are_not_lost() {
    loom::model(|| {
        // A free spread slot, but the only rate token went to the telling call.
        let engine = spreading("[tools.crm]\nrate = \"1/h\"");
        // Two racers each take the free spread slot (or find it taken), are refused
        // by the rate quota, and give the slot back.
        let (e1, e2) = (engine.clone(), engine.clone());
        let t1 = thread::spawn(move || e1.try_admit(&Call::new("crm")).map(drop).is_err());
        let t2 = thread::spawn(move || e2.try_admit(&Call::new("crm")).map(drop).is_err());
        assert!(t1.join().unwrap() && t2.join().unwrap());
        // The slot is free again: the next call is refused by the rate, not by the
        // spreading.
        let no = engine.try_admit(&Call::new("crm")).unwrap_err();
        assert_eq!(no.quota(), "tools.crm.rate");
    });
}

#[test]
fn two_calls_racing_on_the_lock_free_bucket_admit_exactly_one() {
    loom::model(|| {
        let engine = engine("[tools.t]\nrate = \"1/h\"");
        let e1 = engine.clone();
        let t1 = thread::spawn(move || e1.tool("t").try_admit_scoped(&Call::new("t")).is_ok());
        let here = engine.tool("t").try_admit_scoped(&Call::new("t")).is_ok();
        assert_eq!(usize::from(t1.join().unwrap()) + usize::from(here), 1);
    });
}

#[test]
fn the_locked_path_carries_the_lock_free_state_out_and_back_without_losing_a_charge() {
    // A read through the cell's lock takes the state out of the word and writes it
    // back while a call is admitted by compare-and-swap; then a second call.
    loom::model(|| {
        let engine = engine("[tools.t]\nrate = \"1/h\"");
        let e1 = engine.clone();
        let t1 = thread::spawn(move || e1.tool("t").try_admit_scoped(&Call::new("t")).is_ok());
        let seen = available(&engine, "t", "tools.t.rate").unwrap();
        let first = t1.join().unwrap();
        assert!(first);
        assert!(seen <= 1);
        assert_eq!(available(&engine, "t", "tools.t.rate"), Some(0));
        assert!(engine.tool("t").try_admit_scoped(&Call::new("t")).is_err());
    });
}
