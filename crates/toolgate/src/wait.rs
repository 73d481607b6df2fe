//! The wait path of [`crate::Engine::admit`]: a call that must wait queues for its
//! concurrency slots (FIFO), then reserves its admission time in its rate and token
//! quotas and sleeps until then (see [`crate::queue`] for why reservations).
//!
//! The gates are asked at every step, not once: the waiter is registered with the
//! scheduler from the moment it starts waiting, so a gate that closes meanwhile
//! re-gates it at once ([`crate::queue::Scheduler::regate`]); the reservation takes
//! the upstream's pause and spreading in; and when the waiter wakes it asks the gates
//! again — through the same functions as an immediate call — before its permit is
//! built. A gate that closed too late for the re-gating (between the signal and the
//! scheduler's lock) is seen there: the call gives back what it charged and waits on,
//! or is refused.

use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use crate::admission::{binds, lock_all, retired, Denial, Step};
use crate::circuit::CircuitState;
use crate::clock::{nanos, Nanos};
use crate::engine::Core;
use crate::permit::{HeldParts, Permit};
use crate::policy::ToolRuntime;
use crate::quota::{CostOf, Fit, Kind};
use crate::signals::Signals;
use crate::sync::Mutex;
use crate::vocab::{Call, Reason, Rejection, MAX_WAIT_LIMIT};
use crate::waiter::{acquire, sleep_until_slot, Acquired, Steps, WaitSlot, Waiter};

/// What a waiting call asks for, beyond its plan.
struct Want<'c> {
    tenant: Option<&'c str>,
    /// The tenant's key, on a tool with per-tenant signals.
    key: Option<u64>,
    /// The latest admission time the call accepts.
    deadline: Nanos,
    /// The quota path of the first refusal, named when nothing else binds.
    quota: Arc<str>,
}

/// The outcome of a reservation.
enum Reserved {
    /// Admitted at once, at this time.
    Now(Nanos),
    /// Reserved for later: sleep until the slot's time.
    Later,
}

/// When a waiter is admitted: its quotas' time after the upstream's `paused` end, on
/// its `spread` slot (claimed) if the upstream's calls are spread.
struct Timing {
    at: Nanos,
    paused: Nanos,
    spread: Option<Nanos>,
}

/// What a waiter found when its time came.
enum Woke {
    /// Every gate is open: admitted at its reserved time.
    Admitted(Nanos),
    /// Its reservation (at `at`) is void: a gate says no until `denial.at`, or no.
    Void { at: Nanos, denial: Denial },
}

/// The waiter's registration with the scheduler; leaves the queue (giving back its
/// reservations, as if it had never come) unless disarmed.
struct WaitGuard<'a> {
    core: &'a Core,
    seq: u64,
    slot: Arc<WaitSlot>,
    armed: bool,
}

/// A half-open probe slot taken while waiting; given back unless handed to a permit.
struct ProbeHold<'a> {
    tool: &'a ToolRuntime,
    held: bool,
}

/// Concurrency slots taken while waiting; released unless handed to a permit.
struct ConcHold<'a> {
    tool: &'a ToolRuntime,
    held: HeldParts,
}

// === impl ToolRuntime ===

impl ToolRuntime {
    /// The wait path of [`crate::Engine::admit`]: `first` is the immediate attempt's
    /// denial.
    pub(crate) async fn wait(
        self: Arc<Self>,
        call: Call<'_>,
        first: Denial,
    ) -> Result<Permit, Denial> {
        let core = &*self.core;
        let clock = &*core.clock;
        let start = clock.now();
        let max_wait = call.wait_limit(self.max_wait).min(MAX_WAIT_LIMIT);
        let want = Want {
            tenant: call.tenant,
            key: self.tenant_key(call.tenant),
            deadline: start.saturating_add(nanos(max_wait)),
            quota: first.rejection.quota().into(),
        };
        if first.at > want.deadline {
            return Err(self.too_long(&want.quota, first.at - start).into());
        }
        let Some(_queued) = self.stats.enter_queue(self.queue_limit) else {
            let retry = first.rejection.retry_after();
            return Err(
                Rejection::new(self.name.clone(), want.quota, Reason::QueueFull, retry).into(),
            );
        };
        // A half-open probe slot is held while waiting and given back if the call
        // never runs.
        let mut probe = ProbeHold {
            tool: &self,
            held: self.circuit_gate(start).map_err(|d| d.rejection)?,
        };
        let plan = match self.plan(&call, start) {
            Ok(plan) => plan,
            // A reload replaced a tenant's partitions: start over on its policy.
            Err(d) if d.stale => return Err(d),
            Err(d) => return Err(d.rejection.into()),
        };
        let mut guard = WaitGuard::enqueue(core, &self, want.key, want.deadline);
        let mut conc = self.concurrency(&plan, &want, &mut guard).await?;
        let rate: SmallVec<[&Step<'_>; 4]> = plan
            .iter()
            .filter(|s| !s.is_concurrency() && !s.quota.def.shadow && s.cost > 0)
            .collect();
        let admitted_at = self.rate_time(&mut guard, &rate, &want, &mut probe).await?;

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
        permit.set_tenant(want.key);
        Ok(permit)
    }

    /// Phase 1: the concurrency slots of the plan, queued for FIFO in lock order.
    async fn concurrency(
        &self,
        plan: &[Step<'_>],
        want: &Want<'_>,
        guard: &mut WaitGuard<'_>,
    ) -> Result<ConcHold<'_>, Denial> {
        let mut conc = ConcHold {
            tool: self,
            held: HeldParts::new(),
        };
        for s in plan
            .iter()
            .filter(|s| s.is_concurrency() && !s.quota.def.shadow && s.cost > 0)
        {
            match acquire(&*self.core.clock, s, want.deadline, &guard.slot).await {
                Acquired::Granted => conc.held.push(s.held()),
                Acquired::TimedOut => {
                    let r = self.rejection(s.quota, Reason::ConcurrencyLimited, None);
                    return Err(r.into());
                }
                Acquired::Rejected => return Err(guard.refused(self, want)),
            }
        }
        Ok(conc)
    }

    /// Phase 2: reserves the rate time and sleeps until then, and reserves again when
    /// a gate voids the reservation as its time comes; the admission time.
    async fn rate_time(
        self: &Arc<Self>,
        guard: &mut WaitGuard<'_>,
        rate: &[&Step<'_>],
        want: &Want<'_>,
        probe: &mut ProbeHold<'_>,
    ) -> Result<Nanos, Denial> {
        loop {
            if let Reserved::Now(now) = self.reserve(guard, rate, want, probe)? {
                return Ok(now);
            }
            let (at, denial) = match self.sleep(guard, want, probe).await? {
                Woke::Admitted(at) => return Ok(at),
                Woke::Void { at, denial } => (at, denial),
            };
            give_back(&self.core, rate, at);
            if !denial.can_wait {
                return Err(denial.rejection.into());
            }
            if denial.at > want.deadline {
                let quota: Arc<str> = denial.rejection.quota().into();
                let now = self.core.clock.now();
                return Err(self.too_long(&quota, denial.at - now).into());
            }
        }
    }

    /// Reserves the call's admission time in its rate and token quotas, after the
    /// upstream's pause and on a spreading slot, under the scheduler's lock (where
    /// the gates cannot move unseen): admitted at once when that time is now.
    fn reserve(
        self: &Arc<Self>,
        guard: &mut WaitGuard<'_>,
        rate: &[&Step<'_>],
        want: &Want<'_>,
        probe: &mut ProbeHold<'_>,
    ) -> Result<Reserved, Denial> {
        let clock = &*self.core.clock;
        let mut sched = self.core.sched.lock();
        let now = clock.now();
        // The registration (queued, or a reservation a gate voided) makes way for
        // the reservation; a waiter refused by a re-gating has nothing left.
        if let Some(r) = guard.slot.refusal() {
            guard.armed = false;
            return Err(r.into());
        }
        let registered = sched.remove(guard.seq);
        guard.armed = false;
        self.recheck_circuit(now, probe)?;
        sched.collect_debts(now);
        let mut guards: SmallVec<[_; 4]> = rate.iter().map(|s| s.cell.get().lock()).collect();
        if retired(&guards) {
            return Err(self.stale(&want.quota));
        }
        let Timing { at, paused, spread } = self.timing(rate, &mut guards, want, now)?;
        if at <= now {
            for (s, g) in rate.iter().zip(guards.iter_mut()) {
                g.charge(&s.quota.def, s.cost, now);
            }
            return Ok(Reserved::Now(now));
        }
        let seq = sched.next_seq();
        for (s, g) in rate.iter().zip(guards.iter_mut()) {
            g.reserve(&s.quota.def, seq, s.cost, at);
        }
        guard.slot.move_to(at);
        let steps: Steps = rate
            .iter()
            .map(|s| (s.quota.clone(), s.cell.get().clone(), s.cost))
            .collect();
        let mut w = registered
            .unwrap_or_else(|| Box::new(Waiter::queued(self.clone(), want.key, want.deadline)));
        (w.steps, w.reserved, w.slot) = (steps, true, guard.slot.clone());
        (w.not_before, w.spread) = (paused, spread);
        sched.insert(seq, w);
        (guard.seq, guard.armed) = (seq, true);
        Ok(Reserved::Later)
    }

    /// When the call can be admitted (the cells of `rate` locked, settled at `now`):
    /// its quotas' earliest time, after the upstream's pause, on a spreading slot
    /// (claimed only within the deadline); or the rejection naming what makes it
    /// later than the deadline.
    fn timing(
        &self,
        rate: &[&Step<'_>],
        guards: &mut [crate::quota::CellGuard<'_>],
        want: &Want<'_>,
        now: Nanos,
    ) -> Result<Timing, Rejection> {
        let (mut at, mut by) = (now, want.quota.clone());
        let mut binding = None;
        for (s, g) in rate.iter().zip(guards.iter_mut()) {
            g.settle(&s.quota.def, now);
            if let Fit::At(t) = g.fit(&s.quota.def, s.cost, now) {
                if binds(t, s.rank, at, binding, now) {
                    (at, by, binding) = (t, s.quota.def.path.clone(), Some(s.rank));
                }
            }
        }
        let paused = self.signals_of(want.tenant, now, |s, _| s.map_or(0, Signals::paused_until));
        if paused > at {
            (at, by) = (paused, self.pause_path.clone());
        }
        let claim = self.signals_of(want.tenant, now, |s, _| {
            s.map(|s| s.claim_at(at, want.deadline))
        });
        let slot = match claim {
            Some(Ok(slot)) => slot,
            Some(Err(unclaimed)) => Some(unclaimed),
            None => None,
        };
        if let Some(s) = slot.filter(|&s| s > at) {
            (at, by) = (s, self.spread_path.clone());
        }
        if at > want.deadline {
            return Err(self.too_long(&by, at - now));
        }
        // Within the deadline, a slot is a claimed one.
        Ok(Timing {
            at,
            paused,
            spread: slot,
        })
    }

    /// Sleeps until the reserved time, following it as it moves, then asks the gates
    /// again under the scheduler's lock.
    async fn sleep(
        &self,
        guard: &mut WaitGuard<'_>,
        want: &Want<'_>,
        probe: &mut ProbeHold<'_>,
    ) -> Result<Woke, Denial> {
        let clock = &*self.core.clock;
        loop {
            sleep_until_slot(clock, &guard.slot).await;
            let mut sched = self.core.sched.lock();
            let now = clock.now();
            if guard.slot.is_refused() {
                return Err(guard.refused(self, want));
            }
            let at = guard.slot.at();
            if at > now {
                // Moved after it woke.
                continue;
            }
            let spread = sched.remove(guard.seq).and_then(|w| w.spread);
            guard.armed = false;
            drop(sched);
            return Ok(
                match self.gates_on_waking(now, want.tenant, spread, probe) {
                    Ok(()) => Woke::Admitted(at),
                    Err(denial) => Woke::Void { at, denial },
                },
            );
        }
    }

    /// The gates, asked again by a waiter whose time has come, in the order an
    /// immediate call asks them; `spread` is the spreading slot it holds already.
    fn gates_on_waking(
        &self,
        now: Nanos,
        tenant: Option<&str>,
        spread: Option<Nanos>,
        probe: &mut ProbeHold<'_>,
    ) -> Result<(), Denial> {
        self.pause_gate(now, tenant)?;
        let claim = match spread {
            Some(_) => None,
            None => self.spread_gate(now, tenant)?,
        };
        self.recheck_circuit(now, probe).map_err(|rejection| {
            self.unspread(claim);
            Denial {
                rejection,
                at: now,
                can_wait: false,
                stale: false,
            }
        })
    }

    /// The gates asked again for a call that a shared store admitted after it waited
    /// there (`probe`: whether its permit holds a half-open probe, updated). The
    /// pause and the breaker are asked as for a waiter whose time has come; spreading
    /// is not (the call claimed its spreading slot before it went to the store).
    pub(crate) fn gates_after_store(
        &self,
        now: Nanos,
        tenant: Option<&str>,
        probe: &mut bool,
    ) -> Result<(), Denial> {
        self.pause_gate(now, tenant)?;
        let mut hold = ProbeHold {
            tool: self,
            held: *probe,
        };
        *probe = false;
        match self.recheck_circuit(now, &mut hold) {
            Ok(()) => {
                *probe = hold.disarm();
                Ok(())
            }
            Err(rejection) => Err(Denial {
                rejection,
                at: now,
                can_wait: false,
                stale: false,
            }),
        }
    }

    /// Asks the breaker again for a waiter: one that holds a half-open probe keeps it
    /// unless the circuit has opened since (which voided every probe), and any other
    /// is let through, made a probe or refused as a new call would be.
    fn recheck_circuit(&self, now: Nanos, probe: &mut ProbeHold<'_>) -> Result<(), Rejection> {
        let Some(b) = &self.breaker else {
            return Ok(());
        };
        if probe.held {
            if b.state() != CircuitState::Open {
                return Ok(());
            }
            probe.held = false;
        }
        probe.held = self.circuit_gate(now).map_err(|d| d.rejection)?;
        Ok(())
    }

    /// The denial of a waiter whose plan a reload retired: no answer, but a retry on
    /// the policy now in force (its rejection, naming the quota that first refused the
    /// call, is never told).
    fn stale(&self, quota: &Arc<str>) -> Denial {
        let placeholder =
            Rejection::new(self.name.clone(), quota.clone(), Reason::RateLimited, None);
        Denial::stale(placeholder)
    }

    fn too_long(&self, quota: &Arc<str>, retry: Nanos) -> Rejection {
        Rejection::new(
            self.name.clone(),
            quota.clone(),
            Reason::MaxWaitExceeded,
            Some(Duration::from_nanos(retry)),
        )
    }
}

/// Gives back what a waiter's reservation at `at` charged, now that it will not run
/// then: less the refill since, as [`Permit::cancel`] does (its charges are settled,
/// so they cannot be undone exactly).
fn give_back(core: &Core, rate: &[&Step<'_>], at: Nanos) {
    for s in rate {
        match s.quota.def.kind {
            Kind::Bucket(_) => {
                let kept = Mutex::new(0);
                core.reconcile(s.quota, &s.held(), 0, Some((at, &kept)));
            }
            Kind::Sliding(_) => {
                let now = core.clock.now();
                s.cell.get().lock().unrecord(&s.quota.def, at, s.cost, now);
            }
            Kind::Concurrency(_) => {}
        }
    }
}

// === impl WaitGuard ===

impl<'a> WaitGuard<'a> {
    /// Registers a call that starts waiting.
    fn enqueue(core: &'a Core, tool: &Arc<ToolRuntime>, key: Option<u64>, deadline: Nanos) -> Self {
        let w = Box::new(Waiter::queued(tool.clone(), key, deadline));
        let slot = w.slot.clone();
        let mut sched = core.sched.lock();
        let seq = sched.next_seq();
        sched.insert(seq, w);
        Self {
            core,
            seq,
            slot,
            armed: true,
        }
    }

    /// The rejection a re-gating refused the waiter with (it is out of the queue); a
    /// stale denial, to start over, if it has none.
    fn refused(&mut self, tool: &ToolRuntime, want: &Want<'_>) -> Denial {
        self.armed = false;
        match self.slot.refusal() {
            Some(r) => r.into(),
            None => tool.stale(&want.quota),
        }
    }
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut sched = self.core.sched.lock();
            sched.leave(&*self.core.clock, self.seq, &self.slot);
        }
    }
}

// === impl ProbeHold ===

impl ProbeHold<'_> {
    fn disarm(mut self) -> bool {
        std::mem::replace(&mut self.held, false)
    }
}

impl Drop for ProbeHold<'_> {
    fn drop(&mut self) {
        if self.held {
            self.tool.cancel_probe();
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

#[cfg(all(test, not(loom)))]
mod tests;
