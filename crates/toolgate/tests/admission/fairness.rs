//! Fair sharing on a manual clock: tenants served by weight on a contended quota
//! (`fairness = "tenant"`), a share kept for higher classes (`reserve`), classes
//! served in order among waiters, and a full queue that one tenant cannot keep.

use tokio_test::task::{self, Spawn};
use tokio_test::{assert_pending, assert_ready};
use toolgate::{Call, Clock, Completion, Engine, ManualClock, Permit, Priority, Rejection};

use crate::support::{assert_rejected, engine, ms};

type Waiting =
    Spawn<std::pin::Pin<Box<dyn std::future::Future<Output = Result<Permit, Rejection>>>>>;

/// Starts waiting calls of `tenant` (each polled once, so each is queued).
fn enqueue(
    engine: &Engine,
    tenant: &'static str,
    p: Priority,
    n: usize,
) -> Vec<(&'static str, Waiting)> {
    (0..n)
        .map(|_| {
            let engine = engine.clone();
            let fut: std::pin::Pin<Box<dyn std::future::Future<Output = _>>> =
                Box::pin(async move {
                    engine
                        .admit(&Call::new("search").tenant(tenant).priority(p))
                        .await
                });
            let mut t = task::spawn(fut);
            assert_pending!(t.poll());
            (tenant, t)
        })
        .collect()
}

/// Advances the clock by `step` until `n` calls were admitted, polling the calls a
/// change woke; the tenants in the order they were admitted.
fn admissions(
    clock: &ManualClock,
    waiting: &mut Vec<(&'static str, Waiting)>,
    n: usize,
) -> Vec<&'static str> {
    let mut order = Vec::new();
    let mut permits = Vec::new();
    for _ in 0..100_000 {
        let mut i = 0;
        while i < waiting.len() {
            if waiting[i].1.is_woken() {
                if let std::task::Poll::Ready(r) = waiting[i].1.poll() {
                    let (tenant, _) = waiting.remove(i);
                    permits.push(r.unwrap_or_else(|e| panic!("{tenant} refused: {e}")));
                    order.push(tenant);
                    if order.len() == n {
                        return order;
                    }
                    // An admission hands the turn on: look at everyone again.
                    i = 0;
                    continue;
                }
            }
            i += 1;
        }
        clock.advance(ms(10));
    }
    panic!("only {} of {n} admitted: {order:?}", order.len());
}

const FAIR: &str = r#"
[tools.search]
rate = "10/s"
burst = 1
on_limit = "wait"
max_wait = "10m"
queue_limit = 5000
fairness = "tenant"
"#;

#[test]
fn a_tenant_flooding_the_queue_delays_another_by_at_most_one_turn_per_active_tenant() {
    let (engine, clock) = engine(FAIR);
    engine
        .try_admit(&Call::new("search").tenant("a"))
        .unwrap()
        .complete(Completion::success());
    let mut waiting = enqueue(&engine, "a", Priority::Default, 1000);
    waiting.extend(enqueue(&engine, "b", Priority::Default, 1));
    let order = admissions(&clock, &mut waiting, 3);
    // The call whose turn it already was (a's first), then b's: a's 999 others wait.
    assert_eq!(order[..2], ["a", "b"], "{order:?}");
    // Every admission is 100 ms after the previous: the quota is never exceeded.
    assert_eq!(waiting.len(), 998);
}

#[test]
fn with_three_tenants_flooding_a_newcomer_waits_at_most_one_call_of_each() {
    let (engine, clock) = engine(FAIR);
    engine
        .try_admit(&Call::new("search"))
        .unwrap()
        .complete(Completion::success());
    let mut waiting = enqueue(&engine, "a", Priority::Default, 200);
    waiting.extend(enqueue(&engine, "b", Priority::Default, 200));
    waiting.extend(enqueue(&engine, "c", Priority::Default, 200));
    // Let the three settle into turns.
    let _ = admissions(&clock, &mut waiting, 30);
    waiting.extend(enqueue(&engine, "d", Priority::Default, 1));
    let order = admissions(&clock, &mut waiting, 5);
    let d = order
        .iter()
        .position(|t| *t == "d")
        .unwrap_or_else(|| panic!("{order:?}"));
    // The call in its turn, then at most one of each of the three others.
    assert!(d <= 4, "d was admitted after {d} others: {order:?}");
}

#[test]
fn weights_three_to_one_share_any_forty_admissions_within_one_of_thirty_to_ten() {
    let toml = format!("{FAIR}\n[tenants.a]\nweight = 3\n[tenants.b]\nweight = 1\n");
    let (engine, clock) = engine(&toml);
    engine
        .try_admit(&Call::new("search"))
        .unwrap()
        .complete(Completion::success());
    let mut waiting = enqueue(&engine, "a", Priority::Default, 150);
    waiting.extend(enqueue(&engine, "b", Priority::Default, 150));
    let order = admissions(&clock, &mut waiting, 120);
    // Both stay backlogged over these 120 admissions.
    for w in order.windows(40) {
        let a = w.iter().filter(|t| **t == "a").count();
        assert!((29..=31).contains(&a), "{a} of 40 for a: {w:?}");
    }
}

#[test]
fn interactive_waiters_go_before_batch_ones_and_aged_batch_calls_are_not_starved() {
    let toml = FAIR.replace(
        "fairness = \"tenant\"",
        "reserve = { interactive = \"20%\" }",
    );
    let toml = toml.replace("burst = 1", "burst = 5");
    let (engine, clock) = engine(&toml);
    while engine.try_admit(&Call::new("search")).is_ok() {}
    let mut waiting = enqueue(&engine, "batch", Priority::Batch, 20);
    waiting.extend(enqueue(&engine, "interactive", Priority::Interactive, 5));
    let order = admissions(&clock, &mut waiting, 6);
    // The batch call whose turn it was, then the five interactive ones.
    assert_eq!(
        order,
        [
            "batch",
            "interactive",
            "interactive",
            "interactive",
            "interactive",
            "interactive"
        ]
    );
    // A steady stream of interactive calls: batch calls still get turns once aged.
    let mut got_batch = false;
    for _ in 0..40 {
        waiting.extend(enqueue(&engine, "interactive", Priority::Interactive, 1));
        if admissions(&clock, &mut waiting, 1) == ["batch"] {
            got_batch = true;
            break;
        }
    }
    assert!(got_batch, "batch starved");
}

#[test]
fn a_reserved_share_is_left_to_interactive_calls_and_batch_never_uses_it() {
    let (engine, _clock) = engine(
        r#"
        [tools.search]
        rate = "10/s"
        burst = 10
        reserve = { interactive = "20%" }
        "#,
    );
    let batch = Call::new("search").priority(Priority::Batch);
    let mut admitted = 0;
    let mut last = None;
    for _ in 0..20 {
        match engine.try_admit(&batch) {
            Ok(p) => {
                admitted += 1;
                p.complete(Completion::success());
            }
            Err(r) => last = Some(Err(r)),
        }
    }
    assert_eq!(admitted, 8, "batch keeps off the 20 % reserve");
    assert_rejected(
        last.unwrap(),
        "rate_limited",
        "tools.search.rate",
        Some(ms(100)),
    );
    let interactive = Call::new("search").priority(Priority::Interactive);
    engine
        .try_admit(&interactive)
        .unwrap()
        .complete(Completion::success());
    engine
        .try_admit(&interactive)
        .unwrap()
        .complete(Completion::success());
    assert!(
        engine.try_admit(&interactive).is_err(),
        "the reserve is 2 of 10"
    );
}

#[test]
fn a_reserve_on_concurrency_keeps_slots_for_higher_classes() {
    let (engine, _clock) = engine(
        r#"
        [tools.search]
        concurrency = 5
        reserve = { interactive = "20%", default = "20%" }
        "#,
    );
    let batch: Vec<_> = (0..5)
        .filter_map(|_| {
            engine
                .try_admit(&Call::new("search").priority(Priority::Batch))
                .ok()
        })
        .collect();
    assert_eq!(batch.len(), 3, "batch leaves 2 of 5 (40 %)");
    let default = engine.try_admit(&Call::new("search")).unwrap();
    assert!(
        engine.try_admit(&Call::new("search")).is_err(),
        "default leaves 1"
    );
    let interactive = engine.try_admit(&Call::new("search").priority(Priority::Interactive));
    assert!(interactive.is_ok());
    drop((batch, default, interactive));
}

#[test]
fn a_full_fair_queue_pushes_out_the_newest_call_of_the_tenant_with_the_most() {
    let toml = FAIR.replace("queue_limit = 5000", "queue_limit = 4");
    let (engine, _clock) = engine(&toml);
    engine
        .try_admit(&Call::new("search"))
        .unwrap()
        .complete(Completion::success());
    let mut a = enqueue(&engine, "a", Priority::Default, 4);
    let mut b = enqueue(&engine, "b", Priority::Default, 1);
    // a's newest is refused with queue_full, at once; b waits in its place.
    let (_, mut newest) = a.pop().unwrap();
    let r = assert_ready!(newest.poll()).unwrap_err();
    assert_eq!(r.reason().as_str(), "queue_full");
    for (_, t) in a.iter_mut() {
        assert_pending!(t.poll());
    }
    assert_pending!(b[0].1.poll(), "b waits in the room made for it");
    assert_eq!(engine.tool_state("search", None).unwrap().waiting, 4);
    // b has one waiting and a three: a newcomer of a's is refused, not pushed in.
    let call = Call::new("search").tenant("a");
    let mut more = task::spawn(engine.admit(&call));
    let r = assert_ready!(more.poll()).unwrap_err();
    assert_eq!(r.reason().as_str(), "queue_full");
}

#[test]
fn a_wait_that_the_calls_ahead_push_past_max_wait_is_refused_at_once() {
    let toml = FAIR.replace("max_wait = \"10m\"", "max_wait = \"1s\"");
    let (engine, clock) = engine(&toml);
    engine
        .try_admit(&Call::new("search"))
        .unwrap()
        .complete(Completion::success());
    // 100 ms apart: the tenth waiter is 1 s away, the eleventh beyond.
    let _ten = enqueue(&engine, "a", Priority::Default, 10);
    let now = clock.now();
    let call = Call::new("search").tenant("a");
    let mut t = task::spawn(engine.admit(&call));
    let r = assert_ready!(t.poll()).unwrap_err();
    assert_eq!(r.reason().as_str(), "max_wait_exceeded");
    assert_eq!(clock.now(), now);
}

#[test]
fn a_reservation_does_not_go_before_calls_waiting_in_the_fair_queue() {
    let toml = FAIR.replace("burst = 1", "burst = 2");
    let (engine, clock) = engine(&toml);
    let _spent: Vec<_> = (0..2)
        .map(|_| engine.try_admit(&Call::new("search")).unwrap())
        .collect();
    // The head reserves 100 ms; the second call is parked behind it (its task is not
    // polled again here, so the turn does not pass on).
    let _waiting = enqueue(&engine, "a", Priority::Default, 2);
    // By 300 ms the bucket holds a token beyond the head's: the quotas alone would
    // admit a reservation, but the parked call of a's waits for it.
    clock.advance(ms(300));
    let r = engine.try_admit_all(&[Call::new("search").tenant("b")]);
    assert_rejected(
        r.map(|mut v| v.remove(0)),
        "rate_limited",
        "tools.search.rate",
        Some(ms(100)),
    );
}

#[test]
fn an_immediate_call_does_not_go_before_calls_waiting_in_the_fair_queue() {
    let (engine, clock) = engine(FAIR);
    engine
        .try_admit(&Call::new("search"))
        .unwrap()
        .complete(Completion::success());
    // The head reserves 100 ms; the second call is parked behind it.
    let _waiting = enqueue(&engine, "a", Priority::Default, 2);
    // By 250 ms the one-token bucket is full again: the quota alone would admit b now
    // (a one-bucket tool's one-word fast path did), but a's parked call comes first.
    clock.advance(ms(250));
    let r = engine.try_admit(&Call::new("search").tenant("b"));
    assert_rejected(r, "rate_limited", "tools.search.rate", Some(ms(100)));
}
