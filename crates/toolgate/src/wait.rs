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

use crate::clock::{nanos, Nanos};
use crate::denial::Denial;
use crate::fair::{Ticket, Turn};
use crate::held::HeldParts;
use crate::kernel::{evaluate, lock_all, retired, shadow_pass, Step};
use crate::observe::QueueSlot;
use crate::permit::Permit;
use crate::quota::{CellGuard, CostOf, Kind};
use crate::shared::Shared;
use crate::signals::Signals;
use crate::sync::Mutex;
use crate::tool::ToolRuntime;
use crate::vocab::{Call, Reason, Rejection, MAX_WAIT_LIMIT};
use crate::waiter::{acquire, sleep_until_slot, Acquired, Steps, WaitSlot, Waiter};
use hold::{ConcHold, ProbeHold};

/// A call on the wait path: its tool, and what it asks for beyond its plan.
pub(crate) struct Waiting<'c> {
    tool: Arc<ToolRuntime>,
    want: Want<'c>,
    call: Call<'c>,
    /// When it started waiting.
    start: Nanos,
    /// Its place in the tool's queue, counted until it leaves.
    _queued: QueueSlot,
    /// Its place in the tool's fair queue, if the tool has one: it waits for its
    /// turn there first.
    ticket: Option<Ticket>,
}

/// What a waiting call asks for, beyond its plan.
struct Want<'c> {
    tenant: Option<&'c str>,
    /// The tenant's key, on a tool with per-tenant signals.
    key: Option<u64>,
    /// The latest admission time the call accepts.
    deadline: Nanos,
    /// Whether that time is set by the call's own deadline (rather than its
    /// `max_wait`): a refusal then names the deadline.
    by_call_deadline: bool,
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
    shared: &'a Shared,
    seq: u64,
    slot: Arc<WaitSlot>,
    armed: bool,
}

// === impl Want ===

impl Want<'_> {
    /// The refusal of a call whose admission, `wait` from now as `quota` says, comes
    /// after the latest it accepts: by its deadline, or too long a wait.
    fn too_late(&self, tool: &ToolRuntime, quota: &Arc<str>, wait: Nanos) -> Rejection {
        if self.by_call_deadline {
            Rejection::past_deadline(tool.name.clone())
        } else {
            tool.upstream.too_long(quota, wait)
        }
    }
}

// === impl Waiting ===

impl<'c> Waiting<'c> {
    /// The wait path of [`crate::Engine::admit`] for `call` of `tool`, whose
    /// immediate attempt was denied with `first`: the call joins the tool's queue,
    /// or is refused now (its predicted wait is too long, or the queue is full).
    /// [`Waiting::run`] then waits. (Two steps rather than one async function: one
    /// level less of nested futures on the stack of the task that polls it.)
    pub(crate) fn join(
        tool: Arc<ToolRuntime>,
        call: Call<'c>,
        first: Denial,
    ) -> Result<Self, Denial> {
        let start = tool.shared.clock.now();
        let max_wait = call.wait_limit(tool.max_wait).min(MAX_WAIT_LIMIT);
        let by_max_wait = start.saturating_add(nanos(max_wait));
        // The call's own deadline, less the tool's expected run time, when it comes
        // first: the wait is bounded by min(max_wait, deadline − now − run time).
        let latest_start = call
            .deadline_at()
            .map(|d| tool.stats.latency.latest_start(d));
        let want = Want {
            tenant: call.tenant,
            key: tool.upstream.tenant_key(call.tenant),
            deadline: latest_start.map_or(by_max_wait, |l| l.min(by_max_wait)),
            by_call_deadline: latest_start.is_some_and(|l| l < by_max_wait),
            quota: first.rejection.quota().into(),
        };
        if first.at > want.deadline {
            return Err(want.too_late(&tool, &want.quota, first.at - start).into());
        }
        let retry = first.rejection.retry_after();
        let full = Rejection::new(
            tool.name.clone(),
            want.quota.clone(),
            Reason::QueueFull,
            retry,
        );
        let queued = match (tool.stats.enter_queue(tool.queue_limit), &tool.fair) {
            (Some(q), _) => q,
            // A full fair queue makes room by pushing out the newest call of the
            // tenant with the most waiting, if it has two more than this one's.
            (None, Some(f)) if f.push_out(call.tenant, full.clone()) => {
                tool.stats.enter_queue_anyway()
            }
            (None, _) => return Err(full.into()),
        };
        let ticket = match &tool.fair {
            Some(f) => {
                let (ticket, at) = f.park(&tool.quotas, &call, first.at.max(start), start);
                if at > want.deadline {
                    return Err(want.too_late(&tool, &want.quota, at - start).into());
                }
                Some(ticket)
            }
            None => None,
        };
        Ok(Self {
            tool,
            want,
            call,
            start,
            _queued: queued,
            ticket,
        })
    }

    /// Waits for a call that has joined the tool's queue: its concurrency slots,
    /// then its rate time; then the permit.
    pub(crate) async fn run(self) -> Result<Permit, Denial> {
        let (call, start) = (&self.call, self.start);
        let (tool, want) = (&self.tool, &self.want);
        if let Some(t) = &self.ticket {
            let clock = &*tool.shared.clock;
            match t.turn(clock, want.deadline).await {
                Turn::Head => {}
                Turn::Refused(r) => return Err(r.into()),
                Turn::TimedOut => {
                    let waited = clock.now().saturating_sub(start);
                    return Err(want.too_late(tool, &want.quota, waited).into());
                }
            }
        }
        // A half-open probe slot is held while waiting and given back if the call
        // never runs.
        let mut probe = ProbeHold {
            tool,
            held: tool.circuit_gate(start).map_err(|d| d.rejection)?,
        };
        let plan = match tool.plan(call, start) {
            Ok(plan) => plan,
            // A reload replaced a tenant's partitions: start over on its policy.
            Err(d) if d.stale => return Err(d),
            Err(d) => return Err(d.rejection.into()),
        };
        let mut guard = WaitGuard::enqueue(&tool.shared, tool, want.key, want.deadline);
        let mut conc = self.concurrency(&plan, &mut guard).await?;
        let rate: SmallVec<[&Step<'_>; 4]> = plan
            .iter()
            .filter(|s| !s.is_concurrency() && !s.quota.def.shadow && s.cost > 0)
            .collect();
        let admitted_at = self.rate_time(&mut guard, &rate, &mut probe).await?;

        // Admitted: collect what the permit keeps, run the shadow quotas.
        let now = tool.shared.clock.now();
        let mut held = std::mem::take(&mut conc.held);
        held.extend(
            rate.iter()
                .filter(|s| s.quota.def.cost_of == CostOf::Tokens)
                .map(|s| s.held()),
        );
        if plan.iter().any(|s| s.quota.def.shadow) {
            let mut guards = lock_all(&plan);
            if let Some((i, reason)) = shadow_pass(&plan, &mut guards, now, &mut held) {
                tool.shadow_refused(&plan[i], reason, call.tenant);
            }
        }
        let waited = Duration::from_nanos(admitted_at.saturating_sub(start));
        tool.on_admit(waited, call);
        let mut permit = Permit::new(Some(tool.clone()), held, admitted_at, waited);
        permit.set_probe(probe.disarm());
        permit.set_tenant(want.key);
        Ok(permit)
    }

    /// Phase 1: the concurrency slots of the plan, queued for FIFO in lock order.
    async fn concurrency(
        &self,
        plan: &[Step<'_>],
        guard: &mut WaitGuard<'_>,
    ) -> Result<ConcHold<'_>, Denial> {
        let tool = &self.tool;
        let mut conc = ConcHold {
            tool,
            held: HeldParts::new(),
        };
        for s in plan
            .iter()
            .filter(|s| s.is_concurrency() && !s.quota.def.shadow && s.cost > 0)
        {
            let deadline = self.want.deadline;
            match acquire(&*tool.shared.clock, s, deadline, &guard.slot).await {
                Acquired::Granted => conc.held.push(s.held()),
                Acquired::TimedOut => {
                    let r = tool.rejection(s.quota, Reason::ConcurrencyLimited, None);
                    return Err(r.into());
                }
                Acquired::Rejected => return Err(self.refused(guard)),
            }
        }
        Ok(conc)
    }

    /// Phase 2: reserves the rate time and sleeps until then, and reserves again when
    /// a gate voids the reservation as its time comes; the admission time.
    async fn rate_time(
        &self,
        guard: &mut WaitGuard<'_>,
        rate: &[&Step<'_>],
        probe: &mut ProbeHold<'_>,
    ) -> Result<Nanos, Denial> {
        loop {
            if let Reserved::Now(now) = self.reserve(guard, rate, probe)? {
                return Ok(now);
            }
            let (at, denial) = match self.sleep(guard, probe).await? {
                Woke::Admitted(at) => return Ok(at),
                Woke::Void { at, denial } => (at, denial),
            };
            give_back(&self.tool.shared, rate, at);
            if !denial.can_wait {
                return Err(denial.rejection.into());
            }
            if denial.at > self.want.deadline {
                let quota: Arc<str> = denial.rejection.quota().into();
                let now = self.tool.shared.clock.now();
                let wait = denial.at - now;
                return Err(self.want.too_late(&self.tool, &quota, wait).into());
            }
        }
    }

    /// Reserves the call's admission time in its rate and token quotas, after the
    /// upstream's pause and on a spreading slot, under the scheduler's lock (where
    /// the gates cannot move unseen): admitted at once when that time is now.
    fn reserve(
        &self,
        guard: &mut WaitGuard<'_>,
        rate: &[&Step<'_>],
        probe: &mut ProbeHold<'_>,
    ) -> Result<Reserved, Denial> {
        let (tool, want) = (&self.tool, &self.want);
        let mut sched = tool.shared.sched.lock();
        let now = tool.shared.clock.now();
        // The registration (queued, or a reservation a gate voided) makes way for
        // the reservation; a waiter refused by a re-gating has nothing left.
        if let Some(r) = guard.slot.refusal() {
            guard.armed = false;
            return Err(r.into());
        }
        let registered = sched.remove(guard.seq);
        guard.armed = false;
        tool.recheck_circuit(now, &mut probe.held)?;
        sched.collect_debts(now);
        let mut guards: SmallVec<[_; 4]> = rate.iter().map(|s| s.cell.get().lock()).collect();
        if retired(&guards) {
            return Err(self.stale());
        }
        let Timing { at, paused, spread } = self.timing(rate, &mut guards, now)?;
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
            .map(|s| (s.quota.clone(), s.cell.get().clone(), s.cost, s.hold))
            .collect();
        let upstream = &tool.upstream;
        let mut w = registered
            .unwrap_or_else(|| Box::new(Waiter::queued(upstream.clone(), want.key, want.deadline)));
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
        guards: &mut [CellGuard<'_>],
        now: Nanos,
    ) -> Result<Timing, Rejection> {
        let (up, want) = (&*self.tool.upstream, &self.want);
        // The quotas' earliest time: the kernel's evaluation of the rate steps.
        let v = evaluate(rate, guards, now, false);
        let (mut at, mut by) = match v.binding {
            Some(i) => (v.at, rate[i].quota.def.path.clone()),
            None => (v.at, want.quota.clone()),
        };
        let paused = up.signals_of(want.tenant, now, |s, _| s.map_or(0, Signals::paused_until));
        if paused > at {
            (at, by) = (paused, up.pause_path.clone());
        }
        let claim = up.signals_of(want.tenant, now, |s, _| {
            s.map(|s| s.claim_at(at, want.deadline))
        });
        let slot = match claim {
            Some(Ok(slot)) => slot,
            Some(Err(unclaimed)) => Some(unclaimed),
            None => None,
        };
        if let Some(s) = slot.filter(|&s| s > at) {
            (at, by) = (s, up.spread_path.clone());
        }
        if at > want.deadline {
            return Err(want.too_late(&self.tool, &by, at - now));
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
        probe: &mut ProbeHold<'_>,
    ) -> Result<Woke, Denial> {
        let tool = &self.tool;
        let clock = &*tool.shared.clock;
        loop {
            sleep_until_slot(clock, &guard.slot).await;
            let mut sched = tool.shared.sched.lock();
            let now = clock.now();
            if guard.slot.is_refused() {
                return Err(self.refused(guard));
            }
            let at = guard.slot.at();
            if at > now {
                // Moved after it woke.
                continue;
            }
            let spread = sched.remove(guard.seq).and_then(|w| w.spread);
            guard.armed = false;
            drop(sched);
            let tenant = self.want.tenant;
            return Ok(
                match tool.gates_on_waking(now, tenant, spread, &mut probe.held) {
                    Ok(()) => Woke::Admitted(at),
                    Err(denial) => Woke::Void { at, denial },
                },
            );
        }
    }

    /// The rejection a re-gating refused the waiter with (it is out of the queue); a
    /// stale denial, to start over, if it has none.
    fn refused(&self, guard: &mut WaitGuard<'_>) -> Denial {
        guard.armed = false;
        match guard.slot.refusal() {
            Some(r) => r.into(),
            None => self.stale(),
        }
    }

    /// The denial of a waiter whose plan a reload retired: no answer, but a retry on
    /// the policy now in force (its rejection, naming the quota that first refused the
    /// call, is never told).
    fn stale(&self) -> Denial {
        let quota = self.want.quota.clone();
        let placeholder = Rejection::new(self.tool.name.clone(), quota, Reason::RateLimited, None);
        Denial::stale(placeholder)
    }
}

/// Gives back what a waiter's reservation at `at` charged, now that it will not run
/// then: less the refill since, as [`Permit::cancel`] does (its charges are settled,
/// so they cannot be undone exactly).
fn give_back(shared: &Shared, rate: &[&Step<'_>], at: Nanos) {
    for s in rate {
        match s.quota.def.kind {
            Kind::Bucket(_) => {
                let kept = Mutex::new(0);
                shared.reconcile(s.quota, &s.held(), 0, Some((at, &kept)));
            }
            Kind::Sliding(_) => {
                let now = shared.clock.now();
                s.cell.get().lock().unrecord(&s.quota.def, at, s.cost, now);
            }
            Kind::Concurrency(_) => {}
        }
    }
}

// === impl WaitGuard ===

impl<'a> WaitGuard<'a> {
    /// Registers a call that starts waiting.
    fn enqueue(shared: &'a Shared, tool: &ToolRuntime, key: Option<u64>, deadline: Nanos) -> Self {
        let w = Box::new(Waiter::queued(tool.upstream.clone(), key, deadline));
        let slot = w.slot.clone();
        let mut sched = shared.sched.lock();
        let seq = sched.next_seq();
        sched.insert(seq, w);
        Self {
            shared,
            seq,
            slot,
            armed: true,
        }
    }
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut sched = self.shared.sched.lock();
            sched.leave(&*self.shared.clock, self.seq, &self.slot);
        }
    }
}

mod hold;
#[cfg(all(test, not(loom)))]
mod tests;
