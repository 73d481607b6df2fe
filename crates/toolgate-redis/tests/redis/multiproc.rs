//! One quota, many OS processes: 4 processes × 64 concurrent callers on a quota of
//! 50/s with burst 10 for 5 s admit at most 10 + 50 × 5 and at least 95 % of that.
//!
//! The parent test starts a server and re-runs this test binary four times with a
//! filter that selects only [`child_worker`], passing the server and the start time
//! through the environment.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use toolgate::{Call, Policy};
use toolgate_redis::Source;

use crate::support::{prefix, redis_available, store, RedisServer, HEAVY};

const PROCESSES: usize = 4;
const CALLERS: usize = 64;
const SECS: u64 = 5;
const POLICY: &str = "[tools.shared]\nrate = \"50/s\"\nburst = 10";

fn unix_ms() -> u64 {
    unix_us() / 1000
}

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(0))
}

/// Callers stop sending this long before the end, so that the last admissions (made
/// on Redis after the request's flight) still fall within the 5 s.
const GUARD_MS: u64 = 50;

#[test]
fn four_processes_share_one_quota_exactly() {
    if !redis_available() {
        return;
    }
    let _heavy = HEAVY.blocking_lock();
    let server = RedisServer::start();
    let p = prefix("multiproc");
    let start = unix_ms() + 1_500;
    let children = spawn_children(&server.url(), &p, start);
    let mut total = 0;
    let mut each = Vec::new();
    let (mut first, mut last) = (u64::MAX, 0);
    for child in children {
        let (n, span) = child_result(child);
        if let Some((a, b)) = span {
            first = first.min(a);
            last = last.max(b);
        }
        each.push(n);
        total += n;
    }
    let max = 10 + 50 * SECS;
    // Every admission was made on Redis between the first request sent and the last
    // answer received, so the GCRA bound over that measured span holds exactly.
    let span_us = last.saturating_sub(first);
    let exact = 10 + 50 * span_us / 1_000_000;
    eprintln!(
        "admitted per process: {each:?}, total {total} of at most {max} \
         (measured span {span_us} µs: at most {exact})"
    );
    assert!(total <= max, "over-admitted: {total} > {max} ({each:?})");
    assert!(
        total <= exact,
        "over-admitted: {total} > {exact} in {span_us} µs"
    );
    assert!(
        total * 100 >= max * 95,
        "under-admitted: {total} < 95% of {max} ({each:?})"
    );
    assert!(
        each.iter().all(|n| *n > 0),
        "every process got a share: {each:?}"
    );
}

/// Starts the [`PROCESSES`] children on the server at `url`, under key prefix `p`,
/// to start sending at `start` (Unix ms).
fn spawn_children(url: &str, p: &str, start: u64) -> Vec<Child> {
    let exe = std::env::current_exe().expect("test binary");
    (0..PROCESSES)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "multiproc::child_worker",
                    "--exact",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env("TOOLGATE_MP_URL", url)
                .env("TOOLGATE_MP_PREFIX", p)
                .env("TOOLGATE_MP_START", start.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn a child process")
        })
        .collect()
}

/// What a child printed once it finished: the calls it admitted, and the span (Unix
/// µs) from its first request sent to its last answer received, if it measured one.
fn child_result(child: Child) -> (u64, Option<(u64, u64)>) {
    let out = child.wait_with_output().expect("child finishes");
    let text = String::from_utf8_lossy(&out.stdout);
    let n: u64 = text
        .lines()
        .find_map(|l| l.split_once("ADMITTED ").map(|(_, n)| n))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("child printed no count: {text}"));
    assert!(out.status.success(), "child failed: {text}");
    let span: Vec<u64> = text
        .lines()
        .find_map(|l| l.split_once("SPAN ").map(|(_, s)| s))
        .map(|s| {
            s.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let span = if let [a, b] = span[..] {
        Some((a, b))
    } else {
        None
    };
    (n, span)
}

/// The child's part: does nothing unless started by the test above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_worker() {
    let (Ok(url), Ok(p), Ok(start)) = (
        std::env::var("TOOLGATE_MP_URL"),
        std::env::var("TOOLGATE_MP_PREFIX"),
        std::env::var("TOOLGATE_MP_START"),
    ) else {
        return;
    };
    let start: u64 = start.parse().expect("start time");
    let policy = Policy::from_toml_str(POLICY).expect("valid");
    let engine = toolgate_redis::engine(policy, &store(&url, &p, "timeout = \"1s\""))
        .await
        .expect("connect");
    let admitted = Arc::new(AtomicU64::new(0));
    tokio::time::sleep(Duration::from_millis(start.saturating_sub(unix_ms()))).await;
    let end = start + SECS * 1000 - GUARD_MS;
    let first = Arc::new(AtomicU64::new(u64::MAX));
    let last = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..CALLERS)
        .map(|i| {
            let engine = engine.clone();
            let admitted = admitted.clone();
            let (first, last) = (first.clone(), last.clone());
            tokio::spawn(async move {
                let jitter = Duration::from_micros(u64::try_from(i).unwrap_or(0) * 97);
                while unix_ms() < end {
                    first.fetch_min(unix_us(), Ordering::Relaxed);
                    let result = engine.admit_now(&Call::new("shared")).await;
                    last.fetch_max(unix_us(), Ordering::Relaxed);
                    match result {
                        Ok(p) => {
                            assert_eq!(Source::of(&p), Some(Source::Redis));
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(r) => {
                            let wait = r.retry_after().unwrap_or(Duration::from_millis(5));
                            let wait =
                                wait.clamp(Duration::from_millis(1), Duration::from_millis(50));
                            tokio::time::sleep(wait + jitter).await;
                        }
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("caller");
    }
    println!("\nADMITTED {}", admitted.load(Ordering::Relaxed));
    println!(
        "\nSPAN {} {}",
        first.load(Ordering::Relaxed),
        last.load(Ordering::Relaxed)
    );
}
