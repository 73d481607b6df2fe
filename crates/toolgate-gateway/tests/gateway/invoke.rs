//! Invoke against a real upstream: an axum server started by the test on port 0.

use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::support::{start, Server};

async fn upstream() -> String {
    let app = Router::new()
        .route(
            "/echo",
            post(|h: HeaderMap, Json(v): Json<Value>| async move {
                let key = h
                    .get("idempotency-key")
                    .and_then(|k| k.to_str().ok())
                    .map(str::to_string);
                Json(json!({"echo": v, "idempotency_key": key}))
            }),
        )
        .route(
            "/wrong",
            post(|| async { Json(json!({"unexpected": true})) }),
        )
        .route(
            "/fail",
            post(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "boom") }),
        )
        .route(
            "/busy",
            post(|| async {
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    [("retry-after", "2")],
                    "slow down",
                )
            }),
        )
        .route(
            "/low",
            post(|| async {
                (
                    [
                        ("x-ratelimit-limit", "100"),
                        ("x-ratelimit-remaining", "2"),
                        ("x-ratelimit-reset", "60"),
                    ],
                    Json(json!({"echo": "ok"})),
                )
            }),
        )
        .route(
            "/slow",
            post(|| async {
                tokio::time::sleep(Duration::from_secs(3)).await;
                Json(json!({"echo": "late"}))
            }),
        );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(l, app).await });
    format!("http://{addr}")
}

async fn gateway() -> Server {
    let up = upstream().await;
    let tool = |name: &str, path: &str, extra: &str| {
        format!(
            r#"
[tools.{name}]
rate = "3/min"
burst = 3
concurrency = 2

[tools.{name}.upstream]
url = "{up}{path}"
timeout = "300ms"
arguments_schema = {{ type = "object", required = ["q"], properties = {{ q = {{ type = "string" }} }} }}
result_schema = {{ type = "object", required = ["echo"] }}
{extra}
"#
        )
    };
    let config = [
        tool("echo", "/echo", ""),
        tool("wrong", "/wrong", ""),
        tool("fail", "/fail", ""),
        tool("slow", "/slow", ""),
        tool("busy", "/busy", ""),
        tool("low", "/low", ""),
    ]
    .concat();
    start(&config).await
}

async fn invoke(s: &Server, tool: &str, body: Value) -> crate::support::Res {
    s.post(&format!("/v1/tools/{tool}/invoke"), body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_call_runs_against_the_upstream_and_returns_its_result() {
    let s = gateway().await;
    let r = invoke(
        &s,
        "echo",
        json!({"arguments": {"q": "acme"}, "idempotency_key": "k-1"}),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["result"]["echo"], json!({"q": "acme"}));
    assert_eq!(r.body["result"]["idempotency_key"], "k-1");
    assert_eq!(r.body["outcome"], "success");
    let st = s.tool("echo");
    assert_eq!((st.admitted, st.in_flight), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_arguments_are_refused_before_admission() {
    let s = gateway().await;
    let r = invoke(&s, "echo", json!({"arguments": {"q": 5}})).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.body["error"]["code"], "invalid_arguments");
    let m = r.body["error"]["message"].as_str().expect("message");
    assert!(
        m.contains("/q") && m.contains("is not of type \"string\""),
        "{m}"
    );
    let r = invoke(&s, "echo", json!({"arguments": {}})).await;
    assert_eq!(r.status, 400);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .expect("m")
            .contains("\"q\" is a required property"),
        "{r:?}"
    );
    let st = s.tool("echo");
    assert_eq!((st.admitted, st.rejected), (0, 0), "nothing consumed");
    assert_eq!(st.quotas[0].available, Some(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_failures_complete_the_permit_with_their_outcome() {
    let s = gateway().await;
    let r = invoke(&s, "wrong", json!({"arguments": {"q": "x"}})).await;
    assert_eq!(r.status, 502, "{r:?}");
    assert_eq!(r.body["error"]["code"], "invalid_result");
    assert!(r.body["error"]["message"]
        .as_str()
        .expect("m")
        .contains("\"echo\" is a required property"));
    let r = invoke(&s, "fail", json!({"arguments": {"q": "x"}})).await;
    assert_eq!(r.status, 502);
    assert_eq!(r.body["error"]["code"], "upstream_error");
    assert!(r.body["error"]["message"]
        .as_str()
        .expect("m")
        .contains("answered 500: boom"));
    let r = invoke(&s, "slow", json!({"arguments": {"q": "x"}})).await;
    assert_eq!(r.status, 504);
    assert_eq!(r.body["error"]["code"], "upstream_timeout");
    assert!(r.body["error"]["message"]
        .as_str()
        .expect("m")
        .contains("300ms"));
    for t in ["wrong", "fail", "slow"] {
        let st = s.tool(t);
        assert_eq!((st.admitted, st.in_flight), (1, 0), "{t}: {st:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invoke_is_admission_controlled() {
    let s = gateway().await;
    for _ in 0..3 {
        assert_eq!(
            invoke(&s, "echo", json!({"arguments": {"q": "x"}}))
                .await
                .status,
            200
        );
    }
    let r = invoke(&s, "echo", json!({"arguments": {"q": "x"}})).await;
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.body["reason"], "rate_limited");
    assert_eq!(r.body["quota"], "tools.echo.rate");
    assert!(r.headers.contains_key("retry-after"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invoked_calls_are_counted_per_tenant_in_the_activity_issue_17() {
    let s = gateway().await;
    for (tenant, want) in [
        ("acme", 200),
        ("acme", 200),
        ("globex", 200),
        ("globex", 429),
    ] {
        let body = json!({"arguments": {"q": "x"}, "tenant": tenant, "priority": "batch"});
        assert_eq!(invoke(&s, "echo", body).await.status, want);
    }
    let a = s.get("/v1/activity/echo").await.body;
    assert_eq!(a["window"]["admitted"], 3, "{a}");
    assert_eq!(a["window"]["rejected"], 1);
    assert_eq!(a["by_priority"]["batch"]["admitted"], 3);
    let g = s.get("/v1/tools/echo?tenant=globex").await.body;
    let g = &g["tenant_activity"];
    assert_eq!(
        (g["admitted"].as_u64(), g["rejected"].as_u64()),
        (Some(1), Some(1)),
        "{g}"
    );
    assert_eq!(g["rejected_by_reason"]["rate_limited"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_429_with_retry_after_pauses_only_that_tool() {
    let s = gateway().await;
    let r = invoke(&s, "busy", json!({"arguments": {"q": "x"}})).await;
    assert_eq!(r.status, 502, "{r:?}");
    let paused = invoke(&s, "busy", json!({"arguments": {"q": "x"}})).await;
    assert_eq!(paused.status, 429, "{paused:?}");
    assert_eq!(paused.body["quota"], "tools.busy.retry_after");
    assert!(paused.body["retry_after_ms"]
        .as_u64()
        .is_some_and(|ms| ms > 1_000 && ms <= 2_000));
    let other = invoke(&s, "echo", json!({"arguments": {"q": "x"}})).await;
    assert_eq!(other.status, 200, "other tools run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_reporting_little_left_spreads_that_tools_calls() {
    let s = gateway().await;
    // 2 of 100 left for 60 s: one call every 30 s from now on.
    let r = invoke(&s, "low", json!({"arguments": {"q": "x"}})).await;
    assert_eq!(r.status, 200, "{r:?}");
    let first = invoke(&s, "low", json!({"arguments": {"q": "x"}})).await;
    assert_eq!(first.status, 200, "the first slot: {first:?}");
    let spread = invoke(&s, "low", json!({"arguments": {"q": "x"}})).await;
    assert_eq!(spread.status, 429, "{spread:?}");
    assert_eq!(spread.body["quota"], "tools.low.server_limit");
    assert!(spread.body["retry_after_ms"]
        .as_u64()
        .is_some_and(|ms| ms > 20_000 && ms <= 30_000));
    let other = invoke(&s, "echo", json!({"arguments": {"q": "x"}})).await;
    assert_eq!(other.status, 200, "other tools run");
}

/// An upstream that answers 503 to the first request of each idempotency key (or of
/// requests without one), then 200 echoing the key and how often it saw it.
async fn flaky_upstream() -> String {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    let seen: Arc<Mutex<HashMap<Option<String>, u32>>> = Arc::default();
    let app = Router::new().route(
        "/flaky",
        post(move |h: HeaderMap| {
            let seen = seen.clone();
            async move {
                let key = h
                    .get("idempotency-key")
                    .and_then(|k| k.to_str().ok())
                    .map(str::to_string);
                let n = {
                    let mut seen = seen.lock().expect("lock");
                    let n = seen.entry(key.clone()).or_insert(0);
                    *n += 1;
                    *n
                };
                if n == 1 {
                    (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"busy": true})))
                } else {
                    (
                        StatusCode::OK,
                        Json(json!({"echo": "ok", "idempotency_key": key, "seen": n})),
                    )
                }
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(l, app).await });
    format!("http://{addr}")
}

async fn retrying_gateway() -> Server {
    let up = flaky_upstream().await;
    let tool = |name: &str, idempotent: bool| {
        format!(
            r#"
[tools.{name}]
rate = "10/min"
burst = 10
idempotent = {idempotent}

[tools.{name}.retry]
max_attempts = 3
base = "10ms"
cap = "20ms"
deadline = "5s"

[tools.{name}.upstream]
url = "{up}/flaky"
timeout = "1s"
result_schema = {{ type = "object", required = ["echo"] }}
"#
        )
    };
    start(&[tool("lookup", true), tool("charge", false)].concat()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_tool_is_retried_after_a_503_and_reports_its_attempts() {
    let s = retrying_gateway().await;
    let r = invoke(&s, "lookup", json!({"arguments": {"q": "x"}})).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["attempts"], 2);
    assert_eq!(r.body["result"]["seen"], 2);
    let st = s.tool("lookup");
    assert_eq!(
        (st.admitted, st.in_flight),
        (2, 0),
        "every attempt is admitted"
    );
    assert_eq!(st.quotas[0].available, Some(8), "and takes a rate token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_idempotent_call_without_a_key_runs_once_and_a_keyed_one_is_retried() {
    let s = retrying_gateway().await;
    let r = invoke(&s, "charge", json!({"arguments": {"q": "x"}})).await;
    assert_eq!(r.status, 502, "{r:?}");
    let e = &r.body["error"];
    assert_eq!(e["code"], "upstream_error");
    assert_eq!(e["reason"], "not_retryable");
    assert_eq!(e["last_status"], 503);
    let attempts = e["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 1, "{e}");
    assert_eq!(attempts[0]["status"], 503);
    assert_eq!(attempts[0]["delay_ms"], Value::Null);
    assert_eq!(s.tool("charge").admitted, 1);

    let r = invoke(
        &s,
        "charge",
        json!({"arguments": {"q": "x"}, "idempotency_key": "k-7"}),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["attempts"], 2);
    // The upstream saw the key on both attempts.
    assert_eq!(r.body["result"]["idempotency_key"], "k-7");
    assert_eq!(r.body["result"]["seen"], 2);
    assert_eq!(s.tool("charge").admitted, 3);
}
