//! A table of bad inputs, each with its status and message; through the router with
//! `oneshot` (no network).

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::Value;
use toolgate_gateway::state::AppState;
use tower::ServiceExt;

const CONFIG: &str = r#"
unknown_tools = "deny"

[tools.t]
rate = "10/s"
tokens = "100/min"
"#;

struct Case {
    name: &'static str,
    method: &'static str,
    path: &'static str,
    body: Vec<u8>,
    status: u16,
    code: &'static str,
    message: &'static str,
}

fn case(
    name: &'static str,
    path: &'static str,
    body: &str,
    status: u16,
    code: &'static str,
    message: &'static str,
) -> Case {
    Case {
        name,
        method: "POST",
        path,
        body: body.as_bytes().to_vec(),
        status,
        code,
        message,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_input_gets_its_status_and_a_message_naming_the_problem() {
    let state = AppState::from_toml(CONFIG).expect("config");
    let huge = format!(r#"{{"tool":"t","pad":"{}"}}"#, "x".repeat(100 * 1024));
    let mut cases = vec![
        case(
            "malformed JSON",
            "/v1/admit",
            r#"{"tool":"#,
            400,
            "malformed_json",
            "not valid JSON: EOF while parsing",
        ),
        case(
            "trailing garbage",
            "/v1/admit",
            r#"{"tool":"t"} x"#,
            400,
            "malformed_json",
            "trailing characters",
        ),
        case(
            "empty body",
            "/v1/admit",
            "",
            400,
            "malformed_json",
            "the request body is empty",
        ),
        case(
            "wrong type of tool",
            "/v1/admit",
            r#"{"tool": 5}"#,
            400,
            "invalid_request",
            "invalid type: integer `5`, expected a string",
        ),
        case(
            "missing tool",
            "/v1/admit",
            r#"{}"#,
            400,
            "invalid_request",
            "missing field `tool`",
        ),
        case(
            "empty tool",
            "/v1/admit",
            r#"{"tool": ""}"#,
            400,
            "invalid_request",
            "tool: must not be empty",
        ),
        case(
            "negative cost",
            "/v1/admit",
            r#"{"tool":"t","cost":{"tokens":-5}}"#,
            400,
            "invalid_request",
            "invalid value: integer `-5`, expected u64",
        ),
        case(
            "cost of the wrong type",
            "/v1/admit",
            r#"{"tool":"t","cost":{"tokens":"many"}}"#,
            400,
            "invalid_request",
            "invalid type: string \"many\"",
        ),
        case(
            "negative max wait",
            "/v1/admit",
            r#"{"tool":"t","max_wait_ms":-1}"#,
            400,
            "invalid_request",
            "invalid value: integer `-1`",
        ),
        case(
            "not an object",
            "/v1/admit",
            r#"[1,2]"#,
            400,
            "invalid_request",
            "the request body must be a JSON object, got an array",
        ),
        case(
            "unknown tool with deny",
            "/v1/admit",
            r#"{"tool":"nope"}"#,
            429,
            "",
            "unknown_tool",
        ),
        case(
            "cost above capacity",
            "/v1/admit",
            r#"{"tool":"t","cost":{"tokens":101}}"#,
            429,
            "",
            "cost_exceeds_capacity",
        ),
        case(
            "empty plan",
            "/v1/reserve",
            r#"{"calls":[]}"#,
            400,
            "invalid_request",
            "calls: must not be empty",
        ),
        case(
            "zero count",
            "/v1/reserve",
            r#"{"calls":[{"tool":"t","count":0}]}"#,
            400,
            "invalid_request",
            "calls[0].count: must be at least 1",
        ),
        case(
            "huge plan",
            "/v1/reserve",
            r#"{"calls":[{"tool":"t","count":5000}]}"#,
            400,
            "invalid_request",
            "a reservation holds at most 1000",
        ),
        case(
            "malformed lease id",
            "/v1/leases/xyz/complete",
            r#"{"outcome":"success"}"#,
            404,
            "unknown_lease",
            "no open lease \"xyz\"",
        ),
        case(
            "unknown route",
            "/v1/nothing",
            "{}",
            404,
            "not_found",
            "no route POST /v1/nothing",
        ),
        case(
            "invoke without upstream",
            "/v1/tools/t/invoke",
            r#"{"arguments":{}}"#,
            404,
            "no_upstream",
            "has no [tools.t.upstream]",
        ),
        case(
            "invoke of an unknown tool",
            "/v1/tools/zz/invoke",
            r#"{"arguments":{}}"#,
            404,
            "unknown_tool",
            "no tool \"zz\"",
        ),
    ];
    cases.push(Case {
        name: "huge body",
        method: "POST",
        path: "/v1/admit",
        body: huge.into_bytes(),
        status: 413,
        code: "body_too_large",
        message: "larger than the limit of 65536 bytes",
    });
    cases.push(Case {
        name: "wrong method",
        method: "GET",
        path: "/v1/admit",
        body: Vec::new(),
        status: 405,
        code: "method_not_allowed",
        message: "GET is not allowed on /v1/admit",
    });
    // Regression: these two answered 404 although the resource exists for the other
    // method (`GET /v1/tools/t`, `POST /v1/tools/t/invoke`).
    cases.push(Case {
        name: "POST on a tool's state",
        method: "POST",
        path: "/v1/tools/t",
        body: Vec::new(),
        status: 405,
        code: "method_not_allowed",
        message: "POST is not allowed on /v1/tools/t (did you mean POST /v1/tools/t/invoke?)",
    });
    cases.push(Case {
        name: "GET on invoke",
        method: "GET",
        path: "/v1/tools/t/invoke",
        body: Vec::new(),
        status: 405,
        code: "method_not_allowed",
        message: "GET is not allowed on /v1/tools/t/invoke",
    });
    // Regression (#13, item 15): axum's own rejections answered plain text.
    for (method, path, code, message) in [
        (
            "GET",
            "/v1/tools/%ff%fe",
            "invalid_path",
            "the path is not valid: invalid UTF-8 in `tool`",
        ),
        (
            "POST",
            "/v1/tools/%ff%fe/invoke",
            "invalid_path",
            "the path is not valid: invalid UTF-8 in `tool`",
        ),
        (
            "POST",
            "/v1/leases/%ff%fe/complete",
            "invalid_path",
            "invalid UTF-8 in `lease`",
        ),
        (
            "DELETE",
            "/v1/reservations/%ff%fe",
            "invalid_path",
            "invalid UTF-8 in `id`",
        ),
        (
            "GET",
            "/v1/tools?tenant=a&tenant=b",
            "invalid_query",
            "the query string is not valid: duplicate field `tenant`",
        ),
        (
            "GET",
            "/v1/tools/t?tenant=a&tenant=b",
            "invalid_query",
            "duplicate field `tenant`",
        ),
    ] {
        cases.push(Case {
            name: path,
            method,
            path,
            body: br#"{"outcome":"success","arguments":{}}"#.to_vec(),
            status: 400,
            code,
            message,
        });
    }
    for c in cases {
        let req = Request::builder()
            .method(c.method)
            .uri(c.path)
            .header("content-type", "application/json")
            .body(Body::from(c.body))
            .expect("request");
        let res = toolgate_gateway::app::router(state.clone())
            .oneshot(req)
            .await
            .expect("response");
        let status = res.status();
        let bytes = axum::body::to_bytes(res.into_body(), 1 << 20)
            .await
            .expect("body");
        let body: Value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{}: not JSON ({e}): {bytes:?}", c.name));
        assert_eq!(
            status,
            StatusCode::from_u16(c.status).expect("status"),
            "{}: {body}",
            c.name
        );
        let text = if c.status == 429 {
            assert_eq!(body["admitted"], false, "{}", c.name);
            body["reason"].as_str().expect("reason").to_string()
        } else {
            assert_eq!(body["error"]["code"], c.code, "{}: {body}", c.name);
            body["error"]["message"]
                .as_str()
                .expect("message")
                .to_string()
        };
        assert!(
            text.contains(c.message),
            "{}: {text:?} should contain {:?}",
            c.name,
            c.message
        );
    }
    let t = state.engine().tool_state("t", None).expect("t");
    assert_eq!(
        (t.admitted, t.rejected),
        (0, 1),
        "bad input consumed nothing; {t:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_over_the_limit_is_refused_too() {
    let state = AppState::from_toml(CONFIG).expect("config");
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..100).map(|_| Ok(vec![b' '; 1024])).collect();
    let body = Body::from_stream(tokio_stream::iter(chunks));
    let req = Request::builder()
        .method("POST")
        .uri("/v1/admit")
        .body(body)
        .expect("req");
    let res = toolgate_gateway::app::router(state)
        .oneshot(req)
        .await
        .expect("res");
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_405_on_a_tool_path_names_the_allowed_methods() {
    let state = AppState::from_toml(CONFIG).expect("config");
    for (method, path, allow) in [
        ("POST", "/v1/tools/t", "GET,HEAD"),
        ("GET", "/v1/tools/t/invoke", "POST"),
        ("PUT", "/v1/tools/t/invoke", "GET,HEAD,POST"),
    ] {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::empty())
            .expect("request");
        let res = toolgate_gateway::app::router(state.clone())
            .oneshot(req)
            .await
            .expect("response");
        assert_eq!(
            res.status(),
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}"
        );
        assert_eq!(res.headers()["allow"], allow, "{method} {path}");
    }
}
