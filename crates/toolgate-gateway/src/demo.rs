//! `toolgate demo`: the customer-service scenario, in-process, on a virtual clock.
//!
//! One model response asks for five customer lookups, two payment checks and three
//! document searches at once. The demo shows which calls toolgate admits, which it
//! rejects before they leave (and why, and when to come back), how capacity refills,
//! and how wait mode queues a burst of searches in FIFO order. Time is virtual (a
//! manual clock), so the output is the same on every run and takes no real time.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use toolgate::{Call, Clock, Completion, Engine, ManualClock, Policy};

use crate::EXAMPLE_CONFIG;

struct Demo {
    clock: ManualClock,
    engine: Engine,
    out: Arc<Mutex<String>>,
    executions: Arc<AtomicUsize>,
}

/// Runs the scenario and returns what it printed.
pub fn run() -> String {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return format!("cannot start a runtime: {e}\n"),
    };
    rt.block_on(scenario())
}

async fn scenario() -> String {
    let policy = match Policy::from_toml_str(EXAMPLE_CONFIG) {
        Ok(p) => p,
        Err(e) => return format!("the bundled config is invalid: {e}\n"),
    };
    let clock = ManualClock::new();
    let demo = Demo {
        engine: Engine::with_clock(policy, Arc::new(clock.clone())),
        clock,
        out: Arc::default(),
        executions: Arc::default(),
    };
    demo.say("toolgate demo: the customer-service agent (virtual time)\n");
    demo.say(
        "policy: lookup_customer 2/s burst 2 (+ pool crm 100/min), get_payment_status 1/s sliding,",
    );
    demo.say("        search_documents 10/s with 40000 tokens/min, waiting up to 2s\n");

    demo.say("1. One model response asks for 5 lookups, 2 payment checks and 3 searches at once:");
    let mut calls = Vec::new();
    calls.extend((1..=5).map(|i| ("lookup_customer", i)));
    calls.extend((1..=2).map(|i| ("get_payment_status", i)));
    calls.extend((1..=3).map(|i| ("search_documents", i)));
    demo.burst(&calls).await;
    demo.say(&format!(
        "   -> tool bodies executed: {} of {} (the rest were stopped before they left)\n",
        demo.executions.load(Ordering::SeqCst),
        calls.len()
    ));

    demo.say("2. Half a second later the lookup bucket has refilled by one token:");
    demo.clock.advance(Duration::from_millis(500));
    demo.burst(&[("lookup_customer", 6), ("lookup_customer", 7)])
        .await;

    demo.say("\n3. A full second after that, two more (the bucket holds at most 2):");
    demo.clock.advance(Duration::from_millis(1000));
    demo.burst(&[
        ("lookup_customer", 8),
        ("lookup_customer", 9),
        ("lookup_customer", 10),
    ])
    .await;

    demo.say("\n4. A burst of 13 searches in wait mode: 10 run now, 3 queue in FIFO order:");
    let searches: Vec<_> = (4..=16).map(|i| ("search_documents", i)).collect();
    demo.burst(&searches).await;
    for _ in 0..4 {
        demo.clock.advance(Duration::from_millis(100));
        settle().await;
    }
    demo.say(&format!(
        "\n   -> tool bodies executed in all: {}",
        demo.executions.load(Ordering::SeqCst)
    ));
    let text = demo.out.lock().map(|s| s.clone()).unwrap_or_default();
    text
}

impl Demo {
    fn say(&self, line: &str) {
        if let Ok(mut out) = self.out.lock() {
            out.push_str(line);
            out.push('\n');
        }
    }

    /// Starts every call concurrently and lets each run until it is decided.
    async fn burst(&self, calls: &[(&'static str, usize)]) {
        for &(tool, n) in calls {
            let engine = self.engine.clone();
            let out = self.out.clone();
            let executions = self.executions.clone();
            let clock = self.clock.clone();
            tokio::spawn(async move {
                let line = match engine.admit(&Call::new(tool)).await {
                    Ok(permit) => {
                        executions.fetch_add(1, Ordering::SeqCst);
                        let waited = permit.waited();
                        permit.complete(Completion::success());
                        if waited.is_zero() {
                            format!("{:<22} admitted", format!("{tool} #{n}"))
                        } else {
                            format!(
                                "{:<22} admitted after waiting {}ms",
                                format!("{tool} #{n}"),
                                waited.as_millis()
                            )
                        }
                    }
                    Err(r) => {
                        let retry = r
                            .retry_after()
                            .map(|d| format!(", retry after {}ms", d.as_millis()))
                            .unwrap_or_default();
                        format!(
                            "{:<22} rejected: {} by {}{retry}",
                            format!("{tool} #{n}"),
                            r.reason(),
                            r.quota()
                        )
                    }
                };
                let t = clock.now() as f64 / 1e9;
                if let Ok(mut o) = out.lock() {
                    let _ = writeln!(o, "   [t={t:6.3}s] {line}");
                }
            });
        }
        settle().await;
    }
}

/// Lets every spawned task run until it blocks.
async fn settle() {
    for _ in 0..64 {
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_demo_admits_exactly_what_the_policy_allows() {
        let out = super::run();
        let count = |a: &str, b: &str| {
            out.lines()
                .filter(|l| l.contains(a) && l.contains(b))
                .count()
        };
        assert_eq!(count("lookup_customer #", "admitted"), 5, "{out}");
        assert_eq!(count("lookup_customer #", "rejected"), 5, "{out}");
        assert_eq!(count("get_payment_status #", "admitted"), 1, "{out}");
        assert!(out.contains("lookup_customer #3     rejected: rate_limited by tools.lookup_customer.rate, retry after 500ms"), "{out}");
        assert!(out.contains("get_payment_status #2  rejected: rate_limited by tools.get_payment_status.rate, retry after 1000ms"), "{out}");
        assert!(out.contains("executed: 6 of 10"), "{out}");
        assert!(
            out.contains("[t= 1.800s] search_documents #16   admitted after waiting 300ms"),
            "{out}"
        );
        assert!(out.contains("tool bodies executed in all: 22"), "{out}");
    }
}
