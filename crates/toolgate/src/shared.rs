//! What every tool of an engine shares ([`Shared`]): the clock, the scheduler of the
//! waiting calls and the quota store; and the reconciliation of a token estimate,
//! which may meet the waiters' reservations.

use std::sync::Arc;

use crate::clock::{Clock, Nanos, NowSource};
use crate::held::Held;
use crate::queue::Scheduler;
use crate::quota::{CellGuard, CellState, Quota, QuotaDef};
use crate::store::QuotaStore;
use crate::sync::Mutex;

/// What every tool of an engine shares: the clock, the waiters' scheduler and the
/// quota store.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) clock: Arc<dyn Clock>,
    /// `clock`, read without a virtual call when it is one of toolgate's own.
    pub(crate) now: NowSource,
    pub(crate) sched: Mutex<Scheduler>,
    /// The shared store of the quotas, or `None` for this process's memory.
    pub(crate) store: Option<Arc<dyn QuotaStore>>,
}

// === impl Shared ===

impl Shared {
    /// The state shared by the tools of an engine on `clock` and `store`.
    pub(crate) fn new(clock: Arc<dyn Clock>, store: Option<Arc<dyn QuotaStore>>) -> Self {
        Self {
            now: NowSource::of(&*clock),
            clock,
            sched: Mutex::new(Scheduler::default()),
            store,
        }
    }

    /// The engine's time, read without a virtual call for toolgate's own clocks.
    #[inline]
    pub(crate) fn now(&self) -> Nanos {
        self.now.now(&*self.clock)
    }

    /// Reconciles a token estimate against the actual count: charges the difference
    /// between `h`'s cost and `actual`, or refunds it (never above capacity). Behind
    /// waiters' reservations, a charge goes after them (so nobody's promised time
    /// moves back) and a refund goes before them (so they move up). `since` (when
    /// the cost was charged) marks a refund of a charge given back unused.
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
                sched.add_debt(seq, quota, h.cell(quota), actual - h.cost, at);
                return;
            }
            g.first_future_seq(now)
        };
        let Some(first) = first else {
            return;
        };
        let cell = h.cell(quota);
        sched.refund_before(&*self.clock, (quota, cell), first, h.cost - actual, since);
    }
}

/// Reconciles against the cell that carries a retired cell's state now (a reload
/// moved it): the difference goes there, after whatever that cell has promised.
fn reconcile_successor(
    retired: CellGuard<'_>,
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

/// Charges (`actual` above `estimate`) or refunds the difference on a cell that no
/// waiter has reserved.
fn apply_difference(
    g: &mut CellState,
    def: &QuotaDef,
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
