//! The token debt bound (issue #13, item 2): a token budget is never more than one
//! full burst in debt, whatever count a completion reports, both when the
//! difference is charged at once and when it is charged behind waiters'
//! reservations.

use tokio_test::task;
use tokio_test::{assert_pending, assert_ready};
use toolgate::{Call, Completion};

use crate::support::{assert_rejected, engine, ms};

/// 100 tokens per second, burst 100: one token every 10 ms, a full bucket in 1 s.
const BUDGET: &str = r#"
[tools.llm]
tokens = "100/s"
on_limit = "wait"
max_wait = "1h"
"#;

const PATH: &str = "tools.llm.tokens";

#[test]
fn a_reported_count_leaves_the_budget_at_most_one_burst_in_debt() {
    for actual in [u64::MAX, (1 << 53) - 1, 250, 201] {
        let (engine, clock) = engine(BUDGET);
        let p = engine.try_admit(&Call::new("llm").tokens(10)).unwrap();
        p.complete(Completion::success().tokens(actual));
        // Empty, and one burst (1 s) owed: the next token comes 1 s + 10 ms from now.
        let next = engine.try_admit(&Call::new("llm").tokens(1));
        assert_rejected(next, "tokens_limited", PATH, Some(ms(1010)));
        // Full again within 2·burst/rate.
        clock.advance(ms(2000));
        assert!(
            engine.try_admit(&Call::new("llm").tokens(100)).is_ok(),
            "{actual}"
        );
    }
}

#[test]
fn a_debt_below_the_bound_is_charged_in_full() {
    let (engine, _clock) = engine(BUDGET);
    let p = engine.try_admit(&Call::new("llm").tokens(10)).unwrap();
    p.complete(Completion::success().tokens(150));
    // 150 used of 100: 50 owed, so the next token comes at 510 ms.
    let next = engine.try_admit(&Call::new("llm").tokens(1));
    assert_rejected(next, "tokens_limited", PATH, Some(ms(510)));
}

#[test]
fn a_debt_behind_reservations_is_bounded_from_the_last_of_them() {
    let (engine, clock) = engine(BUDGET);
    let first = engine.try_admit(&Call::new("llm").tokens(100)).unwrap();
    // A waiter reserves 50 tokens at 500 ms.
    let call = Call::new("llm").tokens(50);
    let mut waiter = task::spawn(engine.admit(&call));
    assert_pending!(waiter.poll());
    // The count goes behind the waiter, which keeps its time; from there at most one
    // burst is owed beyond empty: the next token comes at 500 + 2000 - 1000 + 10 ms.
    first.complete(Completion::success().tokens(u64::MAX));
    let next = engine.try_admit(&Call::new("llm").tokens(1));
    assert_rejected(next, "tokens_limited", PATH, Some(ms(1510)));
    clock.advance(ms(500));
    assert_eq!(assert_ready!(waiter.poll()).unwrap().waited(), ms(500));
    clock.advance(ms(2000));
    assert!(engine.try_admit(&Call::new("llm").tokens(100)).is_ok());
}

#[test]
fn a_debt_replayed_when_a_waiter_leaves_is_bounded_from_now() {
    let (engine, _clock) = engine(BUDGET);
    let first = engine.try_admit(&Call::new("llm").tokens(100)).unwrap();
    let call = Call::new("llm").tokens(50);
    let mut waiter = task::spawn(engine.admit(&call));
    assert_pending!(waiter.poll());
    first.complete(Completion::success().tokens(u64::MAX));
    // The waiter leaves: the debt is replayed without it, bounded from now.
    drop(waiter);
    let next = engine.try_admit(&Call::new("llm").tokens(1));
    assert_rejected(next, "tokens_limited", PATH, Some(ms(1010)));
}
