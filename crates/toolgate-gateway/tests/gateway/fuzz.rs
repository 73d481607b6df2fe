//! Property tests over everything a client or an operator controls: request bodies,
//! paths and query strings through the whole router, config files, and mesh
//! envelopes. Whatever comes in, nothing panics, no answer is a 5xx, and every error
//! is the JSON shape `{"error": {"code", "message"}}`.
//!
//! `scripts/test` runs them briefly (the default 64 cases each); set
//! `PROPTEST_CASES=10000` for a longer search.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use serde_json::{json, Map, Value};
use toolgate_gateway::settings::Loaded;
use toolgate_gateway::state::AppState;
use tower::ServiceExt;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

/// JSON values of the kinds clients send, with numbers at the edges.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop_oneof![
            Just(0u64),
            Just(1),
            Just(u64::MAX),
            Just((1 << 53) - 1),
            Just(1 << 53),
            any::<u64>()
        ]
        .prop_map(|n| json!(n)),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        word().prop_map(Value::String),
        "\\PC{0,40}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Keys and words the API and the config know, and some they do not.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "tool",
            "tenant",
            "cost",
            "tokens",
            "max_wait_ms",
            "idempotency_key",
            "outcome",
            "latency_ms",
            "status",
            "headers",
            "Retry-After",
            "RateLimit",
            "calls",
            "count",
            "ttl_ms",
            "arguments",
            "rate",
            "burst",
            "window",
            "concurrency",
            "pools",
            "partition",
            "on_limit",
            "max_wait",
            "mode",
            "max_pause",
            "circuit",
            "retry",
            "upstream",
            "url",
            "gateway",
            "lease_ttl",
            "tokens",
            "mesh",
            "max_leases",
        ])
        .prop_map(str::to_string),
        "[a-z_]{1,12}",
    ]
}

fn word() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "t",
        "lookup_customer",
        "success",
        "error",
        "invalid",
        "timeout",
        "5/s",
        "0/s",
        "1/h",
        "sliding",
        "wait",
        "reject",
        "tenant",
        "shadow",
        "60s",
        "0s",
        "25h",
        "-1",
        "Fri, 31 Dec 9999 23:59:59 GMT",
        "\"d\";r=0;t=18446744073709551615",
        "",
        "nats://127.0.0.1:1",
        "http://127.0.0.1:9/x",
    ])
    .prop_map(str::to_string)
}

fn path() -> impl Strategy<Value = String> {
    let segment = prop_oneof![
        word(),
        "[a-z0-9]{32}".prop_map(|s| s),
        "(%[0-9a-fA-F]{2}){1,4}".prop_map(|s| s),
        "[a-zA-Z0-9:_./-]{0,20}".prop_map(|s| s),
    ];
    let base = prop::sample::select(vec![
        "/v1/admit",
        "/v1/reserve",
        "/v1/tools",
        "/v1/tools/",
        "/v1/leases/",
        "/v1/reservations/",
        "/v1/admin/reload",
        "/v1/mesh",
        "/healthz",
        "/metrics",
        "/",
        "/nope/",
    ]);
    let query = prop::option::of("(tenant=[a-z%0-9]{0,6}&?){1,3}");
    (base, segment, prop::bool::ANY, query).prop_map(|(b, s, tail, q)| {
        let mut p = b.to_string();
        if b.ends_with('/') {
            p.push_str(&s);
            if tail {
                p.push_str("/complete");
            }
        }
        if let Some(q) = q {
            p.push('?');
            p.push_str(&q);
        }
        p
    })
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        value().prop_map(|v| v.to_string().into_bytes()),
        prop::collection::vec(any::<u8>(), 0..64),
        Just(Vec::new()),
    ]
}

async fn state() -> AppState {
    AppState::from_toml(
        "[gateway]\nmax_leases = 1000\n\
         [tools.t]\nrate = \"100/s\"\nconcurrency = 5\nmax_pause = \"1m\"\n\
         [tools.t.upstream]\nurl = \"http://127.0.0.1:9/x\"\ntimeout = \"100ms\"\n\
         [tools.wait]\nrate = \"1/s\"\nburst = 1\non_limit = \"wait\"\nmax_wait = \"50ms\"\n\
         [tools.tenant]\nrate = \"5/s\"\npartition = \"tenant\"\ntokens = \"100/s\"\n",
    )
    .expect("config")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Any method, path, query and body through the router: no panic, no 5xx but a
    /// gateway time-out or an unreachable upstream, and every error is JSON.
    #[test]
    fn any_request_gets_a_json_answer_and_never_a_server_error(
        method in prop::sample::select(vec![Method::GET, Method::POST, Method::DELETE, Method::PUT]),
        path in path(),
        body in body(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        rt.block_on(async {
            let state = state().await;
            let Ok(req) = Request::builder().method(method).uri(&path).body(Body::from(body)) else {
                return; // not a URI a client could send at all
            };
            let res = toolgate_gateway::app::router(state).oneshot(req).await.expect("answer");
            let status = res.status();
            let bytes = axum::body::to_bytes(res.into_body(), 1 << 22).await.expect("body");
            let allowed_5xx = [StatusCode::BAD_GATEWAY, StatusCode::GATEWAY_TIMEOUT, StatusCode::SERVICE_UNAVAILABLE];
            assert!(!status.is_server_error() || allowed_5xx.contains(&status), "{path}: {status}");
            if status.is_client_error() || status.is_server_error() {
                let v: Value = serde_json::from_slice(&bytes)
                    .unwrap_or_else(|e| panic!("{path}: {status} is not JSON ({e}): {bytes:?}"));
                let shaped = v["error"]["code"].is_string() && v["error"]["message"].is_string();
                let rejection = status == StatusCode::TOO_MANY_REQUESTS && v["admitted"] == false;
                assert!(shaped || rejection, "{path}: {status}: {v}");
            }
        });
    }

    /// Any config tree: loading it never panics, every error names a path, and a
    /// config that loads builds an engine that decides without panicking.
    #[test]
    fn any_config_loads_or_names_its_problems(v in value(), tools in prop::collection::vec((word(), value()), 0..3)) {
        let mut root = match v { Value::Object(m) => m, other => Map::from_iter([("x".to_string(), other)]) };
        let table: Map<String, Value> = tools.into_iter().collect();
        root.insert("tools".into(), Value::Object(table));
        match Loaded::from_value(Value::Object(root)) {
            Ok(l) => {
                let engine = toolgate::Engine::new(l.policy.clone());
                for tool in l.policy.tools.keys() {
                    let _ = engine.try_admit(&toolgate::Call::new(tool).tenant("a").tokens(u64::MAX));
                }
            }
            Err(e) => {
                assert!(!e.0.is_empty());
                assert!(e.0.iter().all(|line| !line.trim().is_empty()), "{e}");
            }
        }
    }

    /// The bundled config with one value replaced by anything: it loads, or the
    /// errors name the path of what was replaced.
    #[test]
    fn a_config_with_one_bad_value_names_its_path(pick in any::<prop::sample::Index>(), v in value()) {
        let text = toolgate_gateway::EXAMPLE_CONFIG;
        let toml: toml::Value = toml::from_str(text).expect("example");
        let mut root = serde_json::to_value(toml).expect("json");
        let mut leaves = Vec::new();
        collect_leaves(&root, String::new(), &mut leaves);
        let at = leaves[pick.index(leaves.len())].clone();
        *root.pointer_mut(&at).expect("leaf") = v;
        if let Err(e) = Loaded::from_value(root) {
            let dotted = at.trim_start_matches('/').replace('/', ".");
            // The table the value sat in: `tools.lookup_customer`, `gateway.tokens`, ….
            let table: Vec<&str> = dotted.split('.').take(2).collect();
            let table = table.join(".");
            assert!(
                e.0.iter().any(|line| line.contains(&table)),
                "replacing {at} gave errors that do not name it: {e}"
            );
        }
    }

    /// Any mesh payload: it is read or refused with a message, never a panic, and a
    /// call that is read is within every bound.
    #[test]
    fn any_mesh_payload_is_read_within_bounds_or_refused(v in value(), raw in prop::collection::vec(any::<u8>(), 0..64)) {
        use toolgate_mesh::envelope::{MeshCall, MAX_CALL_ID, MAX_NAME};
        for payload in [v.to_string().into_bytes(), raw] {
            match MeshCall::parse(&payload) {
                Ok(c) => {
                    assert!(!c.call_id.is_empty() && c.call_id.len() <= MAX_CALL_ID);
                    assert!(!c.tool.is_empty() && c.tool.len() <= MAX_NAME);
                    assert!(c.arguments.is_object());
                }
                Err(u) => assert!(!u.message.is_empty()),
            }
        }
    }
}

/// JSON pointers to every leaf of `v`.
fn collect_leaves(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                collect_leaves(
                    v,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                collect_leaves(v, format!("{at}/{i}"), out);
            }
        }
        _ => out.push(at),
    }
}
