//! Live state endpoints, including tool names with a namespace and a slash.

use serde_json::json;

use crate::support::start;

const CONFIG: &str = r#"
[tools."mcp:github/search_issues"]
rate = "5/min"
burst = 5

[tools.plain]
concurrency = 3
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_is_served_for_every_tool_including_namespaced_names() {
    let s = start(CONFIG).await;
    let r = s
        .post("/v1/admit", json!({"tool": "mcp:github/search_issues"}))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.headers["ratelimit"], r#""tools.\"mcp:github/search_issues\".rate";r=4;t=12"#,
        "the path is quoted as the core writes it, and escaped"
    );

    let all = s.get("/v1/tools").await;
    assert_eq!(all.status, 200);
    let names: Vec<&str> = all.body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["tool"].as_str())
        .collect();
    assert_eq!(names, ["mcp:github/search_issues", "plain"]);
    assert_eq!(all.body["leases"], 1);

    for path in [
        "/v1/tools/mcp:github/search_issues",
        "/v1/tools/mcp%3Agithub%2Fsearch_issues",
    ] {
        let one = s.get(path).await;
        assert_eq!(one.status, 200, "{path}: {one:?}");
        assert_eq!(one.body["tool"], "mcp:github/search_issues");
        assert_eq!(one.body["tokens_left"], 4);
        assert_eq!(one.body["capacity"], 5);
        assert_eq!(one.body["in_flight"], 1);
        assert_eq!(one.body["admitted"], 1);
        assert_eq!(one.body["circuit"], "closed");
        assert_eq!(
            one.body["quotas"][0]["quota"],
            r#"tools."mcp:github/search_issues".rate"#
        );
    }
    let plain = s.get("/v1/tools/plain").await;
    assert_eq!(plain.body["quotas"][0]["kind"], "concurrency");
    assert_eq!(plain.body["quotas"][0]["available"], 3);
    assert!(plain.body["tokens_left"].is_null());

    let none = s.get("/v1/tools/nope").await;
    assert_eq!(none.status, 404);
    assert_eq!(none.body["error"]["code"], "unknown_tool");
    let health = s.get("/healthz").await.body;
    assert_eq!(health["status"], "ok");
    // This request's connection at least (the client's pool may keep one more).
    let open = health["connections"]["open"].as_u64().unwrap_or(0);
    assert!((1..=3).contains(&open), "{health}");
    assert_eq!(health["connections"]["limit"], 10_000, "{health}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admitted_answers_can_leave_out_what_is_left() {
    let s = start("[gateway]\nratelimit_remaining = false\n[tools.t]\nrate = \"2/s\"\n").await;
    let r = s.admit("t").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["ratelimit-policy"], "\"tools.t.rate\";q=2;w=1");
    assert!(!r.headers.contains_key("ratelimit"), "{r:?}");
    s.admit("t").await;
    let no = s.admit("t").await;
    assert_eq!(no.status, 429);
    assert_eq!(no.headers["ratelimit"], "\"tools.t.rate\";r=0;t=1");
}
