//! Waiting for admission: FIFO per quota, no polling, exact cancellation.
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
//! Scope: the scheduler lock is taken only by waiting calls, cancellations and token
//! reconciliations that meet a reservation; immediate admissions never take it.

use std::collections::BTreeMap;
use std::future::poll_fn;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Duration;

use smallvec::SmallVec;

use crate::admission::{binds, lock_all, retired, Denied, Step};
use crate::clock::{nanos, Clock, Nanos, Sleep};
use crate::config::MAX_WAIT_LIMIT;
use crate::decision::{Call, Reason, Rejection};
use crate::engine::Core;
use crate::permit::{Held, Held2, Permit};
use crate::policy::ToolRuntime;
use crate::quota::{Cell, ConcWaiter, CostOf, Fit, Quota};
use crate::sync::{AtomicU64, Mutex};

/// Every reservation that is still in the future, by arrival order.
#[derive(Debug, Default)]
pub(crate) struct Scheduler {
    next_seq: u64,
    pending: BTreeMap<u64, Pend>,
    debts: usize,
}

type Steps = SmallVec<[(Arc<Quota>, Arc<Cell>, u64); 4]>;

#[derive(Debug)]
enum Pend {
    /// A waiting call's reservation in each of its rate and token quotas.
    Waiter { steps: Steps, slot: Arc<WaitSlot> },
    /// Tokens charged on completion behind the reservations of a bucket.
    Debt {
        quota: Arc<Quota>,
        cell: Arc<Cell>,
        cost: u64,
        at: Nanos,
    },
}

/// The reserved admission time of a waiter, and how to wake it when it moves.
#[derive(Debug)]
pub(crate) struct WaitSlot {
    at: AtomicU64,
    waker: Mutex<Option<Waker>>,
}

/// Cancels a reservation unless disarmed.
struct WaitGuard<'a> {
    core: &'a Core,
    seq: u64,
    slot: Arc<WaitSlot>,
    armed: bool,
}

/// A half-open probe slot taken while waiting; given back unless handed to a permit.
struct ProbeHold<'a>(Option<&'a ToolRuntime>);

impl ProbeHold<'_> {
    fn disarm(mut self) -> bool {
        self.0.take().is_some()
    }
}

impl Drop for ProbeHold<'_> {
    fn drop(&mut self) {
        if let Some(tool) = self.0 {
            tool.cancel_probe();
        }
    }
}

/// Concurrency slots taken while waiting; released unless handed to a permit.
struct ConcHold<'a> {
    tool: &'a ToolRuntime,
    held: Held2,
}

/// A queued concurrency waiter; leaves the queue (or gives back a slot granted in
/// the meantime) unless disarmed.
struct ConcGuard<'a> {
    cell: &'a Arc<Cell>,
    waiter: Arc<ConcWaiter>,
    armed: bool,
}

// === impl WaitSlot ===

impl WaitSlot {
    fn new(at: Nanos) -> Self {
        Self {
            at: AtomicU64::new(at),
            waker: Mutex::new(None),
        }
    }

    fn at(&self) -> Nanos {
        self.at.load(Ordering::Acquire)
    }

    fn move_to(&self, at: Nanos) {
        if self.at.swap(at, Ordering::AcqRel) != at {
            if let Some(w) = self.waker.lock().take() {
                w.wake();
            }
        }
    }
}

// === impl Pend ===

impl Pend {
    fn cells(&self) -> impl Iterator<Item = (&Arc<Quota>, &Arc<Cell>)> {
        let (waiter, debt) = match self {
            Self::Waiter { steps, .. } => (Some(steps.iter().map(|(q, c, _)| (q, c))), None),
            Self::Debt { quota, cell, .. } => (None, Some((quota, cell))),
        };
        waiter.into_iter().flatten().chain(debt)
    }

    fn at(&self) -> Nanos {
        match self {
            Self::Waiter { slot, .. } => slot.at(),
            Self::Debt { at, .. } => *at,
        }
    }
}

// === impl Scheduler ===

impl Scheduler {
    fn next_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// Drops debt records whose time has passed (their charge is committed).
    fn collect_debts(&mut self, now: Nanos) {
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

    /// Undoes the reservations from `from` on that share a cell with `seeds`
    /// (transitively), and replays them in arrival order at the earliest time each now
    /// fits. `adjust` runs on the unwound cells first (a token refund). Returns false
    /// without changing anything if `leaving` has reached its time meanwhile.
    fn replan(
        &mut self,
        clock: &dyn Clock,
        seeds: &[(Arc<Quota>, Arc<Cell>)],
        from: u64,
        leaving: Option<&WaitSlot>,
        adjust: impl FnOnce(&mut [crate::quota::CellGuard<'_>], &[u64], Nanos),
    ) -> bool {
        let scan_now = clock.now();
        // The closure: cells touched, each with the first sequence number that touched it.
        let mut cells: BTreeMap<u64, (Arc<Quota>, Arc<Cell>, u64)> = seeds
            .iter()
            .map(|(q, c)| (c.order(), (q.clone(), c.clone(), from)))
            .collect();
        let mut affected = Vec::new();
        for (&seq, p) in self.pending.range(from..) {
            if p.at() <= scan_now || !p.cells().any(|(_, c)| cells.contains_key(&c.order())) {
                continue;
            }
            affected.push(seq);
            for (q, c) in p.cells() {
                cells
                    .entry(c.order())
                    .or_insert_with(|| (q.clone(), c.clone(), seq));
            }
        }
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
        for seq in affected {
            let Some(p) = self.pending.get_mut(&seq) else {
                continue;
            };
            let idx = |c: &Arc<Cell>| order.binary_search(&c.order()).ok();
            match p {
                Pend::Waiter { steps, slot } => {
                    let mut at = now;
                    for (q, c, cost) in steps.iter() {
                        if let Some(Fit::At(t)) = idx(c).map(|i| guards[i].fit(&q.def, *cost, now))
                        {
                            at = at.max(t);
                        }
                    }
                    for (q, c, cost) in steps.iter() {
                        if let Some(i) = idx(c) {
                            guards[i].reserve(&q.def, seq, *cost, at);
                        }
                    }
                    slot.move_to(at);
                }
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
        true
    }
}

// === impl Core ===

impl Core {
    /// Reconciles a token estimate against the actual count: charges the difference
    /// or refunds it (never above capacity). Behind waiters' reservations, a charge
    /// goes after them (so nobody's promised time moves back) and a refund goes before
    /// them (so they move up).
    /// Charges or refunds the difference between `h`'s cost and `actual`; `since`
    /// (when the cost was charged) marks a refund of a charge given back unused.
    pub(crate) fn reconcile(
        &self,
        quota: &Arc<Quota>,
        h: &Held,
        actual: u64,
        since: Option<(Nanos, &Mutex<u128>)>,
    ) {
        let def = &quota.def;
        if actual == h.cost {
            return;
        }
        let now = self.clock.now();
        {
            let mut g = h.cell(quota).lock();
            if g.is_retired() {
                return reconcile_successor(g, h.cost, actual, since, now);
            }
            g.settle(def, now);
            if !g.has_future(now) {
                return apply_difference(&mut g, def, h.cost, actual, since, now);
            }
        }
        let mut sched = self.sched.lock();
        let now = self.clock.now();
        let first = {
            let mut g = h.cell(quota).lock();
            if g.is_retired() {
                // Retired by a reload since the lock above was let go.
                return reconcile_successor(g, h.cost, actual, since, now);
            }
            g.settle(def, now);
            if !g.has_future(now) {
                return apply_difference(&mut g, def, h.cost, actual, since, now);
            }
            if actual > h.cost {
                let seq = sched.next_seq();
                let at = g.last_reserved();
                g.reserve_debt(def, seq, actual - h.cost, at);
                sched.debts += 1;
                sched.pending.insert(
                    seq,
                    Pend::Debt {
                        quota: quota.clone(),
                        cell: h.cell(quota).clone(),
                        cost: actual - h.cost,
                        at,
                    },
                );
                return;
            }
            g.first_future_seq(now)
        };
        let Some(first) = first else {
            return;
        };
        let refund = h.cost - actual;
        let target = h.cell(quota).order();
        let seeds = [(quota.clone(), h.cell(quota).clone())];
        sched.replan(&*self.clock, &seeds, first, None, |guards, order, now| {
            if let Ok(i) = order.binary_search(&target) {
                guards[i].refund(def, refund, since, now);
            }
        });
    }
}

/// Reconciles against the cell that carries a retired cell's state now (a reload
/// moved it): the difference goes there, after whatever that cell has promised.
fn reconcile_successor(
    retired: crate::quota::CellGuard<'_>,
    estimate: u64,
    actual: u64,
    since: Option<(Nanos, &Mutex<u128>)>,
    now: Nanos,
) {
    let next = retired.successor();
    drop(retired);
    if let Some((cell, def)) = next.and_then(|n| n.follow(now)) {
        let mut g = cell.lock();
        g.settle(&def, now);
        apply_difference(&mut g, &def, estimate, actual, since, now);
    }
}

fn apply_difference(
    g: &mut crate::quota::CellState,
    def: &crate::quota::QuotaDef,
    estimate: u64,
    actual: u64,
    since: Option<(Nanos, &Mutex<u128>)>,
    now: Nanos,
) {
    if actual > estimate {
        g.charge_debt(def, actual - estimate, now);
    } else {
        g.refund(def, estimate - actual, since, now);
    }
}

/// Why the wait path did not admit a call.
#[derive(Debug)]
pub(crate) enum Refusal {
    Rejected(Rejection),
    /// A reload retired a cell of the call's plan: start over on the new policy.
    Stale,
}

impl From<Rejection> for Refusal {
    fn from(r: Rejection) -> Self {
        Self::Rejected(r)
    }
}

// === impl ToolRuntime ===

impl ToolRuntime {
    /// The wait path of [`crate::Engine::admit`]: `first` is the immediate attempt's
    /// denial.
    pub(crate) async fn wait(
        self: Arc<Self>,
        call: Call<'_>,
        first: Denied,
    ) -> Result<Permit, Refusal> {
        let core = &*self.core;
        let clock = &*core.clock;
        let start = clock.now();
        let max_wait = call.wait_limit(self.max_wait).min(MAX_WAIT_LIMIT);
        let deadline = start.saturating_add(nanos(max_wait));
        let quota: Arc<str> = first.rejection.quota().into();
        let reject = |reason, retry: Option<Nanos>| {
            Rejection::new(
                self.name.clone(),
                quota.clone(),
                reason,
                retry.map(Duration::from_nanos),
            )
        };
        if first.at > deadline {
            return Err(reject(Reason::MaxWaitExceeded, Some(first.at - start)).into());
        }
        let Some(_queued) = self.stats.enter_queue(self.queue_limit) else {
            let retry = first.rejection.retry_after().map(nanos);
            return Err(reject(Reason::QueueFull, retry).into());
        };
        // A half-open probe slot is held while waiting and given back if the call
        // never runs.
        let probe = ProbeHold(
            self.circuit_gate(start)
                .map_err(|d| d.rejection)?
                .then_some(&*self),
        );
        let plan = match self.plan(&call, start) {
            Ok(plan) => plan,
            // A reload replaced a tenant's partitions: start over on its policy.
            Err(d) if d.stale => return Err(Refusal::Stale),
            Err(d) => return Err(d.rejection.into()),
        };

        // Phase 1: concurrency slots, FIFO, in lock order.
        let mut conc = ConcHold {
            tool: &self,
            held: Held2::new(),
        };
        for s in plan
            .iter()
            .filter(|s| s.is_concurrency() && !s.quota.def.shadow && s.cost > 0)
        {
            if !acquire(clock, s, deadline).await {
                return Err(self
                    .rejection(s.quota, Reason::ConcurrencyLimited, None)
                    .into());
            }
            conc.held.push(s.held());
        }

        // Phase 2: reserve the rate time.
        let rate: SmallVec<[&Step<'_>; 4]> = plan
            .iter()
            .filter(|s| !s.is_concurrency() && !s.quota.def.shadow && s.cost > 0)
            .collect();
        let reserved = {
            let mut sched = core.sched.lock();
            let now = clock.now();
            sched.collect_debts(now);
            let mut guards: SmallVec<[_; 4]> = rate.iter().map(|s| s.cell.get().lock()).collect();
            if retired(&guards) {
                return Err(Refusal::Stale);
            }
            let mut at = now;
            let mut binding = None;
            for (i, (s, g)) in rate.iter().zip(guards.iter_mut()).enumerate() {
                g.settle(&s.quota.def, now);
                if let Fit::At(t) = g.fit(&s.quota.def, s.cost, now) {
                    if binds(t, s.rank, at, binding.map(|b: usize| rate[b].rank), now) {
                        at = t;
                        binding = Some(i);
                    }
                }
            }
            let paused = self.stats.paused_until.load(Ordering::Acquire);
            if paused > at {
                at = paused;
                binding = None;
            }
            let spread = self.stats.spread_at(at, deadline);
            if spread > at {
                at = spread;
                binding = None;
            }
            if at > deadline {
                let q = binding.map_or(quota.clone(), |i| rate[i].quota.def.path.clone());
                let r = Rejection::new(
                    self.name.clone(),
                    q,
                    Reason::MaxWaitExceeded,
                    Some(Duration::from_nanos(at - now)),
                );
                return Err(r.into());
            }
            if at <= now {
                for (s, g) in rate.iter().zip(guards.iter_mut()) {
                    g.charge(&s.quota.def, s.cost, now);
                }
                Err(now)
            } else {
                let seq = sched.next_seq();
                for (s, g) in rate.iter().zip(guards.iter_mut()) {
                    g.reserve(&s.quota.def, seq, s.cost, at);
                }
                let slot = Arc::new(WaitSlot::new(at));
                let steps = rate
                    .iter()
                    .map(|s| (s.quota.clone(), s.cell.get().clone(), s.cost))
                    .collect();
                sched.pending.insert(
                    seq,
                    Pend::Waiter {
                        steps,
                        slot: slot.clone(),
                    },
                );
                Ok((seq, slot))
            }
        };
        // The admission time is the reserved one, whenever the task gets to run.
        let admitted_at = match reserved {
            Err(now) => now,
            Ok((seq, slot)) => {
                let mut guard = WaitGuard {
                    core,
                    seq,
                    slot,
                    armed: true,
                };
                sleep_until_slot(clock, &guard.slot).await;
                guard.armed = false;
                core.sched.lock().pending.remove(&seq);
                guard.slot.at()
            }
        };

        // Admitted: collect what the permit keeps, run the shadow quotas.
        let now = clock.now();
        let mut held = std::mem::take(&mut conc.held);
        held.extend(
            rate.iter()
                .filter(|s| s.quota.def.cost_of == CostOf::Tokens)
                .map(|s| s.held()),
        );
        if plan.iter().any(|s| s.quota.def.shadow) {
            let mut guards = lock_all(&plan);
            self.shadow_pass(&plan, &mut guards, now, call.tenant, &mut held);
        }
        let waited = Duration::from_nanos(admitted_at.saturating_sub(start));
        self.on_admit(waited, call.tenant);
        let mut permit = Permit::new(Some(self.clone()), held, admitted_at, waited);
        permit.set_probe(probe.disarm());
        Ok(permit)
    }
}

/// Takes the slots of a concurrency step, queueing FIFO until `deadline`.
async fn acquire(clock: &dyn Clock, step: &Step<'_>, deadline: Nanos) -> bool {
    let (def, cell, cost) = (&step.quota.def, step.cell.get(), step.cost);
    let waiter = {
        let mut g = cell.lock();
        let now = clock.now();
        if matches!(g.fit(def, cost, now), Fit::At(_)) {
            g.charge(def, cost, now);
            return true;
        }
        let w = Arc::new(ConcWaiter::new(cost));
        g.enqueue(w.clone());
        w
    };
    let mut guard = ConcGuard {
        cell,
        waiter,
        armed: true,
    };
    let mut timeout = clock.sleep_until(deadline);
    let granted = poll_fn(|cx| {
        *guard.waiter.waker.lock() = Some(cx.waker().clone());
        if guard.waiter.is_granted() {
            return Poll::Ready(true);
        }
        timeout.as_mut().poll(cx).map(|()| false)
    })
    .await;
    guard.armed = !granted;
    granted
}

/// Sleeps until the clock reaches the slot's time, following it when it moves.
async fn sleep_until_slot(clock: &dyn Clock, slot: &WaitSlot) {
    let mut armed: Option<(Nanos, Sleep)> = None;
    poll_fn(|cx| loop {
        *slot.waker.lock() = Some(cx.waker().clone());
        let at = slot.at();
        if clock.now() >= at {
            return Poll::Ready(());
        }
        let sleep = match &mut armed {
            Some((t, s)) if *t == at => s,
            _ => &mut armed.insert((at, clock.sleep_until(at))).1,
        };
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => armed = None,
            Poll::Pending => return Poll::Pending,
        }
    })
    .await;
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut sched = self.core.sched.lock();
        let Some(p) = sched.pending.remove(&self.seq) else {
            return;
        };
        let seeds: Vec<_> = p.cells().map(|(q, c)| (q.clone(), c.clone())).collect();
        let replanned = sched.replan(
            &*self.core.clock,
            &seeds,
            self.seq,
            Some(&self.slot),
            |_, _, _| {},
        );
        if !replanned {
            // Its time came before it left: it was admitted, and the reservation
            // stands like that of any admitted call that is dropped.
            tracing::trace!(target: "toolgate::queue", seq = self.seq, "waiter left after its admission time");
        }
    }
}

impl Drop for ConcHold<'_> {
    fn drop(&mut self) {
        for h in self.held.drain(..) {
            h.cell(h.quota(self.tool)).lock().release(h.cost);
        }
    }
}

impl Drop for ConcGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut g = self.cell.lock();
        if !g.dequeue(&self.waiter) && self.waiter.is_granted() {
            g.release(self.waiter.cost);
        }
    }
}
