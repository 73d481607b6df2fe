//! Bearer tokens bound to tenants: missing, wrong and other-tenant tokens.

use serde_json::json;
use toolgate_gateway::auth::hash_token;

use crate::support::{start, Server};

fn config() -> String {
    format!(
        r#"
[gateway]
protect_metrics = true

[[gateway.tokens]]
tenant = "acme"
sha256 = "{}"
admin = true

[[gateway.tokens]]
tenant = "globex"
sha256 = "{}"

[tools.crm]
rate = "1/min"
burst = 1
partition = "tenant"
"#,
        hash_token("acme-secret"),
        hash_token("globex-secret")
    )
}

async fn server() -> Server {
    start(&config()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_and_wrong_tokens_get_401_and_healthz_stays_open() {
    let s = server().await;
    let r = s.admit("crm").await;
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(r.body["error"]["code"], "unauthorized");
    assert!(r.body["error"]["message"]
        .as_str()
        .expect("msg")
        .contains("missing bearer token"));
    assert_eq!(r.headers["www-authenticate"], "Bearer");
    let r = s.post_as("nope", "/v1/admit", json!({"tool": "crm"})).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.body["error"]["message"], "unknown bearer token");
    let r = s
        .send(
            s.http
                .post(s.url("/v1/admit"))
                .header("authorization", "Basic abc")
                .json(&json!({"tool": "crm"})),
        )
        .await;
    assert_eq!(r.status, 401);
    assert_eq!(s.get("/v1/tools").await.status, 401);
    assert_eq!(s.get("/metrics").await.status, 401, "metrics are protected");
    let m = s
        .http
        .get(s.url("/metrics"))
        .bearer_auth("globex-secret")
        .send()
        .await
        .expect("metrics");
    assert_eq!(m.status(), 200);
    assert_eq!(s.get("/healthz").await.status, 200);
    assert_eq!(
        s.tool("crm").admitted + s.tool("crm").rejected,
        0,
        "nothing decided"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_spends_only_its_own_tenants_partition() {
    let s = server().await;
    let other = s
        .post_as(
            "globex-secret",
            "/v1/admit",
            json!({"tool": "crm", "tenant": "acme"}),
        )
        .await;
    assert_eq!(other.status, 403, "{other:?}");
    assert_eq!(other.body["error"]["code"], "forbidden");
    assert!(other.body["error"]["message"]
        .as_str()
        .expect("m")
        .contains("\"globex\""));

    let a = s
        .post_as("acme-secret", "/v1/admit", json!({"tool": "crm"}))
        .await;
    assert_eq!(a.status, 200);
    let a2 = s
        .post_as(
            "acme-secret",
            "/v1/admit",
            json!({"tool": "crm", "tenant": "acme"}),
        )
        .await;
    assert_eq!(a2.status, 429, "acme's partition is spent");
    let g = s
        .post_as("globex-secret", "/v1/admit", json!({"tool": "crm"}))
        .await;
    assert_eq!(g.status, 200, "globex has its own partition");

    // globex cannot complete (or even see) acme's lease.
    let lease = a.body["lease"].as_str().expect("lease");
    let path = format!("/v1/leases/{lease}/complete");
    let r = s
        .post_as("globex-secret", &path, json!({"outcome": "success"}))
        .await;
    assert_eq!(r.status, 404);
    let r = s
        .post_as("acme-secret", &path, json!({"outcome": "success"}))
        .await;
    assert_eq!(r.status, 204);

    // State is read for the token's tenant.
    let st = s
        .send(
            s.http
                .get(s.url("/v1/tools/crm?tenant=acme"))
                .bearer_auth("globex-secret"),
        )
        .await;
    assert_eq!(st.status, 403);
    let st = s
        .send(
            s.http
                .get(s.url("/v1/tools/crm"))
                .bearer_auth("globex-secret"),
        )
        .await;
    assert_eq!(st.status, 200);
    assert_eq!(st.body["quotas"][0]["available"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_admin_token_may_reload() {
    let s = server().await;
    let r = s
        .post_as("globex-secret", "/v1/admin/reload", json!({}))
        .await;
    assert_eq!(r.status, 403, "{r:?}");
    let r = s
        .post_as("acme-secret", "/v1/admin/reload", json!({}))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
}
