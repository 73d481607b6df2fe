//! One decision, every path: an immediate admission (`try_admit`) and a reservation
//! (`try_admit_all`) are decided by the same kernel, so a reservation of one call
//! and the immediate admission of that call, on two engines with the same history,
//! agree on whether it is admitted and, if not, on when to come back. (Which quota a
//! refusal names may differ on a tie: a reservation ranks the merged steps of all
//! its calls, in lock order.)

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use toolgate::{Call, Completion, Engine, ManualClock, Permit, Policy};

const POLICY: &str = r#"
[pools.p]
rate = "5/s"
burst = 3
concurrency = 3

[tools.a]
rate = "2/s"
burst = 2
pools = ["p"]

[tools.b]
rate = "3/s"
window = "sliding"
tokens = "100/s"
tokens_burst = 50
pools = ["p"]

[tools.c]
rate = "1/s"
burst = 1
concurrency = 1

# One bucket and nothing else: the lock-free fast path on the immediate side.
[tools.d]
rate = "3/s"
burst = 2

# One bucket per tenant, at most 3 partitions live.
[tools.e]
rate = "2/s"
burst = 2
partition = "tenant"
max_partitions = 3

# Shadow quotas of its own, under the enforced pool.
[tools.f]
rate = "1/s"
burst = 1
tokens = "10/s"
tokens_burst = 20
mode = "shadow"
pools = ["p"]
"#;

const TOOLS: [&str; 6] = ["a", "b", "c", "d", "e", "f"];
const TENANTS: [&str; 5] = ["t1", "t2", "t3", "t4", "t5"];

#[derive(Debug, Clone)]
enum Op {
    /// A call of a tool, with its token estimate and (on `e`) its tenant.
    Call(usize, u64, usize),
    /// The oldest-but-`n`th admitted call ends, reporting this many tokens.
    Complete(usize, u64),
    /// Time passes (ms).
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..TOOLS.len(), 0..60u64, 0..TENANTS.len()).prop_map(|(t, n, k)| Op::Call(t, n, k)),
        2 => (0..6usize, 0..80u64).prop_map(|(i, n)| Op::Complete(i, n)),
        2 => (0..1_500u64).prop_map(Op::Advance),
    ]
}

fn engine() -> (Engine, ManualClock) {
    let clock = ManualClock::new();
    let policy = Policy::from_toml_str(POLICY).unwrap();
    (Engine::with_clock(policy, Arc::new(clock.clone())), clock)
}

proptest! {
    #[test]
    fn a_reservation_of_one_call_is_decided_as_its_immediate_admission(
        ops in prop::collection::vec(op(), 1..80)
    ) {
        let (now, now_clock) = engine();
        let (plan, plan_clock) = engine();
        let mut held: Vec<(Permit, Permit)> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            match *op {
                Op::Call(t, tokens, k) => {
                    let tenant = (TOOLS[t] == "e").then_some(TENANTS[k]);
                    let call = Call::new(TOOLS[t]).tokens(tokens).with_tenant(tenant);
                    let immediate = now.try_admit(&call);
                    let reserved = plan.try_admit_all(&[call]).map(|mut v| v.remove(0));
                    match (immediate, reserved) {
                        // A reservation's permit keeps every part it charged (so that
                        // an unused one gives it all back), its tenant's partition
                        // too, which no eviction may take then: on `e`, the calls end
                        // at once, so that both sides evict alike.
                        (Ok(p), Ok(q)) if tenant.is_some() => {
                            p.complete(Completion::success());
                            q.complete(Completion::success());
                        }
                        (Ok(p), Ok(q)) => held.push((p, q)),
                        (Err(r), Err(s)) => prop_assert_eq!(
                            r.retry_after(),
                            s.retry_after(),
                            "op {}: {} against {}", i, r, s
                        ),
                        (x, y) => prop_assert!(
                            false,
                            "op {}: {:?} immediately, {:?} reserved", i, x.map(drop), y.map(drop)
                        ),
                    }
                }
                Op::Complete(n, tokens) if n < held.len() => {
                    let (p, q) = held.remove(n);
                    p.complete(Completion::success().tokens(tokens));
                    q.complete(Completion::success().tokens(tokens));
                }
                Op::Complete(..) => {}
                Op::Advance(ms) => {
                    now_clock.advance(Duration::from_millis(ms));
                    plan_clock.advance(Duration::from_millis(ms));
                }
            }
        }
    }
}
