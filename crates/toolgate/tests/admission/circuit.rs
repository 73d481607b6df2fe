//! The circuit breaker, on a manual clock: every transition.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_test::{assert_pending, assert_ready, task};
use toolgate::{Call, CircuitState, Completion, Outcome};

use crate::support::{assert_rejected, engine, ms, quota};

const BREAKER: &str = r#"
[tools.pay]
rate = "100/s"
[tools.pay.circuit]
window = 4
min_calls = 4
failure_rate = 0.5
open_for = "10s"
open_for_max = "40s"
open_for_multiplier = 2.0
half_open_probes = 2
close_after = 2
slow_call = "2s"
"#;

fn run(engine: &toolgate::Engine, outcome: Outcome) {
    engine
        .try_admit(&Call::new("pay"))
        .unwrap()
        .complete(Completion::new(outcome));
}

fn state(engine: &toolgate::Engine) -> Option<CircuitState> {
    engine.tool_state("pay", None).unwrap().circuit
}

#[test]
fn failures_open_the_circuit_which_rejects_without_consuming_anything() {
    let (engine, clock) = engine(BREAKER);
    run(&engine, Outcome::Success);
    run(&engine, Outcome::Error);
    run(&engine, Outcome::Success);
    assert_eq!(
        state(&engine),
        Some(CircuitState::Closed),
        "min_calls not reached"
    );
    run(&engine, Outcome::Timeout);
    assert_eq!(state(&engine), Some(CircuitState::Open));

    clock.advance(ms(1_500));
    let before = quota(&engine, "pay", "tools.pay.rate").available;
    let r = engine.try_admit(&Call::new("pay")).unwrap_err();
    assert_eq!(
        (r.reason().as_str(), r.quota()),
        ("circuit_open", "tools.pay.circuit")
    );
    assert_eq!(r.retry_after(), Some(ms(8_500)));
    assert_eq!(quota(&engine, "pay", "tools.pay.rate").available, before);
}

#[test]
fn half_open_admits_exactly_the_probes_and_closes_after_enough_successes() {
    let (engine, clock) = engine(BREAKER);
    for _ in 0..4 {
        run(&engine, Outcome::Error);
    }
    clock.advance(Duration::from_secs(10));
    let p1 = engine.try_admit(&Call::new("pay")).unwrap();
    assert_eq!(state(&engine), Some(CircuitState::HalfOpen));
    let p2 = engine.try_admit(&Call::new("pay")).unwrap();
    assert_eq!(
        engine
            .try_admit(&Call::new("pay"))
            .unwrap_err()
            .reason()
            .as_str(),
        "circuit_open"
    );
    p1.complete(Completion::success());
    assert_eq!(state(&engine), Some(CircuitState::HalfOpen));
    // One probe has succeeded, one is in flight: still no room for a third.
    assert!(engine.try_admit(&Call::new("pay")).is_err());
    p2.complete(Completion::success());
    assert_eq!(state(&engine), Some(CircuitState::Closed));
    assert!(engine.try_admit(&Call::new("pay")).is_ok());
}

#[test]
fn a_failed_probe_reopens_with_a_longer_open_period_up_to_the_cap() {
    let (engine, clock) = engine(BREAKER);
    for _ in 0..4 {
        run(&engine, Outcome::Error);
    }
    for open_for in [20, 40, 40] {
        clock.advance(Duration::from_secs(40));
        run(&engine, Outcome::Error); // the probe fails
        assert_eq!(state(&engine), Some(CircuitState::Open));
        let r = engine.try_admit(&Call::new("pay")).unwrap_err();
        assert_eq!(r.retry_after(), Some(Duration::from_secs(open_for)));
    }
}

#[test]
fn a_cancelled_probe_frees_its_slot() {
    let (engine, clock) = engine(BREAKER);
    for _ in 0..4 {
        run(&engine, Outcome::Error);
    }
    clock.advance(Duration::from_secs(10));
    let a = engine.try_admit(&Call::new("pay")).unwrap();
    let b = engine.try_admit(&Call::new("pay")).unwrap();
    assert!(engine.try_admit(&Call::new("pay")).is_err());
    drop(a); // cancelled: no outcome
    let c = engine.try_admit(&Call::new("pay")).unwrap();
    b.complete(Completion::success());
    c.complete(Completion::success());
    assert_eq!(state(&engine), Some(CircuitState::Closed));
}

#[test]
fn slow_calls_count_as_failures() {
    let (engine, _clock) = engine(BREAKER);
    for _ in 0..4 {
        engine
            .try_admit(&Call::new("pay"))
            .unwrap()
            .complete(Completion::success().latency(Duration::from_secs(3)));
    }
    assert_eq!(state(&engine), Some(CircuitState::Open));
}

#[test]
fn invalid_output_degrades_the_tool_and_valid_output_restores_it() {
    let toml = "[tools.pay]\nrate = \"100/s\"\n[tools.pay.circuit]\nwindow = 4\nmin_calls = 4\ndegraded_rate = 0.5";
    let (engine, _clock) = engine(toml);
    for o in [
        Outcome::Invalid,
        Outcome::Success,
        Outcome::Invalid,
        Outcome::Success,
    ] {
        run(&engine, o);
    }
    assert_eq!(state(&engine), Some(CircuitState::Degraded));
    assert!(
        engine.try_admit(&Call::new("pay")).is_ok(),
        "degraded still admits"
    );
    for _ in 0..3 {
        run(&engine, Outcome::Success);
    }
    assert_eq!(state(&engine), Some(CircuitState::Closed));

    let (engine, _clock) = crate::support::engine(&format!("{toml}\non_degraded = \"reject\""));
    for _ in 0..4 {
        run(&engine, Outcome::Invalid);
    }
    let r = engine.try_admit(&Call::new("pay")).unwrap_err();
    assert_eq!(r.reason().as_str(), "circuit_open");
}

#[test]
fn exactly_the_probes_get_through_a_hundred_concurrent_callers() {
    let (engine, clock) = engine(BREAKER);
    for _ in 0..4 {
        run(&engine, Outcome::Error);
    }
    clock.advance(Duration::from_secs(10));
    let admitted = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(std::sync::Barrier::new(100));
    let permits = Arc::new(std::sync::Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..100)
        .map(|_| {
            let (engine, admitted, barrier, permits) = (
                engine.clone(),
                admitted.clone(),
                barrier.clone(),
                permits.clone(),
            );
            std::thread::spawn(move || {
                barrier.wait();
                if let Ok(p) = engine.try_admit(&Call::new("pay")) {
                    admitted.fetch_add(1, Ordering::SeqCst);
                    permits.lock().unwrap().push(p);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(admitted.load(Ordering::SeqCst), 2);
}

#[test]
fn a_reservation_is_refused_while_the_circuit_is_not_closed() {
    let (engine, clock) = engine(BREAKER);
    for _ in 0..4 {
        run(&engine, Outcome::Error);
    }
    let r = engine.try_admit_all(&[Call::new("pay")]).unwrap_err();
    assert_eq!(r.reason().as_str(), "circuit_open");
    clock.advance(Duration::from_secs(10));
    // Half-open: probes are single calls, never part of a reservation.
    assert!(engine.try_admit_all(&[Call::new("pay")]).is_err());
    assert!(engine.try_admit(&Call::new("pay")).is_ok());
}

const DEGRADED_REJECT: &str = r#"
[tools.pay]
rate = "1000/s"
[tools.pay.circuit]
window = 4
min_calls = 4
degraded_rate = 0.5
on_degraded = "reject"
open_for = "10s"
open_for_max = "40s"
open_for_multiplier = 2.0
half_open_probes = 2
close_after = 2
slow_call = "2s"
"#;

/// Four invalid answers: degraded, refusing calls for `open_for` (10 s).
fn degrade(engine: &toolgate::Engine) {
    for _ in 0..4 {
        run(engine, Outcome::Invalid);
    }
    assert_eq!(state(engine), Some(CircuitState::Degraded));
}

/// How many of 100 concurrent callers are admitted; their permits are kept.
fn admit_concurrently(engine: &toolgate::Engine) -> Vec<toolgate::Permit> {
    let barrier = Arc::new(std::sync::Barrier::new(100));
    let threads: Vec<_> = (0..100)
        .map(|_| {
            let (engine, barrier) = (engine.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                engine.try_admit(&Call::new("pay")).ok()
            })
        })
        .collect();
    threads
        .into_iter()
        .filter_map(|t| t.join().unwrap())
        .collect()
}

#[test]
fn a_degraded_tool_that_rejects_lets_probes_through_after_its_refusal_period_and_valid_probes_close_it(
) {
    // Issue #13, item 14: with on_degraded = "reject" no call ran, so the invalid rate
    // could never fall and the tool stayed refused for good.
    let (engine, clock) = engine(DEGRADED_REJECT);
    let before = engine.try_admit(&Call::new("pay")).unwrap();
    degrade(&engine);
    assert_rejected(
        engine.try_admit(&Call::new("pay")),
        "circuit_open",
        "tools.pay.circuit",
        Some(Duration::from_secs(10)),
    );
    // A call admitted before the tool degraded is stale: it decides nothing.
    before.complete(Completion::success());
    assert_eq!(state(&engine), Some(CircuitState::Degraded));
    clock.advance(ms(4_000));
    assert_rejected(
        engine.try_admit(&Call::new("pay")),
        "circuit_open",
        "tools.pay.circuit",
        Some(ms(6_000)),
    );

    clock.advance(ms(6_000));
    let probes = admit_concurrently(&engine);
    assert_eq!(probes.len(), 2, "exactly half_open_probes probes");
    assert_eq!(state(&engine), Some(CircuitState::HalfOpen));
    for p in probes {
        p.complete(Completion::success());
    }
    assert_eq!(state(&engine), Some(CircuitState::Closed));
    assert_eq!(admit_concurrently(&engine).len(), 100);
}

#[test]
fn an_invalid_probe_degrades_again_for_a_longer_period_and_a_failed_one_opens() {
    let (engine, clock) = engine(DEGRADED_REJECT);
    degrade(&engine);
    for period in [20, 40, 40] {
        clock.advance(Duration::from_secs(40));
        run(&engine, Outcome::Invalid); // the probe answers, invalidly
        assert_eq!(state(&engine), Some(CircuitState::Degraded));
        assert_rejected(
            engine.try_admit(&Call::new("pay")),
            "circuit_open",
            "tools.pay.circuit",
            Some(Duration::from_secs(period)),
        );
    }
    // A probe slower than slow_call is a failure: open, not degraded.
    clock.advance(Duration::from_secs(40));
    engine
        .try_admit(&Call::new("pay"))
        .unwrap()
        .complete(Completion::success().latency(Duration::from_secs(3)));
    assert_eq!(state(&engine), Some(CircuitState::Open));
    assert_rejected(
        engine.try_admit(&Call::new("pay")),
        "circuit_open",
        "tools.pay.circuit",
        Some(Duration::from_secs(40)),
    );
    // Two valid probes close it, and the refusal period starts over at open_for.
    clock.advance(Duration::from_secs(40));
    run(&engine, Outcome::Success);
    run(&engine, Outcome::Success);
    assert_eq!(state(&engine), Some(CircuitState::Closed));
    degrade(&engine);
    let r = engine.try_admit(&Call::new("pay")).unwrap_err();
    assert_eq!(r.retry_after(), Some(Duration::from_secs(10)));
}

#[test]
fn a_reload_that_keeps_a_degraded_breaker_does_not_strand_the_tool() {
    let (engine, clock) = engine(DEGRADED_REJECT);
    degrade(&engine);
    clock.advance(ms(3_000));
    // The circuit's settings are unchanged: the same breaker, still degraded.
    engine.apply(
        toolgate::Policy::from_toml_str(&format!(
            "{DEGRADED_REJECT}\n[tools.other]\nrate = \"1/s\""
        ))
        .unwrap(),
    );
    assert_eq!(state(&engine), Some(CircuitState::Degraded));
    assert_rejected(
        engine.try_admit(&Call::new("pay")),
        "circuit_open",
        "tools.pay.circuit",
        Some(ms(7_000)),
    );
    clock.advance(ms(7_000));
    run(&engine, Outcome::Success);
    run(&engine, Outcome::Success);
    assert_eq!(state(&engine), Some(CircuitState::Closed));
}

#[test]
fn a_degraded_tool_that_allows_calls_is_unchanged() {
    let toml = DEGRADED_REJECT.replace("\"reject\"", "\"allow\"");
    let (engine, clock) = engine(&toml);
    degrade(&engine);
    assert_eq!(
        admit_concurrently(&engine).len(),
        100,
        "degraded still admits"
    );
    // Its outcomes still count: enough valid ones restore it without any refusal period.
    for _ in 0..3 {
        run(&engine, Outcome::Success);
    }
    assert_eq!(state(&engine), Some(CircuitState::Closed));
    // After an open period an invalid probe is an answer, as before: it counts
    // toward closing.
    run(&engine, Outcome::Error);
    run(&engine, Outcome::Error);
    assert_eq!(state(&engine), Some(CircuitState::Open), "2 failures of 4");
    clock.advance(Duration::from_secs(10));
    run(&engine, Outcome::Invalid);
    run(&engine, Outcome::Invalid);
    assert_eq!(state(&engine), Some(CircuitState::Closed));
}

#[test]
fn a_half_open_refusal_says_when_the_probes_are_decided() {
    // Issue #13, item 17: half-open refusals carried no retry_after.
    let (engine, clock) = engine(BREAKER);
    for _ in 0..4 {
        run(&engine, Outcome::Error);
    }
    clock.advance(Duration::from_secs(10));
    let _p1 = engine.try_admit(&Call::new("pay")).unwrap();
    clock.advance(ms(300));
    let _p2 = engine.try_admit(&Call::new("pay")).unwrap();
    // The youngest probe has 2 s to slow_call: at most HALF_OPEN_RETRY (1 s).
    let retry = |engine: &toolgate::Engine| {
        engine
            .try_admit(&Call::new("pay"))
            .unwrap_err()
            .retry_after()
    };
    assert_eq!(retry(&engine), Some(ms(1_000)));
    // 400 ms before the youngest probe reaches slow_call (and so is decided).
    clock.advance(ms(1_600));
    assert_eq!(retry(&engine), Some(ms(400)));
    // Past it: the probe will count as failed when it ends; when is unknown.
    clock.advance(ms(500));
    assert_eq!(retry(&engine), Some(ms(1_000)));
    // A reservation is never a probe: refused with a free slot, it is told the same.
    let (engine, clock) = crate::support::engine(&BREAKER.replace("slow_call = \"2s\"", ""));
    for _ in 0..4 {
        run(&engine, Outcome::Error);
    }
    clock.advance(Duration::from_secs(10));
    let r = engine.try_admit_all(&[Call::new("pay")]).unwrap_err();
    assert_eq!(r.retry_after(), Some(ms(1_000)));
    let _p1 = engine.try_admit(&Call::new("pay")).unwrap();
    let _p2 = engine.try_admit(&Call::new("pay")).unwrap();
    assert_eq!(retry(&engine), Some(ms(1_000)), "no slow_call");
}

mod waiting;
