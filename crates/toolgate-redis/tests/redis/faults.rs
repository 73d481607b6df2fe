//! Faults: Redis killed and restarted, Redis hung (SIGSTOP). In every
//! `on_store_error` mode: the mode's documented decision, no call past the timeout,
//! admission back on Redis within 1 s of the restart, and no quota left over-charged.

use std::time::{Duration, Instant};

use toolgate::{Call, Completion, Engine, Permit, Policy, Reason, Rejection};
use toolgate_redis::{Builder, Source};

use crate::support::{prefix, redis_available, store, RedisServer, HEAVY};

const TIMEOUT: Duration = Duration::from_millis(50);
/// Scheduling slack on a shared 2-core machine.
const SLACK: Duration = Duration::from_millis(75);
const LEASE_TTL: Duration = Duration::from_millis(1500);
/// Long enough for a release in the background to land (at most `TIMEOUT`).
const SETTLE: Duration = Duration::from_millis(100);
const POLICY: &str =
    "[tools.t]\nrate = \"100/s\"\nburst = 10\nconcurrency = 4\n[tools.warm]\nrate = \"1000/s\"";

/// An engine on `server` in `on_store_error` mode `mode`, once it reached Redis.
async fn engine(server: &RedisServer, mode: &str) -> Engine {
    let extra = format!("on_store_error = {mode:?}\nlocal_share = 0.5\ntimeout = \"50ms\"");
    let store = store(&server.url(), &prefix(&format!("faults-{mode}")), &extra);
    let engine = Builder::new(Policy::from_toml_str(POLICY).expect("valid"), store)
        .lease_ttl(LEASE_TTL)
        .engine()
        .await
        .expect("connect");
    // Connect and load the script before anything is timed.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(3) {
        match engine.admit_now(&Call::new("warm")).await {
            Ok(p) if Source::of(&p) == Some(Source::Redis) => return engine,
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    panic!("the engine never reached Redis");
}

/// One call, which must not take longer than the timeout.
async fn timed(engine: &Engine) -> Result<Permit, Rejection> {
    let t0 = Instant::now();
    let r = engine.admit_now(&Call::new("t")).await;
    let took = t0.elapsed();
    assert!(took <= TIMEOUT + SLACK, "a call took {took:?}");
    r
}

/// Checks the mode's decision while Redis is unavailable; returns calls admitted.
fn check_degraded(mode: &str, r: Result<Permit, Rejection>) -> u64 {
    match (mode, r) {
        ("fail_closed", Err(no)) => {
            assert_eq!((no.reason(), no.quota()), (Reason::CircuitOpen, "store"));
            assert!(no.is_store_unavailable());
            0
        }
        ("fail_open", Ok(p)) => {
            assert_eq!(Source::of(&p), Some(Source::Unaccounted));
            1
        }
        ("local", Ok(p)) => {
            assert_eq!(Source::of(&p), Some(Source::Local));
            1
        }
        ("local", Err(no)) => {
            assert_eq!(no.quota(), "tools.t.rate", "the local share says no");
            0
        }
        (mode, other) => panic!("{mode}: unexpected {other:?}"),
    }
}

/// Waits until a call is decided by Redis again; returns how long that took.
async fn recovery(engine: &Engine) -> Duration {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(3) {
        match timed(engine).await {
            Ok(p) if Source::of(&p) == Some(Source::Redis) => {
                let took = t0.elapsed();
                // Release it before returning: the release runs in the background
                // and would race the caller's next check.
                p.complete(Completion::success());
                tokio::time::sleep(SETTLE).await;
                return took;
            }
            Err(no) if no.quota() != "store" && no.quota() != "tools.t.rate" => {
                return t0.elapsed()
            }
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    panic!("admission did not come back to Redis within 3 s");
}

async fn killed_and_restarted(mode: &str) {
    let mut server = RedisServer::start();
    let engine = engine(&server, mode).await;
    let held = timed(&engine).await.expect("healthy");
    assert_eq!(Source::of(&held), Some(Source::Redis));
    server.kill();
    let t0 = Instant::now();
    let mut admitted = 0;
    for _ in 0..30 {
        admitted += check_degraded(mode, timed(&engine).await);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let down_for = t0.elapsed().as_secs_f64();
    if mode == "local" {
        // Half the quota: burst 5, 50/s.
        let max = 5.0 + 50.0 * down_for;
        assert!(
            admitted >= 5 && f64::from(u32::try_from(admitted).unwrap_or(0)) <= max,
            "{admitted} > {max}"
        );
    }
    // Completing never waits for Redis: the release (which fails: Redis is down) runs
    // in the background, bounded by the timeout.
    let t0 = Instant::now();
    held.complete(Completion::success());
    assert!(t0.elapsed() <= TIMEOUT + SLACK);
    server.restart();
    let took = recovery(&engine).await;
    assert!(took <= Duration::from_secs(1), "recovered after {took:?}");
    // Nothing left over-charged: the full burst and every concurrency slot.
    let permits = full_capacity(&engine).await;
    assert_eq!(permits.len(), 4);
}

/// Admits as many as the quota allows now, from Redis.
async fn full_capacity(engine: &Engine) -> Vec<Permit> {
    let mut permits = Vec::new();
    while let Ok(p) = engine.admit_now(&Call::new("t")).await {
        assert_eq!(Source::of(&p), Some(Source::Redis));
        permits.push(p);
    }
    permits
}

async fn hung_and_resumed(mode: &str) {
    let server = RedisServer::start();
    let engine = engine(&server, mode).await;
    let held = full_capacity(&engine).await;
    assert_eq!(held.len(), 4);
    server.pause(true);
    for _ in 0..10 {
        check_degraded(mode, timed(&engine).await);
    }
    for p in held {
        let t0 = Instant::now();
        p.complete(Completion::success());
        assert!(t0.elapsed() <= TIMEOUT + SLACK);
    }
    server.pause(false);
    let took = recovery(&engine).await;
    assert!(took <= Duration::from_secs(1), "recovered after {took:?}");
    // Whatever the hang left behind (releases lost, timed-out admissions applied
    // late) is gone once the leases' TTL has passed.
    tokio::time::sleep(LEASE_TTL).await;
    assert_eq!(full_capacity(&engine).await.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_closed_rejects_while_redis_is_down() {
    if redis_available() {
        let _heavy = HEAVY.lock().await;
        killed_and_restarted("fail_closed").await;
        hung_and_resumed("fail_closed").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_open_admits_while_redis_is_down() {
    if redis_available() {
        let _heavy = HEAVY.lock().await;
        killed_and_restarted("fail_open").await;
        hung_and_resumed("fail_open").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_uses_its_share_while_redis_is_down() {
    if redis_available() {
        let _heavy = HEAVY.lock().await;
        killed_and_restarted("local").await;
        hung_and_resumed("local").await;
    }
}

/// While Redis is down, `local` decides in an in-process engine; each decision is
/// still counted once (by the engine on the store), not a second time by that
/// fallback engine.
#[test]
fn the_local_fallback_counts_each_decision_once() {
    if !redis_available() {
        return;
    }
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let admitted = metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let mut server = RedisServer::start();
            let engine = engine(&server, "local").await;
            server.kill();
            let mut admitted = 0;
            for _ in 0..3 {
                let p = timed(&engine).await.expect("the local share admits");
                assert_eq!(Source::of(&p), Some(Source::Local));
                admitted += 1;
                drop(p);
            }
            admitted
        })
    });
    let counted: u64 = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, _, _, _)| {
            let key = key.key();
            key.name() == "toolgate_admissions_total"
                && key.labels().any(|l| l.key() == "tool" && l.value() == "t")
                && key
                    .labels()
                    .any(|l| l.key() == "decision" && l.value() == "admitted")
        })
        .map(|(_, _, _, value)| match value {
            metrics_util::debugging::DebugValue::Counter(n) => n,
            _ => 0,
        })
        .sum();
    assert_eq!(counted, admitted);
}

/// Runs `f` on a current-thread runtime with a recorder of its own, and returns its
/// result with the `toolgate_store_errors_total` counts by `(op, kind)`.
fn counting_store_errors<T>(
    f: impl std::future::Future<Output = T>,
) -> (T, std::collections::BTreeMap<(String, String), u64>) {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let out = metrics::with_local_recorder(&recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(f)
    });
    let mut errors = std::collections::BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let label = |name: &str| {
            key.labels()
                .find(|l| l.key() == name)
                .map_or(String::new(), |l| l.value().to_string())
        };
        if let (true, metrics_util::debugging::DebugValue::Counter(n)) =
            (key.name() == "toolgate_store_errors_total", value)
        {
            *errors.entry((label("op"), label("kind"))).or_insert(0) += n;
        }
    }
    (out, errors)
}

/// Issue #13, item 11: a Redis that stops answering is counted as
/// `toolgate_store_errors_total{kind="timeout"}` on every path that waits for it
/// (admission, release — which also carries token reconciliations — and the probe's
/// ping), never as `kind="redis"`, whichever timer noticed first (the store's, or the
/// client's own response timeout of the same length).
#[test]
fn a_hung_redis_is_counted_as_timeouts_on_every_path() {
    if !redis_available() {
        return;
    }
    let ((), errors) = counting_store_errors(async {
        let server = RedisServer::start();
        let engine = engine(&server, "fail_closed").await;
        let held = timed(&engine).await.expect("healthy");
        server.pause(true);
        assert!(timed(&engine).await.is_err(), "fail_closed while hung");
        // The release runs in the background and times out.
        held.complete(Completion::success());
        // The probe pings every 100 ms while the store is down.
        tokio::time::sleep(Duration::from_millis(350)).await;
        server.pause(false);
    });
    let of = |op: &str, kind: &str| {
        errors
            .get(&(op.to_string(), kind.to_string()))
            .copied()
            .unwrap_or(0)
    };
    for op in ["admit", "release", "ping"] {
        assert!(of(op, "timeout") >= 1, "{op}: {errors:?}");
    }
    assert!(
        errors.keys().all(|(_, kind)| kind == "timeout"),
        "{errors:?}"
    );
}

/// Reads of what quotas have left behind a hung Redis are each counted as a peek
/// timeout: the two in flight, which Redis never answers, and the two given up while
/// waiting their turn, which are never sent.
#[test]
fn reads_of_quota_levels_behind_a_hung_redis_are_counted_as_timeouts() {
    if !redis_available() {
        return;
    }
    let ((), errors) = counting_store_errors(async {
        let server = RedisServer::start();
        let engine = engine(&server, "fail_closed").await;
        let warm = engine.fetch_tool_state("t", None).await.expect("a state");
        assert!(warm.quotas[0].available.is_some(), "{warm:?}");
        server.pause(true);
        let reads = (0..4).map(|_| engine.fetch_tool_state("t", None));
        for s in futures_util::future::join_all(reads).await {
            let s = s.expect("a state");
            assert_eq!(s.quotas[0].available, None, "no figure from a hung server");
        }
        server.pause(false);
    });
    assert_eq!(
        errors.into_iter().collect::<Vec<_>>(),
        [(("peek".to_string(), "timeout".to_string()), 4)]
    );
}

/// Issue #13, item 11: connecting to a cluster node that does not answer fails as a
/// time-out (the cluster client keeps the cause as text only), and is counted as one.
#[test]
fn connecting_to_a_hung_cluster_is_a_counted_timeout() {
    if !redis_available() {
        return;
    }
    let (err, errors) = counting_store_errors(async {
        let server = RedisServer::start();
        server.pause(true);
        let url = format!("{}?cluster=true", server.url());
        let store = store(&url, &prefix("hung-connect"), "timeout = \"50ms\"");
        let policy = Policy::from_toml_str(POLICY).expect("valid");
        let r = toolgate_redis::engine(policy, &store).await;
        server.pause(false);
        r.expect_err("no answer")
    });
    assert_eq!(err.kind(), "timeout", "{err}");
    assert_eq!(
        errors.into_iter().collect::<Vec<_>>(),
        [(("connect".to_string(), "timeout".to_string()), 1)]
    );
}
