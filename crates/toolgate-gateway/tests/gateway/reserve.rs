//! All-or-nothing reservations.

use serde_json::json;

use crate::support::{eventually, start, Res, Server, SOON};

const PLAN: &str = r#"
[tools.search]
rate = "5/min"
burst = 5

[tools.pay]
rate = "1/min"
burst = 1

[tools.slot]
concurrency = 2
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_that_does_not_fit_consumes_nothing() {
    let s = start(PLAN).await;
    let no = s
        .post(
            "/v1/reserve",
            json!({"calls": [{"tool": "search", "count": 2}, {"tool": "pay", "count": 2}]}),
        )
        .await;
    assert_eq!(no.status, 429, "{no:?}");
    assert_eq!(no.body["quota"], "tools.pay.rate");
    assert_eq!(no.body["reason"], "cost_exceeds_capacity");
    assert_eq!(
        s.tool("search").quotas[0].available,
        Some(5),
        "nothing consumed"
    );

    let ok = s
        .post(
            "/v1/reserve",
            json!({"calls": [{"tool": "search", "count": 2}, {"tool": "pay", "count": 1}]}),
        )
        .await;
    assert_eq!(ok.status, 200, "{ok:?}");
    assert_eq!(ok.body["leases"].as_array().map(Vec::len), Some(3));
    assert_eq!(ok.body["calls"][1]["tool"], "pay");
    assert_eq!(s.tool("search").quotas[0].available, Some(3));

    // pay is spent now: the next plan fails on it, and search keeps its 3.
    let no = s
        .post(
            "/v1/reserve",
            json!({"calls": [{"tool": "search", "count": 1}, {"tool": "pay"}]}),
        )
        .await;
    assert_eq!(no.status, 429);
    assert_eq!(no.body["quota"], "tools.pay.rate");
    assert_eq!(no.body["reason"], "rate_limited");
    assert!(no.headers.contains_key("retry-after"));
    assert_eq!(s.tool("search").quotas[0].available, Some(3));

    // Each lease completes on its own.
    let lease = ok.body["leases"][0].as_str().expect("lease");
    let done = s
        .post(
            &format!("/v1/leases/{lease}/complete"),
            json!({"outcome": "success"}),
        )
        .await;
    assert_eq!(done.status, 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unused_parts_are_returned_on_release_and_on_expiry() {
    let s = start(PLAN).await;
    let ok = reserve_both_slots(&s).await;
    assert_eq!(s.admit("slot").await.status, 429);
    let id = ok.body["reservation"].as_str().expect("id");
    let lease = ok.body["leases"][0].as_str().expect("lease");
    let used = s
        .post(
            &format!("/v1/leases/{lease}/complete"),
            json!({"outcome": "success"}),
        )
        .await;
    assert_eq!(used.status, 204);
    let rel = s.release(id).await;
    assert_eq!(rel.status, 200, "{rel:?}");
    assert_eq!(rel.body["released"], 1, "only the unused lease");
    assert_eq!(s.tool("slot").in_flight, 0);
    let gone = s.release(id).await;
    assert_eq!(gone.status, 404);

    let short = s
        .post(
            "/v1/reserve",
            json!({"calls": [{"tool": "slot", "count": 2}], "ttl_ms": 200}),
        )
        .await;
    assert_eq!(short.status, 200);
    assert_eq!(short.body["expires_in_ms"], 200);
    assert_eq!(s.tool("slot").in_flight, 2);
    eventually("the reservation expires", SOON, || async {
        s.tool("slot").in_flight == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_and_expired_parts_give_their_rate_and_tokens_back() {
    let s = start("[tools.r]\nrate = \"3/h\"\ntokens = \"1000/h\"").await;
    let ok = s
        .post("/v1/reserve", json!({"calls": [{"tool": "r", "count": 3}]}))
        .await;
    assert_eq!(ok.status, 200);
    assert_eq!(s.tool("r").quotas[0].available, Some(0));
    let lease = ok.body["leases"][0].as_str().expect("lease");
    let used = s
        .post(
            &format!("/v1/leases/{lease}/complete"),
            json!({"outcome": "success"}),
        )
        .await;
    assert_eq!(used.status, 204);
    let id = ok.body["reservation"].as_str().expect("id");
    let rel = s.release(id).await;
    assert_eq!(rel.body["released"], 2);
    assert_eq!(
        s.tool("r").quotas[0].available,
        Some(2),
        "the unused two came back"
    );

    let short = s
        .post(
            "/v1/reserve",
            json!({"calls": [{"tool": "r", "count": 2}], "ttl_ms": 200}),
        )
        .await;
    assert_eq!(short.status, 200);
    assert_eq!(s.tool("r").quotas[0].available, Some(0));
    eventually(
        "the reservation expires and gives its rate back",
        SOON,
        || async { s.tool("r").quotas[0].available == Some(2) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_is_released_only_by_its_whole_id() {
    // Without auth there is no tenant to check: the id's random half is what keeps
    // one client from releasing another's reservation by counting.
    let s = start(PLAN).await;
    let ok = reserve_both_slots(&s).await;
    let id = ok.body["reservation"].as_str().expect("id").to_string();
    let guessed = format!("{}{}", &id[..16], "0".repeat(16));
    assert_ne!(guessed, id);
    let wrong = s.release(&guessed).await;
    assert_eq!(wrong.status, 404, "{wrong:?}");
    assert_eq!(s.tool("slot").in_flight, 2, "nothing released");
    let rel = s.release(&id).await;
    assert_eq!(rel.body["released"], 2, "{rel:?}");
    assert_eq!(s.tool("slot").in_flight, 0);
}

/// Reserves both of `slot`'s concurrency slots (a 200, checked).
async fn reserve_both_slots(s: &Server) -> Res {
    let ok = s
        .post(
            "/v1/reserve",
            json!({"calls": [{"tool": "slot", "count": 2}]}),
        )
        .await;
    assert_eq!(ok.status, 200, "{ok:?}");
    ok
}
