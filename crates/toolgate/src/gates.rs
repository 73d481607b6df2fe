//! The gates a call passes before its quotas: the upstream's pause and spreading (its
//! `Retry-After` and rate-limit headers, see [`crate::signals`]) and the circuit
//! breaker.
//!
//! One way to decide: every path that admits (try, wait, reserve) asks these
//! functions, and a waiting call asks them again when it wakes. And because a gate can
//! close while calls wait, whatever closes one (an upstream's signal, a breaker that
//! trips) re-gates the calls already waiting at once ([`Scheduler::regate`]), so that
//! they wait the pause out, take the spread slots in turn or are refused, rather than
//! being admitted at the time they were promised before.
//!
//! [`Scheduler::regate`]: crate::queue::Scheduler::regate

use std::time::Duration;

use crate::admission::Denial;
use crate::clock::{nanos, Nanos};
use crate::policy::ToolRuntime;
use crate::queue::Regate;
use crate::shaping::ServerLimit;
use crate::signals::{Claim, Shift, Signals};
use crate::vocab::{Completion, Reason, Rejection};

// === impl ToolRuntime ===

impl ToolRuntime {
    /// The key of `tenant`'s signals on a tool with per-tenant signals (a call
    /// without a tenant is the tenant `""`, as with partitions); `None` otherwise.
    pub(crate) fn tenant_key(&self, tenant: Option<&str>) -> Option<u64> {
        self.tenant_signals
            .as_ref()
            .map(|ts| ts.key(tenant.unwrap_or("")))
    }

    /// Runs `f` on the signals that govern a call of `tenant` at `now` (`None`: none
    /// in force), with the tenant's key on a per-tenant tool. The key is worked out
    /// only while some tenant has a gate in force.
    pub(crate) fn signals_of<R>(
        &self,
        tenant: Option<&str>,
        now: Nanos,
        f: impl FnOnce(Option<&Signals>, Option<u64>) -> R,
    ) -> R {
        match &self.tenant_signals {
            None => f(Some(&self.stats.signals), None),
            Some(ts) if ts.quiet(now) => f(None, None),
            Some(ts) => {
                let key = ts.key(tenant.unwrap_or(""));
                ts.with(key, |s| f(s, Some(key)))
            }
        }
    }

    /// Runs `f` on the signals of the tenant whose key this is (the whole tool's,
    /// when the tool's signals are not per tenant).
    pub(crate) fn signals_by_key<R>(
        &self,
        key: Option<u64>,
        f: impl FnOnce(Option<&Signals>) -> R,
    ) -> R {
        match (&self.tenant_signals, key) {
            (None, _) => f(Some(&self.stats.signals)),
            (Some(ts), Some(key)) => ts.with(key, f),
            (Some(_), None) => f(None),
        }
    }

    /// Refuses calls while the upstream's `Retry-After` pause lasts. Waiting calls may
    /// wait it out: its end is known.
    pub(crate) fn pause_gate(&self, now: Nanos, tenant: Option<&str>) -> Result<(), Denial> {
        let until = self.signals_of(tenant, now, |s, _| s.map_or(0, Signals::paused_until));
        if until <= now {
            return Ok(());
        }
        Err(self.later(&self.pause_path, until, now))
    }

    /// While the upstream's low remaining capacity is spread over its reset window,
    /// takes this call's slot or says when the next one is free.
    pub(crate) fn spread_gate(
        &self,
        now: Nanos,
        tenant: Option<&str>,
    ) -> Result<Option<Claim>, Denial> {
        self.signals_of(tenant, now, |s, key| match s {
            Some(s) => s.spread_claim(now, key),
            None => Ok(None),
        })
        .map_err(|next| self.later(&self.spread_path, next, now))
    }

    /// Gives a spreading slot back (a quota then refused the call).
    pub(crate) fn unspread(&self, claim: Option<Claim>) {
        if let Some(claim) = claim {
            self.signals_by_key(claim.tenant, |s| {
                if let Some(s) = s {
                    s.unspread(claim);
                }
            });
        }
    }

    /// A refusal by an upstream gate that opens at `at`.
    fn later(&self, path: &std::sync::Arc<str>, at: Nanos, now: Nanos) -> Denial {
        Denial {
            rejection: Rejection::new(
                self.name.clone(),
                path.clone(),
                Reason::RateLimited,
                Some(Duration::from_nanos(at - now)),
            ),
            at,
            can_wait: true,
            stale: false,
        }
    }

    /// Asks the circuit breaker: `Ok(true)` for a half-open probe, `Ok(false)` to go
    /// ahead, or a `circuit_open` denial.
    pub(crate) fn circuit_gate(&self, now: Nanos) -> Result<bool, Denial> {
        let Some(b) = &self.breaker else {
            return Ok(false);
        };
        match b.gate(now) {
            crate::circuit::Gate::Pass => Ok(false),
            crate::circuit::Gate::Probe => Ok(true),
            crate::circuit::Gate::Reject(retry) => Err(Denial {
                rejection: Rejection::new(
                    self.name.clone(),
                    self.circuit_path.clone(),
                    Reason::CircuitOpen,
                    Some(retry),
                ),
                at: now,
                can_wait: false,
                stale: false,
            }),
        }
    }

    /// Takes in the upstream's signals in a completion (of a call of the tenant whose
    /// key is `tenant`, on a per-tenant tool): each pause and spreading window is cut
    /// to `max_pause`, and calls waiting are re-gated when a gate moved.
    pub(crate) fn hear(&self, c: &Completion, tenant: Option<u64>) {
        let now = self.core.clock.now();
        let key = self
            .tenant_signals
            .as_ref()
            .map(|ts| tenant.unwrap_or_else(|| ts.key("")));
        let mut shift = Shift::default();
        if let Some(s) = c.server_limit {
            let s = ServerLimit {
                reset: self.bounded(s.reset, "rate-limit reset"),
                ..s
            };
            let (moved, every) = self.update_signals(key, now, |sig| {
                let moved = sig.server_limit(now, s);
                (moved, sig.spreading(now).then(|| sig.spread_every()))
            });
            if let Some(every) = every.filter(|_| moved.respread) {
                self.stats.on_spread(every, key.is_some());
            }
            shift = shift | moved;
        }
        if let Some(after) = c.retry_after {
            let until = now.saturating_add(nanos(self.bounded(after, "Retry-After")));
            shift = shift | self.update_signals(key, now, |sig| sig.pause_until(now, until));
        }
        if shift.paused > 0 {
            self.stats.on_pause(shift.paused, key.is_some());
        }
        if shift.moved() && self.stats.has_waiters() {
            self.core
                .sched
                .lock()
                .regate(&*self.core.clock, self, key, &Regate::Signals);
        }
    }

    /// Re-gates the calls waiting when the breaker has just closed the gate (tripped
    /// open, or turned degraded with `on_degraded = "reject"`): they are refused now,
    /// as a new call would be.
    pub(crate) fn breaker_closed(&self) {
        if !self.stats.has_waiters() {
            return;
        }
        match self.circuit_gate(self.core.clock.now()) {
            Err(d) => self.core.sched.lock().regate(
                &*self.core.clock,
                self,
                None,
                &Regate::Circuit(d.rejection),
            ),
            // Let through after all (an open period of zero): nothing to re-gate.
            Ok(probe) => {
                if probe {
                    self.cancel_probe();
                }
            }
        }
    }

    /// `asked`, cut to `max_pause` (with a warning naming the `signal` when it is).
    fn bounded(&self, asked: Duration, signal: &'static str) -> Duration {
        if asked <= self.max_pause {
            return asked;
        }
        self.stats.on_clamped(signal, asked, self.max_pause);
        self.max_pause
    }

    /// Runs `f` on the signals a new signal goes to: the tenant's (made if need be),
    /// on a per-tenant tool, or the whole tool's.
    fn update_signals<R>(&self, key: Option<u64>, now: Nanos, f: impl FnOnce(&Signals) -> R) -> R {
        match (&self.tenant_signals, key) {
            (Some(ts), Some(key)) => ts.update(key, now, f),
            _ => f(&self.stats.signals),
        }
    }
}
