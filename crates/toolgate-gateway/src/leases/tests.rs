//! The lease table's own tests.

use super::*;
use toolgate::{Call, Engine, Policy};

const CAPS: Caps = Caps {
    total: 10,
    per_tenant: 10,
};

fn engine() -> Engine {
    Engine::new(Policy::from_toml_str("[tools.t]\nconcurrency = 1").expect("policy"))
}

#[test]
fn ids_round_trip_and_strangers_are_not_found() {
    let e = engine();
    let l = Leases::default();
    let p = e.try_admit(&Call::new("t")).expect("admitted");
    let mut places = l.places(Some("a"), 1, CAPS).expect("a place");
    let id = l.insert(
        &mut places,
        NewLease {
            permit: p,
            tool: "t",
            ttl: Duration::from_secs(60),
            reservation: None,
        },
    );
    let s = id.to_string();
    assert_eq!(Id::parse(&s), Some(id));
    let odd = Id {
        seq: 0x0123_4567_89ab_cdef,
        tag: 0xfedc_ba98_7654_3210,
    };
    assert_eq!(odd.to_string(), "0123456789abcdeffedcba9876543210");
    assert!(l.take(&s, Some("b")).is_none(), "another tenant's lease");
    assert!(l.take("0000000000000001ffffffffffffffff", None).is_none());
    assert!(l.take(&s, Some("a")).is_some());
    assert!(l.is_empty());
}

#[test]
fn each_thread_opens_leases_in_a_shard_of_its_own_under_unique_ids() {
    let e = Arc::new(Engine::new(
        Policy::from_toml_str("[tools.t]\nrate = \"1000000/s\"").expect("policy"),
    ));
    let l = Arc::new(Leases::default());
    let caps = Caps {
        total: 10_000,
        per_tenant: 10_000,
    };
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (e, l) = (e.clone(), l.clone());
            std::thread::spawn(move || {
                (0..300)
                    .map(|_| {
                        let permit = e.try_admit(&Call::new("t")).expect("admitted");
                        let mut places = l.places(None, 1, caps).expect("a place");
                        let lease = NewLease {
                            permit,
                            tool: "t",
                            ttl: Duration::from_secs(60),
                            reservation: None,
                        };
                        l.insert(&mut places, lease)
                    })
                    .collect::<Vec<Id>>()
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut seqs = std::collections::HashSet::new();
    for t in threads {
        let ids = t.join().expect("thread");
        // One shard per thread, its ranks in order.
        let shard = ids[0].seq % SHARDS as u64;
        assert!(ids.iter().all(|id| id.seq % SHARDS as u64 == shard));
        assert!(ids.windows(2).all(|w| w[0].seq < w[1].seq));
        for id in ids {
            assert!(seqs.insert(id.seq), "a sequence number given twice");
            all.push(id);
        }
    }
    assert_eq!(l.len(), 1_200);
    // Each is found in its shard once, by its id alone.
    for id in &all {
        assert!(l.take(&id.to_string(), None).is_some());
        assert!(l.take(&id.to_string(), None).is_none());
    }
    assert!(l.is_empty());
}

#[test]
fn an_expired_lease_releases_its_concurrency() {
    let e = engine();
    let l = Leases::default();
    let p = e.try_admit(&Call::new("t")).expect("admitted");
    let mut places = l.places(None, 1, CAPS).expect("a place");
    l.insert(
        &mut places,
        NewLease {
            permit: p,
            tool: "t",
            ttl: Duration::from_millis(10),
            reservation: None,
        },
    );
    assert!(e.try_admit(&Call::new("t")).is_err());
    assert_eq!(l.expire(Instant::now()), 0);
    assert_eq!(l.expire(Instant::now() + Duration::from_millis(11)), 1);
    assert!(e.try_admit(&Call::new("t")).is_ok());
}

#[test]
fn a_shorter_ttl_after_a_longer_one_still_expires_on_time() {
    let e = Engine::new(Policy::from_toml_str("[tools.t]\nconcurrency = 3").expect("policy"));
    let l = Leases::default();
    let open = |ttl_ms| {
        let permit = e.try_admit(&Call::new("t")).expect("admitted");
        let ttl = Duration::from_millis(ttl_ms);
        let mut places = l.places(None, 1, CAPS).expect("a place");
        l.insert(
            &mut places,
            NewLease {
                permit,
                tool: "t",
                ttl,
                reservation: None,
            },
        )
    };
    let long = open(60_000);
    let _short = open(10);
    let taken = open(10);
    assert!(l.take(&taken.to_string(), None).is_some());
    let t = Instant::now() + Duration::from_millis(20);
    assert_eq!(l.expire(t), 1, "the short one, not the taken one");
    assert_eq!(l.len(), 1);
    assert!(l.take(&long.to_string(), None).is_some());
}
