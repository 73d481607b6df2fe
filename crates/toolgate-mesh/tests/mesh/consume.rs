//! Throttled consumption without head-of-line blocking.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{call, rig};

/// 100 calls to a tool limited to `5/s, burst 5` and 100 to an unlimited tool,
/// published at once: the limited tool's upstream sees at most `5 + 5/s × t` calls
/// by every moment t, and every unlimited call finishes within 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_tool_is_consumed_at_its_rate_and_never_delays_another() {
    let r = rig(
        "[tools.slow]\nrate = \"5/s\"\nburst = 5\n[tools.fast]\nidempotent = true\n",
        &["slow", "fast"],
    )
    .await;
    let start = Instant::now();
    for i in 0..100 {
        r.publish(&call(&format!("s{i}"), "slow", json!({}))).await;
        r.publish(&call(&format!("f{i}"), "fast", json!({}))).await;
    }
    for i in 0..100 {
        let res = r.result(&format!("f{i}")).await;
        assert_eq!(res.outcome, "success", "{res:?}");
    }
    let fast_done = start.elapsed();
    assert!(
        fast_done < Duration::from_secs(2),
        "unlimited calls took {fast_done:?}"
    );
    // Let the limited tool run for a while, then check its curve.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let hits = r.upstream.hits_of("slow");
    assert!(
        hits.len() >= 15,
        "only {} limited calls ran in 3+ s",
        hits.len()
    );
    for (n, h) in hits.iter().enumerate() {
        let t = h.at.duration_since(start).as_secs_f64();
        let allowed = 5.0 + 5.0 * t;
        assert!(
            (n + 1) as f64 <= allowed + 1e-9,
            "call {} reached the upstream at {t:.3}s: more than 5 + 5/s × t = {allowed:.2}",
            n + 1
        );
    }
    let view = r.mesh.view();
    assert_eq!(view.status, "ok");
}

/// A tool allowed one call a minute: a worker whose pull finds the stream empty
/// spends none of it, so a call published after start-up still runs at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_that_finds_no_call_spends_no_admission() {
    let r = rig("[tools.scarce]\nrate = \"1/min\"\n", &["scarce"]).await;
    // Past the worker's first pulls, which find nothing.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    r.publish(&call("only", "scarce", json!({}))).await;
    let res = r.result("only").await;
    assert_eq!(res.outcome, "success", "{res:?}");
    assert_eq!(r.upstream.hits_of("scarce").len(), 1);
}
