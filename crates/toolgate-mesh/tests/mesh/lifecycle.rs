//! Starting and stopping a mesh.

use std::time::{Duration, Instant};

use serde_json::json;
use toolgate::{Engine, Policy};
use toolgate_mesh::Mesh;

use crate::support::{call, config, wait_ready, Upstream};

/// A shutdown sent before the mesh's task first ran (a current-thread runtime
/// runs it only when the caller yields) still stops it, within the grace.
#[tokio::test(flavor = "current_thread")]
async fn a_mesh_shut_down_right_after_it_starts_stops_at_once() {
    let _turn = crate::support::turn().await;
    let nats = toolgate_mesh::testing::NatsServer::start();
    let engine = Engine::new(Policy::from_toml_str("[tools.t]\n").expect("policy"));
    let up = Upstream::new(engine.clone(), &["t"]);
    let mesh = Mesh::start(config(&nats.url()), None, engine, up)
        .await
        .expect("mesh");
    let t = Instant::now();
    mesh.shutdown(Duration::from_secs(5)).await;
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t.elapsed()
    );
}

/// Calls published while no gateway ran are all answered by the next one, at once
/// (none is left in a pull of the gateway before it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_published_between_two_meshes_are_all_answered_by_the_second() {
    let _turn = crate::support::turn().await;
    let nats = toolgate_mesh::testing::NatsServer::start();
    let mut cfg = config(&nats.url());
    cfg.ack_wait = Duration::from_secs(30);
    let engine = Engine::new(Policy::from_toml_str("[tools.t]\n").expect("policy"));
    let up = Upstream::new(engine.clone(), &["t"]);
    let first = Mesh::start(cfg.clone(), None, engine.clone(), up.clone())
        .await
        .expect("mesh");
    wait_ready(&first).await;
    first.shutdown(Duration::from_secs(5)).await;
    let caller = toolgate_mesh::client::Caller::connect(&cfg, None)
        .await
        .expect("caller");
    for i in 0..100 {
        caller
            .publish(&call(&format!("r{i}"), "t", json!({})))
            .await
            .expect("publish");
    }
    let second = Mesh::start(cfg, None, engine, up).await.expect("mesh");
    wait_ready(&second).await;
    for i in 0..100 {
        let r = caller
            .result(&format!("r{i}"), Duration::from_secs(5))
            .await;
        assert!(r.is_ok(), "r{i}: {r:?} (within 5 s, well before ack_wait)");
    }
}
