//! The call's deadline: it cuts a hanging attempt, ends a call whose Retry-After
//! lies beyond it, and bounds a retry's wait.

use super::*;

#[test]
fn the_deadline_cuts_a_hanging_attempt_and_completes_it_as_a_timeout() {
    let (engine, clock) = engine(&policy(
        "idempotent = true\nconcurrency = 1",
        "deadline = \"1s\"",
    ));
    let (f, _) = script(&clock, &[Step::Hang]);
    let mut run = task::spawn(engine.run(&T, RunOptions::new(), f));
    assert!(run.poll().is_pending());
    assert_eq!(engine.tool_state("t", None).unwrap().in_flight, 1);
    clock.advance(ms(999));
    assert!(run.poll().is_pending());
    clock.advance(ms(1));
    let f = failure(ready(run.poll()));
    assert_eq!(f.reason, StopReason::DeadlineExceeded);
    assert_eq!(f.attempts[0].end, AttemptEnd::Timeout);
    assert_eq!(f.attempts[0].latency, ms(1_000));
    assert_eq!(f.error, None);
    let st = engine.tool_state("t", None).unwrap();
    assert_eq!(st.in_flight, 0);
    assert!(engine.try_admit(&T).is_ok(), "the concurrency slot is free");

    // A backoff that would end after the deadline ends the call at once.
    let (engine, clock) = crate::support::engine(&policy(
        "idempotent = true",
        "base = \"2s\"\ncap = \"2s\"\ndeadline = \"1s\"",
    ));
    let f = failure(run_now(
        &engine,
        &T,
        RunOptions::new().jitter(jitter_max),
        &clock,
        &[Step::Status(500), Step::Ok],
    ));
    assert_eq!(
        (f.reason, f.attempts.len()),
        (StopReason::DeadlineExceeded, 1)
    );
    assert_eq!(clock.now(), 0, "no time spent waiting in vain");

    // The run's own deadline replaces the tool's: with 3 s the 2 s backoff fits.
    let (f, _) = script(&clock, &[Step::Status(500), Step::Ok]);
    let opts = RunOptions::new()
        .deadline(Duration::from_secs(3))
        .jitter(jitter_max);
    let mut run = task::spawn(engine.run(&T, opts, f));
    assert!(run.poll().is_pending());
    clock.advance(Duration::from_secs(2));
    assert_eq!(ready(run.poll()).unwrap().attempts(), 2);
}

#[test]
fn retry_after_beyond_the_deadline_fails_at_once() {
    let (engine, clock) = engine(&policy("idempotent = true", "deadline = \"5s\""));
    let f = failure(run_now(
        &engine,
        &T,
        RunOptions::new(),
        &clock,
        &[Step::StatusAfter(503, "10"), Step::Ok],
    ));
    assert_eq!(f.reason, StopReason::RetryAfterBeyondDeadline);
    assert_eq!(f.reason.as_str(), "retry_after_beyond_deadline");
    assert_eq!(f.retry_after, Some(Duration::from_secs(10)));
    assert_eq!((f.attempts.len(), f.last_status), (1, Some(503)));
    assert_eq!(clock.now(), 0);
}

#[test]
fn a_waiting_retry_never_waits_past_the_deadline() {
    let (engine, clock) = engine(
        "[tools.t]\nrate = \"1/s\"\nburst = 1\non_limit = \"wait\"\nmax_wait = \"10s\"\nidempotent = true\n[tools.t.retry]\nbase = \"10ms\"\ncap = \"10ms\"\ndeadline = \"500ms\"",
    );
    let (f, seen) = script(&clock, &[Step::Status(503), Step::Ok]);
    let mut run = task::spawn(engine.run(&T, RunOptions::new().jitter(jitter_max), f));
    assert!(run.poll().is_pending());
    clock.advance(ms(10));
    // The next token comes at 1 s, after the deadline: refused at once.
    let f = failure(ready(run.poll()));
    assert_eq!(seen.borrow().len(), 1);
    assert_eq!(f.reason, StopReason::Rejected);
    let r = f.rejection.expect("rejection");
    assert_eq!(r.reason(), Reason::MaxWaitExceeded);
}

#[test]
fn a_run_starts_when_it_is_first_polled_not_when_it_is_made() {
    // Nothing of the run happens before its first poll: made at 0 and polled at
    // 600 ms, its 1 s deadline falls at 1.6 s, and no admission was taken before.
    let (engine, clock) = engine(&policy(
        "idempotent = true\nconcurrency = 1",
        "deadline = \"1s\"",
    ));
    let (f, seen) = script(&clock, &[Step::Hang]);
    let mut run = task::spawn(engine.run(&T, RunOptions::new(), f));
    clock.advance(ms(600));
    assert_eq!(engine.tool_state("t", None).unwrap().in_flight, 0);
    assert!(run.poll().is_pending());
    assert_eq!(
        seen.borrow()[0].2,
        600_000_000,
        "the attempt started at 600 ms"
    );
    clock.advance(ms(999));
    assert!(run.poll().is_pending(), "not cut at 1 s after it was made");
    clock.advance(ms(1));
    let f = failure(ready(run.poll()));
    assert_eq!(f.reason, StopReason::DeadlineExceeded);
    assert_eq!(f.attempts[0].latency, ms(1_000));
}
