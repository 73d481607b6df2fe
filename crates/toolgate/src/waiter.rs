//! A waiting call: what the scheduler keeps of it ([`Waiter`]: its reservations,
//! deadline, tenant and the pause it waits out, which is what re-gating it needs) and
//! the slot its task sleeps on ([`WaitSlot`]: its reserved time or its refusal), with
//! the two ways a waiting task sleeps: queued for a concurrency slot, and until its
//! reserved time.

use std::future::poll_fn;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Poll, Waker};

use smallvec::SmallVec;

use crate::clock::{Clock, Nanos, Sleep};
use crate::kernel::Step;
use crate::quota::{Cell, CellGuard, ConcWaiter, Fit, Quota};
use crate::signals::Signals;
use crate::sync::{AtomicU64, Mutex};
use crate::upstream::Upstream;
use crate::vocab::Rejection;

/// A waiter's reservations: each quota, its cell, the cost reserved there and what
/// its class may not use of the quota (see [`Step::hold`]).
pub(crate) type Steps = SmallVec<[(Arc<Quota>, Arc<Cell>, u64, u64); 4]>;

/// A waiting call, with what re-gating it needs.
#[derive(Debug)]
pub(crate) struct Waiter {
    /// Its reservation in each of its rate and token quotas, at the slot's time;
    /// `reserved` is false (and `steps` empty) while it queues for concurrency.
    pub(crate) steps: Steps,
    pub(crate) reserved: bool,
    pub(crate) slot: Arc<WaitSlot>,
    /// The upstream of the tool whose call it is: its signals and paths.
    pub(crate) upstream: Arc<Upstream>,
    /// Its tenant's key, on a tool with per-tenant signals.
    pub(crate) tenant: Option<u64>,
    /// The latest admission time it accepts (its arrival plus its `max_wait`).
    pub(crate) deadline: Nanos,
    /// The end of an upstream pause it waits out: it is never admitted before.
    pub(crate) not_before: Nanos,
    /// The spreading slot it claimed, if the upstream's calls are spread.
    pub(crate) spread: Option<Nanos>,
}

/// The reserved admission time of a waiter (or its refusal), and how to wake it when
/// either changes.
#[derive(Debug)]
pub(crate) struct WaitSlot {
    at: AtomicU64,
    refused: Mutex<Option<Rejection>>,
    waker: Mutex<Option<Waker>>,
}

/// How the wait for a concurrency slot ended.
pub(crate) enum Acquired {
    Granted,
    TimedOut,
    /// A re-gating refused the waiter (its slot holds the rejection).
    Rejected,
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
    /// A slot not reserved yet (its time is unknown).
    pub(crate) fn queued() -> Self {
        Self {
            at: AtomicU64::new(Nanos::MAX),
            refused: Mutex::new(None),
            waker: Mutex::new(None),
        }
    }

    /// The reserved admission time (`Nanos::MAX` while not reserved).
    pub(crate) fn at(&self) -> Nanos {
        self.at.load(Ordering::Acquire)
    }

    /// Sets the reserved time and wakes the waiter if it moved.
    pub(crate) fn move_to(&self, at: Nanos) {
        if self.at.swap(at, Ordering::AcqRel) != at {
            self.wake();
        }
    }

    /// The rejection the waiter was refused with, if it was (its reservations are
    /// gone then).
    pub(crate) fn refusal(&self) -> Option<Rejection> {
        self.refused.lock().clone()
    }

    /// Whether the waiter was refused.
    pub(crate) fn is_refused(&self) -> bool {
        self.refused.lock().is_some()
    }

    /// Wakes this task when the slot moves or is refused.
    pub(crate) fn register(&self, waker: &Waker) {
        let mut w = self.waker.lock();
        if !w.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *w = Some(waker.clone());
        }
    }

    /// Marks the waiter refused with `r` and wakes it.
    pub(crate) fn refuse(&self, r: Rejection) {
        *self.refused.lock() = Some(r);
        self.wake();
    }

    fn wake(&self) {
        if let Some(w) = self.waker.lock().take() {
            w.wake();
        }
    }
}

// === impl Waiter ===

impl Waiter {
    /// A call that starts waiting (queued, not reserved yet).
    pub(crate) fn queued(upstream: Arc<Upstream>, tenant: Option<u64>, deadline: Nanos) -> Self {
        Self {
            steps: Steps::new(),
            reserved: false,
            slot: Arc::new(WaitSlot::queued()),
            upstream,
            tenant,
            deadline,
            not_before: 0,
            spread: None,
        }
    }

    /// Its replayed time at `now` (`guards` locked on the cells of `order`): the
    /// earliest its quotas fit, not before its pause, on a spreading slot; or the
    /// rejection when that is beyond its deadline.
    pub(crate) fn replay(
        &mut self,
        order: &[u64],
        guards: &[CellGuard<'_>],
        now: Nanos,
    ) -> Result<Nanos, Rejection> {
        let tool = self.upstream.clone();
        let mut at = now.max(self.not_before);
        let mut by = &tool.pause_path;
        for (q, c, cost, hold) in &self.steps {
            let Ok(i) = order.binary_search(&c.order()) else {
                continue;
            };
            if let Fit::At(t) = guards[i].fit(&q.def, cost.saturating_add(*hold), now) {
                if t > at {
                    (at, by) = (t, &q.def.path);
                }
            }
        }
        // The spreading slot: claimed only within the deadline.
        let claim = match self.spread {
            Some(s) => Ok(Some(s)),
            None => tool
                .signals_by_key(self.tenant, |s| s.map(|s| s.claim_at(at, self.deadline)))
                .unwrap_or(Ok(None)),
        };
        let slot = match claim {
            Ok(slot) => slot,
            Err(s) => Some(s),
        };
        if let Some(s) = slot.filter(|&s| s > at) {
            (at, by) = (s, &tool.spread_path);
        }
        if at > self.deadline {
            return Err(tool.too_long(by, at - now));
        }
        self.spread = slot;
        Ok(at)
    }

    /// Whether a gate of the tool of `upstream` that closed at `now` (of tenant
    /// `tenant`'s, if given) concerns this waiter: one of its calls that is not
    /// admitted yet.
    pub(crate) fn regated_by(&self, upstream: &Upstream, tenant: Option<u64>, now: Nanos) -> bool {
        Arc::ptr_eq(&self.upstream.stats, &upstream.stats)
            && tenant.is_none_or(|k| self.tenant == Some(k))
            && (!self.reserved || self.slot.at() > now)
    }

    /// Takes in the upstream's signals as they are now: the pause is waited out (or,
    /// beyond the deadline, the rejection to refuse the waiter with), and a spreading
    /// slot held is given back to be claimed afresh in arrival order.
    pub(crate) fn repause(&mut self, now: Nanos) -> Option<Rejection> {
        let tool = self.upstream.clone();
        let until = tool.signals_by_key(self.tenant, |s| {
            if let (Some(s), Some(slot)) = (s, self.spread.take()) {
                s.rewind_spread(slot);
            }
            s.map_or(0, Signals::paused_until)
        });
        if until > now && until > self.deadline {
            return Some(tool.too_long(&tool.pause_path, until - now));
        }
        self.not_before = self.not_before.max(until);
        None
    }
}

/// Takes the slots of a concurrency step, queueing FIFO until `deadline` or until the
/// waiter is refused.
pub(crate) async fn acquire(
    clock: &dyn Clock,
    step: &Step<'_>,
    deadline: Nanos,
    slot: &WaitSlot,
) -> Acquired {
    let (def, cell, cost) = (&step.quota.def, step.cell.get(), step.cost);
    let waiter = {
        let mut g = cell.lock();
        let now = clock.now();
        if matches!(g.fit(def, cost.saturating_add(step.hold), now), Fit::At(_)) {
            g.charge(def, cost, now);
            return Acquired::Granted;
        }
        let w = Arc::new(ConcWaiter::new(cost, step.hold));
        g.enqueue(w.clone());
        w
    };
    let mut guard = ConcGuard {
        cell,
        waiter,
        armed: true,
    };
    let mut timeout = clock.sleep_until(deadline);
    let acquired = poll_fn(|cx| {
        *guard.waiter.waker.lock() = Some(cx.waker().clone());
        slot.register(cx.waker());
        if guard.waiter.is_granted() {
            return Poll::Ready(Acquired::Granted);
        }
        if slot.is_refused() {
            return Poll::Ready(Acquired::Rejected);
        }
        timeout.as_mut().poll(cx).map(|()| Acquired::TimedOut)
    })
    .await;
    guard.armed = !matches!(acquired, Acquired::Granted);
    acquired
}

/// Sleeps until the clock reaches the slot's time, following it when it moves, or
/// until the waiter is refused.
pub(crate) async fn sleep_until_slot(clock: &dyn Clock, slot: &WaitSlot) {
    let mut armed: Option<(Nanos, Sleep)> = None;
    poll_fn(|cx| loop {
        slot.register(cx.waker());
        let at = slot.at();
        if slot.is_refused() || clock.now() >= at {
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
