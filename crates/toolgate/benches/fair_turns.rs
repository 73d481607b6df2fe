//! The cost of a turn in a fair queue (`fairness = "tenant"`) as the number of
//! waiters and tenants grows: waiters are parked, the clock is advanced one interval
//! at a time, and each admission (the head admitted, the next turn chosen, the new
//! head reserving its time) is timed. Choosing a turn is O(log tenants), so the time
//! per admission should not grow with 100 × the waiters.
//!
//! Run: `cargo bench -p toolgate --bench fair_turns`. Under `cargo test` (no
//! `--bench` argument) it runs a small, quick version.

#![allow(clippy::unwrap_used, missing_docs)]
#![allow(
    clippy::disallowed_methods,
    reason = "a benchmark measures real elapsed time"
)]

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use toolgate::{Call, Engine, ManualClock, Permit, Policy, Rejection};

type Admit = Pin<Box<dyn Future<Output = Result<Permit, Rejection>>>>;

/// Wakes by putting the task's index on a shared list, so a step polls only the
/// tasks a change woke.
struct Woken {
    index: usize,
    list: Arc<Mutex<Vec<usize>>>,
}

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.list.lock().unwrap().push(self.index);
    }
}

/// Polls task `i` once with its waker: whether it was admitted (its slot emptied).
fn poll(i: usize, tasks: &mut [Option<(Admit, Waker)>]) -> bool {
    let Some((fut, waker)) = tasks[i].as_mut() else {
        return false;
    };
    let mut cx = Context::from_waker(waker);
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(r) => {
            drop(r.unwrap());
            tasks[i] = None;
            true
        }
        Poll::Pending => false,
    }
}

/// `waiters` calls of `tenants` tenants parked on a 1,000/s quota; then `turns`
/// admissions (fewer than `waiters`) timed: nanoseconds per admission (advancing the clock and polling
/// the woken included).
fn per_turn(waiters: usize, tenants: usize, turns: usize) -> f64 {
    assert!(turns < waiters, "every turn needs a waiter");
    let clock = ManualClock::new();
    let policy = format!(
        "[tools.f]\nrate = \"1000/s\"\nburst = 1\non_limit = \"wait\"\nmax_wait = \"1h\"\n\
         queue_limit = {}\nfairness = \"tenant\"",
        waiters + 1
    );
    let engine = Engine::with_clock(
        Policy::from_toml_str(&policy).unwrap(),
        Arc::new(clock.clone()),
    );
    drop(engine.try_admit(&Call::new("f")).unwrap());
    let list = Arc::new(Mutex::new(Vec::new()));
    let names: Vec<String> = (0..tenants).map(|t| format!("tenant-{t}")).collect();
    let mut tasks: Vec<Option<(Admit, Waker)>> = (0..waiters)
        .map(|i| {
            let engine = engine.clone();
            let tenant = names[i % tenants].clone();
            let fut: Admit =
                Box::pin(async move { engine.admit(&Call::new("f").tenant(&tenant)).await });
            let waker = Waker::from(Arc::new(Woken {
                index: i,
                list: list.clone(),
            }));
            Some((fut, waker))
        })
        .collect();
    for i in 0..waiters {
        assert!(!poll(i, &mut tasks), "parked");
    }
    list.lock().unwrap().clear();
    let start = Instant::now();
    let mut admitted = 0;
    while admitted < turns {
        clock.advance(Duration::from_millis(1));
        loop {
            let woken: Vec<usize> = std::mem::take(&mut *list.lock().unwrap());
            if woken.is_empty() {
                break;
            }
            for i in woken {
                if poll(i, &mut tasks) {
                    admitted += 1;
                }
            }
        }
    }
    start.elapsed().as_nanos() as f64 / turns as f64
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (small, large, turns) = if full {
        (200, 10_000, 100)
    } else {
        (10, 200, 5)
    };
    for (waiters, tenants) in [(small, 1), (small, 10), (large, 10), (large, 100)] {
        let ns = per_turn(waiters, tenants, turns);
        println!("fair turns: {waiters} waiters over {tenants} tenants: {ns:.0} ns per admission");
    }
}
