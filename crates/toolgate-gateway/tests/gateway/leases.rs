//! Lease completion and expiry.

use std::time::Duration;

use serde_json::json;

use crate::support::{eventually, start, SOON};

const SHORT_TTL: &str = r#"
[gateway]
lease_ttl = "300ms"

[tools.slot]
concurrency = 1

[tools.llm]
tokens = "1000/h"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_is_completed_as_timeout_and_frees_its_slot() {
    let s = start(SHORT_TTL).await;
    let first = s.admit("slot").await;
    assert_eq!(first.status, 200);
    let lease = first.body["lease"].as_str().expect("lease").to_string();
    let busy = s.admit("slot").await;
    assert_eq!(busy.status, 429);
    assert_eq!(busy.body["reason"], "concurrency_limited");
    assert_eq!(busy.body["quota"], "tools.slot.concurrency");
    assert!(
        busy.body["retry_after_ms"].is_null(),
        "unknown for concurrency"
    );
    assert!(!busy.headers.contains_key("retry-after"));

    eventually("the lease expires", SOON, || async {
        s.tool("slot").in_flight == 0
    })
    .await;
    assert!(s.state.leases().is_empty());
    let late = s
        .post(
            &format!("/v1/leases/{lease}/complete"),
            json!({"outcome": "success"}),
        )
        .await;
    assert_eq!(late.status, 404, "{late:?}");
    assert_eq!(late.body["error"]["code"], "unknown_lease");
    assert_eq!(s.admit("slot").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completing_a_lease_releases_it_once_and_reconciles_tokens() {
    let s = start(SHORT_TTL).await;
    let r = s
        .post("/v1/admit", json!({"tool": "llm", "cost": {"tokens": 600}}))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let left = |s: &crate::support::Server| s.tool("llm").quotas[0].available;
    assert_eq!(left(&s), Some(400));
    let no = s
        .post("/v1/admit", json!({"tool": "llm", "cost": {"tokens": 600}}))
        .await;
    assert_eq!(no.status, 429);
    assert_eq!(no.body["reason"], "tokens_limited");
    let lease = r.body["lease"].as_str().expect("lease");
    let path = format!("/v1/leases/{lease}/complete");
    let done = s
        .post(
            &path,
            json!({"outcome": "success", "tokens": 100, "latency_ms": 12}),
        )
        .await;
    assert_eq!(done.status, 204);
    assert_eq!(left(&s), Some(900), "500 tokens refunded");
    let again = s.post(&path, json!({"outcome": "success"})).await;
    assert_eq!(again.status, 404);
    tokio::time::sleep(Duration::from_millis(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_with_an_unknown_outcome_is_refused_and_keeps_the_lease() {
    let s = start(SHORT_TTL).await;
    let r = s.admit("slot").await;
    let lease = r.body["lease"].as_str().expect("lease");
    let path = format!("/v1/leases/{lease}/complete");
    let bad = s.post(&path, json!({"outcome": "meh"})).await;
    assert_eq!(bad.status, 400);
    assert!(
        bad.body["error"]["message"]
            .as_str()
            .expect("message")
            .contains("expected success, error, timeout or invalid"),
        "{bad:?}"
    );
    assert_eq!(s.post(&path, json!({"outcome": "error"})).await.status, 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_completions_open_the_circuit_and_admit_says_circuit_open() {
    let s = start(
        "[tools.pay]\nrate = \"100/s\"\n[tools.pay.circuit]\nwindow = 2\nmin_calls = 2\nopen_for = \"30s\"",
    )
    .await;
    for _ in 0..2 {
        let a = s.admit("pay").await;
        assert_eq!(a.status, 200);
        let lease = a.body["lease"].as_str().expect("lease").to_string();
        let done = s
            .post(
                &format!("/v1/leases/{lease}/complete"),
                json!({"outcome": "error", "latency_ms": 12}),
            )
            .await;
        assert_eq!(done.status, 204);
    }
    let no = s.admit("pay").await;
    assert_eq!(no.status, 429);
    assert_eq!(no.body["reason"], "circuit_open");
    assert_eq!(no.body["quota"], "tools.pay.circuit");
    assert!(no.body["retry_after_ms"]
        .as_u64()
        .is_some_and(|ms| ms > 29_000 && ms <= 30_000));
    assert_eq!(no.headers["retry-after"], "30");
    let state = s.get("/v1/tools/pay").await;
    assert_eq!(state.body["circuit"], "open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_with_429_and_retry_after_pauses_only_that_tool() {
    let s = start("[tools.crm]\nrate = \"100/s\"\n[tools.search]\nrate = \"100/s\"").await;
    let a = s.admit("crm").await;
    let lease = a.body["lease"].as_str().expect("lease").to_string();
    let done = s
        .post(
            &format!("/v1/leases/{lease}/complete"),
            json!({"outcome": "error", "status": 429, "headers": {"retry-after": "2"}}),
        )
        .await;
    assert_eq!(done.status, 204);
    let no = s.admit("crm").await;
    assert_eq!(no.status, 429);
    assert_eq!(no.body["quota"], "tools.crm.retry_after");
    assert_eq!(no.body["reason"], "rate_limited");
    assert!(no.body["retry_after_ms"]
        .as_u64()
        .is_some_and(|ms| ms > 1_000 && ms <= 2_000));
    assert_eq!(
        s.admit("search").await.status,
        200,
        "only that tool is paused"
    );
    eventually("the pause ends", SOON, || async {
        s.admit("crm").await.status == 200
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_headers_with_little_left_spread_that_tools_calls() {
    let s = start("[tools.crm]\nrate = \"100/s\"\n[tools.search]\nrate = \"100/s\"").await;
    let a = s.admit("crm").await;
    let lease = a.body["lease"].as_str().expect("lease").to_string();
    // 2 of 100 left for 60 s: one call every 30 s.
    let done = s
        .post(
            &format!("/v1/leases/{lease}/complete"),
            json!({"outcome": "success", "status": 200,
                   "headers": {"RateLimit": "\"default\";r=2;t=60", "RateLimit-Policy": "\"default\";q=100;w=60"}}),
        )
        .await;
    assert_eq!(done.status, 204);
    assert_eq!(s.admit("crm").await.status, 200, "the first slot");
    let no = s.admit("crm").await;
    assert_eq!(no.status, 429);
    assert_eq!(no.body["quota"], "tools.crm.server_limit");
    assert_eq!(no.body["reason"], "rate_limited");
    assert!(no.body["retry_after_ms"]
        .as_u64()
        .is_some_and(|ms| ms > 20_000 && ms <= 30_000));
    assert_eq!(s.admit("search").await.status, 200, "only that tool");
}
