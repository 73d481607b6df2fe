//! A breaker that trips while calls wait: they are refused at once and give back
//! what they reserved.

use super::*;

const WAITING_BREAKER: &str = r#"
[tools.pay]
rate = "10/s"
burst = 1
on_limit = "wait"
max_wait = "1s"
[tools.pay.circuit]
window = 2
min_calls = 1
failure_rate = 0.5
open_for = "10s"
"#;

#[test]
fn a_waiter_is_refused_at_once_when_the_breaker_trips_and_its_reservation_given_back() {
    // Issue #13, item 12: the waiter used to be admitted at its slot, after the
    // breaker had opened, and reached the failing upstream.
    let (engine, clock) = engine(WAITING_BREAKER);
    let call = Call::new("pay");
    let failing = engine.try_admit(&call).unwrap();
    let mut a = task::spawn(engine.admit(&call)); // due at 100 ms
    let mut b = task::spawn(engine.admit(&call)); // due at 200 ms
    assert_pending!(a.poll());
    assert_pending!(b.poll());
    failing.complete(Completion::new(Outcome::Error));
    assert_eq!(state(&engine), Some(CircuitState::Open));
    // Refused now, not at their slots.
    assert!(a.is_woken() && b.is_woken());
    for w in [&mut a, &mut b] {
        let r = assert_ready!(w.poll()).unwrap_err();
        assert_eq!(
            (r.reason().as_str(), r.quota(), r.retry_after()),
            (
                "circuit_open",
                "tools.pay.circuit",
                Some(Duration::from_secs(10))
            )
        );
    }
    // Their reservations are gone: the bucket refills as if they had never come.
    let rate = |engine: &toolgate::Engine| quota(engine, "pay", "tools.pay.rate");
    assert_eq!(
        (rate(&engine).available, rate(&engine).waiters),
        (Some(0), 0)
    );
    clock.advance(ms(100));
    assert_eq!(rate(&engine).available, Some(1));
    assert_eq!(engine.tool_state("pay", None).unwrap().waiting, 0);
}

#[test]
fn a_call_queued_for_concurrency_is_refused_when_the_breaker_trips() {
    let (engine, clock) = engine(
        "[tools.pay]\nconcurrency = 1\non_limit = \"wait\"\nmax_wait = \"5s\"\n\
         [tools.pay.circuit]\nwindow = 2\nmin_calls = 1\nfailure_rate = 0.5\nopen_for = \"10s\"",
    );
    let call = Call::new("pay");
    let failing = engine.try_admit(&call).unwrap();
    let mut w = task::spawn(engine.admit(&call));
    assert_pending!(w.poll());
    failing.complete(Completion::new(Outcome::Error));
    let r = assert_ready!(w.poll()).unwrap_err();
    assert_eq!(r.reason().as_str(), "circuit_open");
    // The slot it was handed goes back: once the circuit lets calls through, one fits.
    assert_eq!(
        quota(&engine, "pay", "tools.pay.concurrency").available,
        Some(1)
    );
    clock.advance(Duration::from_secs(10));
    let _probe = engine.try_admit(&call).unwrap();
}

#[test]
fn through_engine_run_a_waiting_call_never_reaches_the_upstream_after_the_breaker_trips() {
    // Issue #13, item 12, through the pipeline: an upstream counter proves that the
    // waiting call never went out.
    let (engine, clock) = engine(WAITING_BREAKER);
    let sent = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let upstream = |sent: Arc<AtomicUsize>, release: Arc<std::sync::atomic::AtomicBool>| {
        move |_ctx: toolgate::AttemptCtx<'static>| {
            sent.fetch_add(1, Ordering::SeqCst);
            let release = release.clone();
            async move {
                std::future::poll_fn(|_| {
                    if release.load(Ordering::SeqCst) {
                        std::task::Poll::Ready(())
                    } else {
                        std::task::Poll::Pending
                    }
                })
                .await;
                toolgate::AttemptResult::<(), &str>::failure("upstream down").status(500)
            }
        }
    };
    let call = Call::new("pay");
    let opts = toolgate::RunOptions::new;
    let mut first = task::spawn(engine.run(&call, opts(), upstream(sent.clone(), release.clone())));
    assert_pending!(first.poll()); // admitted, its attempt in flight
    let mut second =
        task::spawn(engine.run(&call, opts(), upstream(sent.clone(), release.clone())));
    assert_pending!(second.poll()); // waiting for its token, due at 100 ms
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    release.store(true, Ordering::SeqCst);
    assert!(assert_ready!(first.poll()).is_err());
    assert_eq!(state(&engine), Some(CircuitState::Open));
    clock.advance(ms(100));
    match assert_ready!(second.poll()) {
        Err(toolgate::ExecuteError::Rejected(r)) => assert_eq!(r.reason().as_str(), "circuit_open"),
        other => panic!("expected a circuit_open rejection, got {other:?}"),
    }
    assert_eq!(
        sent.load(Ordering::SeqCst),
        1,
        "no call went out after the trip"
    );
}
