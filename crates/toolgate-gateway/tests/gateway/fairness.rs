//! Fair sharing over HTTP, on the real clock with generous tolerances: a tenant that
//! floods a `fairness = "tenant"` tool delays another tenant's call by about one
//! turn, not by its backlog; a reserve keeps its share for interactive calls; and an
//! interactive call waiting goes before the batch calls waiting.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::Mutex;

use crate::support::{eventually, start, Server};

const FAIR: &str = r#"
[tools.search]
rate = "20/s"
burst = 1
on_limit = "wait"
max_wait = "30s"
queue_limit = 1000
fairness = "tenant"
"#;

/// Starts `n` waiting admits of `tenant` (and `priority`); each records its tenant in
/// `order` when admitted.
fn flood(
    s: &Arc<Server>,
    tenant: &'static str,
    priority: &'static str,
    n: usize,
    order: &Arc<Mutex<Vec<&'static str>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let (s, order) = (s.clone(), order.clone());
            tokio::spawn(async move {
                let body = json!({"tool": "search", "tenant": tenant, "priority": priority});
                let r = s.post("/v1/admit", body).await;
                assert_eq!(r.status, 200, "{r:?}");
                order.lock().await.push(tenant);
            })
        })
        .collect()
}

/// Waits until all `n` calls of a flood have arrived (waiting, or admitted already: on
/// a loaded machine the first go before the last arrive); how many were admitted.
async fn arrived(s: &Server, order: &Arc<Mutex<Vec<&'static str>>>, n: usize) -> usize {
    eventually(&format!("{n} arrived"), Duration::from_secs(10), || async {
        s.tool("search").waiting + order.lock().await.len() >= n
    })
    .await;
    order.lock().await.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_tenant_delays_another_by_about_one_turn_not_by_its_backlog() {
    let s = Arc::new(start(FAIR).await);
    assert_eq!(s.admit("search").await.status, 200);
    let order = Arc::new(Mutex::new(Vec::new()));
    // 40 calls of a's: two seconds of the quota.
    let a = flood(&s, "a", "default", 40, &order);
    let at_arrival = arrived(&s, &order, 40).await;
    let t = Instant::now();
    let r = s
        .post("/v1/admit", json!({"tool": "search", "tenant": "b"}))
        .await;
    let took = t.elapsed();
    assert_eq!(r.status, 200, "{r:?}");
    // One turn is 50 ms; b goes after a's call in its turn and at most one more.
    assert!(took < Duration::from_millis(800), "b waited {took:?}");
    let before_b = order.lock().await.len() - at_arrival;
    assert!(before_b <= 4, "{before_b} of a's calls went before b's");
    for h in a {
        h.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserve_keeps_its_share_for_interactive_calls_over_http() {
    let s = start(
        r#"
        [tools.search]
        rate = "1/min"
        burst = 10
        reserve = { interactive = "20%" }
        "#,
    )
    .await;
    let mut batch = Vec::new();
    for _ in 0..10 {
        let r = s
            .post("/v1/admit", json!({"tool": "search", "priority": "batch"}))
            .await;
        batch.push(r.status);
    }
    assert_eq!(
        batch.iter().filter(|&&st| st == 200).count(),
        8,
        "{batch:?}"
    );
    let r = s
        .post("/v1/admit", json!({"tool": "search", "priority": "batch"}))
        .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.body["reason"], "rate_limited");
    assert_eq!(r.body["quota"], "tools.search.rate");
    for _ in 0..2 {
        let r = s
            .post(
                "/v1/admit",
                json!({"tool": "search", "priority": "interactive"}),
            )
            .await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    let r = s
        .post(
            "/v1/admit",
            json!({"tool": "search", "priority": "interactive"}),
        )
        .await;
    assert_eq!(r.status, 429, "the reserve is 2 of 10");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_call_waiting_goes_before_the_batch_calls_waiting() {
    let s = Arc::new(
        start(
            &FAIR
                .replace(
                    "fairness = \"tenant\"",
                    "reserve = { interactive = \"10%\" }\nburst = 10",
                )
                .replace("burst = 1\n", ""),
        )
        .await,
    );
    // Spend the burst, then queue twenty batch calls: a second of the quota.
    for _ in 0..10 {
        let _ = s.admit("search").await;
    }
    let order = Arc::new(Mutex::new(Vec::new()));
    let batch = flood(&s, "batch", "batch", 20, &order);
    let at_arrival = arrived(&s, &order, 20).await;
    let urgent = flood(&s, "interactive", "interactive", 1, &order);
    for h in urgent {
        h.await.unwrap();
    }
    let before = order.lock().await.len() - 1 - at_arrival;
    assert!(
        before <= 3,
        "{before} batch calls went before the interactive one"
    );
    for h in batch {
        h.await.unwrap();
    }
}
