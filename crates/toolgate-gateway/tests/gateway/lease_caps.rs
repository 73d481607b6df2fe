//! Issue #13, item 3: a reservation's TTL is capped, and so is the number of open
//! leases, per tenant and in all; a call over a cap is refused before admission.

use std::time::Duration;

use serde_json::json;
use toolgate_gateway::auth::hash_token;

use crate::support::{eventually, start, Res, Server, SOON};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_ttl_beyond_the_cap_is_refused_and_charges_nothing() {
    let s = start("[gateway]\nlease_ttl = \"60s\"\n[tools.slot]\nconcurrency = 3\n").await;
    let r = s
        .post(
            "/v1/reserve",
            json!({"calls": [{"tool": "slot", "count": 3}], "ttl_ms": u64::MAX}),
        )
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.body["error"]["code"], "invalid_request");
    assert_eq!(
        r.body["error"]["message"],
        "ttl_ms: 18446744073709551615 is longer than the cap of 60000 ms (lease_ttl, or \
         [gateway] max_reservation_ttl when that is larger)"
    );
    assert_eq!(s.tool("slot").in_flight, 0, "nothing admitted");
    assert!(s.state.leases().is_empty());
    let r = s
        .post(
            "/v1/reserve",
            json!({"calls": [{"tool": "slot"}], "ttl_ms": 60_001}),
        )
        .await;
    assert_eq!(r.status, 400, "one past the cap: {r:?}");
    let r = s
        .post(
            "/v1/reserve",
            json!({"calls": [{"tool": "slot"}], "ttl_ms": 60_000}),
        )
        .await;
    assert_eq!(r.status, 200, "at the cap: {r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_within_max_reservation_ttl_is_kept_and_expires() {
    let s = start(
        "[gateway]\nlease_ttl = \"100ms\"\nmax_reservation_ttl = \"2s\"\n\
         [tools.slot]\nconcurrency = 3\n",
    )
    .await;
    let r = s
        .post(
            "/v1/reserve",
            json!({"calls": [{"tool": "slot", "count": 2}], "ttl_ms": 1000}),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["expires_in_ms"], 1000);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        s.tool("slot").in_flight,
        2,
        "held past lease_ttl, for its own TTL"
    );
    eventually("the reservation expires", SOON, || async {
        s.tool("slot").in_flight == 0
    })
    .await;
    let r = s
        .post(
            "/v1/reserve",
            json!({"calls": [{"tool": "slot"}], "ttl_ms": 2001}),
        )
        .await;
    assert_eq!(r.status, 400, "past max_reservation_ttl: {r:?}");
}

fn capped_config() -> String {
    let token = |t: &str| {
        format!(
            "[[gateway.tokens]]\ntenant = \"{t}\"\nsha256 = \"{}\"\n",
            hash_token(&format!("{t}-secret"))
        )
    };
    format!(
        "[gateway]\nmax_leases = 3\nmax_leases_per_tenant = 2\n{}{}{}\
         [tools.t]\nrate = \"100/h\"\nburst = 100\n",
        token("a"),
        token("b"),
        token("c")
    )
}

async fn admit(s: &Server, tenant: &str) -> Res {
    s.post_as(
        &format!("{tenant}-secret"),
        "/v1/admit",
        json!({"tool": "t"}),
    )
    .await
}

fn too_many(r: &Res, cap: &str) {
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.body["error"]["code"], "too_many_leases", "{r:?}");
    let m = r.body["error"]["message"].as_str().expect("message");
    assert!(m.contains(&format!("([gateway] {cap})")), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_caps_per_tenant_and_in_total_refuse_before_anything_is_charged() {
    let s = start(&capped_config()).await;
    let available = |s: &Server| s.tool("t").quotas[0].available;
    let first = admit(&s, "a").await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(admit(&s, "a").await.status, 200);
    too_many(&admit(&s, "a").await, "max_leases_per_tenant");
    let r = s
        .post_as("a-secret", "/v1/reserve", json!({"calls": [{"tool": "t"}]}))
        .await;
    too_many(&r, "max_leases_per_tenant");
    assert_eq!(available(&s), Some(98), "the refused calls took nothing");

    assert_eq!(admit(&s, "b").await.status, 200);
    too_many(&admit(&s, "c").await, "max_leases");
    let r = s
        .post_as(
            "b-secret",
            "/v1/reserve",
            json!({"calls": [{"tool": "t", "count": 2}]}),
        )
        .await;
    too_many(&r, "max_leases");
    assert_eq!(available(&s), Some(97));
    let st = s.tool("t");
    assert_eq!((st.admitted, st.rejected), (3, 0), "no decision was made");

    // A completed lease gives its place back.
    let lease = first.body["lease"].as_str().expect("lease");
    let done = s
        .post_as(
            "a-secret",
            &format!("/v1/leases/{lease}/complete"),
            json!({}),
        )
        .await;
    assert_eq!(done.status, 204);
    assert_eq!(admit(&s, "c").await.status, 200);
    too_many(&admit(&s, "c").await, "max_leases");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_lease_of_a_reservation_takes_a_place_until_released() {
    let s = start(&capped_config()).await;
    let r = s
        .post_as(
            "a-secret",
            "/v1/reserve",
            json!({"calls": [{"tool": "t", "count": 3}]}),
        )
        .await;
    too_many(&r, "max_leases_per_tenant");
    let ok = s
        .post_as(
            "a-secret",
            "/v1/reserve",
            json!({"calls": [{"tool": "t", "count": 2}]}),
        )
        .await;
    assert_eq!(ok.status, 200, "{ok:?}");
    too_many(&admit(&s, "a").await, "max_leases_per_tenant");
    let id = ok.body["reservation"].as_str().expect("id");
    let rel = s
        .send(
            s.http
                .delete(s.url(&format!("/v1/reservations/{id}")))
                .bearer_auth("a-secret"),
        )
        .await;
    assert_eq!(rel.body["released"], 2, "{rel:?}");
    assert_eq!(admit(&s, "a").await.status, 200);
}
