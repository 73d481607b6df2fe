//! Reload keeps the state of unchanged quotas; an invalid config is refused.

use serde_json::json;

use crate::support::start_file;

const V1: &str = r#"
[tools.lookup_customer]
rate = "2/min"
burst = 2
"#;

const V2: &str = r#"
[tools.lookup_customer]
rate = "2/min"
burst = 2

[tools.new_tool]
rate = "1/min"
"#;

const BAD: &str = r#"
[tools.lookup_customer]
rate = "0/s"
brust = 2
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_keeps_unchanged_quotas_and_refuses_an_invalid_config() {
    let dir = std::env::temp_dir().join(format!("toolgate-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("toolgate.toml");
    std::fs::write(&path, V1).expect("write");
    let s = start_file(&path).await;
    assert_eq!(s.admit("lookup_customer").await.status, 200);
    assert_eq!(s.admit("lookup_customer").await.status, 200);

    std::fs::write(&path, V2).expect("write");
    let r = s.post("/v1/admin/reload", json!({})).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, json!({"reloaded": true, "tools": 2}));
    let no = s.admit("lookup_customer").await;
    assert_eq!(no.status, 429, "the spent bucket stays spent: {no:?}");
    assert_eq!(s.tool("lookup_customer").admitted, 2, "counters survive");
    assert_eq!(s.admit("new_tool").await.status, 200);

    std::fs::write(&path, BAD).expect("write");
    let r = s.post("/v1/admin/reload", json!({})).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.body["error"]["code"], "invalid_config");
    let errors: Vec<&str> = r.body["error"]["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter_map(|e| e.as_str())
        .collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors
        .iter()
        .any(|e| e.starts_with("tools.lookup_customer.brust: unknown key")));
    assert!(errors
        .iter()
        .any(|e| e.starts_with("tools.lookup_customer.rate: \"0/s\"")));
    // The old config stays in force.
    assert_eq!(
        s.admit("new_tool").await.status,
        429,
        "new_tool is still governed"
    );
    assert_eq!(s.admit("lookup_customer").await.status, 429);
    let _ = std::fs::remove_dir_all(&dir);
}
