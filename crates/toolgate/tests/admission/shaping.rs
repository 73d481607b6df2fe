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
