//! Lanes (`Builder::lanes`): each single-threaded runtime the engine is called from
//! gets a connection and a coalescer of its own, and every lane obeys the one quota
//! kept in Redis, before and after a reload.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use toolgate::config::Config;
use toolgate::{Call, Engine, Policy};
use toolgate_redis::Source;

use crate::support::{prefix, redis_available, store, RedisServer, HEAVY};

/// A single-threaded runtime on a thread of its own, stopped when dropped.
struct Core {
    handle: Handle,
    _stop: oneshot::Sender<()>,
}

fn core() -> Core {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (stop, stopped) = oneshot::channel::<()>();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        ready_tx.send(rt.handle().clone()).expect("the test waits");
        rt.block_on(async {
            let _ = stopped.await;
        });
    });
    Core {
        handle: ready_rx.recv().expect("the runtime started"),
        _stop: stop,
    }
}

/// Redis' count of connected clients.
fn clients(server: &RedisServer) -> u64 {
    let info: String = server.cmd(&["INFO", "clients"]);
    info.lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("connected_clients in INFO clients")
}

fn policy(toml: &str) -> Policy {
    Policy::new(Config::from_toml_str(toml).expect("valid config")).expect("valid policy")
}

/// `n` concurrent calls from each core and from the test's own runtime; how many were
/// admitted.
async fn admit_everywhere(
    engine: &Arc<Engine>,
    cores: &[Core],
    tool: &'static str,
    n: usize,
) -> usize {
    let mut tasks = Vec::new();
    for c in cores {
        for _ in 0..n {
            let e = engine.clone();
            tasks.push(
                c.handle
                    .spawn(async move { e.admit_now(&Call::new(tool)).await.is_ok() }),
            );
        }
    }
    for _ in 0..n {
        let e = engine.clone();
        tasks.push(tokio::spawn(async move {
            e.admit_now(&Call::new(tool)).await.is_ok()
        }));
    }
    join_all(tasks)
        .await
        .into_iter()
        .map(|r| usize::from(r.expect("a call's task")))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_lane_connects_on_its_own_and_all_lanes_share_one_quota() {
    if !redis_available() {
        return;
    }
    let server = RedisServer::start();
    let cores = [core(), core()];
    let before = clients(&server);
    let cfg = store(&server.url(), &prefix("lanes"), "timeout = \"2s\"\n");
    let engine = toolgate_redis::Builder::new(policy("[tools.t]\nrate = \"30/m\"\n"), cfg)
        .lanes(cores.iter().map(|c| c.handle.clone()).collect())
        .engine()
        .await
        .expect("an engine");
    let engine = Arc::new(engine);
    // 60 calls on a quota of 30 a minute, from two lanes and the engine's own
    // runtime at once: exactly 30 admitted (one bucket in Redis, whatever the lane).
    assert_eq!(admit_everywhere(&engine, &cores, "t", 20).await, 30);
    // A connection of each lane's and the engine's own.
    assert_eq!(clients(&server) - before, 3);

    // A reload (a tool added) keeps every lane on its connection: the quota left as
    // it was, the new one shared as well.
    engine
        .try_apply(policy(
            "[tools.t]\nrate = \"30/m\"\n[tools.u]\nrate = \"10/m\"\n",
        ))
        .expect("the store runs the new policy");
    assert_eq!(admit_everywhere(&engine, &cores, "t", 5).await, 0);
    assert_eq!(admit_everywhere(&engine, &cores, "u", 20).await, 10);
    assert_eq!(clients(&server) - before, 3);
}

/// Where a call from `core` was decided, and how long it took.
async fn source_from(engine: &Arc<Engine>, core: &Core) -> (Option<Source>, Duration) {
    let e = engine.clone();
    core.handle
        .spawn(async move {
            let t0 = Instant::now();
            let source = e
                .admit_now(&Call::new("t"))
                .await
                .ok()
                .and_then(|p| Source::of(&p));
            (source, t0.elapsed())
        })
        .await
        .expect("a call's task")
}

/// A lane's connection breaks with Redis and comes back with it: while Redis is down,
/// a lane's calls take the `on_store_error` path within the timeout; after the
/// restart they are decided by Redis again within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_follows_on_store_error_while_redis_is_down_and_comes_back_with_it() {
    if !redis_available() {
        return;
    }
    let _heavy = HEAVY.lock().await;
    let mut server = RedisServer::start();
    let lane = core();
    let extra = "on_store_error = \"local\"\nlocal_share = 0.5\ntimeout = \"50ms\"\n";
    let cfg = store(&server.url(), &prefix("lane-faults"), extra);
    let engine = toolgate_redis::Builder::new(policy("[tools.t]\nrate = \"1000/s\"\n"), cfg)
        .lanes(vec![lane.handle.clone()])
        .engine()
        .await
        .expect("an engine");
    let engine = Arc::new(engine);
    let until_redis = |limit: Duration| {
        let (engine, lane) = (&engine, &lane);
        async move {
            let t0 = Instant::now();
            while t0.elapsed() < limit {
                if source_from(engine, lane).await.0 == Some(Source::Redis) {
                    return Some(t0.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            None
        }
    };
    until_redis(Duration::from_secs(3))
        .await
        .expect("the lane reached Redis");
    server.kill();
    for _ in 0..10 {
        let (source, took) = source_from(&engine, &lane).await;
        assert_eq!(source, Some(Source::Local));
        assert!(took <= Duration::from_millis(125), "a call took {took:?}");
    }
    server.restart();
    let back = until_redis(Duration::from_secs(3))
        .await
        .expect("the lane came back to Redis");
    assert!(back <= Duration::from_secs(1), "back after {back:?}");
}

/// A runtime that nothing drives gets no lane: the engine starts all the same (after
/// waiting a bounded time for all of them at once, not for each in turn: three
/// waited for one after another would take 15 s), and calls use the engine's own
/// connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_that_nothing_drives_gets_no_lane() {
    if !redis_available() {
        return;
    }
    let server = RedisServer::start();
    let idle: Vec<_> = (0..3)
        .map(|_| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime")
        })
        .collect();
    let before = clients(&server);
    let cfg = store(&server.url(), &prefix("lanes-idle"), "timeout = \"2s\"\n");
    let t0 = Instant::now();
    let engine = toolgate_redis::Builder::new(policy("[tools.t]\nrate = \"30/m\"\n"), cfg)
        .lanes(idle.iter().map(|rt| rt.handle().clone()).collect())
        .engine()
        .await
        .expect("an engine");
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    let engine = Arc::new(engine);
    assert_eq!(admit_everywhere(&engine, &[], "t", 40).await, 30);
    assert_eq!(clients(&server) - before, 1);
    // Not dropped in place: a runtime cannot be dropped inside another's task.
    idle.into_iter()
        .for_each(tokio::runtime::Runtime::shutdown_background);
}
