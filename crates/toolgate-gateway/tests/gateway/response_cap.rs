//! Issue #13, item 7: an upstream's answer is read up to `max_response_bytes` (the
//! gateway's, or the tool's own), never relayed whole; a larger one is a 502
//! `upstream_response_too_large`, counted as an error by the breaker, not retried.

use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::json;

use crate::support::{start, Res, Server};

const MIB: usize = 1024 * 1024;

/// 20 MB in 64 KiB chunks: with `Content-Length` (`/sized`) or streamed without it.
async fn upstream() -> String {
    let chunks =
        || (0..320).map(|_| Ok::<_, std::convert::Infallible>(Bytes::from(vec![b' '; 64 * 1024])));
    let app = Router::new()
        .route("/sized", post(|| async { vec![b' '; 20 * MIB] }))
        .route(
            "/streamed",
            post(move || async move { Body::from_stream(tokio_stream::iter(chunks())) }),
        )
        .route(
            "/half",
            post(|| async { Json(json!({"echo": "x".repeat(MIB / 2)})) }),
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
            "[tools.{name}]\nrate = \"100/s\"\nidempotent = true\n[tools.{name}.retry]\n\
             [tools.{name}.circuit]\nwindow = 2\nmin_calls = 2\nopen_for = \"30s\"\n\
             [tools.{name}.upstream]\nurl = \"{up}{path}\"\ntimeout = \"10s\"\n{extra}\n"
        )
    };
    let config = [
        "[gateway]\nmax_response_bytes = 1048576\n".to_string(),
        tool("sized", "/sized", ""),
        tool("streamed", "/streamed", ""),
        tool("half", "/half", ""),
        tool("tight", "/half", "max_response_bytes = 1024"),
    ]
    .concat();
    start(&config).await
}

async fn invoke(s: &Server, tool: &str) -> Res {
    s.post(
        &format!("/v1/tools/{tool}/invoke"),
        json!({"arguments": {}}),
    )
    .await
}

fn too_large(r: &Res, limit: u64) {
    assert_eq!(r.status, 502, "{r:?}");
    assert_eq!(r.body["error"]["code"], "upstream_response_too_large");
    let m = r.body["error"]["message"].as_str().expect("message");
    assert!(
        m.contains(&format!("larger than the limit of {limit} bytes")),
        "{m}"
    );
    assert_eq!(r.body["error"]["reason"], "terminal_error");
    assert_eq!(
        r.body["error"]["attempts"].as_array().map(Vec::len),
        Some(1),
        "not retried: {r:?}"
    );
    assert!(r.body.to_string().len() < 4096, "nothing relayed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_20_mb_answer_with_a_content_length_is_refused_unread() {
    let s = gateway().await;
    let t0 = Instant::now();
    too_large(&invoke(&s, "sized").await, 1_048_576);
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    // Counted as an error by the breaker: two of them open it.
    too_large(&invoke(&s, "sized").await, 1_048_576);
    let r = invoke(&s, "sized").await;
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.body["reason"], "circuit_open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_without_a_length_is_cut_at_the_limit() {
    let s = gateway().await;
    let t0 = Instant::now();
    too_large(&invoke(&s, "streamed").await, 1_048_576);
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    let st = s.tool("streamed");
    assert_eq!(
        (st.admitted, st.in_flight),
        (1, 0),
        "one attempt, completed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_within_the_limit_passes_and_a_tool_may_set_a_lower_one() {
    let s = gateway().await;
    let ok = invoke(&s, "half").await;
    assert_eq!(ok.status, 200, "half a MiB is within 1 MiB");
    assert_eq!(
        ok.body["result"]["echo"].as_str().map(str::len),
        Some(MIB / 2)
    );
    too_large(&invoke(&s, "tight").await, 1024);
}
