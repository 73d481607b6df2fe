//! The retry pipeline (`Engine::run`) on a manual clock, with scripted attempts.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, SystemTime};

use tokio_test::task;
use toolgate::{
    AttemptCtx, AttemptEnd, AttemptResult, Call, Clock, Engine, ExecuteError, ManualClock, Reason,
    RunFailure, RunOptions, RunOutput, StopReason,
};

use crate::support::{engine, ms};

/// How a scripted attempt ends.
#[derive(Debug, Clone, Copy)]
enum Step {
    Ok,
    Status(u16),
    StatusAfter(u16, &'static str),
    Failure,
    Transport,
    Timeout,
    Invalid,
    Hang,
}

type Out = Result<RunOutput<u32>, ExecuteError<RunFailure<&'static str>>>;
type Fut = Pin<Box<dyn Future<Output = AttemptResult<u32, &'static str>>>>;

/// What each attempt saw: its number, key and start time.
type Seen = Rc<RefCell<Vec<(u32, Option<String>, u64)>>>;

/// A closure playing `steps` in order (the last one repeats), recording each attempt.
fn script(clock: &ManualClock, steps: &[Step]) -> (impl FnMut(AttemptCtx<'_>) -> Fut, Seen) {
    let seen: Seen = Rc::default();
    let (log, clock, steps) = (seen.clone(), clock.clone(), steps.to_vec());
    let f = move |ctx: AttemptCtx<'_>| -> Fut {
        let i = log.borrow().len();
        log.borrow_mut().push((
            ctx.number(),
            ctx.idempotency_key().map(str::to_string),
            clock.now(),
        ));
        let step = steps[i.min(steps.len() - 1)];
        let res = match step {
            Step::Ok => AttemptResult::success(ctx.number()).status(200),
            Step::Status(s) => AttemptResult::failure("status").status(s),
            Step::StatusAfter(s, h) => AttemptResult::failure("busy")
                .status(s)
                .retry_after_header(h),
            Step::Failure => AttemptResult::failure("broken"),
            Step::Transport => AttemptResult::transport_error("refused"),
            Step::Timeout => AttemptResult::timeout("slow"),
            Step::Invalid => AttemptResult::invalid("bad output"),
            Step::Hang => return Box::pin(std::future::pending()),
        };
        Box::pin(std::future::ready(res))
    };
    (f, seen)
}

fn policy(extra: &str, retry: &str) -> String {
    format!("[tools.t]\nrate = \"1000/s\"\n{extra}\n[tools.t.retry]\n{retry}\n")
}

fn ready(p: Poll<Out>) -> Out {
    match p {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the run is still pending"),
    }
}

fn failure(out: Out) -> RunFailure<&'static str> {
    match out {
        Err(ExecuteError::Tool(f)) => f,
        other => panic!("expected a terminal failure, got {other:?}"),
    }
}

/// Runs to completion without any time passing.
fn run_now(
    engine: &Engine,
    call: &Call<'_>,
    opts: RunOptions<'_>,
    clock: &ManualClock,
    steps: &[Step],
) -> Out {
    let (f, _) = script(clock, steps);
    ready(task::spawn(engine.run(call, opts, f)).poll())
}

fn jitter_max() -> f64 {
    1.0
}

const T: Call<'static> = Call::new("t");

#[test]
fn retry_after_in_delta_seconds_is_waited_exactly() {
    let (engine, clock) = engine(&policy("idempotent = true", ""));
    let (f, seen) = script(&clock, &[Step::StatusAfter(503, "2"), Step::Ok]);
    let mut run = task::spawn(engine.run(&T, RunOptions::new(), f));
    assert!(run.poll().is_pending());
    assert_eq!(clock.next_deadline(), Some(2_000_000_000));
    // The tool is paused for every caller meanwhile.
    let paused = engine.try_admit(&T).unwrap_err();
    assert_eq!(paused.quota(), "tools.t.retry_after");
    clock.advance(ms(1_999));
    assert!(run.poll().is_pending());
    assert_eq!(seen.borrow().len(), 1, "no retry before Retry-After");
    clock.advance(ms(1));
    let out = ready(run.poll()).unwrap();
    assert_eq!((out.value, out.attempts()), (2, 2));
    assert_eq!(out.history[0].status, Some(503));
    assert_eq!(out.history[0].delay, Some(ms(2_000)));
    assert_eq!(out.history[1].delay, None);
    assert_eq!(seen.borrow()[1].2, 2_000_000_000, "retried at exactly 2 s");
}

#[allow(
    clippy::disallowed_methods,
    reason = "an HTTP date is read against the wall clock"
)]
#[test]
fn retry_after_as_an_http_date_and_garbage() {
    let (engine, clock) = engine(&policy(
        "idempotent = true",
        "base = \"100ms\"\ncap = \"1s\"\nbudget_min_per_second = 10",
    ));
    // A date in the past: retry at once.
    let past = httpdate::fmt_http_date(SystemTime::now() - Duration::from_secs(3_600));
    let out = run_now(
        &engine,
        &T,
        RunOptions::new(),
        &clock,
        &[
            Step::StatusAfter(429, Box::leak(past.into_boxed_str())),
            Step::Ok,
        ],
    )
    .unwrap();
    assert_eq!(out.attempts(), 2);
    assert_eq!(out.history[0].delay, Some(Duration::ZERO));

    // A date ten seconds ahead: wait that long (to the second).
    let ahead = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(10));
    let (f, _) = script(
        &clock,
        &[
            Step::StatusAfter(503, Box::leak(ahead.into_boxed_str())),
            Step::Ok,
        ],
    );
    let mut run = task::spawn(engine.run(&T, RunOptions::new(), f));
    assert!(run.poll().is_pending());
    let wait = clock.next_deadline().unwrap() - clock.now();
    assert!((8_900_000_000..=10_000_000_000).contains(&wait), "{wait}");
    clock.advance(Duration::from_secs(10));
    assert_eq!(ready(run.poll()).unwrap().attempts(), 2);

    // Garbage is ignored: a plain backoff (its ceiling, with maximal jitter).
    let (f, _) = script(&clock, &[Step::StatusAfter(503, "soon"), Step::Ok]);
    let mut run = task::spawn(engine.run(&T, RunOptions::new().jitter(jitter_max), f));
    assert!(run.poll().is_pending());
    assert_eq!(clock.next_deadline().unwrap() - clock.now(), 100_000_000);
    clock.advance(ms(100));
    let out = ready(run.poll()).unwrap();
    assert_eq!(out.history[0].delay, Some(ms(100)));
}

#[test]
fn backoff_grows_to_its_cap_and_retry_after_above_max_retry_after_ends_the_call() {
    let (engine, clock) = engine(&policy(
        "idempotent = true",
        "max_attempts = 5\nbase = \"100ms\"\ncap = \"250ms\"\nmax_retry_after = \"60s\"\nbudget_min_per_second = 100",
    ));
    let (f, seen) = script(&clock, &[Step::Status(500)]);
    let mut run = task::spawn(engine.run(&T, RunOptions::new().jitter(jitter_max), f));
    assert!(run.poll().is_pending());
    for _ in 0..3 {
        clock.advance(ms(250));
        assert!(run.poll().is_pending());
    }
    clock.advance(ms(250));
    let f = failure(ready(run.poll()));
    assert_eq!(f.reason, StopReason::AttemptsExhausted);
    let delays: Vec<_> = f.attempts.iter().map(|a| a.delay).collect();
    assert_eq!(
        delays,
        [
            Some(ms(100)),
            Some(ms(200)),
            Some(ms(250)),
            Some(ms(250)),
            None
        ]
    );
    assert_eq!(seen.borrow().len(), 5);
    assert_eq!(f.last_status, Some(500));

    // A server asking for two minutes is not waited for (the cap is 60 s): the call
    // ends at once, and the tool stays paused for the server's full time.
    let f = failure(run_now(
        &engine,
        &T,
        RunOptions::new(),
        &clock,
        &[Step::StatusAfter(429, "120"), Step::Ok],
    ));
    assert_eq!(f.reason, StopReason::RetryAfterTooLong);
    assert_eq!(f.retry_after, Some(Duration::from_secs(120)));
    assert_eq!(f.attempts.len(), 1);
    let r = engine.try_admit(&T).unwrap_err();
    assert_eq!(r.quota(), "tools.t.retry_after");
    assert_eq!(r.retry_after(), Some(Duration::from_secs(120)));
}

#[test]
fn a_non_idempotent_call_is_retried_only_with_an_idempotency_key() {
    let (engine, clock) = engine(&policy(
        "idempotent = false",
        "base = \"10ms\"\ncap = \"10ms\"",
    ));
    let f = failure(run_now(
        &engine,
        &T,
        RunOptions::new(),
        &clock,
        &[Step::Status(503), Step::Ok],
    ));
    assert_eq!(f.reason, StopReason::NotRetryable);
    assert_eq!(f.attempts.len(), 1);
    assert_eq!(f.error, Some("status"));

    let (f, seen) = script(&clock, &[Step::Transport, Step::Ok]);
    let mut run = task::spawn(engine.run(&T, RunOptions::new().idempotency_key("k-1"), f));
    assert!(run.poll().is_pending());
    clock.advance(ms(10));
    let out = ready(run.poll()).unwrap();
    assert_eq!(out.attempts(), 2);
    assert_eq!(out.history[0].end, AttemptEnd::Transport);
    let keys: Vec<_> = seen.borrow().iter().map(|s| s.1.clone()).collect();
    assert_eq!(keys, [Some("k-1".to_string()), Some("k-1".to_string())]);

    // Without [retry] nothing is retried, key or not.
    let (engine, clock) = crate::support::engine("[tools.t]\nrate = \"10/s\"\nidempotent = true");
    let f = failure(run_now(
        &engine,
        &T,
        RunOptions::new().idempotency_key("k"),
        &clock,
        &[Step::Timeout, Step::Ok],
    ));
    assert_eq!((f.reason, f.attempts.len()), (StopReason::NotRetryable, 1));
    assert_eq!(f.attempts[0].end, AttemptEnd::Timeout);
}

#[test]
fn an_exhausted_budget_turns_retries_off_and_successes_bring_them_back() {
    let (engine, clock) = engine(&policy(
        "idempotent = true",
        "max_attempts = 5\nbase = \"10ms\"\ncap = \"10ms\"\nbudget_ratio = 0.5\nbudget_min_per_second = 0",
    ));
    let opts = RunOptions::new().jitter(jitter_max);
    // No successful call yet: no retry.
    let f = failure(run_now(
        &engine,
        &T,
        opts,
        &clock,
        &[Step::Status(503), Step::Ok],
    ));
    assert_eq!(
        (f.reason, f.attempts.len()),
        (StopReason::RetryBudgetExhausted, 1)
    );
    assert_eq!(f.reason.as_str(), "retry_budget_exhausted");
    // Four successes allow two retries (50 %).
    for _ in 0..4 {
        run_now(&engine, &T, opts, &clock, &[Step::Ok]).unwrap();
    }
    let (f, _) = script(&clock, &[Step::Status(503)]);
    let mut run = task::spawn(engine.run(&T, opts, f));
    for _ in 0..2 {
        assert!(run.poll().is_pending());
        clock.advance(ms(10));
    }
    let f = failure(ready(run.poll()));
    assert_eq!(
        (f.reason, f.attempts.len()),
        (StopReason::RetryBudgetExhausted, 3)
    );
    // Retries are off now, even for a call that would succeed on its second try…
    let f = failure(run_now(
        &engine,
        &T,
        opts,
        &clock,
        &[Step::Status(503), Step::Ok],
    ));
    assert_eq!(f.reason, StopReason::RetryBudgetExhausted);
    // …until the window has moved on and new successes refilled the budget.
    clock.advance(Duration::from_secs(11));
    for _ in 0..2 {
        run_now(&engine, &T, opts, &clock, &[Step::Ok]).unwrap();
    }
    let (f, _) = script(&clock, &[Step::Status(503), Step::Ok]);
    let mut run = task::spawn(engine.run(&T, opts, f));
    assert!(run.poll().is_pending());
    clock.advance(ms(10));
    assert_eq!(ready(run.poll()).unwrap().attempts(), 2);
}

#[test]
fn every_attempt_takes_a_rate_token_and_a_refused_retry_ends_the_call() {
    let (engine, clock) = engine(
        "[tools.t]\nrate = \"1/s\"\nburst = 2\nidempotent = true\n[tools.t.retry]\nbase = \"10ms\"\ncap = \"10ms\"\nbudget_min_per_second = 10",
    );
    let (f, seen) = script(&clock, &[Step::Status(502)]);
    let mut run = task::spawn(engine.run(&T, RunOptions::new().jitter(jitter_max), f));
    assert!(run.poll().is_pending());
    clock.advance(ms(10));
    assert!(run.poll().is_pending());
    clock.advance(ms(10));
    let f = failure(ready(run.poll()));
    assert_eq!(seen.borrow().len(), 2, "two tokens, two attempts");
    assert_eq!(f.reason, StopReason::Rejected);
    assert_eq!(f.attempts.len(), 2);
    let r = f.rejection.expect("the rejection of the third admission");
    assert_eq!(
        (r.reason(), r.quota()),
        (Reason::RateLimited, "tools.t.rate")
    );
    let st = engine.tool_state("t", None).unwrap();
    assert_eq!((st.admitted, st.in_flight), (2, 0));

    // A refused first attempt is a rejection, not a failure of the tool.
    let (f, seen) = script(&clock, &[Step::Ok]);
    match ready(task::spawn(engine.run(&T, RunOptions::new(), f)).poll()) {
        Err(ExecuteError::Rejected(r)) => assert_eq!(r.reason(), Reason::RateLimited),
        other => panic!("{other:?}"),
    }
    assert!(seen.borrow().is_empty(), "the tool never ran");
}

#[test]
fn client_errors_and_invalid_output_are_terminal() {
    let (engine, clock) = engine(&policy("idempotent = true", ""));
    for (step, reason) in [
        (Step::Status(404), StopReason::TerminalStatus),
        (Step::Status(400), StopReason::TerminalStatus),
        (Step::Failure, StopReason::TerminalError),
        (Step::Invalid, StopReason::InvalidOutput),
    ] {
        let (f, seen) = script(&clock, &[step, Step::Ok]);
        let out = failure(ready(
            task::spawn(engine.run(&T, RunOptions::new(), f)).poll(),
        ));
        assert_eq!(out.reason, reason, "{step:?}");
        assert_eq!(seen.borrow().len(), 1, "{step:?}: one attempt");
        assert_eq!(out.attempts[0].delay, None);
    }
    let f = failure(run_now(
        &engine,
        &T,
        RunOptions::new(),
        &clock,
        &[Step::Invalid],
    ));
    assert_eq!(f.attempts[0].end, AttemptEnd::Invalid);
    assert_eq!(
        f.to_string(),
        "call to \"t\" failed after 1 attempt(s): invalid_output: bad output"
    );
}

#[test]
fn dropping_the_run_mid_backoff_or_mid_attempt_holds_no_permit() {
    let (engine, clock) = engine(&policy(
        "idempotent = true\nconcurrency = 1",
        "base = \"1s\"\ncap = \"1s\"",
    ));
    let (f, _) = script(&clock, &[Step::Status(503), Step::Ok]);
    let mut run = task::spawn(engine.run(&T, RunOptions::new().jitter(jitter_max), f));
    assert!(run.poll().is_pending());
    assert_eq!(clock.sleepers(), 1, "in its backoff");
    drop(run);
    assert_eq!(clock.sleepers(), 0);
    assert_eq!(engine.tool_state("t", None).unwrap().in_flight, 0);
    let p = engine.try_admit(&T).expect("the slot is free");
    drop(p);

    let (f, _) = script(&clock, &[Step::Hang]);
    let mut run = task::spawn(engine.run(&T, RunOptions::new(), f));
    assert!(run.poll().is_pending());
    assert_eq!(engine.tool_state("t", None).unwrap().in_flight, 1);
    drop(run);
    assert_eq!(engine.tool_state("t", None).unwrap().in_flight, 0);
    assert_eq!(clock.sleepers(), 0, "the deadline timer is gone too");
    assert!(engine.try_admit(&T).is_ok());
}

#[test]
fn the_run_future_is_send_with_a_send_closure() {
    fn assert_send<T: Send>(_: T) {}
    let (engine, _clock) = engine(&policy("idempotent = true", ""));
    assert_send(engine.run(&T, RunOptions::new(), |ctx| async move {
        AttemptResult::<u32, String>::success(ctx.number())
    }));
}

mod deadline;
mod layer;
