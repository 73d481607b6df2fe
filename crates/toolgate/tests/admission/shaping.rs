//! Server signals: an upstream's `Retry-After` pauses that tool, and only that tool.

use std::time::Duration;

use tokio_test::{assert_pending, assert_ready, task};
use toolgate::{Call, Completion, Outcome};

use crate::support::{assert_rejected, engine, ms};

#[test]
fn a_429_with_retry_after_pauses_only_that_tool() {
    let (engine, clock) = engine(
        "[tools.crm]\nrate = \"100/s\"\n[tools.search]\nrate = \"100/s\"\n[tools.waiter]\nrate = \"100/s\"",
    );
    engine
        .try_admit(&Call::new("crm"))
        .unwrap()
        .complete(Completion::new(Outcome::Error).retry_after(Duration::from_secs(2)));
    assert_rejected(
        engine.try_admit(&Call::new("crm")),
        "rate_limited",
        "tools.crm.retry_after",
        Some(Duration::from_secs(2)),
    );
    assert!(
        engine.try_admit(&Call::new("search")).is_ok(),
        "other tools are not paused"
    );
    clock.advance(ms(1_999));
    assert!(engine.try_admit(&Call::new("crm")).is_err());
    clock.advance(ms(1));
    assert!(engine.try_admit(&Call::new("crm")).is_ok());
}

#[test]
fn a_waiting_call_waits_the_pause_out_or_is_told_at_once_that_it_cannot() {
    let (engine, clock) =
        engine("[tools.crm]\nrate = \"100/s\"\non_limit = \"wait\"\nmax_wait = \"3s\"");
    engine
        .try_admit(&Call::new("crm"))
        .unwrap()
        .complete(Completion::new(Outcome::Error).retry_after(Duration::from_secs(2)));
    let call = Call::new("crm");
    let mut w = task::spawn(engine.admit(&call));
    assert_pending!(w.poll());
    clock.advance(Duration::from_secs(2));
    let p = assert_ready!(w.poll()).unwrap();
    assert_eq!(p.waited(), Duration::from_secs(2));

    // A longer pause than max_wait: rejected now, with the pause's end.
    drop(p);
    engine
        .try_admit(&Call::new("crm"))
        .unwrap()
        .complete(Completion::new(Outcome::Error).retry_after(Duration::from_secs(10)));
    let mut w = task::spawn(engine.admit(&call));
    let r = assert_ready!(w.poll()).unwrap_err();
    assert_eq!(r.reason().as_str(), "max_wait_exceeded");
    assert_eq!(r.retry_after(), Some(Duration::from_secs(10)));
}

#[allow(
    clippy::disallowed_methods,
    reason = "a reset time is read against the wall clock"
)]
fn low(remaining: u64, reset_secs: u64) -> Completion {
    let headers = [
        ("X-RateLimit-Limit", "100".to_string()),
        ("X-RateLimit-Remaining", remaining.to_string()),
        ("X-RateLimit-Reset", reset_secs.to_string()),
    ];
    let s = toolgate::shaping::server_limit(
        headers.iter().map(|(k, v)| (*k, v.as_str())),
        std::time::SystemTime::now(),
    )
    .unwrap();
    Completion::success().server_limit(s)
}

#[test]
fn under_a_tenth_left_the_remaining_calls_are_spread_over_the_reset_window() {
    let (engine, clock) = engine("[tools.crm]\nrate = \"100/s\"\n[tools.search]\nrate = \"100/s\"");
    // 4 of 100 left for the next 2 s: one call every 500 ms.
    engine
        .try_admit(&Call::new("crm"))
        .unwrap()
        .complete(low(4, 2));
    assert!(
        engine.try_admit(&Call::new("crm")).is_ok(),
        "the first slot is free"
    );
    assert_rejected(
        engine.try_admit(&Call::new("crm")),
        "rate_limited",
        "tools.crm.server_limit",
        Some(ms(500)),
    );
    assert!(
        engine.try_admit(&Call::new("search")).is_ok(),
        "other tools are not slowed"
    );
    clock.advance(ms(499));
    assert!(engine.try_admit(&Call::new("crm")).is_err());
    clock.advance(ms(1));
    assert!(engine.try_admit(&Call::new("crm")).is_ok());
    assert!(engine.try_admit(&Call::new("crm")).is_err());
    // After the window, the tool runs at its own rate again.
    clock.advance(Duration::from_secs(2));
    let burst = (0..10)
        .filter(|_| engine.try_admit(&Call::new("crm")).is_ok())
        .count();
    assert_eq!(burst, 10);
}

#[test]
fn a_report_with_room_ends_the_spreading_and_nothing_left_pauses_until_the_reset() {
    let (engine, clock) = engine("[tools.crm]\nrate = \"100/s\"");
    engine
        .try_admit(&Call::new("crm"))
        .unwrap()
        .complete(low(2, 10));
    let p = engine.try_admit(&Call::new("crm")).unwrap();
    assert!(engine.try_admit(&Call::new("crm")).is_err());
    p.complete(low(50, 10));
    assert!(engine.try_admit(&Call::new("crm")).is_ok(), "room again");
    assert!(engine.try_admit(&Call::new("crm")).is_ok());

    engine
        .try_admit(&Call::new("crm"))
        .unwrap()
        .complete(low(0, 3));
    assert_rejected(
        engine.try_admit(&Call::new("crm")),
        "rate_limited",
        "tools.crm.retry_after",
        Some(Duration::from_secs(3)),
    );
    clock.advance(Duration::from_secs(3));
    assert!(engine.try_admit(&Call::new("crm")).is_ok());
}

#[test]
fn a_slot_refused_by_a_quota_is_given_back() {
    let (engine, clock) = engine("[tools.crm]\nconcurrency = 1");
    let p = engine.try_admit(&Call::new("crm")).unwrap();
    engine.try_admit(&Call::new("crm")).err().unwrap();
    p.complete(low(4, 2));
    let held = engine.try_admit(&Call::new("crm")).unwrap(); // takes the slot at t=0
    clock.advance(ms(500));
    // The next slot is free, but the concurrency quota refuses: the slot stays free.
    assert_rejected(
        engine.try_admit(&Call::new("crm")),
        "concurrency_limited",
        "tools.crm.concurrency",
        None,
    );
    drop(held);
    assert!(engine.try_admit(&Call::new("crm")).is_ok());
}

#[test]
fn a_slot_claimed_by_a_refused_reservation_is_given_back() {
    // All-or-nothing: a reservation that a later call's quota refuses consumes
    // nothing, the spreading slot its first call claimed included.
    let (engine, clock) = engine("[tools.crm]\nrate = \"100/s\"\n[tools.db]\nconcurrency = 1");
    engine
        .try_admit(&Call::new("crm"))
        .unwrap()
        .complete(low(4, 2));
    let held = engine.try_admit(&Call::new("db")).unwrap();
    let no = engine
        .try_admit_all(&[Call::new("crm"), Call::new("db")])
        .unwrap_err();
    assert_eq!(
        (no.reason().as_str(), no.quota()),
        ("concurrency_limited", "tools.db.concurrency")
    );
    drop(held);
    // The slot is still free, and only one: the next is 500 ms away.
    assert!(engine.try_admit(&Call::new("crm")).is_ok());
    assert!(engine.try_admit(&Call::new("crm")).is_err());
    clock.advance(ms(500));
    assert!(engine.try_admit(&Call::new("crm")).is_ok());
}

#[test]
fn waiters_are_given_the_spread_slots_in_turn() {
    let (engine, clock) =
        engine("[tools.crm]\nrate = \"100/s\"\non_limit = \"wait\"\nmax_wait = \"2s\"");
    engine
        .try_admit(&Call::new("crm"))
        .unwrap()
        .complete(low(5, 5)); // one per second
    let call = Call::new("crm");
    let first = engine.try_admit(&call).unwrap();
    let mut a = task::spawn(engine.admit(&call));
    let mut b = task::spawn(engine.admit(&call));
    assert_pending!(a.poll());
    assert_pending!(b.poll());
    // A third would be admitted 3 s from now: beyond its max_wait, refused at once.
    let mut c = task::spawn(engine.admit(&call));
    let r = assert_ready!(c.poll()).unwrap_err();
    assert_eq!(r.reason().as_str(), "max_wait_exceeded");
    clock.advance(Duration::from_secs(1));
    let pa = assert_ready!(a.poll()).unwrap();
    assert_pending!(b.poll());
    clock.advance(Duration::from_secs(1));
    let pb = assert_ready!(b.poll()).unwrap();
    assert_eq!(
        (pa.waited(), pb.waited()),
        (Duration::from_secs(1), Duration::from_secs(2))
    );
    drop((first, pa, pb));
}

#[test]
fn a_pause_that_comes_while_calls_wait_is_waited_out_in_fifo_order_or_refused_at_once() {
    // Issue #13, item 13: waiters used to be admitted at their slots, during the pause.
    let (engine, clock) =
        engine("[tools.crm]\nrate = \"10/s\"\nburst = 2\non_limit = \"wait\"\nmax_wait = \"3s\"");
    let call = Call::new("crm");
    let failing = engine.try_admit(&call).unwrap();
    let _other = engine.try_admit(&call).unwrap();
    let short = call.max_wait(ms(500));
    let calls = [call, call, short, call];
    let mut w: Vec<_> = calls.iter().map(|c| task::spawn(engine.admit(c))).collect();
    for t in &mut w {
        assert_pending!(t.poll()); // due at 100, 200, 300 and 400 ms
    }
    failing.complete(Completion::new(Outcome::Error).retry_after(Duration::from_secs(2)));
    // The pause outlasts the third waiter's max_wait: refused now, with the pause's end.
    let r = assert_ready!(w[2].poll()).unwrap_err();
    assert_eq!(
        (r.reason().as_str(), r.quota(), r.retry_after()),
        (
            "max_wait_exceeded",
            "tools.crm.retry_after",
            Some(Duration::from_secs(2))
        )
    );
    clock.advance(ms(1_999));
    for i in [0, 1, 3] {
        assert_pending!(w[i].poll());
    }
    // At the pause's end, as many as the bucket allows (its burst, 2), in order;
    // then one per emission interval, as if the others had arrived then.
    clock.advance(ms(1));
    assert_eq!(assert_ready!(w[0].poll()).unwrap().waited(), ms(2_000));
    assert_eq!(assert_ready!(w[1].poll()).unwrap().waited(), ms(2_000));
    assert_pending!(w[3].poll());
    clock.advance(ms(100));
    assert_eq!(assert_ready!(w[3].poll()).unwrap().waited(), ms(2_100));
    // And a new call comes after them.
    assert_rejected(
        engine.try_admit(&call),
        "rate_limited",
        "tools.crm.rate",
        Some(ms(100)),
    );
}

#[test]
fn a_pause_that_comes_while_a_call_queues_for_concurrency_is_waited_out() {
    let (engine, clock) =
        engine("[tools.db]\nconcurrency = 1\non_limit = \"wait\"\nmax_wait = \"5s\"");
    let call = Call::new("db");
    let held = engine.try_admit(&call).unwrap();
    let mut w = task::spawn(engine.admit(&call));
    let brief = call.max_wait(ms(500));
    let mut short = task::spawn(engine.admit(&brief));
    assert_pending!(w.poll());
    assert_pending!(short.poll());
    held.complete(Completion::new(Outcome::Error).retry_after(Duration::from_secs(2)));
    // The pause outlasts the second one's max_wait: refused now.
    let r = assert_ready!(short.poll()).unwrap_err();
    assert_eq!(r.reason().as_str(), "max_wait_exceeded");
    // The first has its slot, and waits the pause out.
    assert_pending!(w.poll());
    clock.advance(ms(1_999));
    assert_pending!(w.poll());
    clock.advance(ms(1));
    assert_eq!(
        assert_ready!(w.poll()).unwrap().waited(),
        Duration::from_secs(2)
    );
}

#[test]
fn spreading_that_starts_while_calls_wait_spaces_them_by_its_interval() {
    // Issue #13, item 13, for rate-limit headers: waiters used to keep their slots.
    let (engine, clock) =
        engine("[tools.crm]\nrate = \"100/s\"\nburst = 1\non_limit = \"wait\"\nmax_wait = \"5s\"");
    let call = Call::new("crm");
    let reporting = engine.try_admit(&call).unwrap();
    let short = call.max_wait(Duration::from_millis(1_500));
    let calls = [call, call, call, short];
    let mut w: Vec<_> = calls.iter().map(|c| task::spawn(engine.admit(c))).collect();
    for t in &mut w {
        assert_pending!(t.poll()); // due at 10, 20, 30 and 40 ms
    }
    reporting.complete(low(4, 4)); // 4 left for 4 s: one call a second
                                   // The fourth one's slot would come at 3 s, beyond its max_wait: refused now.
    let r = assert_ready!(w[3].poll()).unwrap_err();
    assert_eq!(
        (r.reason().as_str(), r.quota()),
        ("max_wait_exceeded", "tools.crm.server_limit")
    );
    let mut admitted = Vec::new();
    for _ in 0..400 {
        clock.advance(ms(10));
        for t in &mut w[..3] {
            if t.is_woken() {
                if let std::task::Poll::Ready(p) = t.poll() {
                    admitted.push(p.unwrap().waited());
                }
            }
        }
    }
    assert_eq!(admitted, [ms(10), ms(1_010), ms(2_010)]);
}

#[test]
fn a_report_with_room_lets_the_spread_waiters_move_up() {
    let (engine, clock) =
        engine("[tools.crm]\nrate = \"100/s\"\nburst = 1\non_limit = \"wait\"\nmax_wait = \"5s\"");
    let call = Call::new("crm");
    engine.try_admit(&call).unwrap().complete(low(4, 4));
    clock.advance(ms(10));
    let reporting = engine.try_admit(&call).unwrap(); // the first slot
    let mut a = task::spawn(engine.admit(&call));
    assert_pending!(a.poll()); // the next slot, at 1 s
    reporting.complete(low(50, 4)); // room again: the spreading ends
    clock.advance(ms(10));
    assert_eq!(assert_ready!(a.poll()).unwrap().waited(), ms(10));
}
