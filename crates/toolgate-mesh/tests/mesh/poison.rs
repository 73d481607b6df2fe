//! Calls that cannot succeed land in the dead-letter stream with their reason,
//! and the stream keeps flowing.

use std::time::Duration;

use serde_json::json;
use toolgate_mesh::client::Outgoing;

use crate::support::{call, rig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_calls_are_dead_letters_with_their_reason_while_good_calls_flow() {
    let r = rig(
        "unknown_tools = \"deny\"\n[tools.t]\nrate = \"100/s\"\n",
        &["t"],
    )
    .await;
    let raw = |tool: &str, body: serde_json::Value| Outgoing {
        call_id: format!("raw-{tool}-{}", body),
        tool: tool.to_string(),
        envelope: body,
    };
    // Not JSON at all, published raw; and JSON that is not a call.
    let client = async_nats::connect(r.nats.url()).await.expect("connect");
    let js = async_nats::jetstream::new(client);
    js.publish("toolgate.calls.t", "{not json".into())
        .await
        .expect("publish")
        .await
        .expect("stored");
    r.publish(&raw("t", json!("not a call"))).await;
    r.publish(&call("unknown-1", "nope", json!({}))).await;
    r.publish(&call(
        "badargs-1",
        "t",
        json!({"arguments": {"invalid": true}}),
    ))
    .await;
    r.publish(&call("late-1", "t", json!({"deadline": 1_000})))
        .await;
    r.publish(&call("good-1", "t", json!({}))).await;
    assert_eq!(r.result("good-1").await.outcome, "success");
    assert_eq!(r.result("unknown-1").await.outcome, "rejected");
    assert_eq!(r.result("badargs-1").await.outcome, "invalid_arguments");
    assert_eq!(r.result("late-1").await.outcome, "deadline_exceeded");
    // The unknown tool is found by the drain, every 2 s.
    let mut reasons = Vec::new();
    for _ in 0..100 {
        reasons = r.dead_letters().await.into_iter().map(|(h, _)| h).collect();
        if reasons.len() >= 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    reasons.sort();
    assert_eq!(
        reasons,
        [
            "deadline_exceeded",
            "invalid_arguments",
            "invalid_envelope",
            "invalid_envelope",
            "unknown_tool"
        ]
    );
    let letters = r.dead_letters().await;
    let unknown = letters
        .iter()
        .find(|(h, _)| h == "unknown_tool")
        .map(|(_, b)| b.clone());
    let unknown = unknown.expect("an unknown_tool letter");
    assert_eq!(unknown["call_id"], "unknown-1");
    assert!(
        unknown["message"]
            .as_str()
            .is_some_and(|m| m.contains("\"nope\"")),
        "{unknown}"
    );
    assert_eq!(r.upstream.hits_of("t").len(), 1, "only the good call ran");
}
