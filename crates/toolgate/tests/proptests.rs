//! Property tests against simple reference models: random arrivals, costs, pools,
//! tenants, reservations, completions and cancellations never over-admit in any window;
//! waiters are admitted in FIFO order; a cancelled waiter is invisible to everyone
//! else; an unused part of a reservation, given back, counts as never admitted; no
//! call is admitted while its upstream's `Retry-After` pause lasts (of the tool, or of
//! the tenant on the per-tenant tool), waiting calls included.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use tokio_test::task::{self, Spawn};
use toolgate::{Call, Clock, Completion, Engine, ManualClock, Outcome, Permit, Policy, Rejection};

const POLICY: &str = r#"
[pools.p]
rate = "5/s"
burst = 3
concurrency = 3

[tools.a]
rate = "2/s"
burst = 2
pools = ["p"]
on_limit = "wait"
max_wait = "2s"

[tools.b]
rate = "3/s"
window = "sliding"
tokens = "100/s"
tokens_burst = 50
pools = ["p"]
on_limit = "wait"
max_wait = "1s"

[tools.c]
rate = "1/s"
burst = 1
concurrency = 1

# One bucket and nothing else: the lock-free fast path, and waiters on it.
[tools.d]
rate = "3/s"
burst = 2
on_limit = "wait"
max_wait = "2s"

# One bucket per tenant: a call under one quota on the general path, partitions
# created and evicted as tenants come and go (at most 3 live: refusals too), and
# waiters per tenant.
[tools.e]
rate = "2/s"
burst = 2
partition = "tenant"
max_partitions = 3
on_limit = "wait"
max_wait = "2s"
"#;

const TOOLS: [&str; 5] = ["a", "b", "c", "d", "e"];
/// The tenants of tool `e` (picked by a call's token count); every other tool's
/// calls, and reservations, name no tenant.
const TENANTS: [&str; 4] = ["t1", "t2", "t3", "t4"];
const E: usize = 4;

/// The tenant a call of `tool` with `tokens` names.
fn tenant(tool: usize, tokens: u64) -> Option<&'static str> {
    (tool == E).then(|| TENANTS[tokens as usize % TENANTS.len()])
}
const S: u64 = 1_000_000_000;

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Try {
        tool: usize,
        count: u64,
        tokens: u64,
    },
    Wait {
        tool: usize,
        tokens: u64,
    },
    Complete(usize),
    Cancel(usize),
    /// An all-or-nothing reservation of one call per listed tool.
    Reserve(Vec<usize>),
    /// Gives back an unused part of a reservation (`Permit::cancel`).
    Unreserve(usize),
    /// Completes a permit with the upstream's `Retry-After` of this many ms: its tool
    /// (its tenant, on tool `e`) is paused, waiters included.
    Pause(usize, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..700).prop_map(|ms| Op::Advance(ms * 1_000_000 + ms % 7)),
        4 => (0..5usize, 1..=2u64, 0..40u64).prop_map(|(tool, count, tokens)| Op::Try { tool, count, tokens }),
        // The tools that wait: a, b, d and e.
        4 => (0..4usize, 0..40u64).prop_map(|(i, tokens)| Op::Wait { tool: [0, 1, 3, E][i], tokens }),
        2 => any::<usize>().prop_map(Op::Complete),
        2 => any::<usize>().prop_map(Op::Cancel),
        2 => prop::collection::vec(0..5usize, 1..4).prop_map(Op::Reserve),
        2 => any::<usize>().prop_map(Op::Unreserve),
        1 => (any::<usize>(), 0..3_000u64).prop_map(|(k, ms)| Op::Pause(k, ms)),
    ]
}

type AdmitTask =
    Spawn<std::pin::Pin<Box<dyn std::future::Future<Output = Result<Permit, Rejection>> + Send>>>;

/// One admitted call, as the reference models see it.
#[derive(Debug, Clone)]
struct Admission {
    tool: usize,
    /// The tenant named (tool `e` only).
    tenant: Option<&'static str>,
    at: u64,
    count: u64,
    tokens: u64,
    /// Given back unused (a reservation's part): the models count it as never made.
    cancelled: bool,
}

/// Something that happened, in order.
#[derive(Debug, Clone, PartialEq)]
enum Event {
    Admitted { id: usize },
    Released { id: usize },
}

/// What a call was told: the observable outcome compared across runs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Told {
    Admitted(u64),
    Rejected(String, String, Option<Duration>),
}

struct Waiter {
    op_index: usize,
    tool: usize,
    tokens: u64,
    arrived: usize,
    task: Option<AdmitTask>,
    cancelled_pending: bool,
}

/// A tool, and the tenant whose partition a waiter queues on (tool `e` only).
type Queue = (usize, Option<&'static str>);

/// An upstream's pause: of a tool (and tenant, on tool `e`), from its start to its end.
#[derive(Debug, Clone, Copy)]
struct Pause {
    queue: Queue,
    from: u64,
    until: u64,
}

#[derive(Default)]
struct Run {
    admissions: Vec<Admission>,
    events: Vec<Event>,
    permits: Vec<(usize, Permit)>,
    /// The held parts of reservations, by admission id.
    reserved: Vec<(usize, Permit)>,
    /// Outcome of each call by the index of the op that made it.
    told: BTreeMap<usize, Told>,
    /// Admission times of waiters per tool and tenant (FIFO holds per quota, and
    /// each tenant of a tool has a quota of its own), in arrival order.
    waiter_times: BTreeMap<Queue, Vec<(usize, u64)>>,
    pauses: Vec<Pause>,
}

fn engine() -> (Engine, ManualClock) {
    let clock = ManualClock::new();
    let policy = Policy::from_toml_str(POLICY).unwrap();
    (Engine::with_clock(policy, Arc::new(clock.clone())), clock)
}

/// Runs `ops`, skipping the wait ops listed in `skip`.
fn run(ops: &[Op], skip: &[usize]) -> Run {
    run_tracking(ops, skip).0
}

/// Runs `ops`, skipping the wait ops listed in `skip`; also returns the op indexes of
/// the waits cancelled while still pending by a `Cancel(usize::MAX)` right after them.
fn run_tracking(ops: &[Op], skip: &[usize]) -> (Run, Vec<usize>) {
    let mut cancelled = Vec::new();
    let (engine, clock) = engine();
    let mut r = Run::default();
    let mut waiters: Vec<Waiter> = Vec::new();
    let mut arrivals = 0;
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Advance(ns) => clock.advance(Duration::from_nanos(ns)),
            Op::Try {
                tool,
                count,
                tokens,
            } => {
                let mut call = Call::new(TOOLS[tool]).count(count).tokens(tokens);
                if let Some(t) = tenant(tool, tokens) {
                    call = call.tenant(t);
                }
                let res = engine.try_admit(&call);
                r.record(i, tool, count, tokens, res);
            }
            Op::Wait { tool, tokens } => {
                if skip.contains(&i) {
                    continue;
                }
                let e = engine.clone();
                let fut: std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>> =
                    Box::pin(async move {
                        let mut call = Call::new(TOOLS[tool]).tokens(tokens);
                        if let Some(t) = tenant(tool, tokens) {
                            call = call.tenant(t);
                        }
                        e.admit(&call).await
                    });
                arrivals += 1;
                waiters.push(Waiter {
                    op_index: i,
                    tool,
                    tokens,
                    arrived: arrivals,
                    task: Some(task::spawn(fut)),
                    cancelled_pending: false,
                });
            }
            Op::Complete(k) => {
                if !r.permits.is_empty() {
                    let (id, p) = r.permits.remove(k % r.permits.len());
                    drop(p);
                    r.events.push(Event::Released { id });
                }
            }
            Op::Reserve(ref tools) => {
                let calls: Vec<Call<'_>> = tools.iter().map(|&t| Call::new(TOOLS[t])).collect();
                match engine.try_admit_all(&calls) {
                    Ok(permits) => {
                        for (&tool, p) in tools.iter().zip(permits) {
                            r.told.insert(i, Told::Admitted(p.admitted_at()));
                            // No tenant named: tool `e` charges the partition of "".
                            let id =
                                r.admit(tool, (tool == E).then_some(""), p.admitted_at(), 1, 0);
                            r.reserved.push((id, p));
                        }
                    }
                    Err(rej) => r.record(i, 0, 1, 0, Err(rej)),
                }
            }
            Op::Unreserve(k) => {
                if !r.reserved.is_empty() {
                    let (id, p) = r.reserved.remove(k % r.reserved.len());
                    p.cancel();
                    r.admissions[id].cancelled = true;
                    r.events.push(Event::Released { id });
                }
            }
            Op::Pause(k, ms) => {
                if !r.permits.is_empty() {
                    let (id, p) = r.permits.remove(k % r.permits.len());
                    let from = clock.now();
                    p.complete(
                        Completion::new(Outcome::Error).retry_after(Duration::from_millis(ms)),
                    );
                    r.events.push(Event::Released { id });
                    let a = &r.admissions[id];
                    r.pauses.push(Pause {
                        queue: (a.tool, a.tenant),
                        from,
                        until: from + ms * 1_000_000,
                    });
                }
            }
            Op::Cancel(usize::MAX) => {
                if let Some(w) = waiters
                    .last_mut()
                    .filter(|w| w.op_index + 1 == i && w.task.is_some())
                {
                    w.task = None;
                    w.cancelled_pending = true;
                    cancelled.push(w.op_index);
                }
            }
            Op::Cancel(k) => {
                let live: Vec<usize> = (0..waiters.len())
                    .filter(|&w| waiters[w].task.is_some())
                    .collect();
                if !live.is_empty() {
                    let w = &mut waiters[live[k % live.len()]];
                    w.task = None;
                    w.cancelled_pending = true;
                }
            }
        }
        r.poll_waiters(&mut waiters);
    }
    // Let every remaining waiter finish.
    for _ in 0..40 {
        clock.advance(Duration::from_millis(100));
        r.poll_waiters(&mut waiters);
    }
    assert!(
        waiters.iter().all(|w| w.task.is_none()),
        "a waiter never finished"
    );
    assert!(waiters.iter().filter(|w| w.cancelled_pending).count() >= cancelled.len());
    (r, cancelled)
}

impl Run {
    fn record(
        &mut self,
        op: usize,
        tool: usize,
        count: u64,
        tokens: u64,
        res: Result<Permit, Rejection>,
    ) {
        match res {
            Ok(p) => {
                self.told.insert(op, Told::Admitted(p.admitted_at()));
                let id = self.admit(tool, tenant(tool, tokens), p.admitted_at(), count, tokens);
                self.permits.push((id, p));
            }
            Err(rej) => {
                self.told.insert(
                    op,
                    Told::Rejected(
                        rej.reason().to_string(),
                        rej.quota().to_string(),
                        rej.retry_after(),
                    ),
                );
            }
        }
    }

    /// Records an admission; its id.
    fn admit(
        &mut self,
        tool: usize,
        tenant: Option<&'static str>,
        at: u64,
        count: u64,
        tokens: u64,
    ) -> usize {
        let id = self.admissions.len();
        self.admissions.push(Admission {
            tool,
            tenant,
            at,
            count,
            tokens,
            cancelled: false,
        });
        self.events.push(Event::Admitted { id });
        id
    }

    fn poll_waiters(&mut self, waiters: &mut [Waiter]) {
        for w in waiters.iter_mut() {
            let Some(t) = &mut w.task else { continue };
            if let std::task::Poll::Ready(res) = t.poll() {
                w.task = None;
                if let Ok(p) = &res {
                    self.waiter_times
                        .entry((w.tool, tenant(w.tool, w.tokens)))
                        .or_default()
                        .push((w.arrived, p.admitted_at()));
                }
                self.record(w.op_index, w.tool, 1, w.tokens, res);
            }
        }
    }
}

#[path = "proptests/reference.rs"]
mod reference;

use reference::{bucket_conforms, concurrency_conforms, of, window_conforms};

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn no_schedule_over_admits_any_quota(ops in prop::collection::vec(op(), 1..60)) {
        let r = run(&ops, &[]);
        let req = |a: &Admission| a.count;
        bucket_conforms(of(&r, &[0], req), 2, S, 2).map_err(|e| TestCaseError::fail(format!("tools.a.rate: {e}")))?;
        bucket_conforms(of(&r, &[0, 1], req), 5, S, 3).map_err(|e| TestCaseError::fail(format!("pools.p.rate: {e}")))?;
        bucket_conforms(of(&r, &[2], req), 1, S, 1).map_err(|e| TestCaseError::fail(format!("tools.c.rate: {e}")))?;
        bucket_conforms(of(&r, &[3], req), 3, S, 2).map_err(|e| TestCaseError::fail(format!("tools.d.rate: {e}")))?;
        bucket_conforms(of(&r, &[1], |a| a.tokens), 100, S, 50).map_err(|e| TestCaseError::fail(format!("tools.b.tokens: {e}")))?;
        window_conforms(&of(&r, &[1], req), 3, S).map_err(|e| TestCaseError::fail(format!("tools.b.rate: {e}")))?;
        concurrency_conforms(&r, &[0, 1], 3).map_err(|e| TestCaseError::fail(format!("pools.p.concurrency: {e}")))?;
        concurrency_conforms(&r, &[2], 1).map_err(|e| TestCaseError::fail(format!("tools.c.concurrency: {e}")))?;
        for t in TENANTS.into_iter().chain([""]) {
            let adm = r.admissions.iter().filter(|a| a.tool == E && !a.cancelled && a.tenant == Some(t));
            bucket_conforms(adm.map(|a| (a.at, a.count)).collect(), 2, S, 2)
                .map_err(|e| TestCaseError::fail(format!("tools.e.rate, tenant {t:?}: {e}")))?;
        }
    }

    #[test]
    fn no_call_is_admitted_while_its_upstream_pause_lasts(ops in prop::collection::vec(op(), 1..60)) {
        let r = run(&ops, &[]);
        for p in &r.pauses {
            for a in r.admissions.iter().filter(|a| !a.cancelled && (a.tool, a.tenant) == p.queue) {
                prop_assert!(
                    !(p.from < a.at && a.at < p.until),
                    "tool {} (tenant {:?}) admitted at {} during its pause from {} to {}",
                    TOOLS[a.tool], a.tenant, a.at, p.from, p.until
                );
            }
        }
    }

    #[test]
    fn waiters_are_admitted_in_fifo_order(ops in prop::collection::vec(op(), 1..60)) {
        let r = run(&ops, &[]);
        for ((tool, tenant), times) in &r.waiter_times {
            let mut by_arrival = times.clone();
            by_arrival.sort_by_key(|t| t.0);
            for w in by_arrival.windows(2) {
                prop_assert!(w[0].1 <= w[1].1, "tool {} (tenant {:?}): waiter {} admitted at {} after waiter {} at {}", TOOLS[*tool], tenant, w[0].0, w[0].1, w[1].0, w[1].1);
            }
        }
    }

    #[test]
    fn a_waiter_cancelled_before_time_moves_is_invisible_to_every_other_call(
        ops in prop::collection::vec(op(), 1..60),
    ) {
        // Cancel only at the instant of arrival (no time passes), so that "as if it
        // never came" is a statement about every later decision.
        let mut ops: Vec<Op> = ops.into_iter().filter(|op| !matches!(op, Op::Cancel(_))).collect();
        let mut cancel_now = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            if matches!(op, Op::Wait { tokens, .. } if tokens % 3 == 0) {
                cancel_now.push(i);
            }
        }
        for (shift, &i) in cancel_now.iter().enumerate() {
            ops.insert(i + shift + 1, Op::Cancel(usize::MAX));
        }
        let a = run_tracking(&ops, &[]);
        if a.1.is_empty() {
            // No waiter was still pending when cancelled: nothing to compare.
            return Ok(());
        }
        let b = run(&ops, &a.1);
        let others_a: BTreeMap<_, _> = a.0.told.iter().filter(|(k, _)| !a.1.contains(k)).collect();
        let others_b: BTreeMap<_, _> = b.told.iter().filter(|(k, _)| !a.1.contains(k)).collect();
        prop_assert_eq!(others_a, others_b);
    }
}
