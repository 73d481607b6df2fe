//! Waiting for admission: FIFO per quota, no polling, exact cancellation, and gates
//! re-checked while calls wait.
//!
//! Why reservations: a waiter's admission time can be computed the moment it arrives —
//! quota state plus the waiters ahead of it fix it — so a waiter *reserves* that time
//! in every quota of its call (charging each at the reserved time, which is its real
//! admission time) and sleeps until then on the engine's clock. That gives, at once:
//!
//! - **FIFO**: a later call is never admitted before an earlier reservation on the same
//!   quota (fits start at the last reservation);
//! - **no polling**: one timer per waiter, armed at its admission time;
//! - **`max_wait` up front**: the predicted wait is the reserved time, so a call that
//!   would wait too long is rejected before it sleeps, never after;
//! - **exact cancellation**: when a waiter leaves early, its reservations and every
//!   later reservation they could have influenced are undone and replayed without it
//!   (the *replan*), so the accounting is exactly as if it had never arrived and those
//!   behind it move up.
//!
//! Concurrency cannot be predicted (it depends on when calls finish), so a call blocked
//! by a concurrency limit first queues for a slot (FIFO, handed over on release, bounded
//! by its deadline) and then reserves its rate time as above.
//!
//! A reserved time is only as good as the gates it was computed under. When one of
//! them closes while calls wait — the upstream asks for a pause or starts spreading,
//! the breaker trips — the scheduler *re-gates* that tool's waiters
//! ([`Scheduler::regate`]): every waiter is registered with it from the moment it
//! starts waiting (queued for concurrency or reserved), with its deadline, its tenant
//! and the pause it must wait out, so it can be refused at once (its reservations
//! given back through the replan, as if it had never come) or replayed at its new
//! time, in arrival order.
//!
//! Scope: the scheduler lock is taken only by waiting calls, cancellations, gates that
//! close while calls wait and token reconciliations that meet a reservation;
//! immediate admissions never take it.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::clock::{Clock, Nanos};
use crate::kernel::retired;
use crate::quota::{Cell, CellGuard, Quota};
use crate::sync::Mutex;
use crate::upstream::Upstream;
use crate::vocab::Rejection;
use crate::waiter::{WaitSlot, Waiter};

/// Every waiting call, and every reservation that is still in the future, by arrival
/// order.
#[derive(Debug, Default)]
pub(crate) struct Scheduler {
    next_seq: u64,
    pending: BTreeMap<u64, Pend>,
    debts: usize,
}

#[derive(Debug)]
pub(crate) enum Pend {
    /// A waiting call.
    Waiter(Box<Waiter>),
    /// Tokens charged on completion behind the reservations of a bucket.
    Debt {
        quota: Arc<Quota>,
        cell: Arc<Cell>,
        cost: u64,
        at: Nanos,
    },
}

/// What closed a gate of a tool, for [`Scheduler::regate`].
#[derive(Debug)]
pub(crate) enum Regate {
    /// The breaker refuses calls now: every waiter is refused with this.
    Circuit(Rejection),
    /// The upstream's pause or spreading moved.
    Signals,
}

// === impl Pend ===

impl Pend {
    fn cells(&self) -> impl Iterator<Item = (&Arc<Quota>, &Arc<Cell>)> {
        let (waiter, debt) = match self {
            Self::Waiter(w) => (Some(w.steps.iter().map(|(q, c, ..)| (q, c))), None),
            Self::Debt { quota, cell, .. } => (None, Some((quota, cell))),
        };
        waiter.into_iter().flatten().chain(debt)
    }

    fn at(&self) -> Nanos {
        match self {
            Self::Waiter(w) => w.slot.at(),
            Self::Debt { at, .. } => *at,
        }
    }
}

// === impl Scheduler ===

impl Scheduler {
    /// The next arrival number: reservations and waiters are ordered by it.
    pub(crate) fn next_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// Registers a waiter under `seq` (from [`Scheduler::next_seq`], after the
    /// reservations made with it).
    pub(crate) fn insert(&mut self, seq: u64, w: Box<Waiter>) {
        self.pending.insert(seq, Pend::Waiter(w));
    }

    /// Takes the waiter registered under `seq` out (it is admitted, or reserves anew).
    pub(crate) fn remove(&mut self, seq: u64) -> Option<Box<Waiter>> {
        match self.pending.remove(&seq) {
            Some(Pend::Waiter(w)) => Some(w),
            Some(debt) => {
                self.pending.insert(seq, debt);
                None
            }
            None => None,
        }
    }

    /// Drops debt records whose time has passed (their charge is committed).
    pub(crate) fn collect_debts(&mut self, now: Nanos) {
        if self.debts > 0 {
            self.pending
                .retain(|_, p| !matches!(p, Pend::Debt { at, .. } if *at <= now));
            self.debts = self
                .pending
                .values()
                .filter(|p| matches!(p, Pend::Debt { .. }))
                .count();
        }
    }

    /// A waiter leaves before its time (cancelled): its reservations are undone and
    /// the waiters behind it replayed without it. Nothing changes if its time has
    /// come meanwhile (it counts as admitted then).
    pub(crate) fn leave(&mut self, clock: &dyn Clock, seq: u64, slot: &WaitSlot) {
        let Some(w) = self.remove(seq).filter(|w| w.reserved) else {
            return;
        };
        let seeds: Vec<_> = w
            .steps
            .iter()
            .map(|(q, c, ..)| (q.clone(), c.clone()))
            .collect();
        if !self.replan(clock, &seeds, seq, &[], Some(slot), |_, _, _| {}) {
            // Its time came before it left: it was admitted, and the reservation
            // stands like that of any admitted call that is dropped.
            tracing::trace!(target: "toolgate::queue", seq, "waiter left after its admission time");
        }
    }

    /// Re-gates the waiters of the tool of `upstream` (only those of the tenant whose key is `tenant`,
    /// for a per-tenant signal) after one of its gates closed, in arrival order:
    ///
    /// - the breaker refuses calls: each is refused with the breaker's rejection;
    /// - a pause until P: a waiter whose deadline comes before P is refused at once
    ///   with `max_wait_exceeded`, the others are admitted at P at the earliest;
    /// - spreading started, changed or ended: the waiters' spread slots are given out
    ///   afresh in arrival order (a waiter whose slot lies beyond its deadline is
    ///   refused at once with `max_wait_exceeded`).
    ///
    /// A refused waiter leaves as a cancelled one does (those behind it move up, as
    /// if it had never come); the others are replayed at their new times and woken.
    /// Waiters whose time has come are admitted already and left alone (they ask the
    /// gates themselves when they wake).
    pub(crate) fn regate(
        &mut self,
        clock: &dyn Clock,
        upstream: &Upstream,
        tenant: Option<u64>,
        how: &Regate,
    ) {
        let now = clock.now();
        let ids: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| matches!(p, Pend::Waiter(w) if w.regated_by(upstream, tenant, now)))
            .map(|(&seq, _)| seq)
            .collect();
        let mut seeds = Vec::new();
        let mut replay = Vec::new();
        for seq in ids {
            let Some(Pend::Waiter(w)) = self.pending.get_mut(&seq) else {
                continue;
            };
            let refused = match how {
                Regate::Circuit(r) => Some(r.clone()),
                Regate::Signals => w.repause(now),
            };
            if w.reserved {
                seeds.extend(w.steps.iter().map(|(q, c, ..)| (q.clone(), c.clone())));
                replay.push(seq);
            }
            if let Some(r) = refused {
                if let Some(w) = self.remove(seq) {
                    w.slot.refuse(r);
                }
            }
        }
        if let Some(&from) = replay.first() {
            self.replan(clock, &seeds, from, &replay, None, |_, _, _| {});
        }
    }

    /// Records tokens charged on completion behind the reservations of `cell` (its
    /// lock held by the caller, which reserved them there under `seq`, from
    /// [`Scheduler::next_seq`]), so that a replan keeps them behind those waiters.
    pub(crate) fn add_debt(
        &mut self,
        seq: u64,
        quota: &Arc<Quota>,
        cell: &Arc<Cell>,
        cost: u64,
        at: Nanos,
    ) {
        self.debts += 1;
        self.pending.insert(
            seq,
            Pend::Debt {
                quota: quota.clone(),
                cell: cell.clone(),
                cost,
                at,
            },
        );
    }

    /// Refunds `refund` to `cell` of `quota` ahead of its reservations from `first`
    /// on, which move up: they are replayed without it (see [`Scheduler::replan`]).
    /// `since`, as for [`crate::quota::CellState::refund`].
    pub(crate) fn refund_before(
        &mut self,
        clock: &dyn Clock,
        (quota, cell): (&Arc<Quota>, &Arc<Cell>),
        first: u64,
        refund: u64,
        since: Option<(Nanos, &Mutex<u128>)>,
    ) {
        let target = cell.order();
        let seeds = [(quota.clone(), cell.clone())];
        self.replan(clock, &seeds, first, &[], None, |guards, order, now| {
            if let Ok(i) = order.binary_search(&target) {
                guards[i].refund(&quota.def, refund, since, now);
            }
        });
    }

    /// Undoes the reservations from `from` on that share a cell with `seeds`
    /// (transitively), or are listed in `also` (sorted), and replays them in arrival
    /// order at the earliest time each now fits (see [`Waiter::replay`]); a waiter
    /// whose replayed time is beyond its deadline is refused instead. `adjust` runs on
    /// the unwound cells first (a token refund). Returns false without changing
    /// anything if `leaving` has reached its time meanwhile.
    fn replan(
        &mut self,
        clock: &dyn Clock,
        seeds: &[(Arc<Quota>, Arc<Cell>)],
        from: u64,
        also: &[u64],
        leaving: Option<&WaitSlot>,
        adjust: impl FnOnce(&mut [CellGuard<'_>], &[u64], Nanos),
    ) -> bool {
        let (cells, affected) = self.closure(seeds, from, also, clock.now());
        let order: Vec<u64> = cells.keys().copied().collect();
        let entries: Vec<&(Arc<Quota>, Arc<Cell>, u64)> = cells.values().collect();
        let mut guards: Vec<_> = entries.iter().map(|(_, c, _)| c.lock()).collect();
        let now = clock.now();
        if leaving.is_some_and(|s| now >= s.at()) {
            return false;
        }
        if retired(&guards) {
            // A reload carried these reservations into new cells as time, where they
            // can no longer be taken back one by one: everyone keeps the time promised
            // (what the leaving call had reserved stays spent, never handed out twice).
            return true;
        }
        for ((q, _, first), g) in entries.iter().zip(guards.iter_mut()) {
            g.settle(&q.def, now);
            g.unwind_from(*first);
        }
        adjust(&mut guards, &order, now);
        self.replay(affected, &order, &mut guards, now);
        true
    }

    /// What a replan from `from` touches, as seen at `scan_now`: the cells (by lock
    /// order), each with the first sequence number that touched it, and the pending
    /// entries still in the future that touch one of them (transitively, starting
    /// from `seeds`) or are listed in `also`.
    #[allow(clippy::type_complexity)]
    fn closure(
        &self,
        seeds: &[(Arc<Quota>, Arc<Cell>)],
        from: u64,
        also: &[u64],
        scan_now: Nanos,
    ) -> (BTreeMap<u64, (Arc<Quota>, Arc<Cell>, u64)>, Vec<u64>) {
        let mut cells: BTreeMap<u64, (Arc<Quota>, Arc<Cell>, u64)> = seeds
            .iter()
            .map(|(q, c)| (c.order(), (q.clone(), c.clone(), from)))
            .collect();
        let mut affected = Vec::new();
        for (&seq, p) in self.pending.range(from..) {
            let touches = also.binary_search(&seq).is_ok()
                || p.cells().any(|(_, c)| cells.contains_key(&c.order()));
            if p.at() <= scan_now || !touches {
                continue;
            }
            affected.push(seq);
            for (q, c) in p.cells() {
                cells
                    .entry(c.order())
                    .or_insert_with(|| (q.clone(), c.clone(), seq));
            }
        }
        (cells, affected)
    }

    /// Replays the `affected` entries, unwound, in arrival order on the locked cells
    /// (`guards`, of the cells of `order`): each waiter at the earliest time it now
    /// fits (or refused, beyond its deadline), each debt after the last reservation.
    fn replay(
        &mut self,
        affected: Vec<u64>,
        order: &[u64],
        guards: &mut [CellGuard<'_>],
        now: Nanos,
    ) {
        let mut refused = Vec::new();
        for seq in affected {
            let Some(p) = self.pending.get_mut(&seq) else {
                continue;
            };
            let idx = |c: &Arc<Cell>| order.binary_search(&c.order()).ok();
            match p {
                Pend::Waiter(w) => match w.replay(order, guards, now) {
                    Ok(at) => {
                        for (q, c, cost, _) in &w.steps {
                            if let Some(i) = idx(c) {
                                guards[i].reserve(&q.def, seq, *cost, at);
                            }
                        }
                        w.slot.move_to(at);
                    }
                    Err(r) => refused.push((seq, r)),
                },
                Pend::Debt {
                    quota,
                    cell,
                    cost,
                    at,
                } => {
                    if let Some(i) = idx(cell) {
                        let t = guards[i].last_reserved().max(now);
                        guards[i].reserve_debt(&quota.def, seq, *cost, t);
                        *at = t;
                    }
                }
            }
        }
        for (seq, r) in refused {
            if let Some(w) = self.remove(seq) {
                w.slot.refuse(r);
            }
        }
    }
}
