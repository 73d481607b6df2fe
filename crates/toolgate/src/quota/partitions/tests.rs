//! The partitions of a quota, with the engine's cells as their instances.

use std::sync::Arc;

use super::super::cell::Cell;
use super::{Instance, NoPartition, Partitions, MIN_PER_SHARD, SHARDS};
use crate::quota::QuotaDef;
use crate::vocab::{Rate, Window};

fn def() -> QuotaDef {
    let rate = Rate::per_second(1).unwrap_or_else(|e| panic!("{e}"));
    QuotaDef::rate("tools.t.rate".into(), rate, Some(1), Window::Bucket)
}

#[test]
fn idle_partitions_are_evicted_and_busy_ones_are_kept() {
    let def = def();
    let parts = Partitions::<Cell>::new(1_000_000);
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

/// Offers `tenants` new busy tenants to partitions capped at `max`; how many
/// got a partition.
fn fill(max: usize, tenants: usize) -> (Partitions<Cell>, usize) {
    let def = def();
    let parts = Partitions::<Cell>::new(max);
    let mut admitted = 0;
    for i in 0..tenants {
        match parts.get(&format!("t{i}"), &def, 0) {
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
    // Each map hashes with a seed of its own: many maps, many layouts.
    for max in [1, 2, 3, 5, 64, SHARDS * MIN_PER_SHARD - 1] {
        for _ in 0..20 {
            let (parts, admitted) = fill(max, max + 10);
            assert_eq!(admitted, max, "cap {max}");
            // Once they are idle, new tenants get in again.
            assert!(parts.get("newcomer", &def(), 1_000_000_000).is_ok());
        }
    }
}

#[test]
fn a_large_cap_is_never_exceeded_and_nearly_reached() {
    let max = SHARDS * MIN_PER_SHARD * 2;
    let (parts, admitted) = fill(max, max * 2);
    assert!(admitted <= max, "{admitted} partitions, cap {max}");
    // Spread evenly enough over the shards that refusals begin late.
    assert!(admitted >= max * 9 / 10, "{admitted} of {max}");
    assert!(parts.get("newcomer", &def(), 1_000_000_000).is_ok());
}

#[test]
fn converted_partitions_refuse_new_tenants_in_the_old_map() {
    let def = def();
    let old = Partitions::<Cell>::new(1_000);
    let known = old.get("known", &def, 0).unwrap_or_else(|_| panic!("full"));
    let new = old.converted(1_000, |_, _| Arc::new(Cell::fresh(&def, 0)));
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
