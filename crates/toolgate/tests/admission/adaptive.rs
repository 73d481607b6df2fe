//! Adaptive concurrency driving a tool's concurrency quota.

use std::time::Duration;

use toolgate::{Call, Completion, Outcome};

use crate::support::{admit_n, engine, quota};

#[test]
fn the_learnt_limit_drives_the_concurrency_quota() {
    let (engine, _clock) = engine(
        "[tools.db.adaptive]\nalgorithm = \"aimd\"\ntarget_latency = \"100ms\"\nmin = 1\nmax = 4\ninitial = 2\nbackoff = 0.5",
    );
    let call = Call::new("db");
    let mut held = Vec::new();
    assert_eq!(admit_n(&engine, &call, 3, &mut held), 2);
    assert_eq!(quota(&engine, "db", "tools.db.concurrency").capacity, 2);

    // A fast success: the limit grows to 3, and the finished call's slot is free.
    held.remove(0)
        .complete(Completion::success().latency(Duration::from_millis(50)));
    assert_eq!(
        engine.tool_state("db", None).unwrap().adaptive_limit,
        Some(3)
    );
    assert_eq!(admit_n(&engine, &call, 5, &mut held), 2);

    // An error halves it: with 3 in flight and a limit of 1, nothing more gets in.
    held.remove(0).complete(Completion::new(Outcome::Error));
    assert_eq!(
        engine.tool_state("db", None).unwrap().adaptive_limit,
        Some(1)
    );
    assert_eq!(admit_n(&engine, &call, 5, &mut held), 0);
    held.clear();
    assert_eq!(admit_n(&engine, &call, 5, &mut held), 1);
}

#[test]
fn a_waiter_is_admitted_as_soon_as_the_limit_grows() {
    let (engine, _clock) = engine(
        "[tools.db]\non_limit = \"wait\"\nmax_wait = \"5s\"\n[tools.db.adaptive]\nalgorithm = \"aimd\"\ntarget_latency = \"100ms\"\nmin = 1\nmax = 4\ninitial = 1",
    );
    let call = Call::new("db");
    let first = engine.try_admit(&call).unwrap();
    let second = engine.try_admit(&call).unwrap_err();
    assert_eq!(second.reason().as_str(), "concurrency_limited");
    let mut waiter = tokio_test::task::spawn(engine.admit(&call));
    assert!(waiter.poll().is_pending());
    // Another tool's call cannot help; the first call's fast success both frees its
    // slot and raises the limit to 2: the waiter gets in, and there is room for one more.
    first.complete(Completion::success().latency(Duration::from_millis(10)));
    assert!(waiter.is_woken());
    let _w = match waiter.poll() {
        std::task::Poll::Ready(r) => r.unwrap(),
        std::task::Poll::Pending => panic!("still waiting"),
    };
    assert!(engine.try_admit(&call).is_ok());
}
