//! Errors hyper answers itself, before any route runs (a malformed request line, an
//! over-long target, too many headers), over real connections: JSON like every other
//! error (issue #13, item 15; they had empty bodies).

use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::support::{connect, read_until_closed, responses, start, RawRes, Server};

/// Sends `bytes` on a new connection and reads every answer until the gateway closes.
async fn exchange(s: &Server, bytes: &[u8]) -> Vec<RawRes> {
    let mut c = connect(s).await;
    c.write_all(bytes).await.expect("write");
    let (out, _) = read_until_closed(&mut c, Duration::from_secs(5))
        .await
        .expect("the gateway closes the connection");
    responses(&out)
}

fn assert_json_error(r: &RawRes, status: u16, code: &str, message: &str) {
    assert_eq!(r.status, status, "{r:?}");
    assert_eq!(r.header("content-type"), Some("application/json"), "{r:?}");
    assert_eq!(r.header("connection"), Some("close"), "{r:?}");
    assert!(r.header("date").is_some(), "{r:?}");
    assert_eq!(r.body["error"]["code"], code, "{r:?}");
    let text = r.body["error"]["message"].as_str().expect("message");
    assert!(
        text.contains(message),
        "{text:?} should contain {message:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_request_heads_get_json_errors_with_their_status() {
    let s = start("[tools.t]\nrate = \"10/s\"\n").await;
    let many_headers: String = (0..101).map(|i| format!("x-h{i}: v\r\n")).collect();
    let long_target = "a".repeat(70_000);
    let cases = [
        (
            "bad request line",
            "NOT A REQUEST\r\n\r\n".to_string(),
            400,
            "bad_request",
            "not valid HTTP/1.1",
        ),
        (
            "too many headers",
            format!("GET /healthz HTTP/1.1\r\nHost: g\r\n{many_headers}\r\n"),
            431,
            "headers_too_large",
            "more than 100 headers",
        ),
        (
            "target too long",
            format!("GET /{long_target} HTTP/1.1\r\nHost: g\r\n\r\n"),
            414,
            "uri_too_long",
            "longer than 65534 bytes",
        ),
    ];
    for (name, bytes, status, code, message) in cases {
        let res = exchange(&s, bytes.as_bytes()).await;
        assert_eq!(res.len(), 1, "{name}: {res:?}");
        assert_json_error(&res[0], status, code, message);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_head_after_a_served_request_gets_a_json_error_too() {
    let s = start("[tools.t]\nrate = \"10/s\"\n").await;
    let res = exchange(
        &s,
        b"GET /healthz HTTP/1.1\r\nHost: g\r\n\r\nGET /healthz HTTP/1.1 trailing\r\n\r\n",
    )
    .await;
    assert_eq!(res.len(), 2, "{res:?}");
    assert_eq!(res[0].status, 200, "{res:?}");
    assert_eq!(res[0].body["status"], "ok");
    assert_json_error(&res[1], 400, "bad_request", "not valid HTTP/1.1");
}
