//! Fair queues against reference models: for random arrivals, costs, tenants, weights
//! and cancellations, the quota is never exceeded (an exact GCRA replayed over the
//! admissions), FIFO holds within a tenant, and a tenant that starts waiting is
//! admitted after at most the call whose turn it was plus one call of each other
//! tenant then waiting (the bound of `docs/semantics.md`, "Fairness and priority").

#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use proptest::prelude::*;
use tokio_test::task::{self, Spawn};
use toolgate::{Call, Engine, ManualClock, Permit, Policy, Rejection};

const TENANTS: [&str; 4] = ["t0", "t1", "t2", "t3"];
/// The quota: 10/s (one unit every 100 ms), burst 2.
const INTERVAL_MS: u64 = 100;
const BURST: u64 = 2;

#[derive(Debug, Clone)]
enum Ev {
    Arrive { tenant: usize, count: u64 },
    Cancel(usize),
    Advance(u64),
}

fn ev() -> impl Strategy<Value = Ev> {
    prop_oneof![
        4 => (0..TENANTS.len(), 1..=2u64).prop_map(|(tenant, count)| Ev::Arrive { tenant, count }),
        1 => (0..64usize).prop_map(Ev::Cancel),
        3 => (1..250u64).prop_map(Ev::Advance),
    ]
}

type Admit = Pin<Box<dyn Future<Output = Result<Permit, Rejection>>>>;

struct Pending {
    id: usize,
    tenant: usize,
    task: Spawn<Admit>,
}

/// What the run saw of one call.
#[derive(Debug, Clone)]
struct Seen {
    tenant: usize,
    count: u64,
    /// Admissions before it arrived.
    before: usize,
    /// Whether its tenant had nothing waiting when it arrived, and how many other
    /// tenants did.
    newcomer: bool,
    others_waiting: usize,
    /// Its place among admissions (in the order they were seen), and its admission
    /// time.
    admitted: Option<(usize, u64)>,
}

fn policy(weights: &[u32]) -> String {
    let mut s = format!(
        "[tools.f]\nrate = \"10/s\"\nburst = {BURST}\non_limit = \"wait\"\nmax_wait = \"1h\"\n\
         queue_limit = 10000\nfairness = \"tenant\"\n"
    );
    for (t, w) in TENANTS.iter().zip(weights) {
        s.push_str(&format!("[tenants.{t}]\nweight = {w}\n"));
    }
    s
}

/// Polls the woken calls until none moves; admissions are recorded in order.
fn settle(pending: &mut Vec<Pending>, seen: &mut [Seen], order: &mut Vec<usize>) {
    loop {
        let mut moved = false;
        let mut i = 0;
        while i < pending.len() {
            if pending[i].task.is_woken() {
                if let Poll::Ready(r) = pending[i].task.poll() {
                    let p = pending.remove(i);
                    let permit = r.unwrap_or_else(|e| panic!("call {} refused: {e}", p.id));
                    seen[p.id].admitted = Some((order.len(), permit.admitted_at()));
                    order.push(p.id);
                    moved = true;
                    continue;
                }
            }
            i += 1;
        }
        if !moved {
            return;
        }
    }
}

fn run(weights: &[u32], events: &[Ev]) -> Vec<Seen> {
    let clock = ManualClock::new();
    let engine = Engine::with_clock(
        Policy::from_toml_str(&policy(weights)).unwrap(),
        Arc::new(clock.clone()),
    );
    let mut seen: Vec<Seen> = Vec::new();
    let mut pending: Vec<Pending> = Vec::new();
    let mut order = Vec::new();
    for e in events {
        match *e {
            Ev::Arrive { tenant, count } => {
                let waiting = |t: usize| pending.iter().any(|p| p.tenant == t);
                let id = seen.len();
                seen.push(Seen {
                    tenant,
                    count,
                    before: order.len(),
                    newcomer: !waiting(tenant),
                    others_waiting: (0..TENANTS.len())
                        .filter(|&t| t != tenant && waiting(t))
                        .count(),
                    admitted: None,
                });
                let engine = engine.clone();
                let fut: Admit = Box::pin(async move {
                    let call = Call::new("f").tenant(TENANTS[tenant]).count(count);
                    engine.admit(&call).await
                });
                let mut task = task::spawn(fut);
                match task.poll() {
                    Poll::Ready(r) => {
                        let permit = r.unwrap_or_else(|e| panic!("call {id} refused: {e}"));
                        seen[id].admitted = Some((order.len(), permit.admitted_at()));
                        order.push(id);
                    }
                    Poll::Pending => pending.push(Pending { id, tenant, task }),
                }
            }
            Ev::Cancel(i) => {
                if !pending.is_empty() {
                    let p = pending.remove(i % pending.len());
                    drop(p.task);
                }
            }
            Ev::Advance(ms) => clock.advance(Duration::from_millis(ms)),
        }
        settle(&mut pending, &mut seen, &mut order);
    }
    seen
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn fair_turns_never_exceed_the_quota_keep_fifo_per_tenant_and_bound_a_newcomer(
        weights in prop::collection::vec(1..=4u32, TENANTS.len()),
        events in prop::collection::vec(ev(), 1..80),
    ) {
        let seen = run(&weights, &events);
        let mut admitted: Vec<(usize, u64, &Seen)> = seen
            .iter()
            .filter_map(|s| s.admitted.map(|(place, at)| (place, at, s)))
            .collect();
        admitted.sort_by_key(|(place, ..)| *place);

        // The quota: an exact GCRA replayed over the admissions in time order, in
        // nanoseconds.
        let t = INTERVAL_MS * 1_000_000;
        let mut tat = 0u64;
        let mut by_time = admitted.clone();
        by_time.sort_by_key(|(place, at, _)| (*at, *place));
        for (place, at, s) in &by_time {
            let start = tat.max(*at);
            prop_assert!(
                start + s.count * t - at <= BURST * t,
                "admission {place} at {at} ns (cost {}) exceeds the quota", s.count
            );
            tat = start + s.count * t;
        }

        // FIFO within a tenant: ids (arrival order) grow along the admissions.
        for tenant in 0..TENANTS.len() {
            let ids: Vec<usize> = admitted
                .iter()
                .filter(|(_, _, s)| s.tenant == tenant)
                .map(|(place, ..)| *place)
                .collect();
            let arrivals: Vec<usize> = seen
                .iter()
                .enumerate()
                .filter(|(_, s)| s.tenant == tenant && s.admitted.is_some())
                .map(|(_, s)| s.admitted.unwrap().0)
                .collect();
            prop_assert_eq!(&ids, &arrivals, "tenant {} out of arrival order", tenant);
        }

        // A newcomer waits at most the call in its turn plus one of each other
        // waiting tenant.
        for s in seen.iter().filter(|s| s.newcomer) {
            if let Some((place, _)) = s.admitted {
                let ahead = place - s.before;
                prop_assert!(
                    ahead <= 1 + s.others_waiting,
                    "a newcomer of t{} went after {} others ({} tenants waiting)",
                    s.tenant, ahead, s.others_waiting
                );
            }
        }
    }
}
