//! A reservation: every call of a multi-step plan admitted, or none
//! ([`crate::Engine::try_admit_all`], [`crate::Engine::admit_all`]). Never waits.
//!
//! Each call passes its tool's gates (a reservation never runs as a half-open probe),
//! then the plans of all calls are merged — one step per cell, costs summed, so that
//! quotas shared by several calls are charged with their sum — and the decision
//! kernel decides them at once. The permits keep every part they charged, so that an
//! unused one gives it all back ([`Permit::cancel`]).

use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use crate::admit::{needs_async, refuse_unknown};
use crate::clock::Nanos;
use crate::compiled::Compiled;
use crate::held::HeldParts;
use crate::kernel::{self, CellRef, Decision, Plan, Step};
use crate::live::Live;
use crate::permit::{Permit, Unadmitted};
use crate::quota::{Cell, CostOf, Kind};
use crate::signals::Claim;
use crate::sync::Mutex;
use crate::tool::ToolRuntime;
use crate::vocab::{Call, Reason, Rejection, UnknownTools};

/// The spreading slots a reservation has claimed; dropped with any left in it (a
/// refusal), it gives them back.
struct SpreadClaims<'a>(Vec<(&'a ToolRuntime, Claim)>);

/// The calls of a reservation, each with its tool (`None`: a tool without a policy)
/// and its plan.
struct Planned<'c> {
    tools: Vec<Option<&'c Arc<ToolRuntime>>>,
    plans: Vec<Plan<'c>>,
}

/// Admits every call or none, synchronously: refused on a shared store, which only
/// [`admit_all`] can ask.
pub(crate) fn try_admit_all(live: &Live, calls: &[Call<'_>]) -> Result<Vec<Permit>, Rejection> {
    let compiled = live.compiled();
    if live.shared.store.is_some() {
        if let Some((call, tool)) = calls
            .iter()
            .find_map(|c| compiled.tools.get(c.tool).map(|t| (c, t)))
        {
            return Err(needs_async(tool, call));
        }
    }
    drop(compiled);
    loop {
        // `None`: a reload retired a cell of the plan; start over on its policy.
        if let Some(permits) = admit_all_local(live, &live.compiled(), calls)? {
            return Ok(permits);
        }
        live.await_reload();
    }
}

/// Admits every call or none, here and then in the shared store if there is one.
pub(crate) async fn admit_all(live: &Live, calls: &[Call<'_>]) -> Result<Vec<Permit>, Rejection> {
    let local = loop {
        // `None`: a reload retired a cell of the plan; start over on its policy.
        if let Some(permits) = admit_all_local(live, &live.compiled(), calls)? {
            break permits;
        }
        live.reload_done().await;
    };
    let Some(store) = &live.shared.store else {
        return Ok(local);
    };
    // The store sees only the calls of tools with a policy.
    let known: Vec<Call<'_>> = calls
        .iter()
        .zip(&local)
        .filter(|(_, p)| p.tool().is_some())
        .map(|(c, _)| *c)
        .collect();
    // Until the store admits them, the local parts go back as never admitted, also
    // when the caller gives up while the store decides.
    let local: Vec<Unadmitted> = local.into_iter().map(Unadmitted::new).collect();
    match store.admit_all(&known).await {
        Ok(leases) => {
            let mut leases = leases.into_iter();
            Ok(local
                .into_iter()
                .zip(calls)
                .map(|(p, c)| match p.has_tool().then(|| leases.next()) {
                    Some(Some(lease)) => p.admitted(lease, c.priority_class()),
                    _ => p.unstored(),
                })
                .collect())
        }
        Err(r) => {
            let compiled = live.compiled();
            if let Some(t) = compiled.tools.get(r.tool()) {
                t.stats.on_reject(&r, None);
            }
            drop(local);
            Err(r)
        }
    }
}

/// Decides `calls` on `compiled`; `Ok(None)` when a reload retired a cell of the
/// plan (the caller waits for the reload to end and starts over).
fn admit_all_local(
    live: &Live,
    compiled: &Compiled,
    calls: &[Call<'_>],
) -> Result<Option<Vec<Permit>>, Rejection> {
    let now = live.shared.clock.now();
    // Spreading slots claimed so far: given back unless every call is admitted.
    let mut claims = SpreadClaims(Vec::new());
    let Some(planned) = gate_and_plan(compiled, calls, now, &mut claims)? else {
        return Ok(None);
    };
    let mut merged = merge(&planned.plans);
    if let Some(s) = merged.iter().find(|s| s.cost > s.quota.def.capacity()) {
        let tool = planned.owner(s);
        let r = tool.rejection(s.quota, Reason::CostExceedsCapacity, None);
        tool.stats.on_reject(&r, None);
        return Err(r);
    }
    merged.sort_unstable_by_key(|s| s.cell.get().order());
    let mut guards = kernel::lock_all(&merged);
    // What the permits keep is collected below, per call.
    let mut scratch = HeldParts::new();
    let shadow_ok = match kernel::decide(&merged, &mut guards, now, &mut scratch) {
        Decision::Admitted { shadow } => shadow.is_none(),
        Decision::Stale => return Ok(None),
        Decision::Refused {
            step,
            reason,
            retry,
            ..
        } => {
            let tool = planned.owner(&merged[step]);
            let r = tool.rejection(merged[step].quota, reason, retry);
            tool.stats.on_reject(&r, None);
            return Err(r);
        }
    };
    drop(guards);
    let permits = planned.permits(calls, &merged, shadow_ok, now);
    claims.0.clear();
    Ok(Some(permits))
}

/// Asks every call's gates and plans it; `Ok(None)` when a reload replaced a
/// tenant's partitions meanwhile.
fn gate_and_plan<'c>(
    compiled: &'c Compiled,
    calls: &[Call<'_>],
    now: Nanos,
    claims: &mut SpreadClaims<'c>,
) -> Result<Option<Planned<'c>>, Rejection> {
    let mut planned = Planned {
        tools: Vec::with_capacity(calls.len()),
        plans: Vec::with_capacity(calls.len()),
    };
    for call in calls {
        let Some(t) = compiled.tools.get(call.tool) else {
            if compiled.unknown == UnknownTools::Deny {
                return Err(refuse_unknown(compiled, call));
            }
            planned.tools.push(None);
            planned.plans.push(SmallVec::new());
            continue;
        };
        if t.stats.latency.too_late(now, call.deadline_at()) {
            let r = Rejection::past_deadline(t.name.clone());
            t.stats.on_reject(&r, call.tenant);
            return Err(r);
        }
        let pass = match t.gates(now, call) {
            Ok(pass) => pass,
            Err(d) => return Err(t.refuse(d, call.tenant)),
        };
        claims.0.extend(pass.spread.map(|c| (&**t, c)));
        // A reservation never runs as a half-open probe: anything but a closed (or
        // admitting degraded) circuit refuses it.
        if pass.probe {
            t.cancel_probe();
            let r = Rejection::new(
                t.name.clone(),
                t.circuit_path.clone(),
                Reason::CircuitOpen,
                t.breaker.as_ref().map(|b| b.half_open_retry(now)),
            );
            t.stats.on_reject(&r, call.tenant);
            return Err(r);
        }
        let plan = match t.plan(call, now) {
            Ok(plan) => plan,
            // A reload replaced a tenant's partitions: start over.
            Err(d) if d.stale => return Ok(None),
            Err(d) => return Err(t.refuse(d, call.tenant)),
        };
        planned.tools.push(Some(t));
        planned.plans.push(plan);
    }
    Ok(Some(planned))
}

/// The plans of a reservation as one: one step per cell, costs summed.
fn merge<'c>(plans: &[Plan<'c>]) -> Vec<Step<'c>> {
    let mut merged: Vec<Step<'_>> = Vec::new();
    for step in plans.iter().flatten() {
        match merged
            .iter_mut()
            .find(|m| Arc::ptr_eq(m.cell.get(), step.cell.get()))
        {
            Some(m) => {
                m.cost += step.cost;
                m.hold = m.hold.max(step.hold);
            }
            None => merged.push(Step {
                quota: step.quota,
                cell: CellRef::Owned(step.cell.get().clone()),
                cost: step.cost,
                hold: step.hold,
                rank: merged.len(),
            }),
        }
    }
    merged
}

// === impl Planned ===

impl<'c> Planned<'c> {
    /// The tool of the first call whose plan has the cell of `step`, to name in a
    /// rejection.
    fn owner(&self, step: &Step<'_>) -> &'c Arc<ToolRuntime> {
        let i = self
            .plans
            .iter()
            .position(|p| p.iter().any(|s| Arc::ptr_eq(s.cell.get(), step.cell.get())))
            .unwrap_or(0);
        self.tools
            .get(i)
            .copied()
            .flatten()
            .or_else(|| self.tools.iter().flatten().next().copied())
            .expect("a merged step comes from a known tool")
    }

    /// The permits of the admitted calls (`merged`: their steps, charged), each
    /// keeping every part it charged; `shadow_ok`: whether the shadow quotas
    /// admitted them too (and were charged).
    fn permits(
        &self,
        calls: &[Call<'_>],
        merged: &[Step<'_>],
        shadow_ok: bool,
        now: Nanos,
    ) -> Vec<Permit> {
        // A bucket was charged once for every call of the plan on it: the parts of
        // its calls share what a give-back keeps back.
        let kept: Vec<(Arc<Cell>, Arc<Mutex<u128>>)> = merged
            .iter()
            .filter(|s| matches!(s.quota.def.kind, Kind::Bucket(_)))
            .map(|s| (s.cell.get().clone(), Arc::new(Mutex::new(0))))
            .collect();
        let mut permits = Vec::with_capacity(calls.len());
        for ((call, tool), plan) in calls.iter().zip(&self.tools).zip(&self.plans) {
            let Some(tool) = tool else {
                permits.push(Permit::immediate(None, now));
                continue;
            };
            let held = plan
                .iter()
                .filter(|s| {
                    (s.cost > 0 || s.quota.def.cost_of == CostOf::Tokens)
                        && (!s.quota.def.shadow || shadow_ok)
                })
                .map(|s| {
                    let mut h = s.held();
                    h.kept = kept
                        .iter()
                        .find(|(c, _)| Arc::ptr_eq(c, s.cell.get()))
                        .map(|(_, k)| k.clone());
                    h
                })
                .collect();
            if !shadow_ok {
                if let Some(s) = plan.iter().find(|s| s.quota.def.shadow) {
                    tool.stats.on_shadow_reject(
                        &s.quota.def.path,
                        s.quota.def.reason(),
                        call.tenant,
                    );
                }
            }
            tool.on_admit(Duration::ZERO, call);
            let mut permit = Permit::new(Some((*tool).clone()), held, now, Duration::ZERO);
            permit.set_tenant(tool.upstream.tenant_key(call.tenant));
            permits.push(permit);
        }
        permits
    }
}

impl Drop for SpreadClaims<'_> {
    fn drop(&mut self) {
        // Latest first: each claim gives back to the one before it.
        for (tool, claim) in self.0.drain(..).rev() {
            tool.upstream.unspread(Some(claim));
        }
    }
}
