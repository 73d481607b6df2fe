//! The fair queue of a tool ([`FairQueue`]): the order in which its waiting calls
//! take their turn when the tool (or one of its pools) sets `fairness = "tenant"` or a
//! `reserve` for higher priority classes.
//!
//! Without one, the waiters of a tool reserve their admission times in arrival
//! order (see [`crate::queue`]): FIFO. With one, a waiting call first *parks* here,
//! and only the call whose turn it is (the *head*) goes on to the wait path and
//! reserves its time; when it leaves (admitted, refused or cancelled) the next turn
//! is chosen among the parked calls, so the order is decided as late as possible:
//!
//! - **Classes first**: interactive before default before batch; a parked call
//!   counts as one class higher for every [`AGING`] it has waited, so the lowest
//!   class is never starved (after `2 × AGING` a batch call competes as interactive,
//!   oldest first).
//! - **Tenants within a class, by weight** (start-time fair queueing, the virtual
//!   time form of weighted round robin): a tenant's call gets the start tag
//!   `max(V, F)`, its tenant's finish tag becomes `start + cost / weight`, and the
//!   parked call with the smallest start tag goes next (`V` is the start tag of the
//!   last call that went). A tenant that starts waiting gets the tag `V`, so it goes
//!   after at most one call of each other tenant that waits: the bound
//!   `docs/semantics.md` states.
//! - **FIFO within a tenant**: its tags only grow.
//!
//! Choosing the next turn looks at the first parked call of each class: each class
//! keeps its tenants' first calls in an ordered set, so a turn costs O(log tenants).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::future::poll_fn;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;

use std::time::Duration;

use crate::clock::{Clock, Nanos};
use crate::denial::Denial;
use crate::quota::{CostOf, Quota};
use crate::sync::{AtomicU64, Mutex};
use crate::vocab::{Call, Priority, Rejection};
use crate::waiter::WaitSlot;

/// How long a parked call waits before it counts as one class higher.
pub(crate) const AGING: Nanos = 1_000_000_000;

/// The scale of virtual time: a call of cost 1 and weight 1 advances its tenant's
/// finish tag by this much (divisible by every weight up to 1000 but a few, so tags
/// stay exact for common weights).
const SCALE: u128 = 1 << 40;

/// A tool's fair queue.
#[derive(Debug)]
pub(crate) struct FairQueue {
    /// Whether tenants are served by weight (`fairness = "tenant"`); otherwise every
    /// call is of one tenant and only classes order them.
    by_tenant: bool,
    /// Whether a turn's cost is the call's token estimate (the tool or a pool has a
    /// token budget) rather than its request count.
    in_tokens: bool,
    /// `[tenants.ID] weight`, shared by every tool of a policy.
    weights: Arc<HashMap<Box<str>, u32>>,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    /// Calls of each class waiting (parked or head), counted from [`FairQueue::enter`]
    /// to the drop of their [`Ticket`]: read without the lock by every immediate
    /// decision of the tool ([`FairQueue::busy_for`]).
    waiting: [AtomicU64; 3],
}

/// A call's place in the fair queue: parked, or the head. Leaving (dropping it)
/// gives the turn to the next call.
#[derive(Debug)]
pub(crate) struct Ticket {
    queue: Arc<FairQueue>,
    seq: u64,
    class: usize,
    tenant: Box<str>,
    /// Moved to 0 when its turn comes; refused when it is pushed out.
    pub(crate) slot: Arc<WaitSlot>,
}

#[derive(Debug, Default)]
struct State {
    classes: [Class; 3],
    next_seq: u64,
    /// The call whose turn it is, if any.
    head: Option<u64>,
}

/// One priority class: its tenants' parked calls and its virtual time.
#[derive(Debug, Default)]
struct Class {
    vtime: u128,
    flows: HashMap<Box<str>, Flow>,
    /// The first parked call of each tenant: (start tag, seq, tenant).
    firsts: BTreeSet<(u128, u64, Box<str>)>,
}

/// A tenant's parked calls in one class.
#[derive(Debug, Default)]
struct Flow {
    finish: u128,
    parked: VecDeque<Parked>,
}

#[derive(Debug)]
struct Parked {
    seq: u64,
    start: u128,
    since: Nanos,
    slot: Arc<WaitSlot>,
}

/// How a parked call's wait for its turn ended.
pub(crate) enum Turn {
    Head,
    /// Pushed out of a full queue.
    Refused(Rejection),
    TimedOut,
}

/// What [`FairQueue::enter`] found: the ticket, and how many calls go before it.
pub(crate) struct Entered {
    pub(crate) ticket: Ticket,
    pub(crate) ahead: u64,
}

// === impl FairQueue ===

impl FairQueue {
    pub(crate) fn new(
        by_tenant: bool,
        in_tokens: bool,
        weights: Arc<HashMap<Box<str>, u32>>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            by_tenant,
            in_tokens,
            weights,
            clock,
            state: Mutex::new(State::default()),
            waiting: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Whether a call of class `p` that could be admitted at once would go ahead of
    /// a waiting call of its class or a higher one.
    pub(crate) fn busy_for(&self, p: Priority) -> bool {
        self.waiting[..=p as usize]
            .iter()
            .any(|n| n.load(Ordering::Acquire) > 0)
    }

    /// The gate an immediate call of `tool` (its `quotas`) and class `p` passes at
    /// `now`: refused, as if by the tool's first rate quota and for one interval of
    /// it, while calls of its class or a higher one wait (it would jump them).
    pub(crate) fn gate(
        &self,
        tool: &Arc<str>,
        quotas: &[Arc<Quota>],
        p: Priority,
        now: Nanos,
    ) -> Result<(), Denial> {
        if !self.busy_for(p) {
            return Ok(());
        }
        let rated = quotas
            .iter()
            .find(|q| !q.def.shadow && q.def.interval().is_some());
        let Some(q) = rated.or_else(|| quotas.first()) else {
            return Ok(());
        };
        let wait = q.def.interval().unwrap_or(1_000_000);
        let retry = Some(Duration::from_nanos(wait));
        let r = Rejection::new(tool.clone(), q.def.path.clone(), q.def.reason(), retry);
        Err(Denial::until(r, now.saturating_add(wait)))
    }

    /// Parks `call` at `now`; it is the head at once when nothing else waits. Its
    /// turn costs its token estimate on a tool with a token budget, else its request
    /// count (at least 1).
    pub(crate) fn enter(self: &Arc<Self>, call: &Call<'_>, now: Nanos) -> Entered {
        let (p, cost) = (call.priority_class(), call.count);
        let cost = if self.in_tokens { call.tokens } else { cost };
        let tenant: Box<str> = if self.by_tenant {
            call.tenant.unwrap_or("").into()
        } else {
            "".into()
        };
        let weight = u128::from(self.weights.get(&tenant).copied().unwrap_or(1).max(1));
        let slot = Arc::new(WaitSlot::queued());
        let class = p as usize;
        let mut s = self.state.lock();
        let seq = s.next_seq;
        s.next_seq += 1;
        self.waiting[class].fetch_add(1, Ordering::Release);
        let ticket = Ticket {
            queue: self.clone(),
            seq,
            class,
            tenant: tenant.clone(),
            slot: slot.clone(),
        };
        let alone = s.head.is_none() && s.parked() == 0;
        let c = &mut s.classes[class];
        let vtime = c.vtime;
        let flow = c.flows.entry(tenant.clone()).or_default();
        let start = flow.finish.max(vtime);
        flow.finish = start + u128::from(cost.max(1)) * SCALE / weight;
        if alone {
            // Its turn at once; its tags count, so its tenant's next call goes after
            // a newly waiting tenant's first.
            c.vtime = start;
            s.head = Some(seq);
            slot.move_to(0);
            return Entered { ticket, ahead: 0 };
        }
        if flow.parked.is_empty() {
            c.firsts.insert((start, seq, tenant));
        }
        flow.parked.push_back(Parked {
            seq,
            start,
            since: now,
            slot,
        });
        let ahead = s.ahead(class, start, seq);
        Entered { ticket, ahead }
    }

    /// Parks `call` of a tool with `quotas` (see [`FairQueue::enter`]), whose quotas
    /// conform at `at`: its ticket, and when its turn would come if the calls ahead
    /// go at the pace of the tool's slowest request rate.
    pub(crate) fn park(
        self: &Arc<Self>,
        quotas: &[Arc<Quota>],
        call: &Call<'_>,
        at: Nanos,
        now: Nanos,
    ) -> (Ticket, Nanos) {
        let e = self.enter(call, now);
        let enforced = quotas.iter().filter(|q| !q.def.shadow);
        let pace = enforced
            .filter(|q| q.def.cost_of == CostOf::Requests)
            .filter_map(|q| q.def.interval())
            .max()
            .unwrap_or(0);
        let ahead = pace.saturating_mul(e.ahead.saturating_mul(call.count));
        (e.ticket, at.saturating_add(ahead))
    }

    /// Pushes out the newest parked call of the tenant with the most parked calls,
    /// when it has at least two more than `tenant`: refused with `rejection`, to make
    /// room for a call of `tenant` in a full queue. Whether one was.
    pub(crate) fn push_out(&self, tenant: Option<&str>, rejection: Rejection) -> bool {
        if !self.by_tenant {
            return false;
        }
        let mine = tenant.unwrap_or("");
        let mut s = self.state.lock();
        let own: usize = s
            .classes
            .iter()
            .filter_map(|c| c.flows.get(mine))
            .map(|f| f.parked.len())
            .sum();
        let Some((class, victim, len, seq)) = s.largest_flow() else {
            return false;
        };
        if len < own + 2 {
            return false;
        }
        // It leaves the waiting count when its ticket is dropped, as every call does.
        if let Some(p) = s.unpark(class, &victim, seq) {
            p.slot.refuse(rejection);
        }
        true
    }
}

// === impl State ===

impl State {
    fn parked(&self) -> usize {
        self.classes.iter().map(|c| c.firsts.len()).sum()
    }

    /// How many parked calls go before the call (`class`, `start`, `seq`) as things
    /// stand: every call of a higher class, and in its own class those of each
    /// tenant with a smaller start tag (plus the head, if any).
    fn ahead(&self, class: usize, start: u128, seq: u64) -> u64 {
        let higher: usize = self.classes[..class]
            .iter()
            .flat_map(|c| c.flows.values())
            .map(|f| f.parked.len())
            .sum();
        let same: usize = self.classes[class]
            .flows
            .values()
            .map(|f| {
                f.parked
                    .partition_point(|p| (p.start, p.seq) < (start, seq))
            })
            .sum();
        (higher + same + usize::from(self.head.is_some())) as u64
    }

    /// The tenant with the most parked calls in one class: that class, the tenant,
    /// how many, and its newest call's sequence number.
    fn largest_flow(&self) -> Option<(usize, Box<str>, usize, u64)> {
        let (i, t, len, seq) = self
            .classes
            .iter()
            .enumerate()
            .flat_map(|(i, c)| c.flows.iter().map(move |(t, f)| (i, t, f)))
            .filter_map(|(i, t, f)| Some((i, t, f.parked.len(), f.parked.back()?.seq)))
            .max_by_key(|(_, _, len, _)| *len)?;
        Some((i, t.clone(), len, seq))
    }

    /// Takes the parked call `seq` of `tenant` in `class` out of the queue.
    fn unpark(&mut self, class: usize, tenant: &str, seq: u64) -> Option<Parked> {
        let c = &mut self.classes[class];
        let flow = c.flows.get_mut(tenant)?;
        let i = flow.parked.iter().position(|p| p.seq == seq)?;
        if i == 0 {
            let first = &flow.parked[0];
            c.firsts.remove(&(first.start, first.seq, tenant.into()));
        }
        let p = flow.parked.remove(i)?;
        if i == 0 {
            if let Some(next) = flow.parked.front() {
                c.firsts.insert((next.start, next.seq, tenant.into()));
            }
        }
        if flow.parked.is_empty() {
            // An idle tenant keeps no state: it starts afresh at the virtual time.
            c.flows.remove(tenant);
        }
        Some(p)
    }

    /// Gives the turn to the next parked call at `now`: the first of the class that
    /// ranks highest once aged, the oldest on a tie.
    fn next_turn(&mut self, now: Nanos) {
        let pick = self
            .classes
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let (start, seq, tenant) = c.firsts.first()?;
                let since = c.flows.get(tenant)?.parked.front()?.since;
                let aged = usize::try_from(now.saturating_sub(since) / AGING).unwrap_or(i);
                Some((
                    (i.saturating_sub(aged), since, *seq),
                    i,
                    *start,
                    tenant.clone(),
                ))
            })
            .min_by_key(|(rank, ..)| *rank);
        let Some(((_, _, seq), class, start, tenant)) = pick else {
            return;
        };
        if let Some(p) = self.unpark(class, &tenant, seq) {
            let c = &mut self.classes[class];
            c.vtime = c.vtime.max(start);
            self.head = Some(seq);
            p.slot.move_to(0);
        }
    }
}

// === impl Ticket ===

impl Ticket {
    /// Waits for its turn, until `deadline` at most.
    pub(crate) async fn turn(&self, clock: &dyn Clock, deadline: Nanos) -> Turn {
        let mut timeout = clock.sleep_until(deadline);
        poll_fn(|cx| {
            self.slot.register(cx.waker());
            if let Some(r) = self.slot.refusal() {
                return Poll::Ready(Turn::Refused(r));
            }
            if self.is_head() {
                return Poll::Ready(Turn::Head);
            }
            timeout.as_mut().poll(cx).map(|()| Turn::TimedOut)
        })
        .await
    }

    /// Whether its turn has come.
    pub(crate) fn is_head(&self) -> bool {
        self.slot.at() == 0
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut s = self.queue.state.lock();
        self.queue.waiting[self.class].fetch_sub(1, Ordering::Release);
        if s.head == Some(self.seq) {
            s.head = None;
            // A tenant with nothing parked is idle: it keeps no state.
            let c = &mut s.classes[self.class];
            if c.flows
                .get(&self.tenant)
                .is_some_and(|f| f.parked.is_empty())
            {
                c.flows.remove(&self.tenant);
            }
            s.next_turn(self.queue.clock.now());
        } else if !self.slot.is_refused() {
            s.unpark(self.class, &self.tenant, self.seq);
        }
    }
}
