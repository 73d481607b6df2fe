//! What a run does with its tool's reference count, seen from inside the crate.

use std::cell::RefCell;
use std::future::ready;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio_test::task;

use crate::{AttemptResult, Call, Engine, ManualClock, Policy, RunOptions};

/// An engine on a manual clock whose tool `t` is retried after a 503 (a backoff of
/// exactly 1 s).
fn engine() -> (Engine, ManualClock) {
    let clock = ManualClock::new();
    let policy = Policy::from_toml_str(
        "[tools.t]\nrate = \"1000/s\"\nidempotent = true\n\
         [tools.t.retry]\nbase = \"1s\"\ncap = \"1s\"",
    )
    .expect("a valid policy");
    (Engine::with_clock(policy, Arc::new(clock.clone())), clock)
}

#[test]
fn a_run_lends_its_tool_to_its_first_attempt_and_takes_it_back_for_its_retries() {
    let (engine, clock) = engine();
    let tool = Arc::clone(
        engine
            .live()
            .compiled()
            .tools
            .get("t")
            .expect("the policy's tool"),
    );
    let idle = Arc::strong_count(&tool);
    // The count each attempt sees while its permit is held.
    let seen = RefCell::new(Vec::new());
    let attempt = |ctx: crate::AttemptCtx<'_>| {
        seen.borrow_mut().push(Arc::strong_count(&tool));
        ready(match ctx.number() {
            1 => AttemptResult::<u32, &str>::failure("busy").status(503),
            n => AttemptResult::success(n),
        })
    };
    let call = Call::new("t");
    let mut run = task::spawn(engine.run(&call, RunOptions::new().jitter(|| 1.0), attempt));
    assert!(run.poll().is_pending(), "in its backoff after the 503");
    // The first attempt's permit holds the run's own reference: no second one.
    assert_eq!(*seen.borrow(), [idle + 1]);
    clock.advance(Duration::from_secs(1));
    let Poll::Ready(out) = run.poll() else {
        panic!("the retry is ready at once");
    };
    assert_eq!(out.expect("the retry succeeds").value, 2);
    // The retry looks its tool up again (a reload between attempts is seen) and its
    // permit takes its own reference, beside the run's, which it took back: the
    // backoff was the tool's (1 s), read through it.
    assert_eq!(*seen.borrow(), [idle + 1, idle + 2]);
    drop(run);
    assert_eq!(Arc::strong_count(&tool), idle, "nothing kept after the run");
}
