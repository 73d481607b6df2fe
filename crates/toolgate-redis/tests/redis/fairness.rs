//! Fair queues on a shared store, measured: two engines ("replicas") on one Redis, a
//! tenant flooding one of them, and a newcomer on each. Each replica's fair queue
//! lets only its head wait in Redis, so a newcomer waits about one turn per tenant
//! waiting in its own replica plus the other replica's head — not the flood's
//! backlog, which it does with FIFO waiting (measured side by side).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;
use toolgate::{Call, Engine, Policy};

use crate::support::{prefix, redis_available, store, RedisServer};

const POLICY: &str = r#"
[tools.search]
rate = "20/s"
burst = 1
on_limit = "wait"
max_wait = "30s"
"#;

/// Starts `n` waiting admits of `tenant` on `engine`; each records its tenant in
/// `order` when admitted.
fn flood(
    engine: &Engine,
    tenant: &'static str,
    n: usize,
    order: &Arc<Mutex<Vec<&'static str>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let (engine, order) = (engine.clone(), order.clone());
            tokio::spawn(async move {
                let call = Call::new("search").tenant(tenant);
                drop(engine.admit(&call).await.expect("admitted"));
                order.lock().await.push(tenant);
            })
        })
        .collect()
}

/// How long a newcomer of tenant `c` on replica one and of tenant `b` on replica two
/// wait while tenant `a` floods replica one with 30 calls (1.5 s of the quota); and
/// how many of `a`'s went between `c`'s arrival and its admission.
async fn newcomers(server: &RedisServer, fair: bool) -> (Duration, Duration, usize) {
    let p = prefix(if fair { "fair" } else { "fifo" });
    let toml = if fair {
        format!("{POLICY}fairness = \"tenant\"\n")
    } else {
        POLICY.to_string()
    };
    let policy = || Policy::from_toml_str(&toml).expect("valid");
    let one = toolgate_redis::engine(policy(), &store(&server.url(), &p, ""))
        .await
        .expect("connect");
    let two = toolgate_redis::engine(policy(), &store(&server.url(), &p, ""))
        .await
        .expect("connect");
    drop(
        one.admit_now(&Call::new("search").tenant("a"))
            .await
            .expect("the burst"),
    );
    let order = Arc::new(Mutex::new(Vec::new()));
    let a = flood(&one, "a", 30, &order);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let at_arrival = order.lock().await.len();
    let timed = |engine: Engine, tenant: &'static str| async move {
        let t = Instant::now();
        let permit = engine
            .admit(&Call::new("search").tenant(tenant))
            .await
            .expect("admitted");
        drop(permit);
        t.elapsed()
    };
    let (c, b) = tokio::join!(timed(one.clone(), "c"), timed(two.clone(), "b"));
    let before_c = order.lock().await.len() - at_arrival;
    for h in a {
        h.await.expect("a's call");
    }
    (c, b, before_c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_queues_compose_across_replicas_on_redis() {
    if !redis_available() {
        return;
    }
    let server = RedisServer::start();
    let (fifo_c, fifo_b, fifo_before) = newcomers(&server, false).await;
    let (fair_c, fair_b, fair_before) = newcomers(&server, true).await;
    eprintln!(
        "newcomer waits, FIFO: {fifo_c:?} on the flooded replica ({fifo_before} of the \
         flood first), {fifo_b:?} on the other; fair: {fair_c:?} ({fair_before} first), \
         {fair_b:?}"
    );
    // A turn is 50 ms: the newcomer on the flooded replica goes after a's call in its
    // turn, at most one more, and the other replica's head.
    assert!(
        fair_c < Duration::from_millis(600),
        "fair: c waited {fair_c:?}"
    );
    assert!(
        fair_before <= 4,
        "fair: {fair_before} of a's calls before c's"
    );
    assert!(
        fair_b < Duration::from_millis(600),
        "fair: b waited {fair_b:?}"
    );
    // FIFO on the flooded replica waits out the backlog.
    assert!(
        fifo_c > Duration::from_millis(1000),
        "FIFO: c waited {fifo_c:?}"
    );
}
