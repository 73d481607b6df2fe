//! Issue #13, item 6 (and the gateway side of item 2): every id a client sends has a
//! length bound and every number it reports a size bound, each refused with a 400
//! that names the field and the limit, before anything is decided.

use serde_json::json;

use crate::support::{start, Server};

const CONFIG: &str = r#"
[gateway]
body_limit = 200000

[tools.t]
rate = "100/h"
burst = 100
tokens = "1000/h"
partition = "tenant"
"#;

async fn server() -> Server {
    start(CONFIG).await
}

fn message(r: &crate::support::Res) -> String {
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.body["error"]["code"], "invalid_request", "{r:?}");
    r.body["error"]["message"]
        .as_str()
        .expect("message")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_64_kb_tenant_id_is_refused_and_makes_no_partition() {
    let s = server().await;
    let tenant = "x".repeat(64 * 1024);
    let r = s
        .post("/v1/admit", json!({"tool": "t", "tenant": tenant}))
        .await;
    let m = message(&r);
    assert!(
        m.starts_with("tenant: 65536 bytes long; at most 256 bytes"),
        "{m}"
    );
    assert!(m.len() < 200, "the value is not echoed back: {m}");
    let r = s
        .post(
            "/v1/reserve",
            json!({"calls": [{"tool": "t"}], "tenant": tenant}),
        )
        .await;
    assert!(message(&r).starts_with("tenant: 65536 bytes long"));
    // (a URI of 64 KB is refused by the client itself)
    let r = s
        .get(&format!("/v1/tools?tenant={}", "x".repeat(1000)))
        .await;
    assert!(message(&r).starts_with("tenant: 1000 bytes long"));
    let st = s.tool("t");
    assert_eq!(st.quotas[0].partitions, Some(0), "no partition was made");
    assert_eq!(st.admitted + st.rejected, 0, "nothing was decided");

    let ok = s
        .post("/v1/admit", json!({"tool": "t", "tenant": "y".repeat(256)}))
        .await;
    assert_eq!(ok.status, 200, "256 bytes is within the bound: {ok:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_257_byte_tool_name_or_key_is_refused_in_the_body_and_the_path() {
    let s = server().await;
    let tool = "t".repeat(257);
    let r = s.post("/v1/admit", json!({"tool": tool})).await;
    assert!(message(&r).starts_with("tool: 257 bytes long; at most 256 bytes"));
    let r = s
        .post(
            "/v1/reserve",
            json!({"calls": [{"tool": "t"}, {"tool": tool}]}),
        )
        .await;
    assert!(message(&r).starts_with("calls[1].tool: 257 bytes long"));
    let r = s.get(&format!("/v1/tools/{tool}")).await;
    assert!(message(&r).starts_with("tool: 257 bytes long"));
    let r = s
        .post(
            &format!("/v1/tools/{tool}/invoke"),
            json!({"arguments": {}}),
        )
        .await;
    assert!(message(&r).starts_with("tool: 257 bytes long"));
    let key = "k".repeat(257);
    let r = s
        .post("/v1/admit", json!({"tool": "t", "idempotency_key": key}))
        .await;
    assert!(message(&r).starts_with("idempotency_key: 257 bytes long"));
    let r = s
        .post(
            "/v1/tools/t/invoke",
            json!({"arguments": {}, "idempotency_key": key}),
        )
        .await;
    assert!(message(&r).starts_with("idempotency_key: 257 bytes long"));
    assert_eq!(s.tool("t").admitted + s.tool("t").rejected, 0);

    let ok = s.admit(&"u".repeat(256)).await;
    assert_eq!(ok.status, 200, "an unknown tool of 256 bytes is allowed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_long_lease_and_reservation_ids_are_400_and_unknown_ones_404() {
    let s = server().await;
    let long = "0".repeat(257);
    let r = s
        .post(&format!("/v1/leases/{long}/complete"), json!({}))
        .await;
    assert!(message(&r).starts_with("lease: 257 bytes long"));
    let r = s.release(&long).await;
    assert!(message(&r).starts_with("reservation: 257 bytes long"));
    let unknown = "0".repeat(32);
    let r = s
        .post(&format!("/v1/leases/{unknown}/complete"), json!({}))
        .await;
    assert_eq!(r.status, 404, "{r:?}");
    let r = s.release(&unknown).await;
    assert_eq!(r.status, 404, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reported_numbers_beyond_their_bounds_are_refused_and_the_lease_stays_open() {
    let s = server().await;
    let a = s
        .post(
            "/v1/admit",
            json!({"tool": "t", "tenant": "a", "cost": {"tokens": 10}}),
        )
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    let lease = a.body["lease"].as_str().expect("lease").to_string();
    let path = format!("/v1/leases/{lease}/complete");
    let r = s.post(&path, json!({"tokens": u64::MAX})).await;
    assert_eq!(
        message(&r),
        "tokens: 18446744073709551615 is larger than the limit of 9007199254740991"
    );
    let r = s.post(&path, json!({"tokens": 1_u64 << 53})).await;
    assert!(message(&r).starts_with("tokens: 9007199254740992 is larger"));
    let r = s.post(&path, json!({"latency_ms": 86_400_001})).await;
    assert_eq!(
        message(&r),
        "latency_ms: 86400001 is larger than the limit of 86400000"
    );
    let available = |s: &Server| {
        s.state
            .engine()
            .tool_state("t", Some("a"))
            .expect("tool")
            .quotas[1]
            .available
    };
    assert_eq!(available(&s), Some(990), "the budget is untouched");
    assert_eq!(s.post(&path, json!({"tokens": 20})).await.status, 204);
    assert_eq!(available(&s), Some(980));

    let r = s
        .post(
            "/v1/admit",
            json!({"tool": "t", "tenant": "a", "cost": {"tokens": u64::MAX}}),
        )
        .await;
    assert!(message(&r).starts_with("cost.tokens: 18446744073709551615 is larger"));
    let r = s
        .post(
            "/v1/admit",
            json!({"tool": "t", "tenant": "a", "cost": {"tokens": (1_u64 << 53) - 1}}),
        )
        .await;
    assert_eq!(
        r.status, 429,
        "within the bound: an admission decision {r:?}"
    );
    assert_eq!(r.body["reason"], "cost_exceeds_capacity");
}
