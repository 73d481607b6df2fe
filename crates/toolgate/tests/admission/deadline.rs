//! Waits tied to the caller's deadline: the wait is bounded by `min(max_wait,
//! deadline − now − p90 latency)`, a call admitted too late to finish is refused at
//! once (`max_wait_exceeded` by `deadline`), and a call without a deadline is decided
//! as before — all on a manual clock.

use tokio_test::task;
use tokio_test::{assert_pending, assert_ready};
use toolgate::{Call, Clock, Completion, Engine, ManualClock, Priority, Rejection};

use crate::support::{engine, ms};

const TOOL: &str = r#"
[tools.search]
rate = "10/s"
burst = 10
on_limit = "wait"
max_wait = "1s"
"#;

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap()
}

/// An engine whose tool has completed ten calls of 10, 20, … 100 ms (p90: 90 ms) and
/// spent its burst on them: the next call conforms 100 ms from now.
fn observed() -> (Engine, ManualClock) {
    let (engine, clock) = engine(TOOL);
    for i in 1..=10 {
        let p = engine.try_admit(&Call::new("search")).unwrap();
        p.complete(Completion::success().latency(ms(10 * i)));
    }
    (engine, clock)
}

fn assert_past_deadline(r: &Rejection) {
    assert_eq!(r.reason().as_str(), "max_wait_exceeded");
    assert_eq!(r.quota(), "deadline");
    assert!(r.is_past_deadline());
    assert_eq!(r.retry_after(), None);
}

#[test]
fn a_call_whose_deadline_leaves_less_than_the_p90_after_its_predicted_admission_is_refused_at_once()
{
    let (engine, clock) = observed();
    let now = clock.now();
    // Admitted at +100 ms, it needs 90 ms more: a deadline at +189 ms is too soon.
    let call = Call::new("search").deadline(now + nanos(ms(189)));
    let mut t = task::spawn(engine.admit(&call));
    let r = assert_ready!(t.poll()).unwrap_err();
    assert_past_deadline(&r);
    assert_eq!(clock.now(), now, "refused without sleeping");
    assert_eq!(clock.sleepers(), 0);
    let state = engine.tool_state("search", None).unwrap();
    assert_eq!(state.waiting, 0);
}

#[test]
fn a_call_with_room_before_its_deadline_waits_and_is_admitted() {
    let (engine, clock) = observed();
    let now = clock.now();
    // +100 ms + 90 ms = +190 ms: exactly enough room.
    let call = Call::new("search")
        .deadline(now + nanos(ms(190)))
        .priority(Priority::Interactive);
    let mut t = task::spawn(engine.admit(&call));
    assert_pending!(t.poll());
    clock.advance(ms(100));
    let p = assert_ready!(t.poll()).unwrap();
    assert_eq!(p.waited(), ms(100));
}

#[test]
fn without_a_deadline_nothing_changes() {
    let (engine, clock) = observed();
    // The same call waits its max_wait, whatever the latency.
    let call = Call::new("search");
    let mut waiting: Vec<_> = (0..9).map(|_| task::spawn(engine.admit(&call))).collect();
    for t in &mut waiting {
        assert_pending!(t.poll());
    }
    for (i, t) in waiting.iter_mut().enumerate() {
        clock.advance(ms(100));
        let p = assert_ready!(t.poll()).unwrap();
        assert_eq!(p.waited(), ms(100 * (i as u64 + 1)));
    }
}

#[test]
fn an_immediate_admission_is_refused_when_the_p90_does_not_fit_before_the_deadline() {
    let (engine, clock) = engine(TOOL);
    let p = engine.try_admit(&Call::new("search")).unwrap();
    p.complete(Completion::success().latency(ms(90)));
    let now = clock.now();
    let tight = Call::new("search").deadline(now + nanos(ms(89)));
    assert_past_deadline(&engine.try_admit(&tight).unwrap_err());
    let handle = engine.tool("search");
    assert_past_deadline(&handle.try_admit_scoped(&tight).map(drop).unwrap_err());
    assert_past_deadline(&engine.try_admit_all(&[tight]).unwrap_err());
    // Nothing was charged by the refusals: nine of the burst are left.
    let enough = Call::new("search").deadline(now + nanos(ms(90)));
    assert!(engine.try_admit(&enough).is_ok());
    assert!(handle.try_admit_scoped(&enough).is_ok());
    assert_eq!(
        engine.available("search", "tools.search.rate", None),
        Some(7)
    );
}

#[test]
fn a_deadline_already_past_is_refused_at_once_even_with_no_latency_known() {
    let (engine, clock) = engine(TOOL);
    clock.advance(ms(1_000));
    let past = Call::new("search").deadline(clock.now() - 1);
    assert_past_deadline(&engine.try_admit(&past).unwrap_err());
    let mut t = task::spawn(engine.admit(&past));
    assert_past_deadline(&assert_ready!(t.poll()).unwrap_err());
    // With no latency known the expected run time is zero: `now` itself still fits.
    assert!(engine.try_admit(&past.deadline(clock.now())).is_ok());
}

#[test]
fn max_wait_still_binds_when_it_comes_before_the_deadline() {
    let (engine, clock) = observed();
    let far = clock.now() + nanos(ms(10_000));
    let call = Call::new("search").deadline(far).max_wait(ms(50));
    let mut t = task::spawn(engine.admit(&call));
    let r = assert_ready!(t.poll()).unwrap_err();
    // The wait is refused as before, naming the quota, not the deadline.
    assert_eq!(r.reason().as_str(), "max_wait_exceeded");
    assert_eq!(r.quota(), "tools.search.rate");
}

#[test]
fn a_deadline_never_makes_a_fail_fast_tool_wait() {
    let (engine, clock) = engine(&TOOL.replace("on_limit = \"wait\"", "on_limit = \"reject\""));
    let far = clock.now() + nanos(ms(10_000));
    let call = Call::new("search").deadline(far);
    for _ in 0..10 {
        assert!(engine.try_admit(&call).is_ok());
    }
    let mut t = task::spawn(engine.admit(&call));
    let r = assert_ready!(t.poll()).unwrap_err();
    assert_eq!(r.reason().as_str(), "rate_limited");
}

#[test]
fn a_call_carries_its_priority_and_deadline() {
    let call = Call::new("search");
    assert_eq!(call.priority_class(), Priority::Default);
    assert_eq!(call.deadline_at(), None);
    let call = call.priority(Priority::Batch).deadline(7);
    assert_eq!(call.priority_class(), Priority::Batch);
    assert_eq!(call.deadline_at(), Some(7));
    assert_eq!(call.with_deadline(None).deadline_at(), None);
    assert_eq!(call.deadline(u64::MAX).deadline_at(), Some(u64::MAX - 1));
}
