//! Broker and upstream faults: nothing is lost, and a broken tool is not hammered.

use std::time::Duration;

use serde_json::json;

use crate::support::{call, rig, Answer};

/// nats-server killed and restarted on the same store mid-run: every call gets
/// its result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restart_loses_no_call() {
    let mut r = rig("[tools.t]\nrate = \"20/s\"\nburst = 1\n", &["t"]).await;
    for i in 0..40 {
        r.publish(&call(&format!("c{i}"), "t", json!({}))).await;
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    r.nats.restart();
    crate::support::wait_ready(&r.mesh).await;
    let caller = toolgate_mesh::client::Caller::connect(&r.config, None)
        .await
        .expect("caller");
    for i in 0..40 {
        let res = caller
            .result(&format!("c{i}"), Duration::from_secs(20))
            .await
            .expect("a result after the restart");
        assert_eq!(res.outcome, "success", "{res:?}");
    }
}

/// A breaker that opens: calls are handed back (not run into the failing
/// upstream) and complete after it recovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_breaker_delays_calls_until_the_upstream_recovers() {
    let r = rig(
        "[tools.t]\nidempotent = true\n[tools.t.circuit]\nmin_calls = 2\nfailure_rate = 0.5\n\
         open_for = \"1s\"\nhalf_open_probes = 1\nclose_after = 1\n",
        &["t"],
    )
    .await;
    r.upstream
        .answers
        .lock()
        .insert("t".into(), Answer::Unavailable);
    r.publish(&call("b0", "t", json!({"idempotency_key": "b0"})))
        .await;
    r.publish(&call("b1", "t", json!({"idempotency_key": "b1"})))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = r.upstream.hits_of("t").len();
    for i in 2..6 {
        r.publish(&call(&format!("b{i}"), "t", json!({}))).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        r.upstream.hits_of("t").len(),
        before,
        "calls ran into an open circuit"
    );
    r.upstream.answers.lock().insert("t".into(), Answer::Ok);
    for i in 2..6 {
        let res = r.result(&format!("b{i}")).await;
        assert_eq!(res.outcome, "success", "{res:?}");
    }
}
