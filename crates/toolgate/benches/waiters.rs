//! Wait mode on the real clock: 10,000 waiters. Measures how late each is admitted
//! relative to its conforming time (p50/p99/max), and the CPU the process uses while
//! they wait. Run: `cargo bench -p toolgate --bench waiters`.
//! Under `cargo test` (no `--bench` argument) it runs a small, quick version.

#![allow(clippy::unwrap_used, missing_docs)]
#![allow(
    clippy::disallowed_methods,
    reason = "a benchmark measures real elapsed time"
)]

use std::time::{Duration, Instant};

use toolgate::{Call, Engine, Policy};

fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = stat.rsplit(')').next()?;
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn spread(n: usize, rate: u64) {
    let policy = format!(
        "[tools.w]\nrate = \"{rate}/s\"\nburst = 1\non_limit = \"wait\"\nmax_wait = \"1h\"\nqueue_limit = {}",
        n + 1
    );
    let engine = Engine::new(Policy::from_toml_str(&policy).unwrap());
    let (cpu0, wall0) = (cpu_time(), Instant::now());
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let e = engine.clone();
            tokio::spawn(async move {
                let p = e.admit(&Call::new("w")).await.unwrap();
                let late = e.clock().now().saturating_sub(p.admitted_at());
                (p.admitted_at(), Duration::from_nanos(late))
            })
        })
        .collect();
    let mut admitted = Vec::with_capacity(n);
    for t in tasks {
        admitted.push(t.await.unwrap());
    }
    let (cpu, wall) = (cpu_time().zip(cpu0).map(|(a, b)| a - b), wall0.elapsed());
    let mut late: Vec<_> = admitted.iter().map(|&(_, l)| l).collect();
    late.sort();
    // The first conforming times fall while the tasks are still being spawned and
    // polled for the first time: a waiter woken then queues behind that backlog.
    let first = admitted.iter().map(|&(at, _)| at).min().unwrap_or(0);
    let settle = Duration::from_millis(100);
    let mut steady: Vec<_> = admitted
        .iter()
        .filter(|&&(at, _)| Duration::from_nanos(at - first) >= settle)
        .map(|&(_, l)| l)
        .collect();
    steady.sort();
    println!(
        "waiters_spread: {n} waiters at {rate}/s over {wall:.2?}: lateness p50 {:?} p99 {:?} max {:?}; process CPU {:?} ({:.1}% of one core)",
        pct(&late, 0.5),
        pct(&late, 0.99),
        late[n - 1],
        cpu.unwrap_or_default(),
        cpu.map_or(0.0, |c| 100.0 * c.as_secs_f64() / wall.as_secs_f64()),
    );
    if !steady.is_empty() {
        println!(
            "waiters_spread: the {} waiters due {settle:?} or more after the first: lateness p50 {:?} p99 {:?} max {:?}",
            steady.len(),
            pct(&steady, 0.5),
            pct(&steady, 0.99),
            steady[steady.len() - 1],
        );
    }
}

async fn idle(n: usize, hold: Duration) {
    let policy = format!(
        "[tools.w]\nrate = \"{n}/{}ms\"\nwindow = \"sliding\"\non_limit = \"wait\"\nmax_wait = \"1h\"\nqueue_limit = {}",
        hold.as_millis(),
        n + 1
    );
    let engine = Engine::new(Policy::from_toml_str(&policy).unwrap());
    drop(engine.try_admit(&Call::new("w").count(n as u64)).unwrap());
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let e = engine.clone();
            tokio::spawn(async move { e.admit(&Call::new("w")).await.map(drop).is_ok() })
        })
        .collect();
    tokio::time::sleep(hold / 10).await;
    let (cpu0, wall0) = (cpu_time(), Instant::now());
    tokio::time::sleep(hold * 7 / 10).await;
    let (cpu, wall) = (cpu_time().zip(cpu0).map(|(a, b)| a - b), wall0.elapsed());
    let mut ok = 0;
    for t in tasks {
        ok += usize::from(t.await.unwrap());
    }
    assert_eq!(ok, n);
    println!(
        "waiters_idle: {n} waiters asleep for {wall:.2?}: process CPU {:?} ({:.2}% of one core)",
        cpu.unwrap_or_default(),
        cpu.map_or(0.0, |c| 100.0 * c.as_secs_f64() / wall.as_secs_f64()),
    );
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        if full {
            idle(10_000, Duration::from_secs(2)).await;
            spread(10_000, 5_000).await;
        } else {
            idle(200, Duration::from_millis(200)).await;
            spread(200, 2_000).await;
        }
    });
}
