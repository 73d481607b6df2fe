//! Redis-specific behaviour: leases with a TTL, script reloading, Redis' µs clock,
//! configuration errors.

use std::time::Duration;

use toolgate::{Call, Clock, ManualClock, Policy, Reason};
use toolgate_redis::{Source, StoreError};

use crate::backend::{Backend, Factory, RedisFactory};
use crate::support::{prefix, redis_available, store, tat, RedisServer};

/// A crashed process's in-flight calls are released when their leases expire.
#[tokio::test]
async fn a_lost_lease_expires_after_its_ttl() {
    let Some(mut f) = RedisFactory::local() else {
        return;
    };
    f.lease_ttl = Duration::from_secs(2);
    let b = f.make("[tools.c]\nconcurrency = 1").await;
    let p = b.try_admit(&Call::new("c")).await.expect("free");
    assert_eq!(Source::of(&p), Some(Source::Redis));
    std::mem::forget(p); // as if the process died: no release ever comes
    b.clock().advance(Duration::from_millis(1999));
    let no = b
        .try_admit(&Call::new("c"))
        .await
        .expect_err("still leased");
    assert_eq!(no.reason(), Reason::ConcurrencyLimited);
    b.clock().advance(Duration::from_millis(1));
    assert!(b.try_admit(&Call::new("c")).await.is_ok(), "lease expired");
}

/// EVALSHA falls back to loading the script when Redis has forgotten it.
#[tokio::test]
async fn scripts_are_reloaded_after_script_flush() {
    let Some(f) = RedisFactory::local() else {
        return;
    };
    let b = f.make("[tools.t]\nrate = \"10/s\"").await;
    assert!(b.try_admit(&Call::new("t")).await.is_ok());
    let server = f.server.as_ref().expect("own server");
    let _: String = server.cmd(&["SCRIPT", "FLUSH"]);
    let p = b.try_admit(&Call::new("t")).await.expect("admitted");
    assert_eq!(Source::of(&p), Some(Source::Redis), "decided by Redis");
}

/// Rates that are not whole µs per request stay exact: fractions of a µs accumulate
/// (admission times round up to Redis' whole µs).
#[tokio::test]
async fn a_third_of_a_second_is_exact_to_the_microsecond() {
    let Some(f) = RedisFactory::local() else {
        return;
    };
    let b = f.make("[tools.t]\nrate = \"3/s\"\nburst = 3").await;
    let t = Call::new("t");
    for _ in 0..3 {
        assert!(b.try_admit(&t).await.is_ok());
    }
    let no = b.try_admit(&t).await.expect_err("empty");
    assert_eq!(no.retry_after(), Some(Duration::from_micros(333_334)));
    // Tokens come back at 333 333⅓, 666 666⅔ and exactly 1 000 000 µs.
    b.clock().advance(Duration::from_micros(999_999));
    assert!(b.try_admit(&t).await.is_ok());
    assert!(b.try_admit(&t).await.is_ok());
    let no = b.try_admit(&t).await.expect_err("third not yet");
    assert_eq!(no.retry_after(), Some(Duration::from_micros(1)));
    b.clock().advance(Duration::from_micros(1));
    assert!(b.try_admit(&t).await.is_ok());
    let clock: &ManualClock = b.clock();
    assert_eq!(clock.now(), 1_001_000_000_000);
}

/// A policy whose arithmetic would not be exact in Lua is refused at connect, with
/// its path; so is a key prefix that would break hash tags.
#[tokio::test]
async fn inexact_quotas_and_braced_prefixes_are_refused() {
    if !redis_available() {
        return;
    }
    let url = "redis://127.0.0.1:1";
    let policy = Policy::from_toml_str("[tools.x]\nrate = \"1000003/s\"\nburst = 10000000000")
        .expect("valid for the core");
    let err = toolgate_redis::engine(policy, &store(url, "p:", ""))
        .await
        .expect_err("inexact");
    assert!(matches!(err, StoreError::Precision { .. }), "{err}");
    assert!(err.to_string().starts_with("tools.x.rate: "), "{err}");
    let policy = Policy::from_toml_str("[tools.x]\nrate = \"1/s\"").expect("valid");
    let err = toolgate_redis::engine(policy, &store(url, "a{b}:", ""))
        .await
        .expect_err("braces");
    assert_eq!(
        err.to_string(),
        "store.key_prefix: \"a{b}:\": must not contain '{' or '}' (they would override the hash tags)"
    );
}

/// Keys carry the slot group's hash tag, so a tool and its pools share a slot.
#[tokio::test]
async fn a_call_touches_keys_of_one_hash_tag_only() {
    if !redis_available() {
        return;
    }
    let server = RedisServer::start();
    let p = prefix("tags");
    let policy = Policy::from_toml_str(
        "[pools.crm]\nrate = \"5/s\"\n[tools.a]\nrate = \"1/s\"\nconcurrency = 2\npools = [\"crm\"]\npartition = \"tenant\"",
    )
    .expect("valid");
    let engine = toolgate_redis::engine(policy, &store(&server.url(), &p, ""))
        .await
        .expect("connect");
    let permit = engine
        .admit_now(&Call::new("a").tenant("acme"))
        .await
        .expect("admitted");
    let mut keys = server.keys(&p);
    keys.sort();
    assert_eq!(keys.len(), 3, "{keys:?}");
    let tags: Vec<&str> = keys
        .iter()
        .map(|k| &k[k.find('{').unwrap_or(0)..=k.find('}').unwrap_or(0)])
        .collect();
    assert!(
        tags.iter().all(|t| *t == tags[0] && t.len() == 18),
        "{keys:?}"
    );
    assert!(
        keys.iter().any(|k| k.ends_with("g:14:pools.crm.rate")),
        "{keys:?}"
    );
    assert!(
        keys.iter()
            .any(|k| k.ends_with("c:19:tools.a.concurrency:acme")),
        "{keys:?}"
    );
    drop(permit);
}

/// Waiting for a concurrency slot across processes polls until `max_wait`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_for_a_concurrency_slot_polls_until_its_max_wait() {
    let Some(f) = RedisFactory::local() else {
        return;
    };
    let b = f
        .make("[tools.c]\nconcurrency = 1\non_limit = \"wait\"\nmax_wait = \"2s\"")
        .await;
    let held = b.admit(&Call::new("c")).await.expect("free");
    let t0 = std::time::Instant::now();
    let no = b
        .admit(&Call::new("c").max_wait(Duration::from_millis(60)))
        .await
        .expect_err("never freed in time");
    assert_eq!(no.reason(), Reason::ConcurrencyLimited);
    assert!(
        t0.elapsed() >= Duration::from_millis(60),
        "{:?}",
        t0.elapsed()
    );
    let call = Call::new("c");
    let (second, ()) = tokio::join!(b.admit(&call), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        b.complete(held, toolgate::Completion::success()).await;
    });
    let second = second.expect("admitted once the slot was released");
    assert!(
        second.waited() >= Duration::from_millis(100),
        "{:?}",
        second.waited()
    );
}

/// Issue #13, item 2: `release.lua` takes any token difference without a Lua error
/// (the client sends at most two bursts, but the script does not rely on it) and
/// leaves the bucket at most one burst in debt, exactly, also for rates that are
/// not whole µs per token; a state already beyond the bound is left where it is.
#[test]
fn the_release_script_bounds_any_token_charge_exactly() {
    if !redis_available() {
        return;
    }
    let server = RedisServer::start();
    let mut conn = server.conn().expect("connect");
    let script = redis::Script::new(include_str!("../../src/scripts/release.lua"));
    let now: u64 = 1_000_000_000;
    let max = u128::MAX.to_string();
    let charge =
        |conn: &mut redis::Connection, key: &str, [pq, pr, den, burst]: [u64; 4], delta| {
            script
                .key(key)
                .arg(now)
                .arg(1)
                .arg("b")
                .arg(&[pq, pr, den, burst])
                .arg(delta)
                .arg(&[-1, -1, 0])
                .invoke::<i64>(conn)
        };
    // 100/s (10 ms a token); 3/s (333 333⅓ µs a token) with bursts of 3 and 2: a
    // full bucket at `now`, then empty, then one burst owed (in whole µs and thirds).
    let cases = [
        ([10_000, 0, 1, 100], (2_000_000, 0)),
        ([333_333, 1, 3, 3], (2_000_000, 0)),
        ([333_333, 1, 3, 2], (1_333_333, 1)),
    ];
    for (i, (bucket, (owed, third))) in cases.into_iter().enumerate() {
        let huge = ["18446744073709551615", "9007199254740991", "1e308", &max];
        for (j, delta) in huge.into_iter().enumerate() {
            let key = format!("{}{i}:{j}", prefix("release-debt"));
            let applied = charge(&mut conn, &key, bucket, delta);
            assert_eq!(applied.ok(), Some(1), "{delta}");
            assert_eq!(
                tat(&mut conn, &key).expect("a bucket"),
                (now + owed, third),
                "{delta} {bucket:?}"
            );
            // Beyond the bound already (an older state): a charge leaves it there.
            let _: () = redis::cmd("SET")
                .arg(&key)
                .arg(state(now + 5_000_000, 0))
                .arg(&["PX", "60000"])
                .query(&mut conn)
                .expect("set");
            assert_eq!(charge(&mut conn, &key, bucket, delta).ok(), Some(1));
            assert_eq!(
                tat(&mut conn, &key).expect("a bucket"),
                (now + 5_000_000, 0),
                "{delta} {bucket:?}"
            );
        }
    }
}

/// A bucket's state as the scripts keep it: TAT `t` µs, nothing reserved, no
/// recorded expiry.
fn state(t: u64, k: u64) -> Vec<u8> {
    #[allow(clippy::cast_precision_loss, reason = "test values below 2^53")]
    let nums = [t as f64, k as f64, 0.0, 0.0];
    nums.iter().flat_map(|n| n.to_le_bytes()).collect()
}

/// Issue #13, item 10: the lease TTL of an engine's Redis store can be changed
/// while it runs (the gateway sets its own on start and on every reload): leases
/// admitted from then on live that long, also after the policy is reloaded.
#[tokio::test]
async fn a_store_lease_ttl_set_later_applies_to_new_leases_across_reloads() {
    let Some(f) = RedisFactory::local() else {
        return;
    };
    let b = f.make("[tools.c]\nconcurrency = 1").await;
    let store = b.engine.store().expect("a store engine");
    store.set_lease_ttl(Duration::from_secs(300));
    let policy = Policy::from_toml_str("[tools.c]\nconcurrency = 1\n[tools.d]\nrate = \"1/s\"");
    b.engine.try_apply(policy.expect("valid")).expect("applied");
    let p = b.try_admit(&Call::new("c")).await.expect("free");
    std::mem::forget(p); // as if the process died: no release ever comes
                         // Far beyond the 60 s default, the lease still holds its slot.
    b.clock().advance(Duration::from_secs(299));
    let no = b.try_admit(&Call::new("c")).await.expect_err("leased");
    assert_eq!(no.reason(), Reason::ConcurrencyLimited);
    b.clock().advance(Duration::from_secs(1));
    assert!(b.try_admit(&Call::new("c")).await.is_ok(), "lease expired");
}

/// A call that waited in the store is asked the gates again when the store admits
/// it: a breaker that opened meanwhile refuses it (and no call reaches the failing
/// upstream), and so does an upstream pause that began meanwhile (#13, items 12-13).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_waited_in_the_store_meets_the_gates_that_closed_meanwhile() {
    use toolgate::{Completion, Outcome};
    let Some(f) = RedisFactory::local() else {
        return;
    };
    let policy = "[tools.t]\nrate = \"1/s\"\nburst = 1\non_limit = \"wait\"\nmax_wait = \"5s\"\n\
                  [tools.t.circuit]\nmin_calls = 1\nfailure_rate = 0.5\nopen_for = \"30s\"\n\
                  [tools.p]\nrate = \"1/s\"\nburst = 1\non_limit = \"wait\"\nmax_wait = \"5s\"\n";
    let b = f.make(policy).await;
    for (tool, end) in [
        ("t", Completion::new(Outcome::Error)),
        (
            "p",
            Completion::new(Outcome::Error).retry_after(Duration::from_secs(20)),
        ),
    ] {
        let first = b.admit(&Call::new(tool)).await.expect("first");
        let engine = b.engine.clone();
        let waiter = tokio::spawn(async move { engine.admit(&Call::new(tool)).await });
        tokio::time::sleep(Duration::from_millis(200)).await; // waiting in the store
        first.complete(end);
        b.clock().advance(Duration::from_secs(1));
        let no = waiter
            .await
            .expect("joined")
            .expect_err("a gate closed while it waited");
        match tool {
            "t" => assert_eq!(no.reason(), Reason::CircuitOpen, "{no}"),
            _ => assert_eq!(
                (no.reason(), no.quota()),
                (Reason::RateLimited, "tools.p.retry_after"),
                "{no}"
            ),
        }
    }
}

/// A call that adds members to a sorted set (a concurrency lease) names them with an
/// admission id of its own, unique per call, even beside a bucket; a call on buckets
/// alone needs none and adds no member anywhere.
#[tokio::test]
async fn lease_members_carry_an_id_per_admission_and_buckets_alone_add_none() {
    let Some(f) = RedisFactory::local() else {
        return;
    };
    let b = f
        .make("[tools.c]\nrate = \"100/s\"\nconcurrency = 3\n[tools.t]\nrate = \"100/s\"")
        .await;
    let server = f.server.as_ref().expect("own server");
    for _ in 0..5 {
        drop(b.try_admit(&Call::new("t")).await.expect("admitted"));
    }
    let sets = |server: &RedisServer| -> Vec<String> {
        let keys: Vec<String> = server.cmd(&["KEYS", "*"]);
        keys.into_iter()
            .filter(|k| server.cmd::<String>(&["TYPE", k]) == "zset")
            .collect()
    };
    assert!(sets(server).is_empty(), "buckets alone keep no sorted set");
    let c = Call::new("c");
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(b.try_admit(&c).await.expect("a free slot"));
    }
    let leases = sets(server);
    assert_eq!(leases.len(), 1, "one concurrency set: {leases:?}");
    let mut members: Vec<String> = server.cmd(&["ZRANGE", &leases[0], "0", "-1"]);
    assert_eq!(members.len(), 3, "{members:?}");
    assert!(members.iter().all(|m| !m.starts_with(':')), "{members:?}");
    members.dedup();
    assert_eq!(members.len(), 3, "one member per admission: {members:?}");
    let no = b.try_admit(&c).await.expect_err("full");
    assert_eq!(no.reason(), Reason::ConcurrencyLimited);
    drop(held);
    for _ in 0..50 {
        if server.cmd::<u64>(&["ZCARD", &leases[0]]) == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(server.cmd::<u64>(&["ZCARD", &leases[0]]), 0, "released");
    assert!(b.try_admit(&Call::new("c")).await.is_ok());
}
