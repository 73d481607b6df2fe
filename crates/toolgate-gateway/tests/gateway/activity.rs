//! Issue #17, item 5: per-tenant figures on `GET /v1/tools/{tool}?tenant=` and the
//! activity series of `GET /v1/activity`, counted by the gateway over real HTTP.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{eventually, start, token_table, Server};

fn config() -> String {
    let token = token_table;
    format!(
        "{}{}{}[tools.crm]\nrate = \"2/h\"\nburst = 2\n[tools.other]\nconcurrency = 5\n",
        token("acme", false),
        token("globex", false),
        token("ops", true)
    )
}

async fn get_as(s: &Server, token: &str, path: &str) -> (u16, Value) {
    let r = s.get_as(token, path).await;
    (r.status, r.body)
}

async fn ok_as(s: &Server, token: &str, path: &str) -> Value {
    let (status, body) = get_as(s, token, path).await;
    assert_eq!(status, 200, "{path}: {body}");
    body
}

fn sum(v: &Value) -> u64 {
    v.as_array()
        .expect("array")
        .iter()
        .map(|n| n.as_u64().expect("count"))
        .sum()
}

/// acme: 2 admitted, 1 rejected on `crm`; globex: 1 rejected on `crm`.
async fn known_sequence(s: &Server) {
    for want in [200, 200, 429] {
        let r = s
            .post_as("acme-secret", "/v1/admit", json!({"tool": "crm"}))
            .await;
        assert_eq!(r.status, want, "{r:?}");
    }
    let r = s
        .post_as("globex-secret", "/v1/admit", json!({"tool": "crm"}))
        .await;
    assert_eq!(r.status, 429, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_reads_any_tenants_figures_and_a_tenant_only_its_own() {
    let s = start(&config()).await;
    known_sequence(&s).await;

    let acme = ok_as(&s, "ops-secret", "/v1/tools/crm?tenant=acme").await;
    let t = &acme["tenant_activity"];
    assert_eq!(t["tenant"], "acme", "{acme}");
    assert_eq!(t["tracked"], true);
    assert_eq!(t["admitted"], 2);
    assert_eq!(t["rejected"], 1);
    assert_eq!(t["rejected_by_reason"], json!({"rate_limited": 1}));
    assert_eq!(t["waiting"], 0);
    assert_eq!(t["window"]["admitted"], 2);
    assert_eq!(t["window"]["wait_ms"]["p50"], 0, "nobody waited: {t}");
    assert_eq!(acme["admitted"], 2, "an admin sees the tool's totals too");
    assert_eq!(acme["rejected"], 2);

    let globex = ok_as(&s, "ops-secret", "/v1/tools/crm?tenant=globex").await;
    let g = &globex["tenant_activity"];
    assert_eq!(
        (g["admitted"].as_u64(), g["rejected"].as_u64()),
        (Some(0), Some(1))
    );
    assert!(g["window"]["wait_ms"]["p50"].is_null(), "no admission: {g}");
    let nobody = ok_as(&s, "ops-secret", "/v1/tools/crm?tenant=initech").await;
    assert_eq!(nobody["tenant_activity"]["tracked"], false, "{nobody}");

    // acme's own token: its own figures, no totals, no other tenant.
    let mine = ok_as(&s, "acme-secret", "/v1/tools/crm").await;
    assert_eq!(mine["tenant_activity"]["admitted"], 2, "{mine}");
    assert_eq!(mine["tenant_activity"]["rejected"], 1);
    assert!(
        mine.get("admitted").is_none(),
        "no totals for a tenant: {mine}"
    );
    let (status, body) = get_as(&s, "acme-secret", "/v1/tools/crm?tenant=globex").await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = get_as(&s, "acme-secret", "/v1/activity/crm?tenant=globex").await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = get_as(&s, "acme-secret", "/v1/activity?tenant=globex").await;
    assert_eq!(status, 403, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_series_count_a_known_sequence_per_tool_and_per_tenant() {
    let s = start(&config()).await;
    known_sequence(&s).await;

    let all = ok_as(&s, "ops-secret", "/v1/activity/crm").await;
    assert_eq!(all["window_s"], 300);
    assert!(all["tenant"].is_null(), "{all}");
    let series = &all["series"];
    assert_eq!(series["admitted"].as_array().map(Vec::len), Some(300));
    assert_eq!(sum(&series["admitted"]), 2, "{series}");
    assert_eq!(sum(&series["rejected"]), 2);
    assert_eq!(all["window"]["admitted"], 2);
    assert_eq!(all["window"]["rejected"], 2);
    assert_eq!(all["by_priority"]["default"]["admitted"], 2, "{all}");
    assert_eq!(all["by_priority"]["interactive"]["admitted"], 0);
    assert_eq!(all["tenants_tracked"], 2);
    let tenants: Vec<&str> = all["tenants"]
        .as_array()
        .expect("tenants")
        .iter()
        .map(|t| t["tenant"].as_str().expect("name"))
        .collect();
    assert_eq!(tenants, ["globex", "acme"], "most recently active first");

    let short = ok_as(&s, "ops-secret", "/v1/activity/crm?seconds=60").await;
    assert_eq!(
        short["series"]["admitted"].as_array().map(Vec::len),
        Some(60)
    );
    assert_eq!(sum(&short["series"]["admitted"]), 2);

    let one = ok_as(&s, "ops-secret", "/v1/activity/crm?tenant=acme").await;
    assert_eq!(one["tenant"], "acme");
    assert_eq!(sum(&one["series"]["admitted"]), 2, "{one}");
    assert_eq!(sum(&one["series"]["rejected"]), 1);
    assert_eq!(
        one["tenant_figures"]["rejected_by_reason"]["rate_limited"],
        1
    );
    assert!(one.get("tenants").is_none(), "{one}");

    // A tenant's token: its own series, nobody else's.
    let mine = ok_as(&s, "globex-secret", "/v1/activity/crm").await;
    assert_eq!(mine["tenant"], "globex");
    assert_eq!(sum(&mine["series"]["admitted"]), 0, "{mine}");
    assert_eq!(sum(&mine["series"]["rejected"]), 1);
    assert!(mine.get("tenants").is_none() && mine.get("by_priority").is_none());
    let list = ok_as(&s, "acme-secret", "/v1/activity?seconds=10").await;
    assert_eq!(list["tenant"], "acme");
    let tools = list["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 2, "{list}");
    let crm = tools.iter().find(|t| t["tool"] == "crm").expect("crm");
    assert_eq!(sum(&crm["series"]["admitted"]), 2);
    assert_eq!(sum(&crm["series"]["rejected"]), 1);
    let list = ok_as(&s, "ops-secret", "/v1/activity").await;
    let crm = list["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["tool"] == "crm")
        .expect("crm");
    assert_eq!(
        sum(&crm["series"]["rejected"]),
        2,
        "the tool's totals: {list}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_queries_are_400_and_unknown_tools_404() {
    let s = start(&config()).await;
    let long = "x".repeat(1000);
    for (path, field) in [
        (format!("/v1/tools/crm?tenant={long}"), "tenant"),
        (format!("/v1/activity/crm?tenant={long}"), "tenant"),
        (format!("/v1/activity?tenant={long}"), "tenant"),
        ("/v1/activity/crm?seconds=301".into(), "seconds"),
        ("/v1/activity?seconds=0".into(), "seconds"),
        ("/v1/activity/crm?tenants=1001".into(), "tenants"),
        ("/v1/activity/crm?seconds=soon".into(), "seconds"),
    ] {
        let (status, body) = get_as(&s, "ops-secret", &path).await;
        assert_eq!(status, 400, "{path}: {body}");
        let msg = body["error"]["message"].as_str().expect("message");
        assert!(msg.contains(field), "{path}: {msg}");
    }
    let (status, body) = get_as(&s, "ops-secret", "/v1/activity/nope").await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "unknown_tool");
    let r = s.get("/v1/activity").await;
    assert_eq!(r.status, 401, "a token is needed: {r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_calls_reserved_units_and_wait_percentiles_are_counted_per_tenant() {
    let s = start(
        "[tools.w]\nrate = \"10/s\"\nburst = 1\non_limit = \"wait\"\nmax_wait = \"3s\"\n\
         [tools.r]\nconcurrency = 10\n",
    )
    .await;
    let first = s
        .post("/v1/admit", json!({"tool": "w", "tenant": "a"}))
        .await;
    assert_eq!(first.status, 200);
    let mut waiters = Vec::new();
    for _ in 0..2 {
        let (http, url) = (s.http.clone(), s.url("/v1/admit"));
        waiters.push(tokio::spawn(async move {
            let body = json!({"tool": "w", "tenant": "a", "priority": "interactive"});
            http.post(url)
                .json(&body)
                .send()
                .await
                .expect("admit")
                .status()
        }));
    }
    eventually("both calls are waiting", Duration::from_secs(2), || {
        let s = &s;
        async move {
            let r = s.get("/v1/tools/w?tenant=a").await;
            r.body["tenant_activity"]["waiting"].as_u64() == Some(2)
        }
    })
    .await;
    for w in waiters {
        assert_eq!(w.await.expect("join").as_u16(), 200);
    }
    let r = s.get("/v1/tools/w?tenant=a").await;
    let t = &r.body["tenant_activity"];
    assert_eq!(t["admitted"], 3, "{t}");
    assert_eq!(t["waiting"], 0);
    let p99 = t["window"]["wait_ms"]["p99"].as_u64().expect("p99");
    assert!(
        (100..=500).contains(&p99),
        "the last waited about 200 ms: {t}"
    );
    let act = s.get("/v1/activity/w").await.body;
    let inter = &act["by_priority"]["interactive"];
    assert_eq!(inter["admitted"], 2, "{act}");
    assert!(inter["p50"].as_u64().expect("p50") >= 50, "{act}");
    assert_eq!(act["window"]["admitted"], 3);

    let r = s
        .post(
            "/v1/reserve",
            json!({"tenant": "b", "calls": [{"tool": "r", "count": 3}]}),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let b = s.get("/v1/tools/r?tenant=b").await;
    assert_eq!(b.body["tenant_activity"]["admitted"], 3, "{:?}", b.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_a_thousand_tenants_are_tracked_per_tool_the_least_recent_evicted() {
    let s = start("[tools.e]\nconcurrency = 5000\n").await;
    for i in 0..=1000 {
        let r = s
            .post("/v1/admit", json!({"tool": "e", "tenant": format!("t{i}")}))
            .await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    let all = s.get("/v1/activity/e?tenants=1000").await.body;
    assert_eq!(all["tenants_tracked"], 1000, "{}", all["tenants_tracked"]);
    assert_eq!(all["tenants_evicted"], 1);
    assert_eq!(all["tenants"].as_array().map(Vec::len), Some(1000));
    assert_eq!(all["tenants"][0]["tenant"], "t1000");
    assert_eq!(
        all["window"]["admitted"], 1001,
        "the tool counts every call"
    );
    let gone = s.get("/v1/tools/e?tenant=t0").await.body;
    assert_eq!(gone["tenant_activity"]["tracked"], false, "{gone}");
    let kept = s.get("/v1/tools/e?tenant=t1").await.body;
    assert_eq!(kept["tenant_activity"]["admitted"], 1, "{kept}");
    let few = s.get("/v1/activity/e").await.body;
    assert_eq!(
        few["tenants"].as_array().map(Vec::len),
        Some(20),
        "default list"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_that_disconnects_while_waiting_leaves_its_waiting_count() {
    use tokio::io::AsyncWriteExt;
    let s = start("[tools.slot]\nconcurrency = 1\non_limit = \"wait\"\nmax_wait = \"5s\"\n").await;
    let held = s
        .post("/v1/admit", json!({"tool": "slot", "tenant": "a"}))
        .await;
    assert_eq!(held.status, 200);
    let body = r#"{"tool":"slot","tenant":"a"}"#;
    let mut c = crate::support::connect(&s).await;
    let req = format!(
        "POST /v1/admit HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    c.write_all(req.as_bytes()).await.expect("write");
    eventually("the call waits", Duration::from_secs(5), || async {
        waiting(&s).await == Some(1)
    })
    .await;
    drop(c);
    eventually("the count is left", Duration::from_secs(5), || async {
        waiting(&s).await == Some(0)
    })
    .await;
    let t = s.get("/v1/tools/slot?tenant=a").await.body;
    assert_eq!(
        t["tenant_activity"]["admitted"], 1,
        "the one that left was never admitted: {t}"
    );
    assert_eq!(t["tenant_activity"]["rejected"], 0);
}

/// The `waiting` count of tenant `a` on `slot`.
async fn waiting(s: &Server) -> Option<u64> {
    let r = s.get("/v1/tools/slot?tenant=a").await;
    r.body["tenant_activity"]["waiting"].as_u64()
}
