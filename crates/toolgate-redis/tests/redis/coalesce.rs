//! Coalesced admissions (issue #18): calls on one bucket decided together in one run
//! of `admit_bucket.lua` get exactly the answers they would get one by one, and a
//! lone caller is never batched.

use std::time::Duration;

use futures_util::future::join_all;
use toolgate::{Call, Policy, Reason};

use crate::backend::{Backend, Factory, RedisFactory};
use crate::support::{prefix, redis_available, store, tat, RedisServer, HEAVY};

/// One call's answer: admitted, or denied with its retry in µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Admitted,
    Denied(i64),
}

/// A bucket: one token is `pq + pr/den` µs, `burst` tokens at most.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    pq: u64,
    pr: u64,
    den: u64,
    burst: u64,
}

impl Bucket {
    /// `n` tokens as (whole µs, remainder in 1/den µs).
    fn units(self, n: u64) -> (i64, i64) {
        let (n, pq, pr, den) = (
            i128::from(n),
            i128::from(self.pq),
            i128::from(self.pr),
            i128::from(self.den),
        );
        let w = i64::try_from(n * pq + n * pr / den).expect("small");
        let r = i64::try_from(n * pr % den).expect("small");
        (w, r)
    }

    /// The five numbers of a run of `n` calls of `cost` tokens (`admit_bucket.lua`).
    fn run(self, cost: u64, n: u64) -> [i64; 5] {
        let (cw, cr) = self.units(cost);
        let (bw, br) = self.units(self.burst);
        let (mut dw, mut dr) = (cw - bw, cr - br);
        if dr < 0 {
            dr += i64::try_from(self.den).expect("small");
            dw -= 1;
        }
        [cw, cr, dw, dr, i64::try_from(n).expect("small")]
    }
}

/// `admit_bucket.lua`'s numeric argument: `den`, then each run's five numbers.
fn packed(b: Bucket, runs: &[(u64, u64)]) -> Vec<u8> {
    #[allow(clippy::cast_precision_loss, reason = "small test values")]
    let mut nums = vec![b.den as f64];
    for (cost, n) in runs {
        #[allow(clippy::cast_precision_loss, reason = "small test values")]
        nums.extend(b.run(*cost, *n).iter().map(|v| *v as f64));
    }
    nums.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The calls of `costs` as runs of equal costs.
fn runs_of(costs: &[u64]) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for c in costs {
        match runs.last_mut() {
            Some((cost, n)) if cost == c => *n += 1,
            _ => runs.push((*c, 1)),
        }
    }
    runs
}

/// Issue #18: a batch decides its calls in order, each exactly as alone: the same
/// answers (retry included) and the same final state as the calls one by one, by
/// the general `admit.lua` (the reference) and by `admit_bucket.lua` alone, over
/// rates with and without fractions of a µs, costs that leave room for a smaller
/// call after a denial, and time that passes between batches.
#[test]
fn a_batch_decides_each_call_exactly_as_the_calls_one_by_one() {
    if !redis_available() {
        return;
    }
    let server = RedisServer::start();
    let mut conn = server.conn().expect("connect");
    let general = redis::Script::new(include_str!("../../src/scripts/admit.lua"));
    let bucket = redis::Script::new(include_str!("../../src/scripts/admit_bucket.lua"));
    // Under a test clock a key lives its time to full in real time: each bucket
    // takes at least a second per token, so that no key expires mid-test.
    let buckets = [
        Bucket {
            pq: 1_000_000,
            pr: 0,
            den: 1,
            burst: 5,
        },
        Bucket {
            pq: 3_333_333,
            pr: 1,
            den: 3,
            burst: 7,
        },
        Bucket {
            pq: 1_000_000,
            pr: 1,
            den: 1000,
            burst: 3000,
        },
    ];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |m: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % m
    };
    for (i, b) in buckets.into_iter().enumerate() {
        let (ka, kb, kc) = (format!("a{i}"), format!("b{i}"), format!("c{i}"));
        let mut now: u64 = 1_000_000_000;
        for round in 0..40 {
            let len = 1 + next(20);
            // Mostly repeated costs (runs), some changes, some of a whole burst.
            let mut costs = Vec::new();
            let mut cost = 1 + next(b.burst);
            for _ in 0..len {
                if next(3) == 0 {
                    cost = 1 + next(b.burst);
                }
                costs.push(cost);
            }
            let reference: Vec<Outcome> = costs
                .iter()
                .map(|c| {
                    let reply: Vec<i64> = general
                        .key(&ka)
                        .arg(now)
                        .arg(-1)
                        .arg("id")
                        .arg(60_000_000)
                        .arg(1)
                        .arg("b")
                        .arg(0)
                        .arg(*c)
                        .arg(&[b.pq, b.pr, b.den, b.burst])
                        .invoke(&mut conn)
                        .expect("admit.lua");
                    match reply.as_slice() {
                        [1, ..] => Outcome::Admitted,
                        [0, 1, 1, retry] => Outcome::Denied(*retry),
                        other => panic!("{other:?}"),
                    }
                })
                .collect();
            let alone: Vec<Outcome> = costs
                .iter()
                .map(|c| {
                    let v: i64 = bucket
                        .key(&kb)
                        .arg(now)
                        .arg(packed(b, &[(*c, 1)]))
                        .invoke(&mut conn)
                        .expect("admit_bucket.lua");
                    if v >= 0 {
                        assert_eq!(v, i64::try_from(now).expect("small"));
                        Outcome::Admitted
                    } else {
                        Outcome::Denied(-v)
                    }
                })
                .collect();
            let runs = runs_of(&costs);
            let reply: redis::Value = bucket
                .key(&kc)
                .arg(now)
                .arg(packed(b, &runs))
                .invoke(&mut conn)
                .expect("admit_bucket.lua batch");
            let batch: Vec<Outcome> = match reply {
                redis::Value::Int(v) if v >= 0 => vec![Outcome::Admitted],
                redis::Value::Int(v) => vec![Outcome::Denied(-v)],
                other => {
                    let reply: Vec<i64> = redis::from_redis_value(other).expect("integers");
                    assert_eq!(reply.len(), 1 + 2 * runs.len(), "{reply:?}");
                    let mut out = Vec::new();
                    for ((_, n), pair) in runs.iter().zip(reply[1..].chunks(2)) {
                        let admitted = u64::try_from(pair[0]).expect("a count");
                        for j in 0..*n {
                            out.push(if j < admitted {
                                Outcome::Admitted
                            } else {
                                Outcome::Denied(pair[1])
                            });
                        }
                    }
                    out
                }
            };
            assert_eq!(alone, reference, "bucket {i} round {round} {costs:?}");
            assert_eq!(batch, reference, "bucket {i} round {round} {costs:?}");
            let (sa, sb, sc) = (
                tat(&mut conn, &ka),
                tat(&mut conn, &kb),
                tat(&mut conn, &kc),
            );
            assert_eq!((sb, sc), (sa, sa), "bucket {i} round {round}");
            now += next(u64::try_from(b.units(b.burst).0).expect("small") / 2 + 2);
        }
    }
}

/// Script runs Redis counted since the last reset (`EVALSHA` and `EVAL`).
fn script_runs(server: &RedisServer) -> u64 {
    let info: String = server.cmd(&["INFO", "commandstats"]);
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Issue #18: concurrent admissions on one bucket are coalesced into fewer script
/// runs than calls, with the answers the calls get one by one (on a stopped
/// clock: the burst admitted, every other call told to retry in one token's time);
/// a lone caller goes out alone, one script run per call, never waiting for a batch.
#[tokio::test]
async fn concurrent_calls_share_script_runs_and_a_lone_caller_goes_alone() {
    let Some(f) = RedisFactory::local() else {
        return;
    };
    let b = f.make("[tools.t]\nrate = \"10/s\"\nburst = 100").await;
    let server = f.server.as_ref().expect("own server");
    let call = Call::new("t");
    // Warm up: the script is loaded.
    assert!(b.try_admit(&call).await.is_ok());
    b.clock().advance(Duration::from_secs(1));
    let _: String = server.cmd(&["CONFIG", "RESETSTAT"]);
    let results = join_all((0..256).map(|_| b.try_admit(&call))).await;
    let admitted = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(admitted, 100, "the burst, as one by one");
    for r in results.iter().filter_map(|r| r.as_ref().err()) {
        assert_eq!(r.reason(), Reason::RateLimited);
        assert_eq!(r.retry_after(), Some(Duration::from_millis(100)));
    }
    let runs = script_runs(server);
    assert!(runs < 256, "{runs} script runs for 256 concurrent calls");

    b.clock().advance(Duration::from_secs(1));
    let _: String = server.cmd(&["CONFIG", "RESETSTAT"]);
    let mut admitted = 0;
    for _ in 0..12 {
        admitted += usize::from(b.try_admit(&call).await.is_ok());
    }
    assert_eq!(admitted, 10);
    assert_eq!(script_runs(server), 12, "one script run per lone call");
}

/// Issue #18: a caller dropped while its call waits for the round trip in flight is
/// left out of the next batch, so nothing is charged for it (a call dropped after it
/// went out keeps its charge, as without coalescing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_dropped_while_queued_is_not_charged() {
    let Some(f) = RedisFactory::local() else {
        return;
    };
    // A token a minute: no refill while the test runs, however loaded the machine
    // (at one a second, a run slower than a second refilled one and failed).
    let b = f.make("[tools.t]\nrate = \"1/min\"\nburst = 3").await;
    let server = f.server.as_ref().expect("own server");
    let call = Call::new("t");
    assert!(b.try_admit(&call).await.is_ok(), "warm-up: 2 tokens left");
    // Redis hangs: the next call stays in flight, the one after it queues.
    server.pause(true);
    let first = {
        let b = b.clone();
        tokio::spawn(async move { b.try_admit(&Call::new("t")).await.is_ok() })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let queued = {
        let b = b.clone();
        tokio::spawn(async move { b.try_admit(&Call::new("t")).await.is_ok() })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    queued.abort();
    server.pause(false);
    assert!(
        first.await.expect("first call"),
        "the call in flight is admitted"
    );
    // One token left: the dropped caller took none.
    assert!(b.try_admit(&call).await.is_ok(), "the last token");
    let no = b.try_admit(&call).await.expect_err("empty");
    assert_eq!(no.reason(), Reason::RateLimited);
}

/// A Redis server of its own and an engine on it (key prefix after `name`, a store
/// timeout of 1 s) for tool `t` at 1000/s, warmed up by one admission: for the tests
/// that hang the server while calls wait.
async fn one_second_store(name: &str) -> (RedisServer, toolgate::Engine) {
    let server = RedisServer::start();
    let policy = Policy::from_toml_str("[tools.t]\nrate = \"1000/s\"").expect("valid");
    let store = store(&server.url(), &prefix(name), "timeout = \"1s\"");
    let engine = toolgate_redis::engine(policy, &store)
        .await
        .expect("connect");
    assert!(engine.admit_now(&Call::new("t")).await.is_ok(), "warm-up");
    (server, engine)
}

/// Issue #18: a call that queues behind a round trip in flight still waits at most
/// the store's timeout from its own arrival (as an uncoalesced call), not the rest
/// of the other's round trip and then its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_call_waits_at_most_the_timeout() {
    if !redis_available() {
        return;
    }
    let _heavy = HEAVY.lock().await;
    let (server, engine) = one_second_store("queued-timeout").await;
    server.pause(true);
    let first = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.admit_now(&Call::new("t")).await.is_ok() })
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    let start = std::time::Instant::now();
    let queued = engine.admit_now(&Call::new("t")).await;
    let took = start.elapsed();
    server.pause(false);
    assert!(!first.await.expect("first call"), "timed out: fail_closed");
    let no = queued.expect_err("timed out: fail_closed");
    assert!(no.is_store_unavailable(), "{no:?}");
    // 1 s with the fix; 1.2 s (the first call's last 0.2 s, then its own 1 s) without.
    assert!(took < Duration::from_millis(1150), "{took:?}");
}

/// Issue #18: the callers of one batch keep their own deadlines (their arrival plus
/// the store's timeout) with one timer per round trip: behind a hung round trip, the
/// first queued caller is answered a timeout at its own deadline, and the second,
/// still within its own when Redis answers again, gets its decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_caller_of_a_batch_keeps_its_own_deadline() {
    if !redis_available() {
        return;
    }
    let _heavy = HEAVY.lock().await;
    let (server, engine) = one_second_store("own-deadline").await;
    let start = std::time::Instant::now();
    server.pause(true);
    let call_at = |delay: u64| {
        let engine = engine.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            let arrived = std::time::Instant::now();
            let out = engine.admit_now(&Call::new("t")).await;
            (out.map(drop), arrived.elapsed())
        })
    };
    // In flight from 0 ms (deadline 1 s); queued at 100 ms (deadline 1.1 s) and at
    // 700 ms (deadline 1.7 s); Redis answers again at 1.4 s.
    let first = call_at(0);
    let early = call_at(100);
    let late = call_at(700);
    tokio::time::sleep(Duration::from_millis(1400).saturating_sub(start.elapsed())).await;
    server.pause(false);
    let (first, _) = first.await.expect("first call");
    assert!(first.is_err(), "the call in flight timed out");
    let (early, took) = early.await.expect("early call");
    let no = early.expect_err("past its deadline before Redis answered");
    assert!(no.is_store_unavailable(), "{no:?}");
    // Its own timeout, not the batch's: about 1 s from its arrival.
    assert!(took >= Duration::from_millis(950), "{took:?}");
    assert!(took < Duration::from_millis(1300), "{took:?}");
    let (late, took) = late.await.expect("late call");
    assert!(
        late.is_ok(),
        "answered within its own deadline: {late:?} after {took:?}"
    );
}

/// Reads of what quotas have left (state endpoints) take turns, two in flight per
/// process: however many a client asks for at once, the rest wait their turn
/// within the store's timeout and are never sent, so they never queue work on
/// Redis ahead of admissions. Behind a hung server, four reads at once send two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_reads_take_turns_two_in_flight() {
    if !redis_available() {
        return;
    }
    let _heavy = HEAVY.lock().await;
    let (server, engine) = one_second_store("peek-turns").await;
    let warm = engine.fetch_tool_state("t", None).await.expect("a state");
    assert!(warm.quotas[0].available.is_some(), "{warm:?}");
    let _: String = server.cmd(&["CONFIG", "RESETSTAT"]);
    server.pause(true);
    let start = std::time::Instant::now();
    // Polled together, so that all four deadlines fall within microseconds: the
    // two waiting for a turn reach theirs as the two in flight give theirs up.
    let reads = (0..4).map(|_| engine.fetch_tool_state("t", None));
    for s in futures_util::future::join_all(reads).await {
        let s = s.expect("a state");
        assert_eq!(s.quotas[0].available, None, "no figure from a hung server");
    }
    // Each read, turn and round trip together, within the store's 1 s timeout.
    let took = start.elapsed();
    assert!(took < Duration::from_millis(1500), "{took:?}");
    server.pause(false);
    // What reached Redis ran once it woke: two reads, not four.
    let mut runs = 0;
    for _ in 0..50 {
        runs = script_runs(&server);
        if runs >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!((runs, script_runs(&server)), (2, 2));
}
