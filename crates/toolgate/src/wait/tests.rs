//! The wait path's answers to gates that move without the re-gating reaching the
//! waiter (between an upstream's signal, or a trip, and the scheduler's lock): the
//! waiter sees them itself when it wakes.
use std::time::Duration;

use tokio_test::{assert_pending, assert_ready, task};

use crate::clock::ManualClock;
use crate::vocab::{Call, Outcome};
use crate::{Engine, Policy};

use super::*;

const MS: Nanos = 1_000_000;

fn engine(toml: &str) -> (Engine, ManualClock, Arc<ToolRuntime>) {
    let clock = ManualClock::new();
    let engine = Engine::with_clock(
        Policy::from_toml_str(toml).unwrap_or_else(|e| panic!("{e}")),
        Arc::new(clock.clone()),
    );
    let tool = engine.live().compiled().tools.get("t").cloned();
    (engine, clock, tool.unwrap_or_else(|| panic!("no tool t")))
}

#[test]
fn a_waiter_that_wakes_into_a_pause_the_regating_missed_waits_it_out() {
    let (engine, clock, tool) =
        engine("[tools.t]\nrate = \"10/s\"\nburst = 1\non_limit = \"wait\"\nmax_wait = \"5s\"");
    let call = Call::new("t");
    let _first = engine.try_admit(&call);
    let mut w = task::spawn(engine.admit(&call));
    assert_pending!(w.poll()); // due at 100 ms
                               // A pause taken in between the signal and the scheduler's lock: no re-gating.
    let _ = tool.upstream.signals.pause_until(0, 2_000 * MS);
    clock.advance(Duration::from_millis(100));
    // Its time has come, but the gate is closed: it gives its token back and
    // waits the pause out.
    assert_pending!(w.poll());
    clock.advance(Duration::from_millis(1_899));
    assert_pending!(w.poll());
    clock.advance(Duration::from_millis(1));
    let p = assert_ready!(w.poll()).unwrap_or_else(|r| panic!("{r}"));
    assert_eq!(p.waited(), Duration::from_secs(2));
}

#[test]
fn a_waiter_that_wakes_into_a_pause_beyond_its_deadline_is_refused() {
    let (engine, clock, tool) =
        engine("[tools.t]\nrate = \"10/s\"\nburst = 1\non_limit = \"wait\"\nmax_wait = \"1s\"");
    let call = Call::new("t");
    let _first = engine.try_admit(&call);
    let mut w = task::spawn(engine.admit(&call));
    assert_pending!(w.poll());
    let _ = tool.upstream.signals.pause_until(0, 2_000 * MS);
    clock.advance(Duration::from_millis(100));
    let r = assert_ready!(w.poll()).map(drop).unwrap_err();
    assert_eq!(
        (r.reason().as_str(), r.quota(), r.retry_after()),
        (
            "max_wait_exceeded",
            "tools.t.retry_after",
            Some(Duration::from_millis(1_900))
        )
    );
    assert_eq!(engine.available("t", "tools.t.rate", None), Some(1));
}

#[test]
fn a_waiter_that_wakes_after_a_trip_the_regating_missed_is_refused_and_gives_back() {
    let (engine, clock, tool) = engine(
        "[tools.t]\nrate = \"10/s\"\nburst = 1\non_limit = \"wait\"\nmax_wait = \"1s\"\n\
         [tools.t.circuit]\nwindow = 1\nmin_calls = 1\nopen_for = \"10s\"",
    );
    let call = Call::new("t");
    let _first = engine.try_admit(&call);
    let mut w = task::spawn(engine.admit(&call));
    assert_pending!(w.poll());
    // The breaker trips, and the waiters do not hear of it.
    let breaker = tool
        .breaker
        .as_ref()
        .unwrap_or_else(|| panic!("no breaker"));
    assert!(breaker.record(Outcome::Error, None, false, 0));
    clock.advance(Duration::from_millis(100));
    let r = assert_ready!(w.poll()).map(drop).unwrap_err();
    assert_eq!(r.reason().as_str(), "circuit_open");
    assert_eq!(engine.available("t", "tools.t.rate", None), Some(1));
}
