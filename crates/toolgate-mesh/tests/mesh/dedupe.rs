//! Publishing twice runs once; one idempotency key runs the upstream once.

use std::time::Duration;

use serde_json::json;

use crate::support::{call, rig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_msg_id_published_twice_runs_once() {
    let r = rig("[tools.t]\nrate = \"100/s\"\n", &["t"]).await;
    let c = call("dup-1", "t", json!({}));
    r.publish(&c).await;
    r.publish(&c).await;
    assert_eq!(r.result("dup-1").await.outcome, "success");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(r.upstream.hits_of("t").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_calls_with_one_key_run_the_upstream_once_and_both_get_the_result() {
    let r = rig("[tools.t]\nconcurrency = 4\n", &["t"]).await;
    *r.upstream.delay.lock() = Duration::from_millis(300);
    r.publish(&call("k-a", "t", json!({"idempotency_key": "order-42"})))
        .await;
    r.publish(&call("k-b", "t", json!({"idempotency_key": "order-42"})))
        .await;
    let (a, b) = (r.result("k-a").await, r.result("k-b").await);
    assert_eq!(
        (a.outcome.as_str(), b.outcome.as_str()),
        ("success", "success")
    );
    assert_eq!(a.result, b.result, "both get the one result");
    assert_eq!(b.call_id, "k-b");
    let hits = r.upstream.hits_of("t");
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].key.as_deref(), Some("order-42"));
}

/// A call that runs longer than `ack_wait` is kept by in-progress acknowledgements:
/// it is not delivered again (and so not run twice), and its consumer holds at most
/// the tool's `concurrency` calls unacknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_longer_than_ack_wait_runs_once_and_the_consumer_follows_concurrency() {
    let r = rig("[tools.t]\nconcurrency = 3\n", &["t"]).await;
    *r.upstream.delay.lock() = Duration::from_millis(2_500); // ack_wait is 2 s
    r.publish(&call("long-1", "t", json!({}))).await;
    assert_eq!(r.result("long-1").await.outcome, "success");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        r.upstream.hits_of("t").len(),
        1,
        "delivered again while it ran"
    );
    let client = async_nats::connect(r.nats.url()).await.expect("connect");
    let js = async_nats::jetstream::new(client);
    let mut consumer: async_nats::jetstream::consumer::PullConsumer = js
        .get_stream("TOOLGATE_CALLS")
        .await
        .expect("stream")
        .get_consumer(&toolgate_mesh::worker::consumer_name("t"))
        .await
        .expect("consumer");
    let info = consumer.info().await.expect("info");
    assert_eq!(info.config.max_ack_pending, 3);
    assert_eq!(info.num_redelivered, 0);
}
