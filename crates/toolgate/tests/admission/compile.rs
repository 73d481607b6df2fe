//! The engine compiles from the one resolution of a policy (`toolgate::compile`),
//! the same list a shared store compiles from.

use std::sync::Arc;

use toolgate::compile::{tool_quotas, CostOf, Limit, QuotaSpec};
use toolgate::config::Mode;
use toolgate::{Engine, ManualClock, Policy};

/// What the engine's state and the resolution both say about one quota.
fn seen(path: &str, kind: &str, capacity: u64, mode: Mode) -> (String, String, u64, Mode) {
    (path.to_string(), kind.to_string(), capacity, mode)
}

fn kind(q: &QuotaSpec) -> &'static str {
    match (q.limit, q.cost_of) {
        (Limit::Concurrency { .. }, _) => "concurrency",
        (_, CostOf::Tokens) => "tokens",
        (Limit::Sliding { .. }, _) => "sliding",
        _ => "rate",
    }
}

#[test]
fn the_engine_runs_exactly_the_quotas_the_policy_resolves_to_in_their_order() {
    let policy = Policy::from_toml_str(
        r#"
        mode = "shadow"
        [pools.b]
        tokens = "100/min"
        tokens_burst = 30
        [pools.a]
        concurrency = 3
        rate = "5/s"
        window = "sliding"
        mode = "enforce"
        [tools.t]
        concurrency = 2
        tokens = "10/s"
        rate = "1/s"
        burst = 4
        pools = ["b", "a", "b"]
        [tools."mcp:github/search"]
        rate = "2/min"
        partition = "tenant"
        pools = ["a"]
        [tools.bare]
        "#,
    )
    .expect("valid");
    let engine = Engine::with_clock(policy.clone(), Arc::new(ManualClock::new()));
    for tool in policy.tools.keys() {
        let state = engine.tool_state(tool, None).expect("a tool with a policy");
        let ran: Vec<_> = state
            .quotas
            .iter()
            .map(|q| seen(&q.quota, q.kind, q.capacity, q.mode))
            .collect();
        let resolved: Vec<_> = tool_quotas(&policy, tool)
            .expect("a tool with a policy")
            .iter()
            .map(|q| seen(&q.path, kind(q), q.capacity(), q.mode))
            .collect();
        assert_eq!(ran, resolved, "{tool}");
    }
    let t = tool_quotas(&policy, "t").expect("t");
    assert_eq!(
        t.iter().map(|q| &*q.path).collect::<Vec<_>>(),
        [
            "tools.t.rate",
            "tools.t.tokens",
            "tools.t.concurrency",
            "pools.b.tokens",
            "pools.a.rate",
            "pools.a.concurrency"
        ]
    );
    assert_eq!(tool_quotas(&policy, "bare"), Some(Vec::new()));
}
