//! Idle quotas leave no keys behind: every key expires when its state is back to
//! fresh (a full bucket, an empty window, no leases).

use std::time::Duration;

use toolgate::{Call, Completion, Engine, Policy};

use crate::support::{prefix, redis_available, store, RedisServer};

#[tokio::test]
async fn an_idle_quota_leaves_no_keys_after_its_ttl() {
    if !redis_available() {
        return;
    }
    let server = RedisServer::start();
    let p = prefix("expiry");
    let policy = Policy::from_toml_str(
        r#"
        [tools.b]
        rate = "10/s"
        burst = 10
        tokens = "1000/s"
        [tools.s]
        rate = "5/300ms"
        window = "sliding"
        partition = "tenant"
        [tools.c]
        concurrency = 3
        "#,
    )
    .expect("valid");
    let store = store(&server.url(), &p, "timeout = \"500ms\"");
    let engine = toolgate_redis::engine(policy, &store)
        .await
        .expect("connect");
    admit_and_drop_three_each(&engine).await;
    let c = engine.admit_now(&Call::new("c")).await.expect("c");
    let keys = server.keys(&p);
    assert_eq!(keys.len(), 4, "{keys:?}");
    for k in &keys {
        let ttl: i64 = server.cmd(&["PTTL", k]);
        // 3 requests at 10/s: 300 ms; 600 tokens at 1000/s: 600 ms; window: 300 ms;
        // the lease: 60 s.
        let max = if k.contains("concurrency") {
            60_002
        } else {
            602
        };
        assert!(ttl > 0 && ttl <= max, "{k}: PTTL {ttl}");
    }
    // A completed lease removes its key at once (the release runs in the background).
    c.complete(Completion::success());
    let t0 = std::time::Instant::now();
    while server.keys(&p).len() > 3 && t0.elapsed() < Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(server.keys(&p).len(), 3);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(server.keys(&p), Vec::<String>::new());
}

/// Three calls each of `b` (200 tokens) and `s` (tenant `acme`), each dropped at once.
async fn admit_and_drop_three_each(engine: &Engine) {
    for _ in 0..3 {
        drop(
            engine
                .admit_now(&Call::new("b").tokens(200))
                .await
                .expect("b"),
        );
        drop(
            engine
                .admit_now(&Call::new("s").tenant("acme"))
                .await
                .expect("s"),
        );
    }
}
