//! Issue #13, item 8: a reload never turns authentication off, and a config without
//! tools is refused unless it says so; the old config stays in force.

use std::path::PathBuf;

use serde_json::json;
use toolgate_gateway::auth::hash_token;

use crate::support::{eventually, start_file, Res, Server, SOON};

fn tokens() -> String {
    format!(
        "[[gateway.tokens]]\ntenant = \"ops\"\nsha256 = \"{}\"\nadmin = true\n",
        hash_token("ops-secret")
    )
}

fn secured() -> String {
    format!("{}[tools.crm]\nrate = \"1/h\"\nburst = 1\n", tokens())
}

struct File(PathBuf);

impl File {
    fn new(name: &str, text: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("toolgate-reload-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let f = Self(dir.join("toolgate.toml"));
        f.write(text);
        f
    }

    fn write(&self, text: &str) {
        std::fs::write(&self.0, text).expect("write");
    }
}

impl Drop for File {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

async fn reload(s: &Server) -> Res {
    s.post_as("ops-secret", "/v1/admin/reload", json!({})).await
}

fn refused(r: &Res, needle: &str) {
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.body["error"]["code"], "invalid_config");
    let errors = r.body["error"]["errors"].to_string();
    assert!(errors.contains(needle), "{needle:?} in {errors}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloading_an_empty_file_is_refused_and_auth_stays_on() {
    let f = File::new("empty", &secured());
    let s = start_file(&f.0).await;
    f.write("");
    let r = reload(&s).await;
    refused(&r, "a reload never turns authentication off");
    refused(&r, "every quota would be dropped");
    let open = s.admit("crm").await;
    assert_eq!(open.status, 401, "auth is still on: {open:?}");
    let ok = s
        .post_as("ops-secret", "/v1/admit", json!({"tool": "crm"}))
        .await;
    assert_eq!(ok.status, 200);
    let no = s
        .post_as("ops-secret", "/v1/admit", json!({"tool": "crm"}))
        .await;
    assert_eq!(no.status, 429, "the quota is still in force: {no:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_without_tokens_is_refused() {
    let f = File::new("tokenless", &secured());
    let s = start_file(&f.0).await;
    f.write("[tools.crm]\nrate = \"1/h\"\n");
    refused(&reload(&s).await, "takes a restart");
    assert_eq!(s.admit("crm").await.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_no_tools_lets_a_reload_drop_every_tool() {
    let f = File::new("toolless", &secured());
    let s = start_file(&f.0).await;
    f.write(&format!("{}[gateway]\nallow_no_tools = true\n", tokens()));
    let r = reload(&s).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, json!({"reloaded": true, "tools": 0}));
    for _ in 0..3 {
        let a = s
            .post_as("ops-secret", "/v1/admit", json!({"tool": "crm"}))
            .await;
        assert_eq!(a.status, 200, "no quota any more: {a:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_applies_lease_ttl_and_says_which_settings_need_a_restart() {
    let f = File::new("restart", &secured());
    let s = start_file(&f.0).await;
    f.write(&format!(
        "[gateway]\nlease_ttl = \"200ms\"\nbody_limit = 1000\n{}\
         [tools.crm]\nconcurrency = 1\n",
        tokens()
    ));
    let r = reload(&s).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["needs_restart"], json!(["body_limit"]));
    assert_eq!(s.state.body_limit(), 64 * 1024, "fixed at start");
    let a = s
        .post_as("ops-secret", "/v1/admit", json!({"tool": "crm"}))
        .await;
    assert_eq!(a.status, 200);
    eventually("the new lease_ttl expires the lease", SOON, || async {
        s.tool("crm").in_flight == 0
    })
    .await;
}
