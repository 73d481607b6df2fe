//! The admission of one call, the first step of a call's way through the engine:
//! find the tool in the policy in force, ask its gates and the decision kernel
//! ([`crate::tool::ToolRuntime::try_admit`]), wait when the call may
//! ([`crate::wait`]), ask a shared store when there is one, and hand back a
//! [`Permit`] — or a [`Rejection`], counted.
//!
//! A call that finds a cell of its plan retired by a reload starts over on the new
//! policy; a tool without a policy is let through or refused as `unknown_tools` says.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{nanos, Nanos};
use crate::compiled::Compiled;
use crate::fair::{FairQueue, Ticket, Turn as FairTurn};
use crate::live::Live;
use crate::permit::{Permit, Unadmitted};
use crate::store::{QuotaStore, StoreLease};
use crate::tool::ToolRuntime;
use crate::vocab::{Call, OnLimit, Reason, Rejection, UnknownTools, MAX_WAIT_LIMIT};
use crate::wait::Waiting;

/// Whether [`admit`] may wait.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Waits {
    /// As the tool's `on_limit` and the call's own `max_wait` say.
    AsTheToolSays,
    /// Never: now or never.
    Never,
}

impl Waits {
    /// Whether a call of `tool` may wait.
    #[inline]
    fn for_call(self, tool: &ToolRuntime, call: &Call<'_>) -> bool {
        match self {
            Self::AsTheToolSays => {
                tool.on_limit == OnLimit::Wait || call.max_wait_override().is_some()
            }
            Self::Never => false,
        }
    }
}

/// Admits `call` now or rejects it now: never waits (see
/// [`crate::Engine::try_admit`]).
///
/// The lookup and the fast path inline, at the caller, and everything past them out
/// of line ([`try_admit_slow`]): a permit made in the caller's frame is moved field
/// by field, where one handed back by a call is copied in 16-byte pieces over the
/// callee's smaller writes, which the CPU cannot forward from its store buffer. On
/// an EPYC that stall was a quarter of a call by name; the function boundary it
/// costs the paths past the fast one is 16-31 instructions (docs/benchmarks.md,
/// core, round twenty-one).
#[inline(always)]
pub(crate) fn try_admit(live: &Live, call: &Call<'_>) -> Result<Permit, Rejection> {
    // The steps of `ToolRuntime::try_admit` (fast path, quiet path, gates), in the
    // same order, but with the permit made here: one that keeps nothing is built
    // without an `Admission` (the hot path of every call by name). One function for
    // both measured worse on every path past the fast one (docs/benchmarks.md,
    // round five): keep the two in step. On a shared store a tool has no fast
    // path (`compiled.rs`), so the store is asked about past it.
    match live.tool(call.tool) {
        Ok(tool) => {
            let now = live.shared.now();
            if tool.try_admit_fast(call, now) {
                return Ok(Permit::immediate(Some(tool), now));
            }
            try_admit_slow(live, tool, call, now)
        }
        Err(compiled) => unknown(live, &compiled, call),
    }
}

/// [`try_admit`] past the fast path, tried at `now`: out of line.
#[inline(never)]
fn try_admit_slow(
    live: &Live,
    tool: Arc<ToolRuntime>,
    call: &Call<'_>,
    now: Nanos,
) -> Result<Permit, Rejection> {
    try_admit_past_fast(live, tool, call, now)
}

/// [`try_admit`] again, on the policy a reload put in force; out of line, so that
/// [`try_admit_slow`] does not inline the function that calls it.
#[inline(never)]
fn try_admit_again(live: &Live, call: &Call<'_>) -> Result<Permit, Rejection> {
    try_admit(live, call)
}

/// A tool's runtime as an admission gets it: borrowed (a [`crate::ToolHandle`]'s,
/// cloned for the permit only when the call is admitted) or owned (looked up by
/// name: moved into the permit).
pub(crate) trait ToolRef: Sized {
    /// The runtime.
    fn runtime(&self) -> &Arc<ToolRuntime>;
    /// The runtime, for the permit to own.
    fn into_owned(self) -> Arc<ToolRuntime>;
}

impl ToolRef for &Arc<ToolRuntime> {
    #[inline(always)]
    fn runtime(&self) -> &Arc<ToolRuntime> {
        self
    }

    #[inline(always)]
    fn into_owned(self) -> Arc<ToolRuntime> {
        self.clone()
    }
}

impl ToolRef for Arc<ToolRuntime> {
    #[inline(always)]
    fn runtime(&self) -> &Arc<ToolRuntime> {
        self
    }

    #[inline(always)]
    fn into_owned(self) -> Arc<ToolRuntime> {
        self
    }
}

/// [`try_admit`] once the fast path, tried at `now`, said no (or cannot apply): a
/// shared store, the quiet path, then the gates. Inline: a [`crate::ToolHandle`]
/// calls it from its own out-of-line general path, a call by name from
/// [`try_admit_slow`].
#[inline(always)]
pub(crate) fn try_admit_past_fast(
    live: &Live,
    tool: impl ToolRef,
    call: &Call<'_>,
    now: Nanos,
) -> Result<Permit, Rejection> {
    let t = tool.runtime();
    if live.shared.store.is_some() {
        return Err(needs_async(t, call));
    }
    // A call decided while no gate has a say (a tenant's slot): its permit keeps
    // nothing either, and is made without an `Admission`.
    let general = match t.try_admit_quiet(call, now) {
        Ok(Some(tenant)) => {
            let mut permit = Permit::immediate(Some(tool.into_owned()), now);
            permit.set_tenant(tenant);
            return Ok(permit);
        }
        Ok(None) => t.try_admit_gated(call, now),
        Err(d) => Err(d),
    };
    match general {
        Ok(admission) => Ok(Permit::admitted(tool.into_owned(), admission)),
        Err(d) if d.stale => {
            live.await_reload();
            let call = Call {
                tool: &t.name,
                ..*call
            };
            try_admit_again(live, &call)
        }
        Err(d) => Err(t.refuse(d, call.tenant)),
    }
}

/// The answer `call` of `tool` (just looked up) gets at once, in memory, when it
/// `waits` as [`admit`] would let it: `tool` back when only [`admit`] can give it (a
/// shared store, a reload under way, or a refusal the call may wait out, which
/// [`admit`] then decides again before it waits). The same decision [`admit`] makes
/// first, without its future, and with [`try_admit`]'s permits (one that keeps
/// nothing is made without an `Admission`).
#[inline]
pub(crate) fn decide_now<T: ToolRef>(
    live: &Live,
    tool: T,
    call: &Call<'_>,
    waits: Waits,
) -> Result<Result<Permit, Rejection>, T> {
    if live.shared.store.is_some() {
        return Err(tool);
    }
    let now = live.shared.now();
    if tool.runtime().try_admit_fast(call, now) {
        return Ok(Ok(Permit::immediate(Some(tool.into_owned()), now)));
    }
    decide_past_fast(tool, call, now, waits)
}

/// [`decide_now`] once the fast path, tried at `now`, said no: out of line, so that
/// the fast path stays small enough to inline into the futures that call it. The
/// same steps as [`try_admit_past_fast`]; keep the two in step. One function for both
/// (the denial handed back with the tool) cost every path past the fast one 14-33
/// instructions (docs/benchmarks.md, round sixteen).
#[inline(never)]
fn decide_past_fast<T: ToolRef>(
    tool: T,
    call: &Call<'_>,
    now: Nanos,
    waits: Waits,
) -> Result<Result<Permit, Rejection>, T> {
    let t = tool.runtime();
    let general = match t.try_admit_quiet(call, now) {
        Ok(Some(tenant)) => {
            let mut permit = Permit::immediate(Some(tool.into_owned()), now);
            permit.set_tenant(tenant);
            return Ok(Ok(permit));
        }
        Ok(None) => t.try_admit_gated(call, now),
        Err(d) => Err(d),
    };
    match general {
        Ok(admission) => Ok(Ok(Permit::admitted(tool.into_owned(), admission))),
        Err(d) if d.stale || (d.can_wait && waits.for_call(t, call)) => Err(tool),
        Err(d) => Ok(Err(t.refuse(d, call.tenant))),
    }
}

/// [`admit`] of a call by name ([`crate::Engine::admit`],
/// [`crate::Engine::admit_now`]), decided at once when it can be ([`decide_now`]):
/// the future's first poll then answers without building [`admit`]'s, which is
/// boxed, so that this future stays small (it is moved at least once, into place,
/// and [`admit`]'s is 528 bytes); only a call that waits or goes to a shared store
/// allocates it.
pub(crate) async fn admit_by_name(
    live: &Live,
    call: &Call<'_>,
    waits: Waits,
) -> Result<Permit, Rejection> {
    let tool = match resolve(live, call) {
        Ok(tool) => tool,
        Err(unknown) => return unknown,
    };
    match decide_now(live, tool, call, waits) {
        Ok(answer) => answer,
        Err(tool) => Box::pin(admit(live, Some(tool), call, waits)).await,
    }
}

/// Admits `call`, waiting (`waits`: when the tool's `on_limit` is `"wait"` or the
/// call sets its own `max_wait`, see [`crate::Engine::admit`]) or not (see
/// [`crate::Engine::admit_now`]): here, then in the shared store if there is one; a
/// refusal is counted. (One async function from the facade down to the wait path, so
/// that a waiting call's task polls as few nested futures as before.)
pub(crate) async fn admit(
    live: &Live,
    resolved: Option<Arc<ToolRuntime>>,
    call: &Call<'_>,
    waits: Waits,
) -> Result<Permit, Rejection> {
    // `resolved`: the call's tool, looked up by its name a moment ago (a run's first
    // attempt); a reload that retires its plan sends the call to the new policy.
    let mut tool = match resolved.map_or_else(|| resolve(live, call), Ok) {
        Ok(t) => t,
        Err(unknown) => return unknown,
    };
    let waits = waits.for_call(&tool, call);
    let result = loop {
        let now = live.shared.clock.now();
        let outcome = match tool.try_admit(call, now) {
            // Without a store the permit takes the reference as it is: a clone and
            // a drop would be two more writes to a count every thread admitting the
            // tool writes.
            Ok(admission) if live.shared.store.is_none() => {
                return Ok(Permit::admitted(tool, admission));
            }
            Ok(admission) => Ok(Permit::admitted(tool.clone(), admission)),
            Err(denial) if !denial.stale && waits && denial.can_wait => {
                match Waiting::join(tool.clone(), *call, denial) {
                    // Boxed: with the store's round trip below, the wait's state
                    // made this future 1,616 bytes instead of 528, built and copied
                    // on every admission; only a call that waits allocates it.
                    Ok(waiting) => Box::pin(waiting.run()).await,
                    Err(denial) => Err(denial),
                }
            }
            Err(denial) => Err(denial),
        };
        match outcome {
            Ok(permit) => break Ok(permit),
            // A reload retired a cell of the plan: start over on the new policy.
            Err(denial) if denial.stale => {
                live.reload_done().await;
                let call = Call {
                    tool: &tool.name,
                    ..*call
                };
                match resolve(live, &call) {
                    Ok(t) => tool = t,
                    Err(unknown) => return unknown,
                }
            }
            Err(denial) => break Err(denial.rejection),
        }
    };
    let result = match (result, &live.shared.store) {
        // Boxed for the same reason (a store's admission is a round trip anyway).
        (Ok(local), Some(_)) => Box::pin(in_store(live, &tool, call, waits, local)).await,
        (result, _) => result,
    };
    if let Err(r) = &result {
        tool.stats.on_reject(r, call.tenant);
    }
    result
}

/// The runtime of the call's tool, or the answer for a tool without a policy.
fn resolve(live: &Live, call: &Call<'_>) -> Result<Arc<ToolRuntime>, Result<Permit, Rejection>> {
    live.tool(call.tool)
        .map_err(|compiled| unknown(live, &compiled, call))
}

/// Asks the shared store for a call admitted here (`local`, waiting there if
/// `waits`); a refusal gives the local parts back.
async fn in_store(
    live: &Live,
    tool: &ToolRuntime,
    call: &Call<'_>,
    waits: bool,
    local: Permit,
) -> Result<Permit, Rejection> {
    let Some(store) = &live.shared.store else {
        return Ok(local);
    };
    // Until the store admits the call, its local parts go back as never admitted,
    // also when the caller gives up while the store decides.
    let local = Unadmitted::new(local);
    // The store waits as long as the call's cap says: its deadline, less the tool's
    // expected run time, caps it there.
    let call = match call.deadline_at() {
        Some(d) => {
            let now = live.shared.clock.now();
            let room = Duration::from_nanos(tool.stats.latency.latest_start(d).saturating_sub(now));
            call.cap_wait(call.wait_cap().map_or(room, |c| c.min(room)))
        }
        None => *call,
    };
    // On a tool with a fair queue, a call that would wait in the store takes its
    // turn here first: only the head of this process's queue waits there.
    let _turn = match (&tool.fair, waits) {
        (Some(fair), true) => match take_turn(live, tool, fair, &call, store).await {
            Turn::Now(lease) => return Ok(local.admitted(lease, call.priority_class())),
            Turn::Head(ticket) => Some(ticket),
            Turn::Refused(r) => return Err(r),
        },
        _ => None,
    };
    match store.admit(call, waits).await {
        Ok(lease) if lease.waited().is_zero() => Ok(local.admitted(lease, call.priority_class())),
        Ok(lease) => regate_stored(
            live,
            tool,
            &call,
            local.admitted(lease, call.priority_class()),
        ),
        // Nothing ran: the local parts (a probe slot, an adaptive concurrency
        // slot) go back as if the call never came, when `local` drops.
        Err(r) => Err(r),
    }
}

/// What a call of a tool with a fair queue found before it waits in the store.
enum Turn {
    /// Admitted by the store at once (nothing of its class or higher waited here).
    Now(Box<dyn StoreLease>),
    /// Its turn came: the store may now make it wait.
    Head(Ticket),
    Refused(Rejection),
}

/// Asks the store without waiting unless calls of the class of `call` (or higher)
/// wait here already; else parks in the fair queue until its turn, within its
/// `max_wait`.
async fn take_turn(
    live: &Live,
    tool: &ToolRuntime,
    fair: &Arc<FairQueue>,
    call: &Call<'_>,
    store: &Arc<dyn QuotaStore>,
) -> Turn {
    // The quota named if the turn never comes: the one the store refused with.
    let mut quota: Arc<str> = Arc::from("fairness");
    if !fair.busy_for(call.priority_class()) {
        match store.admit(*call, false).await {
            Ok(lease) => return Turn::Now(lease),
            Err(r) if !waitable(&r) => return Turn::Refused(r),
            Err(r) => quota = r.quota().into(),
        }
    }
    let clock = &*live.shared.clock;
    let now = clock.now();
    let limit = call.wait_limit(tool.max_wait).min(MAX_WAIT_LIMIT);
    let deadline = now.saturating_add(nanos(limit));
    let entered = fair.enter(call, now);
    match entered.ticket.turn(clock, deadline).await {
        FairTurn::Head => Turn::Head(entered.ticket),
        FairTurn::Refused(r) => Turn::Refused(r),
        FairTurn::TimedOut => Turn::Refused(tool.upstream.too_long(&quota, nanos(limit))),
    }
}

/// Whether a store's refusal is one that waiting can outlast.
fn waitable(r: &Rejection) -> bool {
    !r.is_store_unavailable()
        && matches!(
            r.reason(),
            Reason::RateLimited | Reason::TokensLimited | Reason::ConcurrencyLimited
        )
}

/// Asks the gates again for a call a shared store admitted after it waited there: a
/// breaker that opened meanwhile refuses it (`circuit_open`), and so does an
/// upstream pause that began meanwhile (`rate_limited`, with the pause's end as
/// `retry_after`) — rather than wait it out holding a store admission charged before
/// the pause, which would release every such call at the pause's end at once. A
/// refused call gives back what it was given, in the store too.
fn regate_stored(
    live: &Live,
    tool: &ToolRuntime,
    call: &Call<'_>,
    mut permit: Permit,
) -> Result<Permit, Rejection> {
    let now = live.shared.clock.now();
    let mut probe = permit.is_probe();
    let gated = tool.gates_after_store(now, call.tenant, &mut probe);
    permit.set_probe(probe);
    match gated {
        Ok(()) => Ok(permit),
        Err(d) => {
            permit.cancel();
            Err(d.rejection)
        }
    }
}

/// The answer for a call of a tool without a policy, as `unknown_tools` says.
pub(crate) fn unknown(
    live: &Live,
    compiled: &Compiled,
    call: &Call<'_>,
) -> Result<Permit, Rejection> {
    match compiled.unknown {
        UnknownTools::Allow => Ok(Permit::immediate(None, live.shared.now())),
        UnknownTools::Deny => Err(refuse_unknown(compiled, call)),
    }
}

/// The rejection of a call of a tool without a policy under `unknown_tools =
/// "deny"`, counted.
pub(crate) fn refuse_unknown(compiled: &Compiled, call: &Call<'_>) -> Rejection {
    let r = Rejection::new(call.tool, "unknown_tools", Reason::UnknownTool, None);
    compiled.unknown_stats.on_reject(&r, call.tenant);
    r
}

/// The answer of the synchronous verbs on a shared store, which they cannot ask.
pub(crate) fn needs_async(tool: &ToolRuntime, call: &Call<'_>) -> Rejection {
    tracing::error!(
        tool = call.tool,
        "try_admit cannot ask a shared store; use admit_now or admit_all"
    );
    let r = Rejection::store_unavailable(tool.name.clone());
    tool.stats.on_reject(&r, call.tenant);
    r
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::clock::{Clock, ManualClock};
    use crate::{Engine, Policy};

    use super::*;

    #[test]
    fn a_call_still_on_the_old_policy_cannot_create_a_partition_the_new_one_misses() {
        // A call that resolved its tool just before a reload plans on the old
        // runtime after it. For a tenant the old map did not have yet, it used to
        // create a partition there and be admitted on it, unseen by the new policy:
        // that tenant then got its burst twice.
        let toml = |burst: u32| {
            format!("[tools.a]\nrate = \"1/h\"\nburst = {burst}\npartition = \"tenant\"")
        };
        let clock = ManualClock::new();
        let engine = Engine::with_clock(
            Policy::from_toml_str(&toml(2)).unwrap(),
            Arc::new(clock.clone()),
        );
        let old = engine.live().compiled().tools.get("a").cloned().unwrap();
        engine.apply(Policy::from_toml_str(&toml(3)).unwrap());
        let call = Call::new("a").tenant("newcomer");
        let denial = old.try_admit(&call, clock.now()).map(drop).unwrap_err();
        assert!(
            denial.stale,
            "the old map must send the call to the new policy"
        );
        // Starting over, the tenant gets the new burst, and only that.
        let admitted = (0..5).filter(|_| engine.try_admit(&call).is_ok()).count();
        assert_eq!(admitted, 3);
    }
}
