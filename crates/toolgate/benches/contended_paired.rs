//! Both cores hammering one quota, toolgate and governor measured in pairs.
//! Run: `cargo bench -p toolgate --bench contended_paired`. Under `cargo test` (no
//! `--bench` argument) it runs a small, quick version.
//!
//! Why besides the criterion group `single_quota_contended_2_threads`: on a VM,
//! what the two threads pay for sharing one quota changes by 2× from one second to
//! the next, as the host places the two vCPUs on sibling hyperthreads of one core
//! (the cache line never moves; both threads share the core's instruction
//! throughput) or on separate cores (the line moves between caches on every swap).
//! Two criterion groups run a minute apart can land in different regimes. Here each
//! round runs toolgate, governor and toolgate again for a quarter of a second each,
//! both threads admitting the whole time (no ramp-up or tail where one runs alone),
//! and compares the neighbouring runs. The report splits the rounds by governor's
//! time: the faster half is the siblings' regime, the slower half the separate
//! cores' (when a run stays in one regime, both halves show it).

#![allow(clippy::unwrap_used, missing_docs)]
#![allow(
    clippy::disallowed_methods,
    reason = "a benchmark measures real elapsed time"
)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use toolgate::Call;

#[path = "support.rs"]
#[allow(dead_code)]
mod support;

use support::{engine, governor_direct, OPEN_BUCKET};

/// Nanoseconds of wall time per decision while two threads run `op` for `span`.
fn overlapped(op: &(dyn Fn() + Sync), span: Duration) -> f64 {
    let stop = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let start = Barrier::new(3);
    let elapsed = std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                start.wait();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..256 {
                        op();
                    }
                    n += 256;
                }
                total.fetch_add(n, Ordering::Relaxed);
            });
        }
        start.wait();
        let t0 = Instant::now();
        std::thread::sleep(span);
        stop.store(true, Ordering::Relaxed);
        t0.elapsed()
    });
    elapsed.as_secs_f64() * 1e9 / total.load(Ordering::Relaxed) as f64
}

/// governor's limiter alone in its own cache lines, as toolgate's word is.
#[repr(align(128))]
struct Padded<T>(T);

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (rounds, span) = if full {
        (40, Duration::from_millis(250))
    } else {
        (2, Duration::from_millis(20))
    };
    let e = engine(OPEN_BUCKET);
    let handle = e.tool("t");
    let call = Call::new("t");
    let gov = Box::new(Padded(governor_direct()));
    let toolgate = || {
        drop(
            handle
                .try_admit_scoped(std::hint::black_box(&call))
                .unwrap(),
        )
    };
    let governor = || gov.0.check().unwrap();
    let mut rounds: Vec<(f64, f64)> = (0..rounds)
        .map(|_| {
            let a = overlapped(&toolgate, span);
            let g = overlapped(&governor, span);
            let b = overlapped(&toolgate, span);
            ((a + b) / 2.0, g)
        })
        .collect();
    rounds.sort_by(|x, y| x.1.total_cmp(&y.1));
    let (fast, slow) = rounds.split_at(rounds.len() / 2);
    for (name, half) in [
        ("governor's faster half", fast),
        ("governor's slower half", slow),
    ] {
        let mut ratios: Vec<f64> = half.iter().map(|(t, g)| t / g).collect();
        ratios.sort_by(f64::total_cmp);
        let mid = half.len() / 2;
        let (t, g) = half[mid];
        println!(
            "contended_paired, {name} ({} rounds): toolgate / governor per decision, \
             median ratio {:.2}; median times {t:.1} / {g:.1} ns; ratios {}",
            half.len(),
            ratios[ratios.len() / 2],
            ratios
                .iter()
                .map(|r| format!("{r:.2}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
}
