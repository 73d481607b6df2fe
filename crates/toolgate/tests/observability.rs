//! Every decision is visible as metrics with the contract's names and labels, and
//! nothing of a call's arguments reaches them. (One test binary: the metrics
//! recorder is process-wide.)

use std::sync::Arc;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;
use tokio_test::task;
use toolgate::{AttemptResult, Call, Completion, Engine, ManualClock, Policy, RunOptions};

#[test]
fn decisions_are_counted_with_tool_decision_and_reason_labels() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");

    // The recorder is installed before the engine, as the docs require.
    let clock = ManualClock::new();
    let policy = Policy::from_toml_str(
        "[tools.lookup]\nrate = \"1/s\"\nconcurrency = 5\n[tools.search]\nrate = \"10/s\"\nburst = 1\non_limit = \"wait\"\n[tools.p]\nrate = \"1/s\"\n[tools.p.circuit]\nmin_calls = 1\nwindow = 1\n[tools.r]\nidempotent = true\n[tools.r.retry]\nbase = \"1ms\"\ncap = \"1ms\"",
    )
    .expect("valid");
    let engine = Engine::with_clock(policy, Arc::new(clock.clone()));
    let held = engine
        .try_admit(&Call::new("lookup").tenant("acme"))
        .expect("admitted");
    assert!(engine.try_admit(&Call::new("lookup")).is_err());
    let _s = engine.try_admit(&Call::new("search")).expect("admitted");
    let search = Call::new("search");
    let mut waiter = task::spawn(engine.admit(&search));
    assert!(waiter.poll().is_pending());
    clock.advance(Duration::from_millis(100));
    let waited = match waiter.poll() {
        std::task::Poll::Ready(r) => r.expect("admitted after waiting"),
        std::task::Poll::Pending => panic!("still waiting"),
    };
    drop(waiter);
    waited.complete(Completion::success());
    // An interactive call that waits 100 ms is counted under its own class.
    let urgent = Call::new("search").priority(toolgate::Priority::Interactive);
    assert!(
        engine.try_admit(&Call::new("search")).is_err(),
        "the waiter took it"
    );
    let mut waiter = task::spawn(engine.admit(&urgent));
    assert!(waiter.poll().is_pending());
    clock.advance(Duration::from_millis(200));
    assert!(matches!(waiter.poll(), std::task::Poll::Ready(Ok(_))));
    drop(waiter);
    engine
        .try_admit(&Call::new("p"))
        .expect("admitted")
        .complete(Completion::new(toolgate::Outcome::Error));
    // A call that succeeds on its second attempt.
    let r = Call::new("r");
    let mut run = task::spawn(
        engine.run(&r, RunOptions::new().jitter(|| 1.0), |ctx| async move {
            if ctx.number() == 1 {
                AttemptResult::failure("busy").status(503)
            } else {
                AttemptResult::<_, &str>::success(())
            }
        }),
    );
    assert!(run.poll().is_pending());
    clock.advance(Duration::from_millis(1));
    assert!(matches!(run.poll(), std::task::Poll::Ready(Ok(out)) if out.attempts() == 2));
    drop(run);
    // An upstream's Retry-After of 2.5 s pauses the tool: 3 whole seconds counted.
    engine
        .try_admit(&Call::new("r"))
        .expect("admitted")
        .complete(Completion::success().retry_after(Duration::from_millis(2_500)));

    let snapshot = snapshotter.snapshot().into_vec();
    let find = |kind: MetricKind, name: &str, labels: &[(&str, &str)]| {
        snapshot.iter().find_map(|(key, _, _, value)| {
            let k = key.key();
            let matches = key.kind() == kind
                && k.name() == name
                && labels
                    .iter()
                    .all(|(l, v)| k.labels().any(|lab| lab.key() == *l && lab.value() == *v));
            matches.then_some(value)
        })
    };
    let count = |tool, decision, reason| match find(
        MetricKind::Counter,
        "toolgate_admissions_total",
        &[("tool", tool), ("decision", decision), ("reason", reason)],
    ) {
        Some(DebugValue::Counter(n)) => *n,
        other => panic!("{tool}/{decision}/{reason}: {other:?}"),
    };
    assert_eq!(count("lookup", "admitted", "none"), 1);
    assert_eq!(count("lookup", "rejected", "rate_limited"), 1);
    assert_eq!(count("search", "admitted", "none"), 3);
    assert_eq!(count("search", "rejected", "rate_limited"), 1);
    assert!(matches!(
        find(MetricKind::Gauge, "toolgate_in_flight", &[("tool", "lookup")]),
        Some(DebugValue::Gauge(g)) if g.0 == 1.0
    ));
    match find(
        MetricKind::Histogram,
        "toolgate_wait_seconds",
        &[("tool", "search"), ("priority", "default")],
    ) {
        Some(DebugValue::Histogram(v)) => {
            assert_eq!(v.len(), 1);
            assert!((v[0].0 - 0.1).abs() < 1e-9);
        }
        other => panic!("wait histogram: {other:?}"),
    }
    match find(
        MetricKind::Histogram,
        "toolgate_wait_seconds",
        &[("tool", "search"), ("priority", "interactive")],
    ) {
        Some(DebugValue::Histogram(v)) => {
            assert_eq!(v.len(), 1);
            assert!((v[0].0 - 0.1).abs() < 1e-9, "{v:?}");
        }
        other => panic!("interactive wait histogram: {other:?}"),
    }
    assert!(matches!(
        find(MetricKind::Gauge, "toolgate_circuit_state", &[("tool", "p")]),
        Some(DebugValue::Gauge(g)) if g.0 == 1.0
    ));
    assert!(matches!(
        find(
            MetricKind::Counter,
            "toolgate_retries_total",
            &[("tool", "r"), ("reason", "status")]
        ),
        Some(DebugValue::Counter(1))
    ));
    assert!(matches!(
        find(
            MetricKind::Counter,
            "toolgate_success_after_retry_total",
            &[("tool", "r")]
        ),
        Some(DebugValue::Counter(1))
    ));
    assert!(matches!(
        find(
            MetricKind::Counter,
            "toolgate_server_paused_seconds_total",
            &[("tool", "r")]
        ),
        Some(DebugValue::Counter(3))
    ));
    // Tenants are not metric labels (unbounded cardinality), and nothing else is
    // (the three priority classes are).
    for (key, _, _, _) in &snapshot {
        for label in key.key().labels() {
            assert!(
                ["tool", "decision", "reason", "from", "to", "priority"].contains(&label.key()),
                "unexpected label {label:?}"
            );
        }
    }
    drop(held);
}
