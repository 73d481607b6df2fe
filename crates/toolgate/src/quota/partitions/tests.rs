//! The partitions of a quota, with the engine's cells as their instances.

use std::sync::Arc;

use super::super::cell::Cell;
use super::{Instance, NoPartition, Partitions, MIN_PER_SHARD, SHARDS};
use proptest::prelude::*;

use super::Inline;
use crate::clock::Nanos;
use crate::quota::{Fit, QuotaDef};
use crate::rate::{Gcra, Tat};
use crate::vocab::{Rate, Window};

fn def() -> QuotaDef {
    let rate = Rate::per_second(1).unwrap_or_else(|e| panic!("{e}"));
    QuotaDef::rate("tools.t.rate".into(), rate, Some(1), Window::Bucket)
}

/// [`def`], partitioned, at most `max` partitions.
fn capped(max: usize) -> QuotaDef {
    def().partitioned(true, max)
}

#[test]
fn idle_partitions_are_evicted_and_busy_ones_are_kept() {
    let def = def();
    let parts = Partitions::<Cell>::new(&capped(1_000_000));
    for i in 0..10_000 {
        let cell = parts
            .get(&format!("tenant-{i}"), &def, 0)
            .unwrap_or_else(|_| panic!("full"));
        let mut st = cell.lock();
        if i % 2 == 0 {
            st.charge(&def, 1, 0);
        }
    }
    // At t=0 the charged half is busy; sweeps kept them.
    parts.sweep(&def, 0);
    assert_eq!(parts.len(), 5_000);
    // One second later every bucket is full again: all idle.
    parts.sweep(&def, 1_000_000_000);
    assert_eq!(parts.len(), 0);
}

/// Offers `tenants` new busy tenants (named after `round`) to partitions capped at
/// `max`; how many got a partition.
fn fill(max: usize, tenants: usize, round: usize) -> (Partitions<Cell>, usize) {
    let def = def();
    let parts = Partitions::<Cell>::new(&capped(max));
    let mut admitted = 0;
    for i in 0..tenants {
        match parts.get(&format!("t{round}-{i}"), &def, 0) {
            Ok(cell) => {
                cell.lock().charge(&def, 1, 0);
                admitted += 1;
            }
            Err(NoPartition::Full) => {}
            Err(NoPartition::Retired) => panic!("not converted"),
        }
    }
    assert_eq!(parts.len(), admitted);
    (parts, admitted)
}

#[test]
fn a_small_cap_is_exact_whatever_the_tenants_hash_to() {
    // Every map hashes with the process's seed: other names, other layouts.
    for max in [1, 2, 3, 5, 64, SHARDS * MIN_PER_SHARD - 1] {
        for round in 0..20 {
            let (parts, admitted) = fill(max, max + 10, round);
            assert_eq!(admitted, max, "cap {max}");
            // Once they are idle, new tenants get in again.
            assert!(parts.get("newcomer", &def(), 1_000_000_000).is_ok());
        }
    }
}

#[test]
fn a_large_cap_is_never_exceeded_and_nearly_reached() {
    let max = SHARDS * MIN_PER_SHARD * 2;
    let (parts, admitted) = fill(max, max * 2, 0);
    assert!(admitted <= max, "{admitted} partitions, cap {max}");
    // Spread evenly enough over the shards that refusals begin late.
    assert!(admitted >= max * 9 / 10, "{admitted} of {max}");
    assert!(parts.get("newcomer", &def(), 1_000_000_000).is_ok());
}

#[test]
fn converted_partitions_refuse_new_tenants_in_the_old_map() {
    let def = def();
    let old = Partitions::<Cell>::new(&capped(1_000));
    let known = old.get("known", &def, 0).unwrap_or_else(|_| panic!("full"));
    let new = old.converted(&capped(1_000), |_, _| Arc::new(Cell::fresh(&def, 0)));
    // A known tenant still finds its (now converted) cell; a new one is refused,
    // so that nobody charges a partition the new map does not have.
    assert!(old
        .get("known", &def, 0)
        .is_ok_and(|c| Arc::ptr_eq(&c, &known)));
    assert_eq!(
        old.get("newcomer", &def, 0).err(),
        Some(NoPartition::Retired)
    );
    assert!(new.get("newcomer", &def, 0).is_ok());
    assert_eq!(new.len(), 2);
}

/// A bucket of `burst` at `n` per `period_ns`, partitioned.
fn bucket(n: u64, period_ns: u64, burst: u64) -> QuotaDef {
    let rate = Rate::try_new(n, std::time::Duration::from_nanos(period_ns))
        .unwrap_or_else(|e| panic!("{e}"));
    QuotaDef::rate("tools.t.rate".into(), rate, Some(burst), Window::Bucket)
        .partitioned(true, 100_000)
}

/// The general path's decision on a tenant's whole instance, as the kernel takes it
/// for a call of one quota: settle, fit, charge if it conforms now.
fn on_instance(
    parts: &Partitions<Cell>,
    key: &str,
    def: &QuotaDef,
    cost: u64,
    now: Nanos,
) -> Inline {
    let cell = parts
        .get(key, def, now)
        .unwrap_or_else(|_| panic!("no partition"));
    let mut g = cell.lock();
    g.settle(def, now);
    match g.fit(def, cost, now) {
        Fit::At(t) if t <= now => {
            g.charge(def, cost, now);
            Inline::Admitted
        }
        Fit::At(t) => Inline::Refused(t),
        Fit::Full => panic!("a bucket is never full"),
    }
}

/// Whether `key` is kept in its slot as a word.
fn in_slot(parts: &Partitions<Cell>, key: &str) -> bool {
    let (hash, shard) = parts.locate(key);
    shard
        .lock()
        .find(hash, key)
        .is_some_and(|t| matches!(t.entry(), super::EntryRef::Word(_)))
}

/// Tenant `t`'s key: short ones, kept in the slot, and long ones, allocated.
fn key_of(t: u8) -> String {
    if t.is_multiple_of(2) {
        format!("tenant-{t}")
    } else {
        format!("9f1c6a0e-52b4-4d9e-8f3a-0d6c1e2b7a5{t}")
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// A call decided in the tenant's slot.
    Inline {
        tenant: u8,
        cost: u64,
        dt: u64,
    },
    /// A call decided on the tenant's whole instance (the general path).
    Instance {
        tenant: u8,
        cost: u64,
        dt: u64,
    },
    /// The whole instance held a while (a permit, a waiter), then let go.
    Hold {
        tenant: u8,
    },
    Sweep {
        dt: u64,
    },
}

fn op(burst: u64) -> impl Strategy<Value = Op> {
    let cost = 1..=burst;
    let dt = prop_oneof![Just(0u64), 0..2_000_000_000u64];
    prop_oneof![
        4 => (0..4u8, cost.clone(), dt.clone()).prop_map(|(tenant, cost, dt)| Op::Inline { tenant, cost, dt }),
        2 => (0..4u8, cost, dt.clone()).prop_map(|(tenant, cost, dt)| Op::Instance { tenant, cost, dt }),
        1 => (0..4u8).prop_map(|tenant| Op::Hold { tenant }),
        1 => dt.prop_map(|dt| Op::Sweep { dt }),
    ]
}

proptest! {
    /// Calls decided in a tenant's slot and on its whole instance, in any mix with
    /// sweeps (which evict idle tenants and put instances back in their slots),
    /// decide exactly as one bucket per tenant that is never evicted: the same
    /// admissions, and refusals until the same time.
    #[test]
    fn the_slot_decides_as_a_bucket_per_tenant(
        (n, period_ns, burst) in (1..1_000u64, 1..3_000_000_000u64, 1..8u64),
        ops in prop::collection::vec(op(8), 1..80),
    ) {
        let def = bucket(n, period_ns, burst);
        let parts = Partitions::<Cell>::new(&def);
        let g = Gcra::new(n, period_ns, burst);
        let mut model: std::collections::HashMap<u8, Tat> = Default::default();
        let mut now: Nanos = 1_000;
        for op in ops {
            match op {
                Op::Inline { tenant, cost, dt } | Op::Instance { tenant, cost, dt } => {
                    now += dt;
                    let cost = cost.min(burst);
                    let key = key_of(tenant);
                    let tat = model.entry(tenant).or_insert_with(|| g.full(now));
                    let expected = match g.earliest(*tat, cost, now) {
                        at if at <= now => {
                            *tat = g.charge(*tat, cost, now);
                            Inline::Admitted
                        }
                        at => Inline::Refused(at),
                    };
                    let got = match op {
                        Op::Inline { .. } => match parts.charge_inline(&key, parts.hash(&key), &def, cost, now) {
                            Ok(Inline::General) => on_instance(&parts, &key, &def, cost, now),
                            Ok(d) => d,
                            Err(e) => panic!("{e:?}"),
                        },
                        _ => on_instance(&parts, &key, &def, cost, now),
                    };
                    prop_assert_eq!(got, expected);
                }
                Op::Hold { tenant } => {
                    let key = key_of(tenant);
                    let held = parts.get(&key, &def, now).unwrap_or_else(|_| panic!("no partition"));
                    // Held elsewhere, it stays a whole instance through a sweep.
                    parts.sweep(&def, now);
                    prop_assert!(!in_slot(&parts, &key));
                    drop(held);
                }
                Op::Sweep { dt } => {
                    now += dt;
                    parts.sweep(&def, now);
                    // Every tenant left is back in its slot: nothing else holds one.
                    for t in 0..4u8 {
                        let key = key_of(t);
                        prop_assert!(parts.peek(&key).is_none() || in_slot(&parts, &key));
                    }
                }
            }
        }
    }
}

#[test]
fn a_tenant_in_its_slot_is_taken_out_for_the_general_path_and_put_back_by_a_sweep() {
    let def = bucket(1, 1_000_000_000, 2);
    let parts = Partitions::<Cell>::new(&def);
    assert_eq!(
        parts.charge_inline("a", parts.hash("a"), &def, 1, 0),
        Ok(Inline::Admitted)
    );
    assert!(in_slot(&parts, "a"));
    // Peeking reads a copy and leaves the tenant in its slot.
    let copy = parts.peek("a").unwrap_or_else(|| panic!("absent"));
    assert_eq!(copy.lock().limiter.available(&def, 0), 1);
    assert_eq!(parts.available("a", &def, 0), Some(1));
    assert_eq!(parts.available("unseen", &def, 0), None);
    assert!(in_slot(&parts, "a"));
    // The general path takes it out, with its state: one token left.
    let cell = parts
        .get("a", &def, 0)
        .unwrap_or_else(|_| panic!("no partition"));
    assert!(!in_slot(&parts, "a"));
    assert_eq!(
        parts.charge_inline("a", parts.hash("a"), &def, 1, 0),
        Ok(Inline::General)
    );
    assert_eq!(cell.lock().limiter.available(&def, 0), 1);
    cell.lock().charge(&def, 1, 0);
    assert_eq!(parts.available("a", &def, 0), Some(0));
    drop(cell);
    // Back in its slot, with the general path's charge: empty until 1 s.
    parts.sweep(&def, 0);
    assert!(in_slot(&parts, "a"));
    assert_eq!(
        parts.charge_inline("a", parts.hash("a"), &def, 1, 0),
        Ok(Inline::Refused(1_000_000_000))
    );
    // A cap counts tenants in their slots too; idle ones make room.
    let small = bucket(1, 1_000_000_000, 1).partitioned(true, 1);
    let parts = Partitions::<Cell>::new(&small);
    assert_eq!(
        parts.charge_inline("a", parts.hash("a"), &small, 1, 0),
        Ok(Inline::Admitted)
    );
    assert_eq!(
        parts.charge_inline("b", parts.hash("b"), &small, 1, 0),
        Err(NoPartition::Full)
    );
    assert_eq!(
        parts.charge_inline("b", parts.hash("b"), &small, 1, 1_000_000_000),
        Ok(Inline::Admitted)
    );
    assert_eq!(parts.len(), 1);
}

#[test]
fn a_reload_takes_tenants_out_of_the_old_slots_and_puts_converted_ones_in_new_slots() {
    let def = bucket(1, 1_000_000_000, 2);
    let old = Partitions::<Cell>::new(&def);
    assert_eq!(
        old.charge_inline("a", old.hash("a"), &def, 1, 0),
        Ok(Inline::Admitted)
    );
    let new = old.converted(&def, |_, c| {
        let tat = c.bucket_state().unwrap_or_else(|| panic!("not a bucket"));
        Arc::new(Cell::of_bucket(tat))
    });
    // The old map keeps a whole instance, which a reload would have retired; the new
    // one keeps the state in the slot.
    assert!(!in_slot(&old, "a"));
    assert_eq!(
        old.charge_inline("a", old.hash("a"), &def, 1, 0),
        Ok(Inline::General)
    );
    assert_eq!(
        old.charge_inline("b", old.hash("b"), &def, 1, 0),
        Err(NoPartition::Retired)
    );
    assert!(in_slot(&new, "a"));
    assert_eq!(
        new.charge_inline("a", new.hash("a"), &def, 1, 0),
        Ok(Inline::Admitted)
    );
    assert_eq!(
        new.charge_inline("a", new.hash("a"), &def, 1, 0),
        Ok(Inline::Refused(1_000_000_000))
    );
}
