//! The store seam (`Engine::with_store`): several engines on one shared store obey
//! one quota, while pauses, breakers and counters stay per engine.
//!
//! `Shared` is a real `QuotaStore`: it keeps the quotas in one in-memory engine
//! that several engines share, as several processes share one Redis (the Redis
//! store runs the semantic suite through the same seam in `toolgate-redis`).
//! A call of the tenant `stalled` never gets an answer from it, as from a store
//! whose round trip hangs.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use toolgate::store::{Level, QuotaStore, StoreFuture, StoreLease};
use toolgate::{Call, Completion, Engine, ManualClock, Outcome, Permit, Policy, Reason, Rejection};

/// The tenant whose calls the store never answers.
const STALLED: &str = "stalled";

#[derive(Debug)]
struct Shared {
    quotas: Engine,
    asked: AtomicUsize,
    refuse_reload: bool,
}

#[derive(Debug)]
struct Lease(Permit);

impl StoreLease for Lease {
    fn waited(&self) -> Duration {
        self.0.waited()
    }
    fn complete(self: Box<Self>, completion: Option<Completion>) {
        // The store keeps quotas only: outcomes feed the breakers of the engine
        // that ran the call, not the store's. Token counts are reconciled.
        match completion.and_then(|c| c.tokens) {
            Some(t) => self.0.complete(Completion::success().tokens(t)),
            None => drop(self.0),
        }
    }
    fn cancel(self: Box<Self>) {
        self.0.cancel();
    }
}

impl QuotaStore for Shared {
    fn name(&self) -> &'static str {
        "shared-memory"
    }
    fn admit<'a>(
        &'a self,
        call: Call<'a>,
        wait: bool,
    ) -> StoreFuture<'a, Result<Box<dyn StoreLease>, Rejection>> {
        self.asked.fetch_add(1, Ordering::Relaxed);
        Box::pin(async move {
            if call.tenant_id() == Some(STALLED) {
                std::future::pending::<()>().await;
            }
            let p = if wait {
                self.quotas.admit(&call).await
            } else {
                self.quotas.try_admit(&call)
            };
            p.map(|p| Box::new(Lease(p)) as Box<dyn StoreLease>)
        })
    }
    fn admit_all<'a>(
        &'a self,
        calls: &'a [Call<'a>],
    ) -> StoreFuture<'a, Result<Vec<Box<dyn StoreLease>>, Rejection>> {
        self.asked.fetch_add(1, Ordering::Relaxed);
        Box::pin(async move {
            if calls.iter().any(|c| c.tenant_id() == Some(STALLED)) {
                std::future::pending::<()>().await;
            }
            self.quotas.try_admit_all(calls).map(|ps| {
                ps.into_iter()
                    .map(|p| Box::new(Lease(p)) as Box<dyn StoreLease>)
                    .collect()
            })
        })
    }
    fn levels<'a>(
        &'a self,
        tools: &'a [&'a str],
        tenant: Option<&'a str>,
    ) -> StoreFuture<'a, Result<Vec<Vec<Level>>, String>> {
        Box::pin(async move {
            if tenant == Some(STALLED) {
                return Err("the store did not answer".to_string());
            }
            Ok(tools
                .iter()
                .map(|tool| {
                    let quotas = self.quotas.tool_state(tool, tenant).map(|s| s.quotas);
                    quotas
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(|q| Some(Level::new(q.quota, q.available?)))
                        .collect()
                })
                .collect())
        })
    }
    fn apply(&self, policy: &Policy) -> Result<(), String> {
        if self.refuse_reload && *policy != self.quotas.policy() {
            return Err("this store cannot run that policy".into());
        }
        self.quotas.apply(policy.clone());
        Ok(())
    }
}

const TOML: &str = r#"
[tools.lookup]
rate = "2/s"
burst = 2
concurrency = 5

[tools.pay]
rate = "100/s"

[tools.pay.circuit]
window = 2
min_calls = 2
failure_rate = 0.5
open_for = "10s"
"#;

fn setup(toml: &str, refuse_reload: bool) -> (Arc<Shared>, Engine, Engine, ManualClock) {
    let clock = ManualClock::new();
    let policy = Policy::from_toml_str(toml).unwrap();
    let store = Arc::new(Shared {
        quotas: Engine::with_clock(policy.clone(), Arc::new(clock.clone())),
        asked: AtomicUsize::new(0),
        refuse_reload,
    });
    let a = Engine::with_store(policy.clone(), Arc::new(clock.clone()), store.clone()).unwrap();
    let b = Engine::with_store(policy, Arc::new(clock.clone()), store.clone()).unwrap();
    (store, a, b, clock)
}

#[tokio::test]
async fn engines_on_one_store_obey_one_quota() {
    let (_store, a, b, clock) = setup(TOML, false);
    let call = Call::new("lookup");
    let p1 = a.admit_now(&call).await.unwrap();
    let p2 = b.admit(&call).await.unwrap();
    let no = b.admit_now(&call).await.unwrap_err();
    assert_eq!(
        (no.reason(), no.quota()),
        (Reason::RateLimited, "tools.lookup.rate")
    );
    assert_eq!(no.retry_after(), Some(Duration::from_millis(500)));
    assert!(a.admit_now(&call).await.is_err());
    clock.advance(Duration::from_millis(500));
    let p3 = a.admit_now(&call).await.unwrap();
    // Each engine counts its own decisions, once each.
    let sa = a.tool_state("lookup", None).unwrap();
    let sb = b.tool_state("lookup", None).unwrap();
    assert_eq!((sa.admitted, sa.rejected, sa.in_flight), (2, 1, 2));
    assert_eq!((sb.admitted, sb.rejected, sb.in_flight), (1, 1, 1));
    for p in [p1, p2, p3] {
        p.complete(Completion::success());
    }
    assert_eq!(a.tool_state("lookup", None).unwrap().in_flight, 0);
}

/// `(quota, kind, capacity, available)` of each quota in `tool`'s state.
fn quota_figures(s: &toolgate::ToolState) -> Vec<(&str, &str, u64, Option<u64>)> {
    s.quotas
        .iter()
        .map(|q| (q.quota.as_str(), q.kind, q.capacity, q.available))
        .collect()
}

#[tokio::test]
async fn fetched_state_reads_what_each_quota_has_left_in_the_store() {
    let toml = r#"
        [pools.crm]
        rate = "10/min"
        [tools.lookup]
        rate = "2/s"
        burst = 2
        pools = ["crm"]
        [tools.db.adaptive]
        algorithm = "aimd"
        target_latency = "100ms"
        min = 1
        max = 4
        initial = 2
    "#;
    let (_store, a, b, _clock) = setup(toml, false);
    let call = Call::new("lookup");
    let _held = a.admit_now(&call).await.unwrap();
    // What an engine keeps itself has no quota of the store's ...
    assert!(b.tool_state("lookup", None).unwrap().quotas.is_empty());
    // ... and its fetched state has every quota of the policy, with the store's
    // figures: b sees what a admitted.
    let s = b.fetch_tool_state("lookup", None).await.unwrap();
    assert_eq!(
        quota_figures(&s),
        [
            ("tools.lookup.rate", "rate", 2, Some(1)),
            ("pools.crm.rate", "rate", 10, Some(9)),
        ]
    );
    assert!(b.fetch_tool_state("nope", None).await.is_none());
    // Every tool at once: the same figures, sorted by name.
    let all = b.fetch_tool_states(None).await;
    let names: Vec<&str> = all.iter().map(|s| s.tool.as_str()).collect();
    assert_eq!(names, ["db", "lookup"]);
    assert_eq!(
        quota_figures(&all[1])[0],
        ("tools.lookup.rate", "rate", 2, Some(1))
    );
    // An adaptive limit stays the engine's own, after the store's quotas (none here).
    let s = b.fetch_tool_state("db", None).await.unwrap();
    assert_eq!(
        quota_figures(&s),
        [("tools.db.concurrency", "concurrency", 2, Some(2))]
    );
    // A store that does not answer leaves the figures unknown, the limits known.
    let s = b.fetch_tool_state("lookup", Some(STALLED)).await.unwrap();
    assert_eq!(
        quota_figures(&s),
        [
            ("tools.lookup.rate", "rate", 2, None),
            ("pools.crm.rate", "rate", 10, None),
        ]
    );
}

#[tokio::test]
async fn an_open_circuit_refuses_before_the_store_is_asked_and_only_in_its_engine() {
    let (store, a, b, _clock) = setup(TOML, false);
    for _ in 0..2 {
        let p = a.admit_now(&Call::new("pay")).await.unwrap();
        p.complete(Completion::new(Outcome::Error));
    }
    let asked = store.asked.load(Ordering::Relaxed);
    let no = a.admit_now(&Call::new("pay")).await.unwrap_err();
    assert_eq!(no.reason(), Reason::CircuitOpen);
    assert_eq!(no.quota(), "tools.pay.circuit");
    assert_eq!(
        store.asked.load(Ordering::Relaxed),
        asked,
        "the store was not asked"
    );
    // The other engine (process) has its own breaker, still closed.
    assert!(b.admit_now(&Call::new("pay")).await.is_ok());
}

#[tokio::test]
async fn all_or_nothing_plans_go_through_the_store() {
    let (_store, a, b, _clock) = setup(TOML, false);
    let plan = [Call::new("lookup"), Call::new("lookup"), Call::new("pay")];
    let permits = a.admit_all(&plan).await.unwrap();
    assert_eq!(permits.len(), 3);
    // The store's lookup quota is spent: the same plan on the other engine gets
    // nothing, not even the pay part.
    let no = b.admit_all(&plan).await.unwrap_err();
    assert_eq!(no.quota(), "tools.lookup.rate");
    assert_eq!(b.tool_state("pay", None).unwrap().in_flight, 0);
    // Unused parts go back to the store.
    permits.into_iter().for_each(Permit::cancel);
    assert!(b.admit_all(&plan).await.is_ok());
}

#[tokio::test]
async fn a_permit_says_which_store_decided_it() {
    let (_store, a, _b, _clock) = setup(TOML, false);
    let stored = a.admit_now(&Call::new("lookup")).await.unwrap();
    assert_eq!(stored.store_source(), Some("store"));
    let untouched = a.admit_now(&Call::new("weather")).await.unwrap();
    assert_eq!(untouched.store_source(), None);
    let (memory, _clock) = crate::support::engine(TOML);
    let local = memory.try_admit(&Call::new("lookup")).unwrap();
    assert_eq!(local.store_source(), None);
}

#[tokio::test]
async fn the_synchronous_verbs_refuse_on_a_store_and_say_so() {
    let (_store, a, _b, _clock) = setup(TOML, false);
    let no = a.try_admit(&Call::new("lookup")).unwrap_err();
    assert_eq!((no.quota(), no.reason()), ("store", Reason::CircuitOpen));
    assert!(no.is_store_unavailable());
    let no = a.try_admit_all(&[Call::new("lookup")]).unwrap_err();
    assert_eq!(no.quota(), "store");
    assert!(no.is_store_unavailable());
    // Through a handle too, owned or scoped: a tool on a store has no fast path,
    // and the handle's general path asks.
    let handle = a.tool("lookup");
    let no = handle.try_admit(&Call::new("lookup")).unwrap_err();
    assert!(no.is_store_unavailable());
    let no = handle
        .try_admit_scoped(&Call::new("lookup"))
        .map(|p| p.into_owned())
        .unwrap_err();
    assert!(no.is_store_unavailable());
    // Tools without a policy never needed the store.
    assert!(a.try_admit(&Call::new("weather")).is_ok());
    assert!(a.tool("weather").try_admit(&Call::new("weather")).is_ok());
}

#[tokio::test]
async fn a_reload_the_store_refuses_leaves_the_old_policy_in_force() {
    let (_store, a, _b, _clock) = setup(TOML, true);
    let new = Policy::from_toml_str("[tools.lookup]\nrate = \"1/h\"").unwrap();
    let e = a.try_apply(new).unwrap_err();
    assert!(e.contains("cannot run"), "{e}");
    assert!(a.policy().tools.contains_key("pay"), "old policy kept");
    assert!(a.admit_now(&Call::new("pay")).await.is_ok());
}

#[tokio::test]
async fn a_call_dropped_while_the_store_decides_never_counts_as_in_flight() {
    let toml = "[tools.slow]\nrate = \"1/s\"\nburst = 1\non_limit = \"wait\"\nmax_wait = \"10s\"\n";
    let (_store, a, _b, clock) = setup(toml, false);
    let call = Call::new("slow");
    let held = a.admit(&call).await.unwrap();
    // The next call waits in the store (its clock never moves here); its caller
    // gives up while it waits.
    assert!(still_pending(pin!(a.admit(&call))));
    let s = a.tool_state("slow", None).unwrap();
    assert_eq!(
        (s.admitted, s.in_flight),
        (1, 1),
        "the call the store never admitted is not counted, in or out"
    );
    held.complete(Completion::success());
    assert_eq!(a.tool_state("slow", None).unwrap().in_flight, 0);
    // What the store kept for the call that left goes back with it: the next call
    // waits for the refill only.
    clock.advance(Duration::from_secs(1));
    assert!(a.admit_now(&call).await.is_ok());
}

#[tokio::test]
async fn a_plan_or_a_call_dropped_while_the_store_hangs_never_counts_as_in_flight() {
    let (_store, a, _b, _clock) = setup(TOML, false);
    let held = a.admit_now(&Call::new("pay")).await.unwrap();
    let plan = [Call::new("pay").tenant(STALLED), Call::new("weather")];
    assert!(still_pending(pin!(a.admit_all(&plan))));
    assert!(still_pending(pin!(a.admit_now(&plan[0]))));
    let s = a.tool_state("pay", None).unwrap();
    assert_eq!((s.admitted, s.in_flight), (1, 1));
    held.complete(Completion::success());
    assert_eq!(a.tool_state("pay", None).unwrap().in_flight, 0);
}

/// Polls `f` once: whether it still waits for the store. It is dropped after, as
/// by a caller that gives up.
fn still_pending<F: Future>(f: Pin<&mut F>) -> bool {
    f.poll(&mut Context::from_waker(Waker::noop())).is_pending()
}
