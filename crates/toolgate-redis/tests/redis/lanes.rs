//! Lanes (`Builder::lanes`): each single-threaded runtime the engine is called from
//! gets a connection and a coalescer of its own, and every lane obeys the one quota
//! kept in Redis, before and after a reload.

use std::sync::Arc;

use futures_util::future::join_all;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use toolgate::config::Config;
use toolgate::{Call, Engine, Policy};

use crate::support::{prefix, redis_available, store, RedisServer};

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
