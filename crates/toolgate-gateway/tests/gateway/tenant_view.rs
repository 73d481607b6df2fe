//! Issue #13, item 16: a tenant's token sees its own figures and the limits in force
//! on `GET /v1/tools`, never another tenant's activity; an admin token sees totals.

use serde_json::{json, Value};

use crate::support::{start, token_table, Server};

fn config() -> String {
    let token = token_table;
    format!(
        "{}{}{}\
         [tools.crm]\nrate = \"10/h\"\nburst = 10\npartition = \"tenant\"\n\
         [tools.slot]\nconcurrency = 3\n",
        token("acme", false),
        token("globex", false),
        token("ops", true)
    )
}

async fn get(s: &Server, token: &str, path: &str) -> Value {
    let r = s.get_as(token, path).await;
    assert_eq!(r.status, 200, "{r:?}");
    r.body
}

fn tool<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["tool"] == name)
        .expect("tool listed")
}

const TOTALS: [&str; 5] = [
    "admitted",
    "rejected",
    "shadow_rejected",
    "in_flight",
    "waiting",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_sees_no_other_tenants_figures_and_an_admin_sees_totals() {
    let s = start(&config()).await;
    for tool in ["crm", "crm", "crm", "slot", "slot"] {
        let r = s
            .post_as("globex-secret", "/v1/admit", json!({"tool": tool}))
            .await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    let a = s
        .post_as("acme-secret", "/v1/admit", json!({"tool": "crm"}))
        .await;
    assert_eq!(a.status, 200);

    let mine = get(&s, "acme-secret", "/v1/tools").await;
    assert_eq!(mine["leases"], 1, "acme's own open leases: {mine}");
    assert_eq!(mine["tenant"], "acme");
    for name in ["crm", "slot"] {
        let t = tool(&mine, name);
        for key in TOTALS {
            assert!(t.get(key).is_none(), "{name}.{key} is a total: {t}");
        }
        for q in t["quotas"].as_array().expect("quotas") {
            assert!(q.get("partitions").is_none(), "{q}");
            assert!(q.get("waiters").is_none(), "{q}");
            assert!(q.get("capacity").is_some(), "the limit in force: {q}");
        }
    }
    let crm = tool(&mine, "crm");
    assert_eq!(crm["leases"], 1, "{crm}");
    assert_eq!(crm["tokens_left"], 9, "acme's own partition: {crm}");
    assert_eq!(crm["capacity"], 10);
    let slot = tool(&mine, "slot");
    assert_eq!(slot["leases"], 0, "{slot}");
    assert_eq!(
        slot["quotas"][0]["available"], 1,
        "a shared quota's available stays (its refusals tell as much)"
    );
    let one = get(&s, "acme-secret", "/v1/tools/crm").await;
    assert_eq!(&one, crm, "one tool reads as in the list");

    let theirs = get(&s, "globex-secret", "/v1/tools").await;
    assert_eq!(theirs["leases"], 5);
    assert_eq!(tool(&theirs, "crm")["leases"], 3);
    assert_eq!(tool(&theirs, "crm")["tokens_left"], 7);

    let all = get(&s, "ops-secret", "/v1/tools").await;
    assert_eq!(all["leases"], 6, "every open lease: {all}");
    let crm = tool(&all, "crm");
    assert_eq!(crm["admitted"], 4, "{crm}");
    assert_eq!(crm["in_flight"], 4);
    assert_eq!(crm["quotas"][0]["partitions"], 2);
    assert_eq!(tool(&all, "slot")["in_flight"], 2);
}
