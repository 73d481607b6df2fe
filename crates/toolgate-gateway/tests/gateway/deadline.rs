//! `priority` and `deadline` over HTTP, on the real clock with generous tolerances: a
//! call admitted too late to finish by its deadline (the tool's observed p90 latency
//! after its predicted admission) is refused at once; one with room waits and is
//! admitted; malformed or unbounded values are 400s naming the field.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::support::{start, Server};

/// One call a second, three at once: after the burst the next call is about a
/// second away.
const SLOW: &str = r#"
[tools.slow]
rate = "1/s"
burst = 3
on_limit = "wait"
max_wait = "5s"
"#;

/// Unix milliseconds `d` from now.
fn in_ms(d: Duration) -> Value {
    let at = SystemTime::now() + d;
    json!(u64::try_from(at.duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap())
}

/// Spends the burst on three calls that report 400 ms of latency each.
async fn observe_400ms(s: &Server) {
    for _ in 0..3 {
        let r = s.admit("slow").await;
        assert_eq!(r.status, 200, "{r:?}");
        let lease = r.body["lease"].as_str().unwrap().to_string();
        let done = s
            .post(
                &format!("/v1/leases/{lease}/complete"),
                json!({"outcome": "success", "latency_ms": 400}),
            )
            .await;
        assert_eq!(done.status, 204, "{done:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_too_soon_for_the_p90_is_refused_at_once_and_one_with_room_waits() {
    let s = start(SLOW).await;
    observe_400ms(&s).await;
    // Admitted in about 1 s, it needs 400 ms more: a deadline 1.2 s away is too soon.
    let t = Instant::now();
    let r = s
        .post(
            "/v1/admit",
            json!({"tool": "slow", "deadline": in_ms(Duration::from_millis(1200)), "priority": "interactive"}),
        )
        .await;
    let took = t.elapsed();
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.body["reason"], "max_wait_exceeded");
    assert_eq!(r.body["quota"], "deadline");
    assert!(
        took < Duration::from_millis(700),
        "refused at once, not after a wait: {took:?}"
    );
    // An RFC 3339 deadline 4 s away leaves room: it waits its turn and is admitted.
    let at = humantime::format_rfc3339_millis(SystemTime::now() + Duration::from_secs(4));
    let t = Instant::now();
    let r = s
        .post(
            "/v1/admit",
            json!({"tool": "slow", "deadline": at.to_string()}),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let waited = r.body["waited_ms"].as_u64().unwrap();
    assert!(waited >= 500, "it waited for the quota: {waited} ms");
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_past_deadline_is_refused_at_once_on_admit_reserve_and_invoke() {
    let s = start(SLOW).await;
    let past = json!(1_000);
    let r = s
        .post("/v1/admit", json!({"tool": "slow", "deadline": past}))
        .await;
    assert_eq!(
        (r.status, &r.body["quota"]),
        (429, &json!("deadline")),
        "{r:?}"
    );
    let r = s
        .post(
            "/v1/reserve",
            json!({"calls": [{"tool": "slow"}, {"tool": "slow", "deadline": past, "priority": "batch"}]}),
        )
        .await;
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.body["reason"], "max_wait_exceeded");
    assert_eq!(r.body["quota"], "deadline");
    // Nothing was charged: the whole burst is still there.
    assert_eq!(s.tool("slow").quotas[0].available, Some(3));
    // Without a deadline, the same calls are admitted as before.
    let r = s
        .post(
            "/v1/reserve",
            json!({"calls": [{"tool": "slow", "count": 2}]}),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = s
        .post("/v1/admit", json!({"tool": "slow", "priority": "default"}))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_priorities_and_unreadable_or_far_deadlines_are_400s_naming_the_field() {
    let s = start(SLOW).await;
    let far = in_ms(Duration::from_secs(2 * 24 * 60 * 60));
    let cases = [
        (
            "/v1/admit",
            json!({"tool": "slow", "priority": "urgent"}),
            "priority",
        ),
        (
            "/v1/admit",
            json!({"tool": "slow", "deadline": "tomorrow"}),
            "deadline",
        ),
        (
            "/v1/admit",
            json!({"tool": "slow", "deadline": -5}),
            "deadline",
        ),
        (
            "/v1/admit",
            json!({"tool": "slow", "deadline": far}),
            "deadline",
        ),
        (
            "/v1/reserve",
            json!({"calls": [{"tool": "slow"}, {"tool": "slow", "priority": "high"}]}),
            "calls[1].priority",
        ),
        (
            "/v1/reserve",
            json!({"calls": [{"tool": "slow", "deadline": {"at": 1}}]}),
            "calls[0].deadline",
        ),
        (
            "/v1/tools/slow/invoke",
            json!({"arguments": {}, "priority": "now"}),
            "priority",
        ),
        (
            "/v1/tools/slow/invoke",
            json!({"arguments": {}, "deadline": far}),
            "deadline",
        ),
    ];
    for (path, body, field) in cases {
        let r = s.post(path, body.clone()).await;
        assert_eq!(r.status, 400, "{path} {body}: {r:?}");
        assert_eq!(r.body["error"]["code"], "invalid_request", "{r:?}");
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("{field}: ")),
            "{path} {body}: {message}"
        );
    }
    assert_eq!(
        s.tool("slow").quotas[0].available,
        Some(3),
        "nothing charged"
    );
}
