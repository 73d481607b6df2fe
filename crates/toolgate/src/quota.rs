//! One quota of a compiled policy: its definition (what it limits and how) and its
//! live state (one cell, or one cell per tenant partition).
//!
//! A cell holds the limiter state plus, only while someone waits, the pending
//! reservations of waiters and the queue of concurrency waiters. Everything here is
//! called with the cell's lock held; the engine decides the order of locks.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::task::Waker;

use crate::clock::Nanos;
use crate::config::{Mode, Rate, Window as WindowKind};
use crate::decision::Reason;
use crate::partition::Partitions;
use crate::rate::{Gcra, SlidingLog, Tat, Window, WordForm};
use crate::sync::{AtomicBool, AtomicU64, Mutex, MutexGuard};
use std::sync::atomic::Ordering;

/// What a quota limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Bucket(Gcra),
    Sliding(Window),
    Concurrency(u64),
}

/// Which part of a call a quota is charged with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CostOf {
    /// Its request count (`rate`, `concurrency`).
    Requests,
    /// Its token estimate (`tokens`), reconciled when the call completes.
    Tokens,
}

/// A quota's definition. Two quotas with equal definitions are interchangeable, which
/// is what lets a reload keep the state of unchanged quotas.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct QuotaDef {
    pub(crate) path: Arc<str>,
    pub(crate) kind: Kind,
    pub(crate) cost_of: CostOf,
    pub(crate) shadow: bool,
    pub(crate) partitioned: bool,
    pub(crate) max_partitions: usize,
}

/// A quota with its state.
#[derive(Debug)]
pub(crate) struct Quota {
    pub(crate) def: QuotaDef,
    pub(crate) slot: Slot,
}

#[derive(Debug, Clone)]
pub(crate) enum Slot {
    Single(Arc<Cell>),
    Partitioned(Arc<Partitions>),
}

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

/// The state of an unpartitioned bucket, kept in one atomic word whenever nobody
/// holds the cell's lock and nobody waits on it, so that the fast path admits with
/// one compare-and-swap and no lock.
///
/// The word holds either the bucket's state ([`WordForm`] units), and is then the
/// truth, or [`FastBucket::LOCKED`], and then the state under the lock is. Taking
/// the lock swaps `LOCKED` in and carries the word into the state; releasing it
/// writes the state back unless waiters have reservations on the cell (they keep the
/// word locked, which sends every call through the general path and its FIFO
/// order). A fast admission that finds the word locked falls back to the general
/// path; one whose compare-and-swap loses to a lock taker retries and sees `LOCKED`.
///
/// Only the cells of tools that take the fast path use the word (see
/// [`Cell::enable_fast`]); for the others it stays `LOCKED` and taking the lock costs
/// nothing more.
///
/// It fills a 128-byte block of its own, the word alone in the first cache line and
/// the bucket's parameters in the second: the word's line is the one that cores
/// hand back and forth when they admit the same tool, and the parameters, read on
/// every call before the word, must not travel with it (with them in one line, two
/// cores on one quota took 1.6–1.9 × as long per decision).
#[derive(Debug)]
#[repr(C, align(128))]
pub(crate) struct FastBucket {
    pub(crate) word: AtomicU64,
    /// Keeps the parameters out of the word's cache line.
    _apart: [u64; 7],
    pub(crate) form: WordForm,
    enabled: AtomicBool,
}

/// The cell's lock, held: also carries the fast path's word in and out.
pub(crate) struct CellGuard<'a> {
    guard: MutexGuard<'a, CellState>,
    fast: Option<&'a FastBucket>,
}

static NEXT_CELL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[derive(Debug)]
pub(crate) struct CellState {
    pub(crate) limiter: Limiter,
    pub(crate) pending: Option<Box<Pending>>,
}

#[derive(Debug, Clone)]
pub(crate) enum Limiter {
    Bucket(Tat),
    Sliding(Box<SlidingLog>),
    Concurrency {
        in_flight: u64,
        limit: u64,
    },
    /// A reload carried the state into another cell: whoever finds this under the
    /// lock starts over on the policy now in force (a charge here would be lost).
    /// A token estimate reconciled late follows the successor.
    Retired(Box<Successor>),
}

/// The cell that carries a retired cell's state, and its definition.
#[derive(Debug, Clone)]
pub(crate) struct Successor {
    pub(crate) cell: Link,
    pub(crate) def: QuotaDef,
}

/// How a retired cell refers to its successor.
#[derive(Debug, Clone)]
pub(crate) enum Link {
    /// An unpartitioned quota's cell, held strongly: a retired cell lives only while
    /// something from before the reload (a permit) still refers to it, and its
    /// successor must outlive it.
    Strong(Arc<Cell>),
    /// A tenant partition, held weakly: the link must not keep the new partition
    /// from being evicted. Once it is gone (evicted when idle, or replaced by a
    /// further reload whose partitions dropped it), the tenant's partition now is
    /// found by its key where the quota's partitions live now.
    Tenant {
        cell: std::sync::Weak<Cell>,
        key: Box<str>,
        home: Arc<crate::partition::Home>,
    },
}

// === impl Successor ===

impl Successor {
    /// The live cell at the end of the chain of reloads since, with its definition;
    /// `None` when the quota is gone from the policy in force. Takes one lock at a
    /// time.
    pub(crate) fn follow(self, now: Nanos) -> Option<(Arc<Cell>, QuotaDef)> {
        let (mut cell, mut def) = self.resolve(now)?;
        loop {
            let next = cell.lock().successor();
            match next {
                Some(n) => (cell, def) = n.resolve(now)?,
                None => return Some((cell, def)),
            }
        }
    }

    /// The cell this link leads to, with its definition: a tenant's partition that
    /// is gone is looked up (or created) by its key where the quota's partitions live
    /// now, under the definition in force.
    fn resolve(self, now: Nanos) -> Option<(Arc<Cell>, QuotaDef)> {
        match self.cell {
            Link::Strong(cell) => Some((cell, self.def)),
            Link::Tenant { cell, key, home } => match cell.upgrade() {
                Some(cell) => Some((cell, self.def)),
                None => home.partition(&key, now),
            },
        }
    }
}

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
    pub(crate) granted: AtomicBool,
    pub(crate) waker: Mutex<Option<Waker>>,
}

/// When a cell could admit a step, as seen under its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fit {
    /// Conforms at this time (≥ now).
    At(Nanos),
    /// A concurrency limit is full (or has waiters ahead).
    Full,
}

// === impl QuotaDef ===

impl QuotaDef {
    pub(crate) fn rate(path: Arc<str>, rate: Rate, burst: Option<u64>, window: WindowKind) -> Self {
        let kind = match window {
            WindowKind::Bucket => Kind::Bucket(Gcra::new(
                rate.count(),
                rate.period_ns(),
                burst.unwrap_or(rate.count()),
            )),
            WindowKind::Sliding => Kind::Sliding(Window::new(rate.count(), rate.period_ns())),
        };
        Self::with_kind(path, kind, CostOf::Requests)
    }

    pub(crate) fn tokens(path: Arc<str>, rate: Rate, burst: Option<u64>) -> Self {
        let g = Gcra::new(
            rate.count(),
            rate.period_ns(),
            burst.unwrap_or(rate.count()),
        );
        Self::with_kind(path, Kind::Bucket(g), CostOf::Tokens)
    }

    pub(crate) fn concurrency(path: Arc<str>, limit: u32) -> Self {
        Self::with_kind(path, Kind::Concurrency(u64::from(limit)), CostOf::Requests)
    }

    fn with_kind(path: Arc<str>, kind: Kind, cost_of: CostOf) -> Self {
        Self {
            path,
            kind,
            cost_of,
            shadow: false,
            partitioned: false,
            max_partitions: crate::config::DEFAULT_MAX_PARTITIONS,
        }
    }

    pub(crate) fn mode(mut self, mode: Mode) -> Self {
        self.shadow = mode == Mode::Shadow;
        self
    }

    pub(crate) fn partitioned(mut self, on: bool, max: usize) -> Self {
        self.partitioned = on;
        self.max_partitions = max;
        self
    }

    /// The reason given when this quota says no.
    pub(crate) fn reason(&self) -> Reason {
        match (self.kind, self.cost_of) {
            (Kind::Concurrency(_), _) => Reason::ConcurrencyLimited,
            (_, CostOf::Tokens) => Reason::TokensLimited,
            _ => Reason::RateLimited,
        }
    }

    /// The most a single admission can ever cost.
    pub(crate) fn capacity(&self) -> u64 {
        match self.kind {
            Kind::Bucket(g) => g.burst(),
            Kind::Sliding(w) => w.limit(),
            Kind::Concurrency(k) => k,
        }
    }

    /// A new limiter in its initial (full) state.
    pub(crate) fn fresh(&self, now: Nanos) -> Limiter {
        match self.kind {
            Kind::Bucket(g) => Limiter::Bucket(g.full(now)),
            Kind::Sliding(_) => Limiter::Sliding(Box::default()),
            Kind::Concurrency(k) => Limiter::Concurrency {
                in_flight: 0,
                limit: k,
            },
        }
    }

    /// A limiter of this definition carrying over what `old` had used, such that the
    /// switch never admits more than either definition would allow from here.
    ///
    /// Times already promised to waiters (reservations past `now`) carry over as
    /// time: a quota of another kind counts as used up until the last of them, so a
    /// promised time is never handed out twice. (A bucket turned into a bucket, or a
    /// window into a window, carries them exactly.)
    pub(crate) fn convert(&self, old: &QuotaDef, state: &Limiter, now: Nanos) -> Limiter {
        let promised = old.promised_until(state);
        let (used, now) = if promised > now {
            (u64::MAX, promised)
        } else {
            (old.used(state, now), now)
        };
        match (self.kind, old.kind, state) {
            (Kind::Bucket(new), Kind::Bucket(prev), Limiter::Bucket(tat)) => {
                Limiter::Bucket(new.convert_from(&prev, *tat, now))
            }
            (Kind::Bucket(new), _, _) => {
                let left = new.burst().saturating_sub(used);
                Limiter::Bucket(new.charge(new.full(now), new.burst() - left, now))
            }
            (Kind::Sliding(_), _, Limiter::Sliding(log)) => Limiter::Sliding(log.clone()),
            (Kind::Sliding(w), _, _) => Limiter::Sliding(Box::new(w.seeded(used, now))),
            (Kind::Concurrency(k), _, Limiter::Concurrency { in_flight, .. }) => {
                Limiter::Concurrency {
                    in_flight: *in_flight,
                    limit: k,
                }
            }
            (Kind::Concurrency(k), _, _) => Limiter::Concurrency {
                in_flight: 0,
                limit: k,
            },
        }
    }

    /// Until when `state` holds times promised to waiters: a bucket until it would be
    /// empty, a window until its newest entry (0: none).
    fn promised_until(&self, state: &Limiter) -> Nanos {
        match (self.kind, state) {
            (Kind::Bucket(g), Limiter::Bucket(tat)) => g.empty_at(*tat),
            (Kind::Sliding(_), Limiter::Sliding(log)) => log.newest().unwrap_or(0),
            _ => 0,
        }
    }

    /// Capacity in use at `now` (tokens taken, window entries, calls in flight).
    pub(crate) fn used(&self, state: &Limiter, now: Nanos) -> u64 {
        match (self.kind, state) {
            (Kind::Bucket(g), Limiter::Bucket(tat)) => {
                g.burst() - g.available(*tat, now).min(g.burst())
            }
            (Kind::Sliding(w), Limiter::Sliding(log)) => w.in_window(log, now),
            (_, Limiter::Concurrency { in_flight, .. }) => *in_flight,
            _ => 0,
        }
    }

    /// Capacity available at `now`.
    pub(crate) fn available(&self, state: &Limiter, now: Nanos) -> u64 {
        match (self.kind, state) {
            (_, Limiter::Concurrency { in_flight, limit }) => limit.saturating_sub(*in_flight),
            _ => self.capacity().saturating_sub(self.used(state, now)),
        }
    }
}

// === impl Quota ===

impl Quota {
    pub(crate) fn new(def: QuotaDef, now: Nanos) -> Self {
        let slot = if def.partitioned {
            Slot::Partitioned(Partitions::new(def.max_partitions).install(&def))
        } else {
            Slot::Single(Arc::new(Cell::single(&def, def.fresh(now))))
        };
        Self { def, slot }
    }

    /// A quota of definition `def` carrying over the state of `old`.
    ///
    /// A concurrency limit keeps its very cells (only the limit changes), so that
    /// calls admitted before the switch release into the same count.
    pub(crate) fn converted(def: QuotaDef, old: &Quota, now: Nanos) -> Self {
        if let (Kind::Concurrency(limit), Kind::Concurrency(_)) = (def.kind, old.def.kind) {
            if def.partitioned == old.def.partitioned {
                match &old.slot {
                    Slot::Single(c) => c.lock().set_limit(limit),
                    Slot::Partitioned(p) => p.for_each(|c| c.lock().set_limit(limit)),
                }
                let slot = old.slot.clone();
                return Self { def, slot };
            }
        }
        // The old cell is retired under the same lock that reads its state, so no
        // call can charge it after the state has moved (it starts over instead), and
        // it points to the cell that carries the state now.
        let succeed = |cell: &Cell, tenant: Option<(&str, &Arc<crate::partition::Home>)>| {
            let single = tenant.is_none();
            let mut g = cell.lock();
            let limiter = def.convert(&old.def, &g.limiter, now);
            let next = Arc::new(if single {
                Cell::single(&def, limiter)
            } else {
                Cell::new(limiter)
            });
            // A tenant partition links weakly: eviction must stay free to drop it (a
            // late difference then goes to the tenant's partition by key).
            let cell = match tenant {
                None => Link::Strong(next.clone()),
                Some((key, home)) => Link::Tenant {
                    cell: Arc::downgrade(&next),
                    key: key.into(),
                    home: home.clone(),
                },
            };
            g.limiter = Limiter::Retired(Box::new(Successor {
                cell,
                def: def.clone(),
            }));
            next
        };
        let slot = match (&old.slot, def.partitioned) {
            (Slot::Single(cell), false) => Slot::Single(succeed(cell, None)),
            (Slot::Partitioned(parts), true) => Slot::Partitioned(
                parts
                    .converted(def.max_partitions, |key, c| {
                        succeed(c, Some((key, parts.home())))
                    })
                    .install(&def),
            ),
            (_, true) => Slot::Partitioned(Partitions::new(def.max_partitions).install(&def)),
            (_, false) => Slot::Single(Arc::new(Cell::single(&def, def.fresh(now)))),
        };
        Self { def, slot }
    }
}

// === impl Cell ===

impl Cell {
    pub(crate) fn new(limiter: Limiter) -> Self {
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
    pub(crate) fn single(def: &QuotaDef, limiter: Limiter) -> Self {
        let fast = match (def.kind, &limiter) {
            (Kind::Bucket(g), Limiter::Bucket(_)) => g.word_form().map(|form| {
                Box::new(FastBucket {
                    word: AtomicU64::new(FastBucket::LOCKED),
                    _apart: [0; 7],
                    form,
                    enabled: AtomicBool::new(false),
                })
            }),
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
        let fast = self
            .fast
            .as_deref()
            .filter(|f| f.enabled.load(Ordering::Acquire));
        if let Some(f) = fast {
            f.take_out(&mut guard);
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
        if !f.enabled.load(Ordering::Acquire) {
            let state = self.state.lock();
            f.enabled.store(true, Ordering::Release);
            // The word is still `LOCKED`: the state under the lock goes into it.
            f.put_back(&state);
        }
        true
    }

    /// The key that orders lock acquisition.
    pub(crate) fn order(&self) -> u64 {
        self.id
    }
}

// === impl FastBucket ===

impl FastBucket {
    /// The word while the state lives under the lock (never a reachable state: it
    /// would be a bucket 584 years into the clock at one unit per nanosecond).
    pub(crate) const LOCKED: u64 = u64::MAX;

    /// Moves the state from the word into `state`, leaving the word `LOCKED` (the
    /// lock is being taken).
    #[inline(never)]
    fn take_out(&self, state: &mut CellState) {
        let word = self.word.swap(Self::LOCKED, Ordering::AcqRel);
        if word != Self::LOCKED {
            state.limiter = Limiter::Bucket(self.form.to_tat(word));
        }
    }

    /// Moves the state back into the word (the lock is being let go), unless
    /// waiters hold reservations or the state has no one-word form.
    #[inline(never)]
    fn put_back(&self, state: &CellState) {
        if state.pending.is_some() {
            return;
        }
        if let Limiter::Bucket(tat) = &state.limiter {
            if let Some(word) = self.form.to_word(*tat).filter(|w| *w != Self::LOCKED) {
                self.word.store(word, Ordering::Release);
            }
        }
    }

    /// Admits `cost` at `now` with one compare-and-swap, or says that the general
    /// path must decide: `false` on a rejection too (which the general path then
    /// explains), or while the state is under the lock.
    #[inline]
    pub(crate) fn try_charge(&self, cost: u64, now: Nanos) -> bool {
        let Some(charge) = self.form.prepare(cost, now) else {
            return false;
        };
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            // `apply` refuses a `LOCKED` word and never returns one.
            let Some(next) = charge.apply(word) else {
                return false;
            };
            match self
                .word
                .compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(seen) => word = seen,
            }
        }
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
            f.put_back(&self.guard);
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
    pub(crate) fn successor(&self) -> Option<Successor> {
        match &self.limiter {
            Limiter::Retired(next) => Some((**next).clone()),
            _ => None,
        }
    }

    /// Whether a reload moved this cell's state elsewhere (see [`Limiter::Retired`]).
    pub(crate) fn is_retired(&self) -> bool {
        matches!(self.limiter, Limiter::Retired(_))
    }

    /// Folds reservations whose time has come into the committed state and trims
    /// sliding windows.
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

    /// The time of the last future reservation, which FIFO order puts every new
    /// admission at or after.
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
            if *in_flight + w.cost > *limit {
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

// === impl ConcWaiter ===

impl ConcWaiter {
    pub(crate) fn new(cost: u64) -> Self {
        Self {
            cost,
            granted: AtomicBool::new(false),
            waker: Mutex::new(None),
        }
    }

    pub(crate) fn is_granted(&self) -> bool {
        self.granted.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(cell: &Cell) -> u64 {
        cell.fast().unwrap().word.load(Ordering::Acquire)
    }

    #[test]
    fn the_word_holds_the_bucket_only_while_it_is_in_use_and_nobody_waits() {
        let def = QuotaDef::rate(
            "tools.t.rate".into(),
            Rate::per_second(2).unwrap(),
            Some(2),
            WindowKind::Bucket,
        );
        let cell = Cell::single(&def, def.fresh(0));
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
            assert_eq!(def.available(&g.limiter, 0), 1);
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
}
