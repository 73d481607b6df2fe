//! The semantic suite: contract §2, written once over [`Backend`], run against the
//! in-memory engine and Redis (and, in `cluster.rs`, a Redis Cluster).

use std::time::Duration;

use toolgate::{Call, Completion, Reason, Rejection};

use crate::backend::{Backend, Factory};

mod debt;
mod levels;
mod reserve;
mod wait;
pub use debt::*;
pub use levels::*;
pub use reserve::*;
pub use wait::*;

const MS: Duration = Duration::from_millis(1);

fn why(r: &Rejection) -> (Reason, &str, Option<Duration>) {
    (r.reason(), r.quota(), r.retry_after())
}

async fn admitted<B: Backend>(b: &B, call: &Call<'_>, n: usize) -> Vec<B::Permit> {
    let mut out = Vec::new();
    for _ in 0..n {
        if let Ok(p) = b.try_admit(call).await {
            out.push(p);
        }
    }
    out
}

/// `rate="2/s", burst=2`: five at once → 2; one more at 0.5 s; then one every 0.5 s.
pub async fn burst_then_exact_refill<F: Factory>(f: &F) {
    let b = f.make("[tools.t]\nrate = \"2/s\"\nburst = 2").await;
    let t = Call::new("t");
    assert_eq!(admitted(&b, &t, 5).await.len(), 2);
    let no = b.try_admit(&t).await.expect_err("third call rejected");
    assert_eq!(
        why(&no),
        (Reason::RateLimited, "tools.t.rate", Some(500 * MS))
    );
    assert_eq!(no.tool(), "t");
    b.clock().advance(499 * MS);
    let no = b.try_admit(&t).await.expect_err("not yet");
    assert_eq!(no.retry_after(), Some(MS));
    b.clock().advance(MS);
    assert!(b.try_admit(&t).await.is_ok());
    assert!(b.try_admit(&t).await.is_err());
    b.clock().advance(500 * MS);
    assert!(b.try_admit(&t).await.is_ok());
    // A full second from empty refills both tokens, never more.
    b.clock().advance(Duration::from_secs(10));
    assert_eq!(admitted(&b, &t, 5).await.len(), 2);
}

/// At most N in any interval of P; retry_after is when the oldest leaves.
pub async fn sliding_window_is_exact<F: Factory>(f: &F) {
    let b = f
        .make("[tools.s]\nrate = \"3/min\"\nwindow = \"sliding\"")
        .await;
    let s = Call::new("s");
    for _ in 0..3 {
        assert!(b.try_admit(&s).await.is_ok());
        b.clock().advance(Duration::from_secs(10));
    }
    let no = b.try_admit(&s).await.expect_err("fourth in the window");
    assert_eq!(
        why(&no),
        (
            Reason::RateLimited,
            "tools.s.rate",
            Some(Duration::from_secs(30))
        )
    );
    b.clock().advance(Duration::from_secs(30) - MS);
    assert_eq!(
        b.try_admit(&s).await.err().and_then(|r| r.retry_after()),
        Some(MS)
    );
    b.clock().advance(MS);
    assert!(b.try_admit(&s).await.is_ok());
    let no = b.try_admit(&s).await.expect_err("window full again");
    assert_eq!(no.retry_after(), Some(Duration::from_secs(10)));
}

/// Tokens charged with the estimate, reconciled on completion, never refunded above
/// capacity.
pub async fn tokens_are_reconciled<F: Factory>(f: &F) {
    let b = f.make("[tools.llm]\ntokens = \"1000/min\"").await;
    let a = b
        .try_admit(&Call::new("llm").tokens(600))
        .await
        .expect("fits");
    let no = b
        .try_admit(&Call::new("llm").tokens(600))
        .await
        .expect_err("400 left");
    // 200 tokens missing at 1000/min: 12 s.
    assert_eq!(
        why(&no),
        (
            Reason::TokensLimited,
            "tools.llm.tokens",
            Some(Duration::from_secs(12))
        )
    );
    b.complete(a, Completion::success().tokens(100)).await;
    // 900 left now.
    assert!(b.try_admit(&Call::new("llm").tokens(901)).await.is_err());
    let c = b
        .try_admit(&Call::new("llm").tokens(900))
        .await
        .expect("refunded");
    assert!(b.try_admit(&Call::new("llm").tokens(1)).await.is_err());
    b.complete(c, Completion::success().tokens(0)).await;
    // The refund of 900 brings back 900, the 100 actually used stay charged.
    assert!(b.try_admit(&Call::new("llm").tokens(901)).await.is_err());
    let d = b
        .try_admit(&Call::new("llm").tokens(100))
        .await
        .expect("fits");
    // Using more than estimated charges the difference.
    b.complete(d, Completion::success().tokens(700)).await;
    assert!(b.try_admit(&Call::new("llm").tokens(201)).await.is_err());
    assert!(b.try_admit(&Call::new("llm").tokens(200)).await.is_ok());
    let no = b
        .try_admit(&Call::new("llm").tokens(1001))
        .await
        .expect_err("never fits");
    assert_eq!(
        why(&no),
        (Reason::CostExceedsCapacity, "tools.llm.tokens", None)
    );
}

/// At most K in flight; completing or dropping a permit frees its slot.
pub async fn concurrency_is_released<F: Factory>(f: &F) {
    let b = f.make("[tools.c]\nconcurrency = 2").await;
    let c = Call::new("c");
    let mut held = admitted(&b, &c, 3).await;
    assert_eq!(held.len(), 2);
    let no = b.try_admit(&c).await.expect_err("full");
    assert_eq!(
        why(&no),
        (Reason::ConcurrencyLimited, "tools.c.concurrency", None)
    );
    let first = held.pop().expect("a permit");
    b.complete(first, Completion::success()).await;
    let again = b.try_admit(&c).await.expect("slot freed by complete");
    drop(again);
    b.settle().await;
    assert!(b.try_admit(&c).await.is_ok(), "slot freed by drop");
}

/// A tool draws from its own quotas and its pools'; the pool names itself.
pub async fn pools_are_shared<F: Factory>(f: &F) {
    let b = f
        .make(
            r#"
            [pools.crm]
            rate = "100/min"
            burst = 3
            [tools.lookup]
            rate = "2/s"
            burst = 2
            pools = ["crm"]
            [tools.update]
            rate = "5/s"
            pools = ["crm"]
            "#,
        )
        .await;
    assert_eq!(admitted(&b, &Call::new("lookup"), 5).await.len(), 2);
    assert!(b.try_admit(&Call::new("update")).await.is_ok());
    let no = b
        .try_admit(&Call::new("update"))
        .await
        .expect_err("pool empty");
    assert_eq!(
        why(&no),
        (
            Reason::RateLimited,
            "pools.crm.rate",
            Some(Duration::from_millis(600))
        )
    );
    assert_eq!(no.tool(), "update");
}

/// A name that needs quoting is quoted in the quota paths rejections name, as in
/// config errors, alike on every backend (the paths come from one resolution).
pub async fn a_name_that_needs_quoting_names_its_quotas_alike<F: Factory>(f: &F) {
    let b = f
        .make(
            r#"
            [pools."crm v2"]
            rate = "1/h"
            burst = 2
            [tools."mcp:github/search"]
            rate = "1/h"
            burst = 1
            pools = ["crm v2"]
            [tools."mcp:github/list"]
            pools = ["crm v2"]
            "#,
        )
        .await;
    let search = Call::new("mcp:github/search");
    assert!(b.try_admit(&search).await.is_ok());
    let no = b.try_admit(&search).await.expect_err("its own bucket");
    assert_eq!(no.quota(), r#"tools."mcp:github/search".rate"#);
    let list = Call::new("mcp:github/list");
    assert!(b.try_admit(&list).await.is_ok());
    let no = b.try_admit(&list).await.expect_err("the pool");
    assert_eq!(
        (no.tool(), no.quota()),
        ("mcp:github/list", r#"pools."crm v2".rate"#)
    );
}

/// One instance per tenant; a call without a tenant uses the "" partition.
pub async fn tenants_have_their_own_partitions<F: Factory>(f: &F) {
    let b = f
        .make("[tools.t]\nrate = \"1/s\"\nburst = 1\npartition = \"tenant\"")
        .await;
    assert!(b.try_admit(&Call::new("t").tenant("acme")).await.is_ok());
    assert!(b.try_admit(&Call::new("t").tenant("acme")).await.is_err());
    assert!(b.try_admit(&Call::new("t").tenant("globex")).await.is_ok());
    assert!(b.try_admit(&Call::new("t")).await.is_ok());
    assert!(b.try_admit(&Call::new("t")).await.is_err());
    assert!(b.try_admit(&Call::new("t").tenant("")).await.is_err());
}

/// A denied call consumes nothing anywhere: not the pool, not the concurrency; a
/// denied plan charges none of its calls.
pub async fn a_denied_call_charges_nothing<F: Factory>(f: &F) {
    a_denied_single_call_charges_nothing(f).await;
    a_denied_plan_charges_nothing(f).await;
}

/// The single calls of [`a_denied_call_charges_nothing`].
async fn a_denied_single_call_charges_nothing<F: Factory>(f: &F) {
    let b = f
        .make(
            r#"
            [pools.p]
            rate = "1/h"
            burst = 2
            [tools.t1]
            rate = "1/h"
            burst = 1
            pools = ["p"]
            [tools.t2]
            concurrency = 1
            pools = ["p"]
            [tools.t3]
            rate = "1/h"
            burst = 1
            concurrency = 5
            "#,
        )
        .await;
    assert!(b.try_admit(&Call::new("t1")).await.is_ok()); // pool: 1 left
    let no = b
        .try_admit(&Call::new("t1"))
        .await
        .expect_err("t1's own bucket");
    assert_eq!(no.quota(), "tools.t1.rate");
    let held = b
        .try_admit(&Call::new("t2"))
        .await
        .expect("pool had 1 left"); // pool: 0
    let no = b.try_admit(&Call::new("t2")).await.expect_err("pool empty");
    assert_eq!(no.quota(), "pools.p.rate");
    b.complete(held, Completion::success()).await;
    // The rate-denied t3 does not hold a concurrency lease.
    let p = b.try_admit(&Call::new("t3")).await.expect("first");
    for _ in 0..10 {
        assert_eq!(
            b.try_admit(&Call::new("t3"))
                .await
                .err()
                .map(|r| r.reason()),
            Some(Reason::RateLimited)
        );
    }
    b.complete(p, Completion::success()).await;
}

/// The plans of [`a_denied_call_charges_nothing`].
async fn a_denied_plan_charges_nothing<F: Factory>(f: &F) {
    // A plan is all-or-nothing too: the second call fails, the first is not charged.
    let b = f
        .make(
            // A plan's tools share a pool, so that in a cluster they share a slot.
            "[pools.plan]\nrate = \"1000/h\"\n[tools.a]\nrate = \"1/h\"\nburst = 1\npools = [\"plan\"]\n\
             [tools.z]\nrate = \"1/h\"\nburst = 1\npools = [\"plan\"]",
        )
        .await;
    assert!(b.try_admit(&Call::new("z")).await.is_ok());
    let no = b
        .try_admit_all(&[Call::new("a"), Call::new("z")])
        .await
        .expect_err("z empty");
    assert_eq!(no.quota(), "tools.z.rate");
    assert!(
        b.try_admit(&Call::new("a")).await.is_ok(),
        "a was not charged"
    );
    // Costs of one quota in a plan add up.
    let b = f.make("[tools.a]\nrate = \"1/h\"\nburst = 2").await;
    let no = b
        .try_admit_all(&[Call::new("a"), Call::new("a"), Call::new("a")])
        .await
        .expect_err("three never fit");
    assert_eq!(
        why(&no),
        (Reason::CostExceedsCapacity, "tools.a.rate", None)
    );
    let two = b
        .try_admit_all(&[Call::new("a"), Call::new("a")])
        .await
        .expect("two fit");
    assert_eq!(two.len(), 2);
    assert!(b.try_admit(&Call::new("a")).await.is_err());
}

/// A cost above capacity is "never", not "not now".
pub async fn a_cost_above_capacity_is_rejected_at_once<F: Factory>(f: &F) {
    let b = f
        .make("[tools.t]\nrate = \"10/s\"\nburst = 2\nconcurrency = 5")
        .await;
    let no = b
        .try_admit(&Call::new("t").count(3))
        .await
        .expect_err("never fits");
    assert_eq!(
        why(&no),
        (Reason::CostExceedsCapacity, "tools.t.rate", None)
    );
    assert!(b.try_admit(&Call::new("t").count(2)).await.is_ok());
}

/// Shadow quotas are evaluated but never enforced.
pub async fn shadow_quotas_never_reject<F: Factory>(f: &F) {
    let b = f
        .make(
            r#"
            [pools.p]
            rate = "1/h"
            burst = 1
            mode = "shadow"
            [tools.t]
            rate = "1/h"
            burst = 3
            pools = ["p"]
            [tools.s]
            rate = "1/h"
            burst = 1
            concurrency = 1
            mode = "shadow"
            "#,
        )
        .await;
    assert_eq!(admitted(&b, &Call::new("t"), 5).await.len(), 3);
    assert_eq!(admitted(&b, &Call::new("s"), 5).await.len(), 5);
}

/// Unknown tools pass without accounting, or are denied with `unknown_tool`.
pub async fn unknown_tools_are_allowed_or_denied<F: Factory>(f: &F) {
    let b = f.make("[tools.t]\nrate = \"1/s\"").await;
    assert_eq!(admitted(&b, &Call::new("nope"), 5).await.len(), 5);
    let b = f
        .make("unknown_tools = \"deny\"\n[tools.t]\nrate = \"1/s\"")
        .await;
    let no = b.try_admit(&Call::new("nope")).await.expect_err("denied");
    assert_eq!(why(&no), (Reason::UnknownTool, "unknown_tools", None));
    assert_eq!(no.tool(), "nope");
}

/// Instantiates every case of the suite for one factory expression.
#[macro_export]
macro_rules! semantic_suite {
    ($factory:expr) => {
        $crate::semantic_suite!($factory;
            burst_then_exact_refill,
            sliding_window_is_exact,
            tokens_are_reconciled,
            concurrency_is_released,
            pools_are_shared,
            a_name_that_needs_quoting_names_its_quotas_alike,
            tenants_have_their_own_partitions,
            a_denied_call_charges_nothing,
            a_cost_above_capacity_is_rejected_at_once,
            shadow_quotas_never_reject,
            unknown_tools_are_allowed_or_denied,
            waiters_sleep_until_their_reserved_time,
            a_cancelled_waiter_gives_its_time_back,
            an_unused_reservation_gives_its_charges_back,
            a_late_give_back_never_refunds_wasted_refill,
            a_reported_token_count_owes_at_most_one_burst,
            a_token_debt_behind_a_waiter_owes_at_most_one_burst_from_it,
            a_wait_cap_refuses_a_longer_wait_at_once,
            levels_say_what_each_quota_has_left,
            levels_of_a_partition_are_the_tenants_own,
            levels_of_every_tool_are_read_at_once,
        );
    };
    ($factory:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let Some(f) = $factory else { return };
                $crate::semantic::$case(&f).await;
            }
        )*
    };
}

/// Runs every case in turn (for backends that are costly to start).
pub async fn all<F: Factory>(f: &F) {
    burst_then_exact_refill(f).await;
    sliding_window_is_exact(f).await;
    tokens_are_reconciled(f).await;
    concurrency_is_released(f).await;
    pools_are_shared(f).await;
    a_name_that_needs_quoting_names_its_quotas_alike(f).await;
    tenants_have_their_own_partitions(f).await;
    a_denied_call_charges_nothing(f).await;
    a_cost_above_capacity_is_rejected_at_once(f).await;
    shadow_quotas_never_reject(f).await;
    unknown_tools_are_allowed_or_denied(f).await;
    waiters_sleep_until_their_reserved_time(f).await;
    a_cancelled_waiter_gives_its_time_back(f).await;
    an_unused_reservation_gives_its_charges_back(f).await;
    a_late_give_back_never_refunds_wasted_refill(f).await;
    a_reported_token_count_owes_at_most_one_burst(f).await;
    a_token_debt_behind_a_waiter_owes_at_most_one_burst_from_it(f).await;
    a_wait_cap_refuses_a_longer_wait_at_once(f).await;
    levels_say_what_each_quota_has_left(f).await;
    levels_of_a_partition_are_the_tenants_own(f).await;
    levels_of_every_tool_are_read_at_once(f).await;
}
