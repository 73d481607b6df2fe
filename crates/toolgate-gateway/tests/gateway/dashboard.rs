//! The dashboard in headless Chromium: it loads, shows one row per configured tool,
//! and updates after admits; it plots each tool's last minutes and breaks a tool
//! down by tenant on click; the screenshots are saved under `target/artifacts/`.
//!
//! Headless `--dump-dom` cannot click, so the click is driven by the address: a click
//! on a tool sets `#tool=NAME`, and the page reads that fragment on load.
//!
//! Without a `chromium` binary the test says so and passes, unless
//! `TOOLGATE_REQUIRE_CHROMIUM=1` (set by `scripts/test.d/20-rust-tests.sh`; `15-chromium.sh`
//! installs Chromium when it is missing).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::support::{start, token_table};

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|p| p.join(name))
                    .find(|p| p.is_file())
            })
        })
}

/// The Chromium binary, or `None` (the test then passes, saying so) unless
/// `TOOLGATE_REQUIRE_CHROMIUM` is set, when its absence fails the test.
fn chromium_or_skip() -> Option<PathBuf> {
    let found = chromium();
    if found.is_none() {
        assert!(
            std::env::var_os("TOOLGATE_REQUIRE_CHROMIUM").is_none(),
            "TOOLGATE_REQUIRE_CHROMIUM is set but no chromium binary was found"
        );
        eprintln!("SKIPPED: no chromium binary; scripts/test.d/15-chromium.sh installs it");
    }
    found
}

/// Saves a screenshot of `url` as `target/artifacts/NAME` (with a profile under
/// `profile`) and checks that it is not empty.
async fn screenshot(chrome: PathBuf, profile: PathBuf, url: String, name: &str) {
    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/artifacts");
    std::fs::create_dir_all(&artifacts).expect("artifacts dir");
    let shot = artifacts.join(name);
    let _ = std::fs::remove_file(&shot);
    let arg = format!("--screenshot={}", shot.display());
    tokio::task::spawn_blocking(move || run(&chrome, &profile, &[&arg], &url))
        .await
        .expect("join");
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 1000, "screenshot saved at {}", shot.display());
}

fn run(chrome: &Path, profile: &Path, what: &[&str], url: &str) -> String {
    let out = Command::new(chrome)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--window-size=1280,720",
            "--virtual-time-budget=4000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(what)
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The text of the cell with `class` in the row of `tool`.
fn cell(dom: &str, tool: &str, class: &str) -> Option<String> {
    let row = dom.split(&format!("data-tool=\"{tool}\"")).nth(1)?;
    let row = row.split("</tr>").next()?;
    let cell = row.split(&format!("class=\"{class}\">")).nth(1)?;
    Some(cell.split('<').next()?.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_every_tool_and_updates_after_admits() {
    let Some(chrome) = chromium_or_skip() else {
        return;
    };
    let s = start(toolgate_gateway::EXAMPLE_CONFIG).await;
    let profile = std::env::temp_dir().join(format!("toolgate-chromium-{}", std::process::id()));
    let url = format!("{}/", s.base);

    let chrome2 = chrome.clone();
    let (p2, u2) = (profile.join("a"), url.clone());
    let before = tokio::task::spawn_blocking(move || run(&chrome2, &p2, &["--dump-dom"], &u2))
        .await
        .expect("join");
    for tool in ["get_payment_status", "lookup_customer", "search_documents"] {
        assert!(
            before.contains(&format!("data-tool=\"{tool}\"")),
            "row for {tool}: {before}"
        );
    }
    assert_eq!(before.matches("<tr data-tool=").count(), 3, "{before}");
    assert_eq!(
        cell(&before, "lookup_customer", "admitted").as_deref(),
        Some("0"),
        "{before}"
    );
    assert_eq!(
        cell(&before, "lookup_customer", "tokens").as_deref(),
        Some("2 / 2"),
        "{before}"
    );

    for _ in 0..3 {
        s.post("/v1/admit", json!({"tool": "lookup_customer"}))
            .await;
    }
    for _ in 0..4 {
        s.post("/v1/admit", json!({"tool": "search_documents"}))
            .await;
    }

    let chrome3 = chrome.clone();
    let (p3, u3) = (profile.join("b"), url.clone());
    let after = tokio::task::spawn_blocking(move || run(&chrome3, &p3, &["--dump-dom"], &u3))
        .await
        .expect("join");
    assert_eq!(
        cell(&after, "lookup_customer", "admitted").as_deref(),
        Some("2"),
        "{after}"
    );
    assert_eq!(
        cell(&after, "lookup_customer", "rejected").as_deref(),
        Some("1"),
        "{after}"
    );
    assert_eq!(
        cell(&after, "search_documents", "admitted").as_deref(),
        Some("4"),
        "{after}"
    );
    assert!(after.contains("circuit-closed"), "{after}");
    assert!(after.contains("live · 3 tools"), "{after}");

    screenshot(chrome, profile.join("c"), url.clone(), "dashboard.png").await;
    let _ = std::fs::remove_dir_all(&profile);
}

/// With the event mesh running, the dashboard shows its state and, per tool, the lag
/// and the dead letters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_mesh_lag_and_dead_letters_per_tool() {
    let Some(chrome) = chromium_or_skip() else {
        return;
    };
    let nats = toolgate_mesh::testing::NatsServer::start();
    let s = start("[tools.t]\n[tools.t.upstream]\nurl = \"http://127.0.0.1:9/x\"\narguments_schema = { type = \"object\", required = [\"q\"] }\n").await;
    let config = toolgate_mesh::MeshConfig::new(nats.url());
    toolgate_gateway::mesh::start(&s.state, config.clone(), None)
        .await
        .expect("mesh");
    crate::mesh::mesh_ready_in(&s.state).await;
    let caller = toolgate_mesh::client::Caller::connect(&config, None)
        .await
        .expect("caller");
    let bad = toolgate_mesh::client::Outgoing {
        call_id: "bad-1".into(),
        tool: "t".into(),
        envelope: json!({"call_id": "bad-1", "tool": "t", "arguments": {}}),
    };
    caller.publish(&bad).await.expect("publish");
    let r = caller
        .result("bad-1", std::time::Duration::from_secs(10))
        .await
        .expect("result");
    assert_eq!(r.outcome, "invalid_arguments");
    let profile =
        std::env::temp_dir().join(format!("toolgate-chromium-mesh-{}", std::process::id()));
    let url = format!("{}/", s.base);
    let dom = tokio::task::spawn_blocking(move || run(&chrome, &profile, &["--dump-dom"], &url))
        .await
        .expect("join");
    assert!(dom.contains("event mesh"), "{dom}");
    let mesh_table = dom.split("id=\"mesh-tools\"").nth(1).unwrap_or_default();
    assert_eq!(
        cell(mesh_table, "t", "bad dead").as_deref(),
        Some("1"),
        "{dom}"
    );
    assert_eq!(
        cell(mesh_table, "t", "pending").as_deref(),
        Some("0"),
        "{dom}"
    );
}

/// The text of the element with `class` inside the first element marked `marker`.
fn inside(dom: &str, marker: &str, class: &str) -> Option<String> {
    let part = dom.split(marker).nth(1)?;
    let part = part.split("</tr>").next()?.split("class=\"card").next()?;
    let cell = part.split(&format!("class=\"{class}\">")).nth(1)?;
    Some(cell.split('<').next()?.to_string())
}

/// The `data-peak` of the polyline with `class` in the card of `tool`.
fn peak(dom: &str, tool: &str, class: &str) -> Option<u64> {
    // The first part holds the table's rows, which carry `data-tool` too.
    let card = dom
        .split("class=\"card")
        .skip(1)
        .find(|c| c.starts_with(&format!("\" data-tool=\"{tool}\"")))?;
    let line = card.split(&format!("<polyline class=\"{class}\"")).nth(1)?;
    let v = line.split("data-peak=\"").nth(1)?;
    v.split('"').next()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_plots_each_tool_and_breaks_a_tool_down_by_tenant_on_click() {
    let Some(chrome) = chromium_or_skip() else {
        return;
    };
    let s = start(toolgate_gateway::EXAMPLE_CONFIG).await;
    for (tenant, want) in [("acme", 200), ("acme", 200), ("globex", 429)] {
        let r = s
            .post(
                "/v1/admit",
                json!({"tool": "lookup_customer", "tenant": tenant}),
            )
            .await;
        assert_eq!(r.status, want, "{r:?}");
    }
    let profile =
        std::env::temp_dir().join(format!("toolgate-chromium-plots-{}", std::process::id()));
    let (c1, p1, u1) = (chrome.clone(), profile.join("a"), format!("{}/", s.base));
    let plain = tokio::task::spawn_blocking(move || run(&c1, &p1, &["--dump-dom"], &u1))
        .await
        .expect("join");
    assert_eq!(plain.matches("class=\"card").count(), 3, "{plain}");
    assert!(
        peak(&plain, "lookup_customer", "admitted").is_some_and(|p| p >= 1),
        "admissions plotted: {plain}"
    );
    assert!(
        peak(&plain, "lookup_customer", "rejected").is_some_and(|p| p >= 1),
        "the rejection plotted: {plain}"
    );
    assert_eq!(
        peak(&plain, "get_payment_status", "admitted"),
        Some(0),
        "{plain}"
    );
    assert!(
        plain.contains("<polyline class=\"p99\""),
        "wait plots: {plain}"
    );
    let card = "class=\"card\" data-tool=\"lookup_customer\"";
    assert_eq!(
        inside(&plain, card, "win-admitted").as_deref(),
        Some("2"),
        "{plain}"
    );
    assert_eq!(
        inside(&plain, card, "win-rejected").as_deref(),
        Some("1"),
        "{plain}"
    );
    assert!(
        plain.contains("id=\"breakdown\" hidden"),
        "no tool picked: {plain}"
    );
    assert!(!plain.contains("data-tenant="), "{plain}");

    let (c2, p2) = (chrome.clone(), profile.join("b"));
    let u2 = format!("{}/#tool=lookup_customer", s.base);
    let picked = tokio::task::spawn_blocking(move || run(&c2, &p2, &["--dump-dom"], &u2))
        .await
        .expect("join");
    assert!(!picked.contains("id=\"breakdown\" hidden"), "{picked}");
    assert!(picked.contains("class=\"card selected\""), "{picked}");
    let acme = "data-tenant=\"acme\"";
    let globex = "data-tenant=\"globex\"";
    assert_eq!(
        inside(&picked, acme, "admitted").as_deref(),
        Some("2"),
        "{picked}"
    );
    assert_eq!(inside(&picked, acme, "rejected").as_deref(), Some("0"));
    assert_eq!(inside(&picked, globex, "rejected").as_deref(), Some("1"));
    assert_eq!(
        inside(&picked, globex, "reasons").as_deref(),
        Some("rate_limited 1"),
        "{picked}"
    );
    assert!(picked.contains("2 tenants active"), "{picked}");

    let url = format!("{}/#tool=lookup_customer", s.base);
    screenshot(chrome, profile.join("c"), url, "dashboard-breakdown.png").await;
    let _ = std::fs::remove_dir_all(&profile);
}

/// With tokens, a tenant's token sees its own series and its own row only (#17).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_dashboard_shows_its_own_activity_only() {
    let Some(chrome) = chromium_or_skip() else {
        return;
    };
    let token = |t: &str| token_table(t, false);
    let config = format!(
        "{}{}[tools.crm]\nrate = \"2/h\"\nburst = 2\n",
        token("acme"),
        token("globex")
    );
    let s = start(&config).await;
    for (who, want) in [("acme", 200), ("acme", 200), ("globex", 429)] {
        let r = s
            .post_as(
                &format!("{who}-secret"),
                "/v1/admit",
                json!({"tool": "crm"}),
            )
            .await;
        assert_eq!(r.status, want, "{r:?}");
    }
    let profile =
        std::env::temp_dir().join(format!("toolgate-chromium-tenant-{}", std::process::id()));
    let url = format!("{}/#token=acme-secret&tool=crm", s.base);
    let dom = tokio::task::spawn_blocking(move || run(&chrome, &profile, &["--dump-dom"], &url))
        .await
        .expect("join");
    let card = "class=\"card selected\" data-tool=\"crm\"";
    assert_eq!(
        inside(&dom, card, "win-admitted").as_deref(),
        Some("2"),
        "{dom}"
    );
    assert_eq!(
        inside(&dom, card, "win-rejected").as_deref(),
        Some("0"),
        "globex's rejection is not acme's: {dom}"
    );
    assert!(dom.contains("your tenant (acme) only"), "{dom}");
    assert!(dom.contains("data-tenant=\"acme\""), "{dom}");
    assert!(!dom.contains("globex"), "no other tenant: {dom}");
}
