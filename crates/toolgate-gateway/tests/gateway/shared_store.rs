//! `toolgate serve --store redis://…`: two gateway processes on one real
//! `redis-server` (started here on a free port) obey one quota.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::procs::{free_port, redis_available, Gateway, Redis};
use crate::support::{config_file, remove_config};

async fn admit(http: &reqwest::Client, base: &str, tool: &str) -> (u16, Value) {
    let res = http
        .post(format!("{base}/v1/admit"))
        .json(&json!({"tool": tool}))
        .send()
        .await
        .expect("request");
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_one_redis_obey_one_quota() {
    if !redis_available() {
        return;
    }
    let redis = Redis::start();
    let config = config_file(
        "redis-shared",
        r#"
        [store]
        timeout = "2s"          # semantics, not timeouts, are tested here

        [tools.lookup_customer]
        rate = "5/min"
        burst = 5

        [tools.search_documents]
        rate = "1000/s"
        "#,
    );
    let a = Gateway::start(&config, &["--store", &redis.url()]);
    let b = Gateway::start(&config, &["--store", &redis.url()]);
    let http = reqwest::Client::new();

    // 2 × 20 concurrent calls, half through each gateway: 5 in all get through.
    let calls = (0..40).map(|i| {
        let base = if i % 2 == 0 { &a.base } else { &b.base }.clone();
        let http = http.clone();
        async move { admit(&http, &base, "lookup_customer").await }
    });
    let results = futures_join_all(calls).await;
    let admitted = results.iter().filter(|(s, _)| *s == 200).count();
    assert_eq!(admitted, 5, "{results:?}");
    let (_, no) = results
        .iter()
        .find(|(s, _)| *s == 429)
        .expect("a rejection");
    assert_eq!(no["quota"], "tools.lookup_customer.rate");
    assert_eq!(no["reason"], "rate_limited");
    assert!(
        no["retry_after_ms"].as_u64().is_some_and(|ms| ms > 0),
        "{no}"
    );

    // Both gateways see the quota spent; an unrelated tool is untouched.
    assert_eq!(admit(&http, &a.base, "lookup_customer").await.0, 429);
    assert_eq!(admit(&http, &b.base, "lookup_customer").await.0, 429);
    assert_eq!(admit(&http, &b.base, "search_documents").await.0, 200);
    let tools: Value = http
        .get(format!("{}/v1/tools", a.base))
        .send()
        .await
        .expect("tools")
        .json()
        .await
        .expect("json");
    assert_eq!(tools["store"], "redis", "{tools}");
    // What the quota has left is read from Redis: each gateway reports the calls
    // the other admitted too (5/min refills one call in 12 s, long after this).
    for gw in [&a, &b] {
        let one = get_json(&http, &format!("{}/v1/tools/lookup_customer", gw.base)).await;
        assert_eq!(
            (&one["tokens_left"], &one["capacity"]),
            (&json!(0), &json!(5)),
            "{one}"
        );
        let q = &one["quotas"][0];
        assert_eq!(q["quota"], "tools.lookup_customer.rate", "{one}");
        assert_eq!(
            (&q["kind"], &q["available"]),
            (&json!("rate"), &json!(0)),
            "{one}"
        );
    }
    let listed = tools["tools"].as_array().expect("a list");
    let lookup = listed
        .iter()
        .find(|t| t["tool"] == "lookup_customer")
        .expect("listed");
    assert_eq!(lookup["tokens_left"], 0, "{tools}");
    let search = listed
        .iter()
        .find(|t| t["tool"] == "search_documents")
        .expect("listed");
    assert_eq!(search["capacity"], 1000, "{tools}");
    assert!(
        search["tokens_left"].as_u64().is_some_and(|n| n >= 999),
        "{tools}"
    );
    // Reading spent nothing: the quota is as empty as before, not emptier, and
    // the other tool still admits.
    assert_eq!(admit(&http, &b.base, "search_documents").await.0, 200);
    remove_config(&config);
}

async fn get_json(http: &reqwest::Client, url: &str) -> Value {
    let res = http.get(url).send().await.expect("request");
    assert_eq!(res.status(), 200, "{url}");
    res.json().await.expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_redis_fails_closed_within_the_store_timeout() {
    let config = config_file(
        "redis-down",
        "[store]\ntimeout = \"200ms\"\n\n[tools.lookup_customer]\nrate = \"5/s\"\n",
    );
    // Nothing listens on this port: the gateway starts anyway (the store is
    // connected lazily) and refuses calls, by the quota `store`, in bounded time.
    let down = format!("redis://127.0.0.1:{}", free_port());
    let gw = Gateway::start(&config, &["--store", &down]);
    let http = reqwest::Client::new();
    let start = Instant::now();
    let (status, body) = admit(&http, &gw.base, "lookup_customer").await;
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["quota"], "store");
    assert_eq!(body["reason"], "circuit_open");
    // The state endpoint still answers, in bounded time: the limits in force, and
    // no figure for what Redis holds (unknown, not zero).
    let start = Instant::now();
    let one = get_json(&http, &format!("{}/v1/tools/lookup_customer", gw.base)).await;
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(
        (&one["tokens_left"], &one["capacity"]),
        (&Value::Null, &json!(5)),
        "{one}"
    );
    assert_eq!(one["quotas"][0]["available"], Value::Null, "{one}");
    remove_config(&config);
}

/// Runs futures concurrently (no `futures` dependency needed for one helper).
async fn futures_join_all<F: std::future::Future + Send + 'static>(
    fs: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = fs.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}

/// How long the lease of tool `t`'s concurrency slot has left in Redis (its score is
/// its expiry, in Redis µs), the longest if several are held.
fn store_lease_left(redis: &Redis) -> Duration {
    let mut conn = redis::Client::open(redis.url())
        .and_then(|c| c.get_connection())
        .expect("a connection to the test's redis-server");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*tools.t.concurrency")
        .query(&mut conn)
        .expect("KEYS");
    let [key] = keys.as_slice() else {
        panic!("one lease key: {keys:?}");
    };
    let leases: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut conn)
        .expect("ZRANGE");
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut conn).expect("TIME");
    let expiry = leases.iter().map(|(_, at)| *at).fold(0.0, f64::max);
    Duration::from_micros((expiry as u64).saturating_sub(secs * 1_000_000 + micros))
}

/// Issue #13, item 10: a lease in Redis lives as long as the gateway's lease plus
/// the margin (not the store's own 60 s default), follows a reload of `lease_ttl`,
/// and a live gateway still gives each slot back when its own lease expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_leases_on_redis_follow_the_gateways_lease_ttl() {
    use toolgate_gateway::state::{AppState, Source};
    use toolgate_gateway::store::{Store, STORE_LEASE_MARGIN};

    if !redis_available() {
        return;
    }
    let redis = Redis::start();
    let write = |ttl: &str| {
        config_file(
            "redis-lease-ttl",
            &format!(
                "[gateway]\nlease_ttl = \"{ttl}\"\n[store]\ntimeout = \"2s\"\n\
                 [tools.t]\nconcurrency = 1\n"
            ),
        )
    };
    let config = write("1s");
    let source = Source::File(config.clone());
    let loaded = source.load().expect("valid config");
    toolgate_gateway::metrics::install();
    let store = Store::parse(&redis.url(), loaded.policy.store.as_ref()).expect("redis");
    let engine = store.engine(loaded.policy.clone()).await.expect("engine");
    let s = crate::support::start_on(AppState::new(source, loaded, engine).expect("state")).await;
    let near = |left: Duration, ttl: Duration| {
        let full = ttl + STORE_LEASE_MARGIN;
        assert!(
            left <= full && left + Duration::from_secs(1) > full,
            "{left:?} of {full:?}"
        );
    };

    let started = Instant::now();
    assert_eq!(s.admit("t").await.status, 200);
    near(store_lease_left(&redis), Duration::from_secs(1));
    let no = s.admit("t").await;
    assert_eq!(
        (no.status, &no.body["reason"]),
        (429, &json!("concurrency_limited"))
    );
    // The gateway's reaper gives the slot back when its own lease expires, long
    // before the store's lease would.
    crate::support::eventually(
        "the expired lease's slot",
        Duration::from_secs(3),
        || async { s.admit("t").await.status == 200 },
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(1) + STORE_LEASE_MARGIN);

    // A longer lease_ttl, reloaded: leases admitted from then on live longer in Redis.
    write("4s");
    assert_eq!(s.post("/v1/admin/reload", json!({})).await.status, 200);
    crate::support::eventually(
        "a slot after the reload",
        Duration::from_secs(3),
        || async { s.admit("t").await.status == 200 },
    )
    .await;
    near(store_lease_left(&redis), Duration::from_secs(4));
    remove_config(&config);
}

/// Redis' count of connected clients.
fn redis_clients(redis: &Redis) -> u64 {
    let mut conn = redis::Client::open(redis.url())
        .and_then(|c| c.get_connection())
        .expect("a connection to the test's redis-server");
    let info: String = redis::cmd("INFO")
        .arg("clients")
        .query(&mut conn)
        .expect("INFO clients");
    info.lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("connected_clients")
}

/// `toolgate serve` on Redis gives each of its connections' runtimes a connection to
/// Redis of its own (one per core: `TOKIO_WORKER_THREADS` of them here), every one
/// of which obeys the one quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_core_of_a_gateway_on_redis_has_its_own_redis_connection() {
    if !redis_available() {
        return;
    }
    let redis = Redis::start();
    let config = config_file(
        "redis-lanes",
        "[store]\ntimeout = \"2s\"\n[tools.t]\nrate = \"10/min\"\nburst = 10\n",
    );
    let before = redis_clients(&redis);
    let gw = Gateway::start_with_env(
        &config,
        &["--store", &redis.url()],
        &[("TOKIO_WORKER_THREADS", "3")],
    );
    // Six clients, 18 calls at once: at least six connections, spread over the
    // three cores (the accept loop gives each new one to the core with the fewest).
    let clients: Vec<reqwest::Client> = (0..6)
        .map(|_| {
            reqwest::Client::builder()
                .pool_max_idle_per_host(1)
                .build()
                .expect("client")
        })
        .collect();
    let calls = (0..18).map(|i| {
        let (http, base) = (clients[i % 6].clone(), gw.base.clone());
        async move { admit(&http, &base, "t").await.0 }
    });
    let statuses = futures_join_all(calls).await;
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        10,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 429).count(),
        8,
        "{statuses:?}"
    );
    // Every admission went through its core's own connection.
    assert_eq!(redis_clients(&redis) - before, 3);
    #[cfg(target_os = "linux")]
    assert_eq!(crate::procs::core_threads(gw.child.id()), 3);
    remove_config(&config);
}
