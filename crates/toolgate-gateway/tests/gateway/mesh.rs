//! `toolgate serve --mesh`: gateway processes consuming calls from a real
//! nats-server and running them against a real upstream over loopback.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use parking_lot::Mutex;
use serde_json::{json, Value};
use toolgate_mesh::client::{Caller, Outgoing};
use toolgate_mesh::testing::NatsServer;
use toolgate_mesh::MeshConfig;

use crate::procs::{redis_available, Gateway, Redis};
use crate::support::config_file;

/// One request the upstream saw.
#[derive(Debug, Clone)]
struct Hit {
    n: String,
    key: Option<String>,
    start: Instant,
    /// When it started on the wall clock, the clock Redis decides on (`TIME`), which
    /// may run at another rate than `Instant`'s where the system's time is being
    /// adjusted.
    wall: SystemTime,
    end: Option<Instant>,
}

/// A local upstream that sleeps `delay` per request and records every request.
struct Upstream {
    url: String,
    hits: Arc<Mutex<Vec<Hit>>>,
}

async fn upstream(delay: Duration) -> Upstream {
    let hits: Arc<Mutex<Vec<Hit>>> = Arc::default();
    let h = hits.clone();
    let app = Router::new().route(
        "/run",
        post(move |headers: HeaderMap, Json(v): Json<Value>| {
            let hits = h.clone();
            async move {
                let key = headers
                    .get("idempotency-key")
                    .and_then(|k| k.to_str().ok())
                    .map(str::to_string);
                let n = v["n"].as_str().unwrap_or_default().to_string();
                let i = {
                    let mut all = hits.lock();
                    all.push(Hit {
                        n: n.clone(),
                        key,
                        start: Instant::now(),
                        wall: SystemTime::now(),
                        end: None,
                    });
                    all.len() - 1
                };
                tokio::time::sleep(delay).await;
                hits.lock()[i].end = Some(Instant::now());
                Json(json!({"ran": n}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    Upstream {
        url: format!("http://{addr}/run"),
        hits,
    }
}

fn call(id: &str, key: Option<&str>) -> Outgoing {
    let mut envelope = json!({"call_id": id, "tool": "t", "arguments": {"n": id}});
    if let Some(k) = key {
        envelope["idempotency_key"] = json!(k);
    }
    Outgoing {
        call_id: id.into(),
        tool: "t".into(),
        envelope,
    }
}

async fn health(http: &reqwest::Client, base: &str) -> Value {
    match http.get(format!("{base}/healthz")).send().await {
        Ok(r) => r.json().await.unwrap_or(Value::Null),
        Err(_) => Value::Null,
    }
}

/// Waits until the mesh of the gateway at `base` is ready (streams made, workers on).
pub async fn mesh_ready(http: &reqwest::Client, base: &str) {
    crate::support::eventually("the mesh is ready", Duration::from_secs(15), || async {
        health(http, base).await["mesh"]["status"] == "ok"
    })
    .await;
}

/// Waits until an in-process mesh is ready.
pub async fn mesh_ready_in(state: &toolgate_gateway::state::AppState) {
    crate::support::eventually("the mesh is ready", Duration::from_secs(15), || async {
        state.mesh().is_some_and(|m| m.view().status == "ok")
    })
    .await;
}

async fn caller(nats: &NatsServer) -> Caller {
    Caller::connect(&MeshConfig::new(nats.url()), None)
        .await
        .expect("caller")
}

/// Every result in the results stream, by call id.
async fn results_by_call(nats: &NatsServer) -> HashMap<String, usize> {
    let client = async_nats::connect(nats.url()).await.expect("connect");
    let js = async_nats::jetstream::new(client);
    let stream = js.get_stream("TOOLGATE_RESULTS").await.expect("results");
    let consumer: async_nats::jetstream::consumer::PullConsumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            ack_policy: async_nats::jetstream::consumer::AckPolicy::None,
            ..Default::default()
        })
        .await
        .expect("consumer");
    let mut out = HashMap::new();
    let mut batch = consumer
        .fetch()
        .max_messages(10_000)
        .messages()
        .await
        .expect("fetch");
    while let Some(Ok(m)) = futures_util::StreamExt::next(&mut batch).await {
        let v: Value = serde_json::from_slice(&m.payload).unwrap_or(Value::Null);
        *out.entry(v["call_id"].as_str().unwrap_or_default().to_string())
            .or_insert(0) += 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolgate_call_runs_a_call_through_the_gateway_and_prints_its_result() {
    let nats = NatsServer::start();
    let up = upstream(Duration::ZERO).await;
    let config = config_file(
        "call",
        &format!(
            "[tools.t]\nrate = \"10/s\"\n[tools.t.upstream]\nurl = \"{}\"\n",
            up.url
        ),
    );
    let gw = Gateway::start(&config, &["--mesh", &nats.url()]);
    let http = reqwest::Client::new();
    crate::support::eventually("the mesh is up", Duration::from_secs(10), || async {
        health(&http, &gw.base).await["mesh"]["status"] == "ok"
    })
    .await;
    let out = tokio::task::spawn_blocking({
        let url = nats.url();
        move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
                .args([
                    "call",
                    "--mesh",
                    &url,
                    "t",
                    "--args",
                    "{\"n\": \"one\"}",
                    "--key",
                    "k-1",
                ])
                .args(["--deadline", "10s", "--wait", "--timeout", "10s"])
                .output()
                .expect("toolgate call")
        }
    })
    .await
    .expect("joined");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).expect("a JSON result");
    assert_eq!(result["outcome"], "success", "{result}");
    assert_eq!(result["result"], json!({"ran": "one"}));
    assert_eq!(result["status"], 200);
    let hits = up.hits.lock().clone();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].key.as_deref(), Some("k-1"), "the key goes upstream");
    let mesh: Value = http
        .get(format!("{}/v1/mesh", gw.base))
        .send()
        .await
        .expect("mesh")
        .json()
        .await
        .expect("json");
    assert_eq!(mesh["status"], "ok");
    assert_eq!(mesh["tools"][0]["tool"], "t");
}

/// Two gateways, one killed with SIGKILL mid-run (the upstream takes 300 ms a
/// call): every call gets exactly one result; only calls in flight at the kill
/// reach the upstream a second time, with the same `Idempotency-Key`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_killed_mid_run_loses_no_call_and_repeats_only_calls_in_flight() {
    let nats = NatsServer::start();
    let up = upstream(Duration::from_millis(300)).await;
    let config = config_file(
        "kill",
        &format!(
            "[mesh]\nack_wait = \"2s\"\n[tools.t]\nconcurrency = 4\n\
             [tools.t.upstream]\nurl = \"{}\"\ntimeout = \"5s\"\n",
            up.url
        ),
    );
    let mut a = Gateway::start(&config, &["--mesh", &nats.url()]);
    let b = Gateway::start(&config, &["--mesh", &nats.url()]);
    let c = caller(&nats).await;
    let http = reqwest::Client::new();
    mesh_ready(&http, &a.base).await;
    mesh_ready(&http, &b.base).await;
    let n = 40;
    for i in 0..n {
        c.publish(&call(&format!("c{i}"), Some(&format!("k{i}"))))
            .await
            .expect("publish");
    }
    // Kill `a` while it runs calls (not at a fixed time: on a loaded machine it may
    // not have started any by then), a moment after its upstream requests began.
    crate::support::eventually("gateway a runs calls", Duration::from_secs(15), || async {
        let mesh: Value = match http.get(format!("{}/v1/mesh", a.base)).send().await {
            Ok(r) => r.json().await.unwrap_or(Value::Null),
            Err(_) => Value::Null,
        };
        mesh["tools"][0]["in_flight"].as_u64().unwrap_or(0) >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let killed_at = Instant::now();
    a.kill();
    for i in 0..n {
        let r = c
            .result(&format!("c{i}"), Duration::from_secs(30))
            .await
            .expect("a result");
        assert_eq!(r.outcome, "success", "{r:?}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let per_call = results_by_call(&nats).await;
    assert_eq!(per_call.len(), n, "{per_call:?}");
    assert!(
        per_call.values().all(|&k| k == 1),
        "a call got more than one result: {per_call:?}"
    );
    let hits = up.hits.lock().clone();
    let mut by_call: HashMap<String, Vec<Hit>> = HashMap::new();
    for h in hits {
        by_call.entry(h.n.clone()).or_default().push(h);
    }
    for (id, hs) in &by_call {
        let key = format!("k{}", &id[1..]);
        assert!(
            hs.iter().all(|h| h.key.as_deref() == Some(key.as_str())),
            "{id}: {hs:?}"
        );
        if hs.len() > 1 {
            assert_eq!(hs.len(), 2, "{id} ran {} times", hs.len());
            // The first run was in flight at the kill: started, not long before it.
            let first = &hs[0];
            assert!(
                first.start <= killed_at,
                "{id}: repeated though it started after the kill"
            );
            assert!(
                killed_at.duration_since(first.start) < Duration::from_millis(600),
                "{id}: its first run ended well before the kill, yet it ran again"
            );
        }
    }
    let repeated = by_call.values().filter(|hs| hs.len() > 1).count();
    assert!(
        repeated >= 1,
        "no call was in flight at the kill: the test proved nothing"
    );
    drop(b);
}

/// NATS away when the gateway starts: HTTP serves, /healthz says degraded; when
/// NATS comes, the mesh catches up and calls run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_started_without_nats_serves_http_and_catches_up_when_nats_comes() {
    let mut nats = NatsServer::start();
    nats.kill();
    let up = upstream(Duration::ZERO).await;
    let config = config_file(
        "late",
        &format!("[tools.t]\n[tools.t.upstream]\nurl = \"{}\"\n", up.url),
    );
    let gw = Gateway::start(&config, &["--mesh", &nats.url()]);
    let http = reqwest::Client::new();
    let h = health(&http, &gw.base).await;
    assert_eq!(h["status"], "degraded", "{h}");
    let admit = http
        .post(format!("{}/v1/admit", gw.base))
        .json(&json!({"tool": "t"}))
        .send()
        .await
        .expect("admit");
    assert_eq!(admit.status(), 200, "HTTP works without NATS");
    nats.restart();
    crate::support::eventually("the mesh is up", Duration::from_secs(15), || async {
        health(&http, &gw.base).await["status"] == "ok"
    })
    .await;
    let c = caller(&nats).await;
    c.publish(&call("late-1", None)).await.expect("publish");
    let r = c
        .result("late-1", Duration::from_secs(10))
        .await
        .expect("a result");
    assert_eq!(r.outcome, "success");
}

/// Two gateways sharing `--store redis://` and one stream never exceed the quota
/// together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_one_redis_and_one_stream_keep_one_quota() {
    if !redis_available() {
        return;
    }
    let redis = Redis::start();
    let nats = NatsServer::start();
    let up = upstream(Duration::ZERO).await;
    let config = config_file(
        "shared",
        &format!(
            "[store]\ntimeout = \"2s\"\n[tools.t]\nrate = \"5/s\"\nburst = 5\n\
             [tools.t.upstream]\nurl = \"{}\"\n",
            up.url
        ),
    );
    let a = Gateway::start(&config, &["--mesh", &nats.url(), "--store", &redis.url()]);
    let b = Gateway::start(&config, &["--mesh", &nats.url(), "--store", &redis.url()]);
    let c = caller(&nats).await;
    let http = reqwest::Client::new();
    mesh_ready(&http, &a.base).await;
    mesh_ready(&http, &b.base).await;
    // On the wall clock: the quota is enforced on Redis' clock, whose rate may differ
    // from `Instant`'s by more than the tolerance below while the system's time is
    // being adjusted (0.5 % was seen on a test machine: 24 ms over these 4.8 s).
    let start = SystemTime::now();
    for i in 0..30 {
        c.publish(&call(&format!("s{i}"), None))
            .await
            .expect("publish");
    }
    for i in 0..30 {
        let r = c
            .result(&format!("s{i}"), Duration::from_secs(30))
            .await
            .expect("a result");
        assert_eq!(r.outcome, "success", "{r:?}");
    }
    let hits = up.hits.lock().clone();
    assert_eq!(hits.len(), 30);
    let mut times: Vec<f64> = hits
        .iter()
        .map(|h| {
            h.wall
                .duration_since(start)
                .unwrap_or_default()
                .as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    for (i, t) in times.iter().enumerate() {
        // The bucket started full at the first admission (≥ start): 5 + 5/s × t.
        let allowed = 5.0 + 5.0 * t + 0.05;
        assert!(
            (i + 1) as f64 <= allowed,
            "call {} at {t:.3}s exceeds 5 + 5/s × t",
            i + 1
        );
    }
}

/// On a shared store too, a per-tenant quota is each tenant's own: one tenant's
/// calls that spend their partition never hold up another's. (The quotas then live
/// in Redis, not in the engine's state, and the worker must still see that the
/// tool's admission depends on the call's tenant.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_a_tenant_spending_its_partition_never_holds_up_another() {
    if !redis_available() {
        return;
    }
    let redis = Redis::start();
    let nats = NatsServer::start();
    let up = upstream(Duration::ZERO).await;
    let config = config_file(
        "partitioned",
        &format!(
            "[store]\ntimeout = \"2s\"\n[tools.t]\nrate = \"1/min\"\nburst = 1\n\
             partition = \"tenant\"\n[tools.t.upstream]\nurl = \"{}\"\n",
            up.url
        ),
    );
    let gw = Gateway::start(&config, &["--mesh", &nats.url(), "--store", &redis.url()]);
    let c = caller(&nats).await;
    let http = reqwest::Client::new();
    mesh_ready(&http, &gw.base).await;
    let of = |id: &str, tenant: &str| {
        let mut out = call(id, None);
        out.envelope["tenant"] = json!(tenant);
        out
    };
    // acme asks for five calls (its partition admits one a minute); globex then
    // asks for one. The calls queue in the stream, so the worker works busy: it
    // pulls several at a time and must admit each with its own tenant.
    for i in 1..=5 {
        c.publish(&of(&format!("acme-{i}"), "acme"))
            .await
            .expect("publish");
    }
    c.publish(&of("globex-1", "globex")).await.expect("publish");
    let r = c
        .result("globex-1", Duration::from_secs(20))
        .await
        .expect("globex's call is not held up by acme's");
    assert_eq!(r.outcome, "success", "{r:?}");
    // One of acme's calls ran (which one is the order they were admitted in); the
    // others wait for acme's own partition, a minute away.
    crate::support::eventually(
        "one of acme's calls runs",
        Duration::from_secs(20),
        || async { up.hits.lock().len() >= 2 },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ran: Vec<String> = up.hits.lock().iter().map(|h| h.n.clone()).collect();
    let acme = ran.iter().filter(|n| n.starts_with("acme-")).count();
    assert_eq!((ran.len(), acme), (2, 1), "{ran:?}");
}

/// A reload that gives a tool an upstream starts its worker: its calls, waiting in
/// the stream (a dead letter would have been `unknown_tool` before), now run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_adds_a_tool_starts_consuming_its_calls() {
    let nats = NatsServer::start();
    let up = upstream(Duration::ZERO).await;
    let base = format!("[tools.a]\n[tools.a.upstream]\nurl = \"{}\"\n", up.url);
    let path = config_file("reload", &base);
    let s = crate::support::start_file(&path).await;
    toolgate_gateway::mesh::start(&s.state, MeshConfig::new(nats.url()), None)
        .await
        .expect("mesh");
    mesh_ready_in(&s.state).await;
    let c = caller(&nats).await;
    let mut b = call("b-1", None);
    b.tool = "b".into();
    b.envelope["tool"] = json!("b");
    std::fs::write(
        &path,
        format!(
            "{base}[tools.b]\n[tools.b.upstream]\nurl = \"{}\"\n",
            up.url
        ),
    )
    .expect("config");
    s.state.reload().expect("reloaded");
    c.publish(&b).await.expect("publish");
    let r = c
        .result("b-1", Duration::from_secs(10))
        .await
        .expect("a result");
    assert_eq!(r.outcome, "success", "{r:?}");
}
