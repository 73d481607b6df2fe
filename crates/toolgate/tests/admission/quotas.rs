//! Every kind of quota, pools, partitions and all-or-nothing admission.

use std::time::Duration;

use toolgate::{Call, Clock, Completion, Outcome};

use crate::support::{admit_n, assert_rejected, engine, ms, quota, quota_of};

#[test]
fn a_call_denied_by_its_pool_consumes_nothing_from_its_own_quotas() {
    let (engine, _clock) = engine(
        r#"
        [pools.crm]
        rate = "1/min"
        burst = 1

        [tools.lookup]
        rate = "10/s"
        tokens = "1000/min"
        concurrency = 5
        pools = ["crm"]

        [tools.update]
        pools = ["crm"]
        "#,
    );
    let mut permits = Vec::new();
    assert_eq!(admit_n(&engine, &Call::new("update"), 1, &mut permits), 1);
    let call = Call::new("lookup").tokens(100);
    assert_rejected(
        engine.try_admit(&call),
        "rate_limited",
        "pools.crm.rate",
        Some(Duration::from_secs(60)),
    );
    assert_eq!(
        quota(&engine, "lookup", "tools.lookup.rate").available,
        Some(10)
    );
    assert_eq!(
        quota(&engine, "lookup", "tools.lookup.tokens").available,
        Some(1000)
    );
    assert_eq!(
        quota(&engine, "lookup", "tools.lookup.concurrency").available,
        Some(5)
    );
    assert_eq!(engine.tool_state("lookup", None).unwrap().in_flight, 0);
}

#[test]
fn two_tools_sharing_a_pool_never_exceed_it_together() {
    let (engine, clock) = engine(
        r#"
        [pools.crm]
        rate = "4/s"
        burst = 4
        [tools.a]
        rate = "100/s"
        pools = ["crm"]
        [tools.b]
        rate = "100/s"
        pools = ["crm"]
        "#,
    );
    let mut keep = Vec::new();
    let a = admit_n(&engine, &Call::new("a"), 3, &mut keep);
    let b = admit_n(&engine, &Call::new("b"), 3, &mut keep);
    assert_eq!((a, b), (3, 1));
    clock.advance(ms(250));
    assert_eq!(admit_n(&engine, &Call::new("b"), 3, &mut keep), 1);
}

#[test]
fn token_budgets_charge_the_estimate_and_reconcile_the_actual_count() {
    let (engine, _clock) = engine("[tools.llm]\ntokens = \"1000/min\"");
    let tokens = |e: &toolgate::Engine| quota(e, "llm", "tools.llm.tokens").available;

    let p = engine.try_admit(&Call::new("llm").tokens(300)).unwrap();
    assert_eq!(tokens(&engine), Some(700));
    // The call used more than estimated: the difference is charged.
    p.complete(Completion::success().tokens(500));
    assert_eq!(tokens(&engine), Some(500));

    let p = engine.try_admit(&Call::new("llm").tokens(400)).unwrap();
    assert_eq!(tokens(&engine), Some(100));
    // It used less: the difference is refunded.
    p.complete(Completion::success().tokens(50));
    assert_eq!(tokens(&engine), Some(450));

    // Concurrent estimates cannot overshoot: 450 left, two calls of 300 each.
    let first = engine.try_admit(&Call::new("llm").tokens(300));
    assert!(first.is_ok());
    assert_rejected(
        engine.try_admit(&Call::new("llm").tokens(300)),
        "tokens_limited",
        "tools.llm.tokens",
        Some(Duration::from_millis(9_000)),
    );
}

#[test]
fn a_refund_never_lifts_a_budget_above_its_capacity() {
    let (engine, clock) = engine("[tools.llm]\ntokens = \"1000/min\"");
    let p = engine.try_admit(&Call::new("llm").tokens(1000)).unwrap();
    clock.advance(Duration::from_secs(60));
    p.complete(Completion::success().tokens(0));
    assert_eq!(
        quota(&engine, "llm", "tools.llm.tokens").available,
        Some(1000)
    );
    assert_eq!(
        admit_n(&engine, &Call::new("llm").tokens(600), 2, &mut Vec::new()),
        1
    );
}

#[test]
fn concurrency_limits_calls_in_flight_and_dropping_a_permit_releases_it() {
    let (engine, _clock) = engine("[tools.db]\nconcurrency = 2");
    let a = engine.try_admit(&Call::new("db")).unwrap();
    let b = engine.try_admit(&Call::new("db")).unwrap();
    assert_rejected(
        engine.try_admit(&Call::new("db")),
        "concurrency_limited",
        "tools.db.concurrency",
        None,
    );
    assert_eq!(engine.tool_state("db", None).unwrap().in_flight, 2);
    a.complete(Completion::new(Outcome::Error));
    drop(b); // a panic or a cancelled task
    assert_eq!(engine.tool_state("db", None).unwrap().in_flight, 0);
    assert_eq!(admit_n(&engine, &Call::new("db"), 3, &mut Vec::new()), 2);
}

#[test]
fn a_cost_that_can_never_fit_is_rejected_at_once_without_retry_time() {
    let (engine, _clock) = engine(
        "[tools.llm]\nrate = \"5/s\"\ntokens = \"1000/min\"\ntokens_burst = 500\nconcurrency = 3",
    );
    assert_rejected(
        engine.try_admit(&Call::new("llm").tokens(501)),
        "cost_exceeds_capacity",
        "tools.llm.tokens",
        None,
    );
    assert_rejected(
        engine.try_admit(&Call::new("llm").count(6)),
        "cost_exceeds_capacity",
        "tools.llm.rate",
        None,
    );
    assert_eq!(quota(&engine, "llm", "tools.llm.rate").available, Some(5));
}

#[test]
fn a_cost_too_big_for_several_quotas_names_the_first_in_config_order() {
    // The tool's own quotas come first in config order, its pools' after, whatever
    // order their locks are taken in.
    let (engine, _clock) = engine(
        "[pools.crm]\nrate = \"3/s\"\n[tools.t]\nrate = \"2/s\"\ntokens = \"9/s\"\npools = [\"crm\"]",
    );
    for _ in 0..2 {
        assert_rejected(
            engine.try_admit(&Call::new("t").count(5).tokens(10)),
            "cost_exceeds_capacity",
            "tools.t.rate",
            None,
        );
    }
    assert_rejected(
        engine.try_admit(&Call::new("t").count(1).tokens(10)),
        "cost_exceeds_capacity",
        "tools.t.tokens",
        None,
    );
    assert_rejected(
        engine.try_admit(&Call::new("t").count(3)),
        "cost_exceeds_capacity",
        "tools.t.rate",
        None,
    );
    assert_eq!(quota(&engine, "t", "pools.crm.rate").available, Some(3));
}

#[test]
fn a_sliding_window_admits_at_most_n_in_any_interval() {
    let (engine, clock) = engine("[tools.pay]\nrate = \"3/min\"\nwindow = \"sliding\"");
    let call = Call::new("pay");
    let mut keep = Vec::new();
    assert_eq!(admit_n(&engine, &call, 1, &mut keep), 1);
    clock.advance(Duration::from_secs(20));
    assert_eq!(admit_n(&engine, &call, 5, &mut keep), 2);
    // The oldest admission (t=0) leaves the window at t=60 s.
    assert_rejected(
        engine.try_admit(&call),
        "rate_limited",
        "tools.pay.rate",
        Some(Duration::from_secs(40)),
    );
    clock.advance(Duration::from_secs(40));
    assert_eq!(admit_n(&engine, &call, 5, &mut keep), 1);
    assert_rejected(
        engine.try_admit(&call),
        "rate_limited",
        "tools.pay.rate",
        Some(Duration::from_secs(20)),
    );
}

#[test]
fn unknown_tools_pass_untouched_by_default_and_can_be_denied() {
    let (engine, _clock) = engine("[tools.known]\nrate = \"1/h\"");
    for _ in 0..100 {
        let p = engine
            .try_admit(&Call::new("mcp:github/search_issues"))
            .unwrap();
        assert_eq!(p.tool(), None);
    }
    let (engine, _clock) =
        crate::support::engine("unknown_tools = \"deny\"\n[tools.known]\nrate = \"1/h\"");
    let r = engine
        .try_admit(&Call::new("openapi:crm/getCustomer"))
        .unwrap_err();
    assert_eq!(r.reason().as_str(), "unknown_tool");
    assert_eq!(r.tool(), "openapi:crm/getCustomer");
    assert_eq!(r.retry_after(), None);
}

#[test]
fn shadow_mode_computes_and_counts_every_decision_but_never_enforces() {
    let (engine, _clock) = engine("mode = \"shadow\"\n[tools.t]\nrate = \"2/s\"\nburst = 2");
    assert_eq!(admit_n(&engine, &Call::new("t"), 5, &mut Vec::new()), 5);
    let state = engine.tool_state("t", None).unwrap();
    assert_eq!(
        (state.admitted, state.rejected, state.shadow_rejected),
        (5, 0, 3)
    );

    // Mixed: the tool is enforced, its pool only observed.
    let (engine, _clock) = crate::support::engine(
        "[pools.p]\nrate = \"1/s\"\nmode = \"shadow\"\n[tools.t]\nrate = \"3/s\"\npools = [\"p\"]",
    );
    assert_eq!(admit_n(&engine, &Call::new("t"), 5, &mut Vec::new()), 3);
    let state = engine.tool_state("t", None).unwrap();
    assert_eq!((state.rejected, state.shadow_rejected), (2, 2));
}

#[test]
fn admitting_several_calls_is_all_or_nothing() {
    let (engine, _clock) = engine(
        "[pools.crm]\nrate = \"3/s\"\n[tools.lookup]\nrate = \"5/s\"\npools = [\"crm\"]\n[tools.update]\npools = [\"crm\"]",
    );
    // Together the two calls need more of the pool than it can ever hold.
    let too_big = [Call::new("lookup").count(2), Call::new("update").count(2)];
    let r = engine.try_admit_all(&too_big).unwrap_err();
    assert_eq!(
        (r.reason().as_str(), r.quota()),
        ("cost_exceeds_capacity", "pools.crm.rate")
    );

    let _one = engine.try_admit(&Call::new("update")).unwrap();
    let plan = [Call::new("lookup").count(2), Call::new("update")];
    let r = engine.try_admit_all(&plan).unwrap_err();
    assert_eq!(
        (r.reason().as_str(), r.quota()),
        ("rate_limited", "pools.crm.rate")
    );
    assert_eq!(
        quota(&engine, "lookup", "pools.crm.rate").available,
        Some(2)
    );
    assert_eq!(
        quota(&engine, "lookup", "tools.lookup.rate").available,
        Some(5)
    );

    let permits = engine
        .try_admit_all(&[Call::new("lookup"), Call::new("update"), Call::new("other")])
        .unwrap();
    assert_eq!(permits.len(), 3);
    assert_eq!(
        quota(&engine, "lookup", "pools.crm.rate").available,
        Some(0)
    );
    assert_eq!(
        quota(&engine, "lookup", "tools.lookup.rate").available,
        Some(4)
    );
}

#[test]
fn rejections_are_distinct_from_tool_failures() {
    let (engine, _clock) = engine("[tools.t]\nrate = \"1/h\"");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let failed: Result<(), _> =
        rt.block_on(engine.execute(&Call::new("t"), || async { Err("boom") }));
    assert_eq!(failed, Err(toolgate::ExecuteError::Tool("boom")));
    let rejected: Result<(), toolgate::ExecuteError<&str>> =
        rt.block_on(engine.execute(&Call::new("t"), || async { unreachable!("must not run") }));
    assert!(
        matches!(rejected, Err(toolgate::ExecuteError::Rejected(r)) if r.reason().as_str() == "rate_limited")
    );
    let state = engine.tool_state("t", None).unwrap();
    assert_eq!((state.admitted, state.rejected, state.in_flight), (1, 1, 0));
}

#[test]
fn rates_far_above_one_per_nanosecond_and_below_one_per_day_work() {
    let (engine, clock) = engine(
        "[tools.fast]\nrate = \"10000000000/s\"\nburst = 1000\n[tools.slow]\nrate = \"1/7d\"",
    );
    assert_eq!(
        admit_n(&engine, &Call::new("fast"), 2000, &mut Vec::new()),
        1000
    );
    clock.advance(Duration::from_nanos(50));
    assert_eq!(
        admit_n(&engine, &Call::new("fast"), 2000, &mut Vec::new()),
        500
    );
    assert!(engine.try_admit(&Call::new("slow")).is_ok());
    assert_rejected(
        engine.try_admit(&Call::new("slow")),
        "rate_limited",
        "tools.slow.rate",
        Some(Duration::from_secs(7 * 86_400)),
    );
}

#[test]
fn unused_parts_of_a_reservation_give_back_everything_they_charged() {
    let (engine, _clock) = engine(
        r#"
        [pools.crm]
        rate = "10/min"
        [tools.lookup]
        rate = "5/min"
        window = "sliding"
        tokens = "1000/min"
        concurrency = 3
        pools = ["crm"]
        "#,
    );
    let mut permits = engine
        .try_admit_all(&[Call::new("lookup").count(2).tokens(300)])
        .unwrap();
    assert_eq!(
        quota(&engine, "lookup", "tools.lookup.rate").available,
        Some(3)
    );
    assert_eq!(
        quota(&engine, "lookup", "pools.crm.rate").available,
        Some(8)
    );
    assert_eq!(
        quota(&engine, "lookup", "tools.lookup.tokens").available,
        Some(700)
    );
    assert_eq!(
        quota(&engine, "lookup", "tools.lookup.concurrency").available,
        Some(1)
    );
    permits.remove(0).cancel();
    assert_eq!(
        quota(&engine, "lookup", "tools.lookup.rate").available,
        Some(5)
    );
    assert_eq!(
        quota(&engine, "lookup", "pools.crm.rate").available,
        Some(10)
    );
    assert_eq!(
        quota(&engine, "lookup", "tools.lookup.tokens").available,
        Some(1000)
    );
    assert_eq!(
        quota(&engine, "lookup", "tools.lookup.concurrency").available,
        Some(3)
    );
    assert_eq!(engine.tool_state("lookup", None).unwrap().in_flight, 0);

    // A used part is completed as usual and keeps its charge.
    let used = engine
        .try_admit_all(&[Call::new("lookup").tokens(100)])
        .unwrap();
    for p in used {
        p.complete(Completion::success().tokens(100));
    }
    assert_eq!(
        quota(&engine, "lookup", "tools.lookup.rate").available,
        Some(4)
    );
    assert_eq!(
        quota(&engine, "lookup", "tools.lookup.tokens").available,
        Some(900)
    );
}

/// Both engines' answers to the same calls, at the same times: one decides on the
/// fast path (and refuses off the bucket's word, or a tenant's slot), the other's
/// calls carry a far deadline, which sends each of them through the gates and the
/// kernel under the cell's lock. Every answer must be the same, `retry_after`
/// included, and what is left the same read without the lock as under it.
fn same_answers_with_and_without_the_general_path(toml: &str, tenants: &[&str]) {
    let (fast, fast_clock) = engine(toml);
    let (general, general_clock) = engine(toml);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for i in 0..2_000 {
        let dt = match next(4) {
            0 => 0,
            1 => next(1_000),
            _ => next(400_000_000),
        };
        fast_clock.advance(Duration::from_nanos(dt));
        general_clock.advance(Duration::from_nanos(dt));
        let tenant = tenants[next(tenants.len() as u64) as usize];
        let call = Call::new("t").tenant(tenant).count(1 + next(3));
        let far = general_clock.now() + 1_000_000_000_000_000;
        let a = fast.try_admit(&call);
        let b = general.try_admit(&call.deadline(far));
        // What is left, read off the word (or the tenant's slot) without the lock,
        // through the permit, and under the lock (the state snapshot).
        let left = fast.available("t", "tools.t.rate", Some(tenant));
        let locked = quota_of(&fast, "t", Some(tenant), "tools.t.rate").available;
        assert_eq!(left, locked, "call {i}");
        if let Ok(p) = &a {
            assert_eq!(p.available("tools.t.rate", Some(tenant)), left, "call {i}");
        }
        match (a, b) {
            (Ok(_), Ok(_)) => {}
            (Err(a), Err(b)) => assert_eq!(
                (a.reason(), a.quota(), a.retry_after()),
                (b.reason(), b.quota(), b.retry_after()),
                "call {i}"
            ),
            (a, b) => panic!("call {i}: {:?} against {:?}", a.err(), b.err()),
        }
    }
}

#[test]
fn a_refusal_read_off_the_fast_paths_word_is_the_general_paths_refusal() {
    same_answers_with_and_without_the_general_path("[tools.t]\nrate = \"7/s\"\nburst = 3", &[""]);
    // A rate whose units are not whole nanoseconds.
    same_answers_with_and_without_the_general_path("[tools.t]\nrate = \"3/7s\"\nburst = 3", &[""]);
}

#[test]
fn a_decision_in_a_tenants_slot_without_the_gates_is_the_one_made_through_them() {
    same_answers_with_and_without_the_general_path(
        "[tools.t]\nrate = \"5/s\"\nburst = 3\npartition = \"tenant\"",
        &["a", "b", "9f1c6a0e-52b4-4d9e-8f3a-0d6c1e2b7a55"],
    );
}

mod tenants;
