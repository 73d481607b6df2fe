//! What a cell keeps of the calls that wait on it, only while some do ([`Pending`]):
//! the reservations of rate and token waiters ([`Entry`], each with the
//! [`Snapshot`] that undoes it exactly) and the FIFO queue of concurrency waiters
//! ([`ConcWaiter`]).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Waker;

use crate::clock::Nanos;
use crate::rate::Tat;
use crate::sync::{AtomicBool, Mutex};

/// Reservations of waiters (future admissions, in time order) and concurrency
/// waiters (FIFO).
#[derive(Debug, Default)]
pub(crate) struct Pending {
    pub(crate) entries: VecDeque<Entry>,
    pub(crate) conc_waiters: VecDeque<Arc<ConcWaiter>>,
}

/// A reservation charged to a cell ahead of its time.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) seq: u64,
    pub(crate) at: Nanos,
    pub(crate) before: Snapshot,
}

/// The limiter state just before an entry was charged.
#[derive(Debug, Clone)]
pub(crate) enum Snapshot {
    Bucket(Tat),
    Sliding(usize),
}

/// A call waiting for room in a concurrency limit.
#[derive(Debug)]
pub(crate) struct ConcWaiter {
    pub(crate) cost: u64,
    /// What its class may not use of the limit: it is granted when `cost + hold`
    /// fits, and takes `cost`.
    pub(crate) hold: u64,
    pub(crate) granted: AtomicBool,
    pub(crate) waker: Mutex<Option<Waker>>,
}

// === impl ConcWaiter ===

impl ConcWaiter {
    pub(crate) fn new(cost: u64, hold: u64) -> Self {
        Self {
            cost,
            hold,
            granted: AtomicBool::new(false),
            waker: Mutex::new(None),
        }
    }

    pub(crate) fn is_granted(&self) -> bool {
        self.granted.load(Ordering::Acquire)
    }
}
