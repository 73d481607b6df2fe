//! A cell's one-word form and its size.

use super::*;
use crate::vocab::{Rate, Window};

fn word(cell: &Cell) -> u64 {
    cell.fast().unwrap().word.load(Ordering::Acquire)
}

#[test]
fn the_word_holds_the_bucket_only_while_it_is_in_use_and_nobody_waits() {
    let def = QuotaDef::rate(
        "tools.t.rate".into(),
        Rate::per_second(2).unwrap(),
        Some(2),
        Window::Bucket,
    );
    let cell = Cell::single(&def, Limiter::fresh(&def, 0));
    // Not in use: the lock keeps the state, the fast path defers.
    assert_eq!(word(&cell), FastBucket::LOCKED);
    assert!(!cell.fast().unwrap().try_charge(1, 0));
    drop(cell.lock());
    assert_eq!(word(&cell), FastBucket::LOCKED);

    assert!(cell.enable_fast());
    assert_ne!(word(&cell), FastBucket::LOCKED);
    assert!(cell.fast().unwrap().try_charge(1, 0));
    // The lock carries the charge out of the word and back.
    {
        let g = cell.lock();
        assert_eq!(word(&cell), FastBucket::LOCKED);
        assert_eq!(g.limiter.available(&def, 0), 1);
    }
    assert!(cell.fast().unwrap().try_charge(1, 0));
    assert!(!cell.fast().unwrap().try_charge(1, 0));
    // A waiter's reservation keeps the word locked until it is settled.
    {
        let mut g = cell.lock();
        g.pending = Some(Box::default());
    }
    assert_eq!(word(&cell), FastBucket::LOCKED);
    {
        let mut g = cell.lock();
        g.settle(&def, 0);
        assert!(g.pending.is_none());
    }
    assert_ne!(word(&cell), FastBucket::LOCKED);
    assert!(!cell.fast().unwrap().try_charge(1, 0));
    assert!(cell.fast().unwrap().try_charge(1, 500_000_000));
}

#[test]
fn a_partition_costs_at_most_64_bytes_of_quota_state() {
    // The cell (id, lock, limiter, pending pointer, and the pointer to the
    // one-word form that only unpartitioned buckets have); the map adds the key
    // and a pointer, the allocation adds the reference counts.
    assert!(
        std::mem::size_of::<Cell>() <= 64,
        "{}",
        std::mem::size_of::<Cell>()
    );
    assert_eq!(std::mem::size_of::<Cell>(), 56);
}
