//! The event mesh against a bare JetStream consumer, side by side in one run
//! (`scripts/bench-mesh`).
//!
//! Both consume the same calls from their own work-queue stream on one
//! `nats-server`, against one trivial local upstream, with the same pull batch (64)
//! and the same in-flight bound (256):
//!
//! - **bare**: an `async-nats` pull consumer that fetches → POSTs the arguments to
//!   the upstream → publishes the result to JetStream (confirmed) → acknowledges
//!   (confirmed), with no admission;
//! - **toolgate**: `toolgate serve --mesh` in-process (an unlimited tool with the
//!   same upstream): the whole pipeline — envelope checks, admission, the breaker,
//!   the result, the dead-letter bookkeeping.
//!
//! Two measures: **throughput**, draining N calls published beforehand; and
//! **latency**, publish-to-result of calls published at a steady rate well under
//! capacity, as p50/p99. Usage: `bench_mesh [N] [RATE] [ROUNDS]` (default 10000 calls,
//! 500 calls/s for the latency run, 2 interleaved rounds; the best round is kept).

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::disallowed_methods,
    reason = "a benchmark measures real elapsed time"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::pull::Config as PullConfig;
use async_nats::jetstream::consumer::{AckPolicy, PullConsumer};
use async_nats::jetstream::stream::{Config as StreamConfig, RetentionPolicy};
use async_nats::jetstream::{AckKind, Context};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use toolgate_gateway::state::AppState;
use toolgate_mesh::testing::NatsServer;
use toolgate_mesh::MeshConfig;

const BATCH: usize = 64;
const IN_FLIGHT: usize = 256;

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n = args.first().copied().unwrap_or(10_000) as usize;
    let rate = args.get(1).copied().unwrap_or(500);
    let rounds = args.get(2).copied().unwrap_or(2);
    let nats = NatsServer::start();
    let upstream = upstream().await;
    let client = async_nats::connect(nats.url()).await.expect("nats");
    let js = async_nats::jetstream::new(client.clone());
    // Both consumers start on a full stream: the calls are published first.
    let first = start_mesh(&nats, &upstream).await; // creates the mesh's streams
    first.ready().await;
    first.stop().await;
    Bare::streams(&js).await;
    let (mut best_bare, mut best_tg) = (Run::worst(), Run::worst());
    for round in 0..rounds {
        let tag = publish(&js, "bench.calls.echo", n).await;
        let sub = client
            .subscribe("bench.results.>")
            .await
            .expect("subscribe");
        let t0 = Instant::now();
        let bare = Bare::start(&js, &upstream).await;
        let b = wait_results(sub, &tag, n, t0).await;
        drop(bare);
        let tag = publish(&js, "toolgate.calls.echo", n).await;
        let sub = client
            .subscribe("toolgate.results.>")
            .await
            .expect("subscribe");
        // Timed from the mesh's readiness: connecting and checking the streams is a
        // start-up cost, not consumption.
        let mesh = start_mesh(&nats, &upstream).await;
        mesh.ready().await;
        let t0 = Instant::now();
        let t = wait_results(sub, &tag, n, t0).await;
        mesh.stop().await;
        eprintln!(
            "round {round}: bare {:.0}/s, toolgate {:.0}/s",
            b.per_sec, t.per_sec
        );
        best_bare = best_bare.best(b);
        best_tg = best_tg.best(t);
    }
    let lat_n = (rate as usize * 4).min(n);
    let bare = Bare::start(&js, &upstream).await;
    let lb = paced(
        &js,
        &client,
        "bench.calls.echo",
        "bench.results",
        lat_n,
        rate,
    )
    .await;
    drop(bare);
    let mesh = start_mesh(&nats, &upstream).await;
    mesh.ready().await;
    let lt = paced(
        &js,
        &client,
        "toolgate.calls.echo",
        "toolgate.results",
        lat_n,
        rate,
    )
    .await;
    mesh.stop().await;
    report(n, rate, &best_bare, &best_tg, &lb, &lt);
}

/// A trivial upstream: echoes the arguments.
async fn upstream() -> String {
    let app = axum::Router::new().route(
        "/echo",
        axum::routing::post(|axum::Json(v): axum::Json<Value>| async move { axum::Json(v) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/echo")
}

/// A gateway with the mesh running, in this process.
struct Gateway(AppState);

impl Gateway {
    async fn ready(&self) {
        let until = Instant::now() + Duration::from_secs(10);
        while self.0.mesh().is_some_and(|m| m.view().status != "ok") {
            assert!(Instant::now() < until, "mesh not ready");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn stop(self) {
        if let Some(m) = self.0.mesh() {
            m.shutdown(Duration::from_secs(5)).await;
        }
    }
}

async fn start_mesh(nats: &NatsServer, upstream: &str) -> Gateway {
    let config = format!(
        "[gateway]\nmax_leases = 1000000\n[tools.echo]\nrate = \"1000000/s\"\n\
         [tools.echo.upstream]\nurl = \"{upstream}\"\n"
    );
    let state = AppState::from_toml(&config).expect("config");
    let mut mesh = MeshConfig::new(nats.url());
    mesh.batch = BATCH;
    mesh.max_in_flight = IN_FLIGHT;
    toolgate_gateway::mesh::start(&state, mesh, None)
        .await
        .expect("mesh");
    Gateway(state)
}

/// The bare consumer: fetch → HTTP → publish the result → ack.
struct Bare {
    task: tokio::task::JoinHandle<()>,
}

impl Bare {
    async fn streams(js: &Context) {
        for (name, subject, retention) in [
            ("BENCH_CALLS", "bench.calls.>", RetentionPolicy::WorkQueue),
            ("BENCH_RESULTS", "bench.results.>", RetentionPolicy::Limits),
        ] {
            js.get_or_create_stream(StreamConfig {
                name: name.into(),
                subjects: vec![subject.into()],
                retention,
                ..StreamConfig::default()
            })
            .await
            .expect("stream");
        }
    }

    async fn start(js: &Context, upstream: &str) -> Self {
        let consumer: PullConsumer = js
            .get_stream("BENCH_CALLS")
            .await
            .expect("stream")
            .get_or_create_consumer(
                "bare",
                PullConfig {
                    durable_name: Some("bare".into()),
                    ack_policy: AckPolicy::Explicit,
                    max_ack_pending: IN_FLIGHT as i64,
                    ..PullConfig::default()
                },
            )
            .await
            .expect("consumer");
        let (js, url) = (js.clone(), upstream.to_string());
        let task = tokio::spawn(async move { bare_loop(consumer, js, url).await });
        Self { task }
    }
}

impl Drop for Bare {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn bare_loop(consumer: PullConsumer, js: Context, url: String) {
    let http = reqwest::Client::new();
    let room = Arc::new(Semaphore::new(IN_FLIGHT));
    loop {
        let Ok(mut batch) = consumer
            .batch()
            .max_messages(BATCH)
            .expires(Duration::from_secs(1))
            .messages()
            .await
        else {
            continue;
        };
        while let Some(Ok(msg)) = batch.next().await {
            let slot = room.clone().acquire_owned().await.expect("room");
            let (js, http, url) = (js.clone(), http.clone(), url.clone());
            tokio::spawn(async move {
                let call: Value = serde_json::from_slice(&msg.payload).unwrap_or(Value::Null);
                let id = call["call_id"].as_str().unwrap_or_default().to_string();
                let res = http.post(&url).json(&call["arguments"]).send().await;
                let body: Value = match res {
                    Ok(r) => r.json().await.unwrap_or(Value::Null),
                    Err(_) => Value::Null,
                };
                let out = json!({"call_id": id, "outcome": "success", "result": body});
                if let Ok(ack) = js
                    .publish(format!("bench.results.{id}"), out.to_string().into())
                    .await
                {
                    let _ = ack.await;
                }
                let _ = msg.double_ack_with(AckKind::Ack).await;
                drop(slot);
            });
        }
    }
}

/// One run's figures.
#[derive(Debug, Clone)]
struct Run {
    per_sec: f64,
}

impl Run {
    fn worst() -> Self {
        Self { per_sec: 0.0 }
    }

    fn best(self, other: Self) -> Self {
        if other.per_sec > self.per_sec {
            other
        } else {
            self
        }
    }
}

fn envelope(id: &str) -> Vec<u8> {
    json!({"call_id": id, "tool": "echo", "arguments": {"id": id}})
        .to_string()
        .into_bytes()
}

/// Publishes `n` calls (confirmed) and returns their ids' common prefix.
async fn publish(js: &Context, calls: &str, n: usize) -> String {
    let tag = format!("d{:x}-", rand::random::<u64>());
    // At most 1000 confirmations outstanding: the client waits beyond 5000.
    let mut acks = Vec::with_capacity(1000);
    for i in 0..n {
        let id = format!("{tag}{i}");
        acks.push(
            js.publish(calls.to_string(), envelope(&id).into())
                .await
                .expect("publish"),
        );
        if acks.len() == 1000 || i + 1 == n {
            for a in acks.drain(..) {
                a.await.expect("stored");
            }
        }
    }
    tag
}

/// Waits on `sub` (subscribed before the consumer started) for the `n` results of
/// calls whose ids start with `tag`, timed from `t0`.
async fn wait_results(mut sub: async_nats::Subscriber, tag: &str, n: usize, t0: Instant) -> Run {
    let mut seen = std::collections::HashSet::new();
    while seen.len() < n {
        match tokio::time::timeout(Duration::from_secs(20), sub.next()).await {
            Ok(Some(m)) if m.subject.as_str().contains(tag) => {
                seen.insert(m.subject.to_string());
            }
            Ok(Some(_)) => {}
            _ => {
                let missing: Vec<usize> = (0..n)
                    .filter(|i| !seen.iter().any(|s| s.ends_with(&format!("{tag}{i}"))))
                    .collect();
                panic!(
                    "{tag}: only {} of {n} results arrived; missing {missing:?}",
                    seen.len()
                )
            }
        }
    }
    Run {
        per_sec: n as f64 / t0.elapsed().as_secs_f64(),
    }
}

/// Latency of `n` calls published at `rate` per second: (p50, p99) in ms.
async fn paced(
    js: &Context,
    client: &async_nats::Client,
    calls: &str,
    results: &str,
    n: usize,
    rate: u64,
) -> (f64, f64) {
    let tag = format!("{:x}", rand::random::<u64>());
    let mut sub = client
        .subscribe(format!("{results}.>"))
        .await
        .expect("subscribe");
    let sent: Arc<Vec<std::sync::Mutex<Option<Instant>>>> =
        Arc::new((0..n).map(|_| std::sync::Mutex::new(None)).collect());
    let (js2, calls2, sent2, tag2) = (js.clone(), calls.to_string(), sent.clone(), tag.clone());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
        for i in 0..n {
            tick.tick().await;
            *sent2[i].lock().expect("lock") = Some(Instant::now());
            let _ = js2
                .publish(calls2.clone(), envelope(&format!("p{tag2}-{i}")).into())
                .await;
        }
    });
    let mut lat = Vec::with_capacity(n);
    while lat.len() < n {
        let msg = tokio::time::timeout(Duration::from_secs(60), sub.next())
            .await
            .expect("a result")
            .expect("open");
        if !msg.subject.as_str().contains(&format!("p{tag}-")) {
            continue;
        }
        let now = Instant::now();
        let i: usize = msg
            .subject
            .rsplit('-')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        if let Some(t) = *sent[i].lock().expect("lock") {
            lat.push(now.duration_since(t).as_secs_f64() * 1e3);
        }
    }
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    (pct(0.50), pct(0.99))
}

fn report(n: usize, rate: u64, bare: &Run, tg: &Run, lb: &(f64, f64), lt: &(f64, f64)) {
    println!("| measure | bare async-nats consumer | toolgate mesh | toolgate / bare |");
    println!("|---|---:|---:|---:|");
    println!(
        "| throughput, {n} calls drained (calls/s) | {:.0} | {:.0} | {:.2} |",
        bare.per_sec,
        tg.per_sec,
        tg.per_sec / bare.per_sec
    );
    println!(
        "| latency p50 at {rate} calls/s (ms) | {:.2} | {:.2} | +{:.2} ms |",
        lb.0,
        lt.0,
        lt.0 - lb.0
    );
    println!(
        "| latency p99 at {rate} calls/s (ms) | {:.2} | {:.2} | +{:.2} ms |",
        lb.1,
        lt.1,
        lt.1 - lb.1
    );
}
