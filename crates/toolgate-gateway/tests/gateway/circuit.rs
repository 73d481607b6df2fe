//! Circuit refusals over HTTP: every one says when to come back (issue #13, item 17).

use std::time::Duration;

use serde_json::json;

use crate::support::{Res, Server};

/// Admits a call on `tool` and completes its lease with `outcome`.
async fn call(s: &Server, tool: &str, outcome: &str) {
    let a = s.admit(tool).await;
    assert_eq!(a.status, 200, "{a:?}");
    let lease = a.body["lease"].as_str().expect("lease");
    let done = s
        .post(
            &format!("/v1/leases/{lease}/complete"),
            json!({ "outcome": outcome }),
        )
        .await;
    assert_eq!(done.status, 204, "{done:?}");
}

/// A 429 `circuit_open` whose `retry_after_ms` lies in `ms` and whose `Retry-After`
/// is `header` seconds.
#[track_caller]
fn assert_circuit_open(r: &Res, ms: std::ops::RangeInclusive<u64>, header: &str) {
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.body["reason"], "circuit_open", "{r:?}");
    assert_eq!(r.body["quota"], "tools.pay.circuit", "{r:?}");
    let after = r.body["retry_after_ms"].as_u64();
    assert!(after.is_some_and(|a| ms.contains(&a)), "{r:?}");
    assert_eq!(r.headers["retry-after"], header, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_degraded_tool_that_rejects_says_when_its_probes_start() {
    let s = crate::support::start(
        "[tools.pay]\nrate = \"100/s\"\n[tools.pay.circuit]\nwindow = 2\nmin_calls = 2\n\
         degraded_rate = 0.5\non_degraded = \"reject\"\nopen_for = \"30s\"",
    )
    .await;
    call(&s, "pay", "invalid").await;
    call(&s, "pay", "invalid").await;
    assert_eq!(s.get("/v1/tools/pay").await.body["circuit"], "degraded");
    assert_circuit_open(&s.admit("pay").await, 29_000..=30_000, "30");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_open_refusal_carries_a_retry_time() {
    let s = crate::support::start(
        "[tools.pay]\nrate = \"100/s\"\n[tools.pay.circuit]\nwindow = 2\nmin_calls = 2\n\
         open_for = \"100ms\"",
    )
    .await;
    call(&s, "pay", "error").await;
    call(&s, "pay", "error").await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let probe = s.admit("pay").await;
    assert_eq!(probe.status, 200, "the probe: {probe:?}");
    assert_eq!(s.get("/v1/tools/pay").await.body["circuit"], "half_open");
    // Without slow_call the probe's end is unknown: one second.
    assert_circuit_open(&s.admit("pay").await, 1_000..=1_000, "1");
}
