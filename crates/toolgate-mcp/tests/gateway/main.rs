//! The MCP gateway in process: a real rmcp client talks to a [`toolgate_mcp::Gateway`]
//! over a pipe, in front of a fake upstream served over HTTP on loopback. Each test
//! is a sentence about how a `tools/call` is admitted, forwarded and classified (#16).

#![allow(
    clippy::disallowed_methods,
    reason = "real HTTP on loopback, real time"
)]

mod support;

use serde_json::json;
use support::{setup, setup_as, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_listed_under_their_exposed_names_with_their_schemas() {
    let s = setup("", json!({})).await;
    let tools = s.client.peer().list_all_tools().await.expect("list");
    let names: Vec<&str> = tools.iter().map(|t| &*t.name).collect();
    assert_eq!(
        names,
        [
            "fake__bad",
            "fake__fail",
            "fake__grow",
            "fake__odd_name",
            "fake__ok",
            "fake__slow"
        ]
    );
    let ok = &tools[4];
    assert_eq!(ok.description.as_deref(), Some("the ok tool"));
    assert!(ok.output_schema.is_some());
    let entry = s.upstreams.catalog();
    let odd = entry.get("fake__odd_name").expect("odd");
    assert_eq!(odd.policy_key, "mcp:fake/odd.name");
    assert_eq!(s.upstream_calls(), 0, "listing calls no tool");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_within_quota_runs_and_one_beyond_it_never_reaches_the_upstream() {
    let s = setup("[tools.\"mcp:fake/ok\"]\nrate = \"1/min\"\n", json!({})).await;
    let ok = s.call("fake__ok").await.expect("call");
    assert_eq!(ok.is_error, Some(false));
    assert_eq!(ok.structured_content, Some(json!({"n": 1})));
    let denied = s.call("fake__ok").await.expect("call");
    assert_eq!(denied.is_error, Some(true));
    let data = denied.structured_content.clone().expect("data");
    assert_eq!(data["tool"], "fake__ok");
    assert_eq!(data["quota"], "tools.\"mcp:fake/ok\".rate");
    assert_eq!(data["reason"], "rate_limited");
    assert!(
        data["retry_after_ms"].as_u64().expect("ms") > 55_000,
        "{data}"
    );
    assert!(text(&denied)
        .starts_with("fake__ok is rate limited (tools.\"mcp:fake/ok\".rate); retry after 5"));
    assert_eq!(s.upstream_calls(), 1);
    let st = s.state("mcp:fake/ok");
    assert_eq!((st.admitted, st.rejected, st.in_flight), (1, 1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_reject_jsonrpc_error_answers_an_error_with_the_same_data() {
    let s = setup(
        "[tools.\"mcp:fake/ok\"]\nrate = \"1/min\"\n",
        json!({"on_reject": "jsonrpc_error"}),
    )
    .await;
    s.call("fake__ok").await.expect("first");
    let err = s.call("fake__ok").await.expect_err("rejected");
    let rmcp::service::ServiceError::McpError(e) = err else {
        panic!("not a JSON-RPC error: {err}");
    };
    assert_eq!(e.code.0, toolgate_mcp::rejection::REJECTED_CODE);
    let data = e.data.expect("data");
    assert_eq!(data["reason"], "rate_limited");
    assert_eq!(data["tool"], "fake__ok");
    assert_eq!(s.upstream_calls(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn is_error_results_are_failures_that_open_the_breaker() {
    let s = setup(
        "[tools.\"mcp:fake/fail\"]\n[tools.\"mcp:fake/fail\".circuit]\nwindow = 2\n\
         min_calls = 2\nfailure_rate = 0.5\nopen_for = \"1m\"\n",
        json!({}),
    )
    .await;
    for _ in 0..2 {
        let r = s.call("fake__fail").await.expect("call");
        // The upstream's own isError result comes back as it is.
        assert_eq!((r.is_error, text(&r).as_str()), (Some(true), "boom"));
    }
    let r = s.call("fake__fail").await.expect("call");
    let data = r.structured_content.clone().expect("a rejection");
    assert_eq!(data["reason"], "circuit_open", "{data}");
    assert_eq!(
        s.upstream_calls(),
        2,
        "the open breaker keeps the upstream out"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_content_that_breaks_the_output_schema_is_invalid() {
    let s = setup(
        "[tools.\"mcp:fake/bad\"]\n[tools.\"mcp:fake/bad\".circuit]\nwindow = 2\n\
         min_calls = 2\ndegraded_rate = 0.5\n",
        json!({}),
    )
    .await;
    for _ in 0..2 {
        let r = s.call("fake__bad").await.expect("call");
        assert_eq!(r.is_error, Some(true));
        let t = text(&r);
        assert!(t.starts_with("fake__bad returned an invalid result: the structuredContent does not match the tool's outputSchema: /n:"), "{t}");
    }
    let st = s.state("mcp:fake/bad");
    assert_eq!(st.circuit.map(|c| c.as_str()), Some("degraded"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_tool_and_oversized_arguments_are_json_rpc_errors() {
    let s = setup("", json!({"max_argument_bytes": 64})).await;
    let err = s.call("fake__nope").await.expect_err("unknown");
    assert!(err.to_string().contains("unknown tool"), "{err}");
    let mut params = rmcp::model::CallToolRequestParams::new("fake__ok");
    params.arguments = json!({"x": "y".repeat(100)}).as_object().cloned();
    let err = s
        .client
        .peer()
        .call_tool(params)
        .await
        .expect_err("too big");
    assert!(err.to_string().contains("mcp.max_argument_bytes"), "{err}");
    assert_eq!(s.upstream_calls(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_outlives_call_timeout_is_a_timeout() {
    let s = setup("", json!({"call_timeout": "300ms"})).await;
    let r = s.call("fake__slow").await.expect("call");
    assert_eq!(r.is_error, Some(true));
    assert_eq!(
        text(&r),
        "fake__slow did not answer within 0.3 s (call_timeout)"
    );
    // The dropped upstream call was cancelled there.
    for _ in 0..50 {
        if s.fake.cancelled.load(std::sync::atomic::Ordering::SeqCst) == 1 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the upstream never saw the cancellation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_upstream_tool_list_reaches_the_catalog_and_the_client() {
    let s = setup("", json!({})).await;
    assert!(s.upstreams.catalog().get("fake__extra").is_none());
    // The upstream (2026-07-28) announces the change on toolgate's listen stream;
    // toolgate reads the list again and tells its own client (a handshake-era session).
    s.call("fake__grow").await.expect("grow");
    for _ in 0..100 {
        if s.upstreams.catalog().get("fake__extra").is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        s.upstreams.catalog().get("fake__extra").is_some(),
        "the catalog never had the new tool"
    );
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        s.listener.changes.notified(),
    )
    .await
    .expect("notifications/tools/list_changed in time");
    let names: Vec<String> = s
        .client
        .peer()
        .list_all_tools()
        .await
        .expect("list")
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(names.contains(&"fake__extra".to_string()), "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_estimate_read_from_the_arguments_is_charged_to_the_budget() {
    let s = setup(
        "[tools.\"mcp:fake/ok\"]\ntokens = \"100/min\"\n",
        json!({"fake": {"cost": {"ok": "/max_tokens"}}}),
    )
    .await;
    let first = s
        .call_with("fake__ok", json!({"max_tokens": 60}))
        .await
        .expect("call");
    assert_eq!(first.is_error, Some(false));
    let second = s
        .call_with("fake__ok", json!({"max_tokens": 60}))
        .await
        .expect("call");
    let data = second.structured_content.clone().expect("a rejection");
    assert_eq!(data["reason"], "tokens_limited", "{data}");
    assert_eq!(data["quota"], "tools.\"mcp:fake/ok\".tokens");
    // 40 tokens are left: a smaller estimate fits.
    let third = s
        .call_with("fake__ok", json!({"max_tokens": 40}))
        .await
        .expect("call");
    assert_eq!(third.is_error, Some(false));
    let err = s
        .call_with("fake__ok", json!({"max_tokens": "lots"}))
        .await
        .expect_err("not a number");
    assert!(
        err.to_string()
            .contains("the token estimate at /max_tokens"),
        "{err}"
    );
    assert_eq!(s.upstream_calls(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admission_and_rejection_is_told_with_its_tenant_issue_17() {
    let policy = "[tools.\"mcp:fake/ok\"]\nrate = \"1/min\"\n";
    let s = setup_as(policy, json!({}), Some("acme")).await;
    s.call("fake__ok").await.expect("call");
    let denied = s.call("fake__ok").await.expect("call");
    assert_eq!(denied.is_error, Some(true));
    let seen = s.decisions.0.lock().expect("lock").clone();
    assert_eq!(
        seen,
        [
            "admitted mcp:fake/ok acme",
            "rejected mcp:fake/ok acme rate_limited"
        ]
    );
}
