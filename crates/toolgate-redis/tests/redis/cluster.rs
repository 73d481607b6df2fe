//! A real 3-master Redis Cluster passes the semantic suite: every call's keys share
//! one hash slot, so the admission script runs atomically on one master.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::backend::RedisFactory;
use crate::support::{redis_available, RedisServer, HEAVY};

/// Three masters, slots spread by `redis-cli --cluster create`.
struct Cluster {
    nodes: Vec<RedisServer>,
}

impl Cluster {
    fn start() -> Self {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                RedisServer::start_with(
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        "2000",
                    ],
                    true,
                )
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli runs (package redis-tools)");
        assert!(
            out.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while !nodes.iter().all(|n| {
            n.cmd::<String>(&["CLUSTER", "INFO"])
                .contains("cluster_state:ok")
        }) {
            assert!(Instant::now() < deadline, "cluster never reached state ok");
            std::thread::sleep(Duration::from_millis(100));
        }
        Self { nodes }
    }

    fn url(&self) -> String {
        let urls: Vec<String> = self.nodes.iter().map(RedisServer::url).collect();
        urls.join(",")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_master_cluster_passes_the_semantic_suite() {
    if !redis_available() {
        return;
    }
    let _heavy = HEAVY.lock().await;
    let cluster = Cluster::start();
    let f = RedisFactory::new(cluster.url());
    crate::semantic::all(&f).await;
    // The suite's keys were spread over the masters (slot groups differ by tool).
    let with_keys = cluster
        .nodes
        .iter()
        .filter(|n| n.cmd::<i64>(&["DBSIZE"]) > 0)
        .count();
    assert!(with_keys >= 2, "keys on {with_keys} master(s) only");
}
