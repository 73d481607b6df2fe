//! A quota instance's live state ([`Cell`]): its limiter ([`Limiter`]: a bucket,
//! a window, a count in flight, or retired into a successor by a reload) and, only
//! while calls wait on it, what they have reserved and who queues ([`Pending`]),
//! behind one lock ([`CellGuard`]) that also carries an unpartitioned bucket's state
//! in and out of its one-word form ([`FastBucket`]).
//!
//! Everything on [`CellState`] is called with the cell's lock held; the engine
//! decides the order of locks ([`Cell::order`]).
//!
//! [`Pending`]: super::waiters::Pending

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::def::{Kind, QuotaDef};
use super::fast::FastBucket;
use super::limiter::Limiter;
use super::partitions::Instance;
use super::successor::{Retirable, Successor};
use super::waiters::{ConcWaiter, Entry, Pending, Snapshot};
use crate::clock::Nanos;
use crate::rate::Tat;
use crate::sync::{Mutex, MutexGuard};

/// The state of one quota instance.
#[derive(Debug)]
pub(crate) struct Cell {
    /// Unique and fixed for the cell's life: the order in which locks are taken.
    /// (Addresses would do for deadlock freedom, but ids keep the order the same
    /// from run to run, which model checking needs.)
    id: u64,
    /// The lock-free form of an unpartitioned bucket (see [`FastBucket`]).
    fast: Option<Box<FastBucket>>,
    state: Mutex<CellState>,
}

/// The cell's lock, held: also carries the fast path's word in and out.
pub(crate) struct CellGuard<'a> {
    guard: MutexGuard<'a, CellState>,
    fast: Option<&'a FastBucket>,
}

static NEXT_CELL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[derive(Debug)]
pub(crate) struct CellState {
    pub(crate) limiter: Limiter<Cell>,
    pub(crate) pending: Option<Box<Pending>>,
}

/// When a cell could admit a step, as seen under its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fit {
    /// Conforms at this time (≥ now).
    At(Nanos),
    /// A concurrency limit is full (or has waiters ahead).
    Full,
}

// === impl Cell ===

impl Cell {
    pub(crate) fn new(limiter: Limiter<Cell>) -> Self {
        Self {
            id: NEXT_CELL.fetch_add(1, Ordering::Relaxed),
            fast: None,
            state: Mutex::new(CellState {
                limiter,
                pending: None,
            }),
        }
    }

    /// A cell of an unpartitioned quota: a bucket also gets the lock-free form.
    pub(crate) fn single(def: &QuotaDef, limiter: Limiter<Cell>) -> Self {
        let fast = match (def.kind, &limiter) {
            (Kind::Bucket(g), Limiter::Bucket(_)) => {
                g.word_form().map(|form| Box::new(FastBucket::new(form)))
            }
            _ => None,
        };
        Self {
            fast,
            ..Self::new(limiter)
        }
    }

    #[inline]
    pub(crate) fn lock(&self) -> CellGuard<'_> {
        let mut guard = self.state.lock();
        let fast = self.fast.as_deref().filter(|f| f.is_enabled());
        if let Some(f) = fast {
            guard.take_from(f);
        }
        CellGuard { guard, fast }
    }

    /// The lock-free form of the cell's bucket, if it has one. Its word stays
    /// `LOCKED` (so [`FastBucket::try_charge`] defers to the general path) unless
    /// [`Cell::enable_fast`] put it in use.
    #[inline]
    pub(crate) fn fast(&self) -> Option<&FastBucket> {
        self.fast.as_deref()
    }

    /// Puts the cell's bucket in its lock-free form from now on, for a tool that
    /// takes the fast path; `false` if it has none. The state moves into the word the
    /// next time the lock is let go.
    pub(crate) fn enable_fast(&self) -> bool {
        let Some(f) = self.fast.as_deref() else {
            return false;
        };
        if !f.is_enabled() {
            let state = self.state.lock();
            f.enable();
            // The word is still `LOCKED`: the state under the lock goes into it.
            state.put_into(f);
        }
        true
    }

    /// The key that orders lock acquisition.
    pub(crate) fn order(&self) -> u64 {
        self.id
    }
}

impl Instance for Cell {
    fn fresh(def: &QuotaDef, now: Nanos) -> Self {
        Cell::new(Limiter::fresh(def, now))
    }

    fn is_idle(&self, def: &QuotaDef, now: Nanos) -> bool {
        let mut g = self.lock();
        g.settle(def, now);
        g.is_idle(def, now)
    }

    fn available(&self, def: &QuotaDef, now: Nanos) -> u64 {
        // A bucket's one-word form is the whole state: read off it, without the lock.
        if let Some(tat) = self.fast().and_then(FastBucket::peek) {
            return Limiter::<Cell>::Bucket(tat).available(def, now);
        }
        let mut g = self.lock();
        g.settle(def, now);
        g.limiter.available(def, now)
    }

    fn of_bucket(tat: Tat) -> Self {
        Cell::new(Limiter::Bucket(tat))
    }

    fn bucket_state(&self) -> Option<Tat> {
        let g = self.lock();
        match (&g.limiter, &g.pending) {
            (Limiter::Bucket(tat), None) => Some(*tat),
            _ => None,
        }
    }
}

impl Retirable for Cell {
    fn successor(&self) -> Option<Successor<Cell>> {
        self.lock().successor()
    }
}

// === impl CellGuard ===

impl std::ops::Deref for CellGuard<'_> {
    type Target = CellState;

    fn deref(&self) -> &CellState {
        &self.guard
    }
}

impl std::ops::DerefMut for CellGuard<'_> {
    fn deref_mut(&mut self) -> &mut CellState {
        &mut self.guard
    }
}

impl Drop for CellGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        if let Some(f) = self.fast {
            self.guard.put_into(f);
        }
    }
}

impl fmt::Debug for CellGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.guard.fmt(f)
    }
}

// === impl CellState ===

impl CellState {
    /// The link to the cell that took this retired cell's state (`None` while the
    /// cell is live); follow it with [`Successor::follow`] once this lock is let go.
    pub(crate) fn successor(&self) -> Option<Successor<Cell>> {
        match &self.limiter {
            Limiter::Retired(next) => Some((**next).clone()),
            _ => None,
        }
    }

    /// Moves the bucket's state from `fast`'s word into this state, leaving the word
    /// `LOCKED` (the lock is being taken).
    #[inline(never)]
    fn take_from(&mut self, fast: &FastBucket) {
        if let Some(tat) = fast.take() {
            self.limiter = Limiter::Bucket(tat);
        }
    }

    /// Moves the bucket's state back into `fast`'s word (the lock is being let go),
    /// unless waiters hold reservations or the state has no one-word form.
    #[inline(never)]
    fn put_into(&self, fast: &FastBucket) {
        if self.pending.is_some() {
            return;
        }
        if let Limiter::Bucket(tat) = &self.limiter {
            fast.store(*tat);
        }
    }

    /// Whether a reload moved this cell's state elsewhere (see [`Limiter::Retired`]).
    pub(crate) fn is_retired(&self) -> bool {
        matches!(self.limiter, Limiter::Retired(_))
    }

    /// Folds reservations whose time has come into the state and trims sliding windows.
    #[inline]
    pub(crate) fn settle(&mut self, def: &QuotaDef, now: Nanos) {
        if let Some(p) = &mut self.pending {
            while p.entries.front().is_some_and(|e| e.at <= now) {
                p.entries.pop_front();
            }
            self.forget_empty_pending();
        }
        if let (Kind::Sliding(w), Limiter::Sliding(log)) = (def.kind, &mut self.limiter) {
            // Snapshots count entries from the log's creation, so trimming the front
            // never invalidates them.
            w.trim(log, now);
        }
    }

    /// The last future reservation's time: FIFO order admits nothing before it.
    pub(crate) fn last_reserved(&self) -> Nanos {
        self.pending
            .as_ref()
            .and_then(|p| p.entries.back())
            .map_or(0, |e| e.at)
    }

    /// When `cost` could be admitted here (settled at `now`).
    #[inline]
    pub(crate) fn fit(&self, def: &QuotaDef, cost: u64, now: Nanos) -> Fit {
        match (&def.kind, &self.limiter) {
            (Kind::Bucket(g), Limiter::Bucket(tat)) => {
                Fit::At(g.earliest(*tat, cost, now).max(self.last_reserved()))
            }
            (Kind::Sliding(w), Limiter::Sliding(log)) => Fit::At(w.earliest(log, cost, now)),
            (_, Limiter::Concurrency { in_flight, limit }) => {
                let queued = self
                    .pending
                    .as_ref()
                    .is_some_and(|p| !p.conc_waiters.is_empty());
                if !queued && in_flight + cost <= *limit {
                    Fit::At(now)
                } else {
                    Fit::Full
                }
            }
            _ => Fit::At(now),
        }
    }

    /// Charges `cost` at `at` (which must fit).
    #[inline]
    pub(crate) fn charge(&mut self, def: &QuotaDef, cost: u64, at: Nanos) {
        match (&def.kind, &mut self.limiter) {
            (Kind::Bucket(g), Limiter::Bucket(tat)) => *tat = g.charge(*tat, cost, at),
            (Kind::Sliding(w), Limiter::Sliding(log)) => w.charge(log, cost, at),
            (_, Limiter::Concurrency { in_flight, .. }) => *in_flight += cost,
            _ => {}
        }
    }

    /// Charges `cost` tokens at `at` that a call used beyond its estimate: as
    /// [`CellState::charge`], but a bucket is never left more than one burst in debt
    /// beyond `at` (see `Gcra::charge_debt`), whatever count was reported.
    pub(crate) fn charge_debt(&mut self, def: &QuotaDef, cost: u64, at: Nanos) {
        match (&def.kind, &mut self.limiter) {
            (Kind::Bucket(g), Limiter::Bucket(tat)) => *tat = g.charge_debt(*tat, cost, at),
            _ => self.charge(def, cost, at),
        }
    }

    /// Charges `cost` at `at` as the reservation `seq`, to be undone exactly if the
    /// waiter leaves before `at`.
    pub(crate) fn reserve(&mut self, def: &QuotaDef, seq: u64, cost: u64, at: Nanos) {
        self.reserve_with(def, seq, cost, at, Self::charge);
    }

    /// As [`CellState::reserve`], for tokens used beyond an estimate and charged
    /// behind the waiters' reservations at `at` (the last of them): never more than
    /// one burst in debt beyond `at` ([`CellState::charge_debt`]).
    pub(crate) fn reserve_debt(&mut self, def: &QuotaDef, seq: u64, cost: u64, at: Nanos) {
        self.reserve_with(def, seq, cost, at, Self::charge_debt);
    }

    fn reserve_with(
        &mut self,
        def: &QuotaDef,
        seq: u64,
        cost: u64,
        at: Nanos,
        charge: fn(&mut Self, &QuotaDef, u64, Nanos),
    ) {
        let before = match &self.limiter {
            Limiter::Bucket(tat) => Snapshot::Bucket(*tat),
            Limiter::Sliding(log) => Snapshot::Sliding(log.len()),
            Limiter::Concurrency { .. } | Limiter::Retired(_) => {
                return charge(self, def, cost, at)
            }
        };
        charge(self, def, cost, at);
        let p = self.pending.get_or_insert_with(Box::default);
        p.entries.push_back(Entry { seq, at, before });
    }

    /// Undoes every reservation with sequence number ≥ `seq`, returning their numbers.
    pub(crate) fn unwind_from(&mut self, seq: u64) -> Vec<u64> {
        let Some(p) = &mut self.pending else {
            return Vec::new();
        };
        let Some(i) = p.entries.iter().position(|e| e.seq >= seq) else {
            return Vec::new();
        };
        let undone: Vec<Entry> = p.entries.drain(i..).collect();
        self.forget_empty_pending();
        if let Some(first) = undone.first() {
            match (&first.before, &mut self.limiter) {
                (Snapshot::Bucket(tat), Limiter::Bucket(cur)) => *cur = *tat,
                (Snapshot::Sliding(len), Limiter::Sliding(log)) => log.truncate(*len),
                _ => {}
            }
        }
        undone.into_iter().map(|e| e.seq).collect()
    }

    /// Returns `cost` tokens at `now`, never above capacity: a token reconciliation
    /// (`since: None`), or a charge made at `since` that is given back unused (less
    /// the refill since then; see `Gcra::refund`).
    pub(crate) fn refund(
        &mut self,
        def: &QuotaDef,
        cost: u64,
        since: Option<(Nanos, &crate::sync::Mutex<u128>)>,
        now: Nanos,
    ) {
        if let (Kind::Bucket(g), Limiter::Bucket(tat)) = (&def.kind, &mut self.limiter) {
            *tat = g.refund(*tat, cost, since, now);
        }
    }

    /// The sequence number of the first reservation still in the future.
    pub(crate) fn first_future_seq(&self, now: Nanos) -> Option<u64> {
        self.pending
            .as_ref()
            .and_then(|p| p.entries.iter().find(|e| e.at > now))
            .map(|e| e.seq)
    }

    /// Takes an admission of `cost` at `at` back out of a sliding log (a reserved call
    /// that never ran). Only while no reservation sits on the cell: removing an entry
    /// from the middle would shift the snapshots of later reservations.
    pub(crate) fn unrecord(&mut self, def: &QuotaDef, at: Nanos, cost: u64, now: Nanos) {
        // Reservations already due are settled first, so that the answer depends on
        // the future reservations only, not on when the cell was last looked at.
        self.settle(def, now);
        if self.pending.as_ref().is_some_and(|p| !p.entries.is_empty()) {
            return;
        }
        if let (Kind::Sliding(_), Limiter::Sliding(log)) = (&def.kind, &mut self.limiter) {
            log.remove(at, cost);
        }
    }

    /// Whether a future reservation sits on this cell.
    pub(crate) fn has_future(&self, now: Nanos) -> bool {
        self.last_reserved() > now
    }

    /// Releases `cost` concurrency and hands the room to waiters in FIFO order.
    pub(crate) fn release(&mut self, cost: u64) {
        if let Limiter::Concurrency { in_flight, .. } = &mut self.limiter {
            *in_flight = in_flight.saturating_sub(cost);
        }
        self.grant_waiters();
    }

    /// Sets a new concurrency limit and admits the waiters that now fit.
    pub(crate) fn set_limit(&mut self, new: u64) {
        if let Limiter::Concurrency { limit, .. } = &mut self.limiter {
            *limit = new;
        }
        self.grant_waiters();
    }

    fn grant_waiters(&mut self) {
        let Limiter::Concurrency { in_flight, limit } = &mut self.limiter else {
            return;
        };
        let Some(p) = &mut self.pending else {
            return;
        };
        while let Some(w) = p.conc_waiters.front() {
            if *in_flight + w.cost.saturating_add(w.hold) > *limit {
                break;
            }
            *in_flight += w.cost;
            w.granted.store(true, Ordering::Release);
            if let Some(waker) = w.waker.lock().take() {
                waker.wake();
            }
            p.conc_waiters.pop_front();
        }
        self.forget_empty_pending();
    }

    /// Drops the pending list once nothing is left in it: a cell that waiters have
    /// all left is as if they had never come (it may go idle, and be evicted).
    fn forget_empty_pending(&mut self) {
        if self
            .pending
            .as_ref()
            .is_some_and(|p| p.entries.is_empty() && p.conc_waiters.is_empty())
        {
            self.pending = None;
        }
    }

    /// Queues a concurrency waiter.
    pub(crate) fn enqueue(&mut self, w: Arc<ConcWaiter>) {
        self.pending
            .get_or_insert_with(Box::default)
            .conc_waiters
            .push_back(w);
    }

    /// Removes a concurrency waiter; false if it was not queued (already granted).
    pub(crate) fn dequeue(&mut self, w: &Arc<ConcWaiter>) -> bool {
        let Some(p) = &mut self.pending else {
            return false;
        };
        let Some(i) = p.conc_waiters.iter().position(|x| Arc::ptr_eq(x, w)) else {
            return false;
        };
        p.conc_waiters.remove(i);
        // A waiter leaving the head may let those behind it through.
        self.grant_waiters();
        true
    }

    /// Whether this cell is indistinguishable from a fresh one at `now`.
    pub(crate) fn is_idle(&self, def: &QuotaDef, now: Nanos) -> bool {
        if self.pending.is_some() {
            return false;
        }
        match (&def.kind, &self.limiter) {
            (Kind::Bucket(g), Limiter::Bucket(tat)) => g.is_idle(*tat, now),
            (Kind::Sliding(w), Limiter::Sliding(log)) => {
                log.is_empty()
                    || log
                        .newest()
                        .is_some_and(|t| t.saturating_add(w.period_ns()) <= now)
            }
            (_, Limiter::Concurrency { in_flight, .. }) => *in_flight == 0,
            _ => true,
        }
    }

    /// Future reservations and concurrency waiters on this cell.
    pub(crate) fn waiters(&self, now: Nanos) -> usize {
        self.pending.as_ref().map_or(0, |p| {
            p.entries.iter().filter(|e| e.at > now).count() + p.conc_waiters.len()
        })
    }
}

#[cfg(test)]
mod tests;
