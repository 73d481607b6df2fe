//! Local grants (`local_grant`): batches taken in one round trip, spent locally,
//! returned when unused — and never more admissions than the quota allows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use toolgate::{Call, Engine, Policy};
use toolgate_redis::Source;

use crate::support::{prefix, redis_available, store, RedisServer, HEAVY};

/// `n` engines on `server` (as `n` processes would be), each with grants of `grant`.
async fn engines(server: &RedisServer, policy: &str, n: usize, grant: u64) -> Vec<Engine> {
    let p = prefix("grant");
    let mut out = Vec::new();
    for _ in 0..n {
        let extra = format!("local_grant = {grant}\ntimeout = \"1s\"");
        let policy = Policy::from_toml_str(policy).expect("valid");
        out.push(
            toolgate_redis::engine(policy, &store(&server.url(), &p, &extra))
                .await
                .expect("connect"),
        );
    }
    out
}

async fn drain(engine: &Engine) -> u64 {
    let mut n = 0;
    while engine.admit_now(&Call::new("t")).await.is_ok() {
        n += 1;
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_never_over_admit_and_unused_units_come_back() {
    if !redis_available() {
        return;
    }
    let server = RedisServer::start();
    let g = engines(&server, "[tools.t]\nrate = \"10/h\"\nburst = 10", 2, 5).await;
    let first = g[0].admit_now(&Call::new("t")).await.expect("a batch of 5");
    assert_eq!(Source::of(&first), Some(Source::Grant));
    // The other process gets what Redis has left (5), not what sits in the grant.
    assert_eq!(drain(&g[1]).await, 5);
    // The first spends the rest of its grant locally.
    assert_eq!(drain(&g[0]).await, 4);
    assert_eq!(drain(&g[1]).await, 0);

    // An unused grant is returned when it expires (after at most 1 s).
    let g = engines(&server, "[tools.t]\nrate = \"10/h\"\nburst = 10", 2, 5).await;
    drop(g[0].admit_now(&Call::new("t")).await.expect("a batch of 5"));
    assert_eq!(drain(&g[1]).await, 5);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(drain(&g[1]).await, 4, "the 4 unused units came back");
}

/// The accuracy trade-off, measured: 4 engines × 16 callers on 50/s burst 10 for 3 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_keep_a_shared_quota_within_bounds() {
    if !redis_available() {
        return;
    }
    let _heavy = HEAVY.lock().await;
    let server = RedisServer::start();
    let g = engines(&server, "[tools.t]\nrate = \"50/s\"\nburst = 10", 4, 5).await;
    let (admitted, granted) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for engine in &g {
        for _ in 0..16 {
            let (engine, admitted, granted) = (engine.clone(), admitted.clone(), granted.clone());
            tasks.push(tokio::spawn(async move {
                while Instant::now() < end {
                    match engine.admit_now(&Call::new("t")).await {
                        Ok(p) => {
                            admitted.fetch_add(1, Ordering::Relaxed);
                            if Source::of(&p) == Some(Source::Grant) {
                                granted.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(r) => {
                            let wait = r.retry_after().unwrap_or(Duration::from_millis(5));
                            tokio::time::sleep(
                                wait.clamp(Duration::from_millis(1), Duration::from_millis(20)),
                            )
                            .await;
                        }
                    }
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("caller");
    }
    let (total, granted) = (
        admitted.load(Ordering::Relaxed),
        granted.load(Ordering::Relaxed),
    );
    // Every batch and single admission was charged on Redis within this span.
    let span = t0.elapsed();
    let max = 10 + 50 * u64::try_from(span.as_millis()).unwrap_or(u64::MAX) / 1000;
    eprintln!(
        "local_grant = 5: admitted {total} of at most {max} in {span:?}; {granted} through grants"
    );
    assert!(total <= max, "over-admitted: {total} > {max}");
    assert!(
        total * 100 >= max * 80,
        "under-admitted: {total} < 80% of {max}"
    );
    assert!(granted > 0);
}
