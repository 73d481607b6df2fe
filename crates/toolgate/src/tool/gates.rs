//! A tool's gates ([`Pass`]: what they let a call through with): the fair queue,
//! the upstream's pause and spreading and the circuit breaker, asked in that order
//! by every path before the tool's quotas — by a new call, by a waiter whose time
//! has come and by a call a shared store admitted — and given back when the quotas
//! refuse.

use crate::circuit::{CircuitState, Gate};
use crate::clock::Nanos;
use crate::denial::Denial;
use crate::queue::Regate;
use crate::signals::Claim;
use crate::vocab::{Call, Reason, Rejection};

use super::ToolRuntime;

/// What the gates let a call through with ([`ToolRuntime::gates`]).
#[derive(Debug)]
pub(crate) struct Pass {
    /// A half-open probe slot of the breaker.
    pub(crate) probe: bool,
    /// A spreading slot, while the upstream's calls are spread.
    pub(crate) spread: Option<Claim>,
}

// === impl ToolRuntime ===

impl ToolRuntime {
    /// The gates, in the order every path asks them: the fair queue (calls of the
    /// class of `call` or a higher one waiting), the upstream's pause, its spreading
    /// (a slot claimed), the circuit breaker (a half-open probe slot taken). A
    /// refusal leaves nothing taken. (`try_admit_fast` skips them only
    /// while none has a say, see [`ToolRuntime::ungated`]; a waiter asks them again
    /// through [`ToolRuntime::gates_on_waking`].)
    pub(crate) fn gates(&self, now: Nanos, call: &Call<'_>) -> Result<Pass, Denial> {
        if let Some(f) = &self.fair {
            f.gate(&self.name, &self.quotas, call.priority_class(), now)?;
        }
        let (up, tenant) = (&*self.upstream, call.tenant);
        up.pause_gate(now, tenant)?;
        let spread = up.spread_gate(now, tenant)?;
        let probe = self
            .circuit_gate(now)
            .inspect_err(|_| up.unspread(spread))?;
        Ok(Pass { probe, spread })
    }

    /// Gives back what the gates let a call through with (its quotas then refused
    /// it): the probe slot, then the spreading slot.
    pub(crate) fn ungate(&self, pass: Pass) {
        if pass.probe {
            self.cancel_probe();
        }
        self.upstream.unspread(pass.spread);
    }

    /// Asks the circuit breaker: `Ok(true)` for a half-open probe, `Ok(false)` to go
    /// ahead, or a `circuit_open` denial.
    pub(crate) fn circuit_gate(&self, now: Nanos) -> Result<bool, Denial> {
        let Some(b) = &self.breaker else {
            return Ok(false);
        };
        match b.gate(now) {
            Gate::Pass => Ok(false),
            Gate::Probe => Ok(true),
            Gate::Reject(retry) => Err(Denial::final_at(
                Rejection::new(
                    self.name.clone(),
                    self.circuit_path.clone(),
                    Reason::CircuitOpen,
                    Some(retry),
                ),
                now,
            )),
        }
    }

    /// Gives back a half-open probe slot whose call never ran.
    pub(crate) fn cancel_probe(&self) {
        if let Some(b) = &self.breaker {
            b.cancel_probe();
        }
    }

    /// Asks the breaker again for a waiting call (`probe`: whether it holds a
    /// half-open probe, updated): one that holds a probe keeps it unless the circuit
    /// has opened since (which voided every probe), and any other is let through,
    /// made a probe or refused as a new call would be.
    pub(crate) fn recheck_circuit(&self, now: Nanos, probe: &mut bool) -> Result<(), Rejection> {
        let Some(b) = &self.breaker else {
            return Ok(());
        };
        if *probe {
            if b.state() != CircuitState::Open {
                return Ok(());
            }
            *probe = false;
        }
        *probe = self.circuit_gate(now).map_err(|d| d.rejection)?;
        Ok(())
    }

    /// The gates, asked again by a waiter whose time has come, in the order an
    /// immediate call asks them; `spread` is the spreading slot it holds already,
    /// `probe` whether it holds a half-open probe (updated).
    pub(crate) fn gates_on_waking(
        &self,
        now: Nanos,
        tenant: Option<&str>,
        spread: Option<Nanos>,
        probe: &mut bool,
    ) -> Result<(), Denial> {
        let up = &*self.upstream;
        up.pause_gate(now, tenant)?;
        let claim = match spread {
            Some(_) => None,
            None => up.spread_gate(now, tenant)?,
        };
        self.recheck_circuit(now, probe).map_err(|rejection| {
            up.unspread(claim);
            Denial::final_at(rejection, now)
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
        self.upstream.pause_gate(now, tenant)?;
        self.recheck_circuit(now, probe)
            .map_err(|rejection| Denial::final_at(rejection, now))
    }

    /// Re-gates the calls waiting when the breaker has just closed the gate (tripped
    /// open, or turned degraded with `on_degraded = "reject"`): they are refused now,
    /// as a new call would be.
    pub(crate) fn breaker_closed(&self) {
        if !self.stats.has_waiters() {
            return;
        }
        let clock = &*self.shared.clock;
        match self.circuit_gate(clock.now()) {
            Err(d) => {
                let how = Regate::Circuit(d.rejection);
                self.shared
                    .sched
                    .lock()
                    .regate(clock, &self.upstream, None, &how);
            }
            // Let through after all (an open period of zero): nothing to re-gate.
            Ok(probe) => {
                if probe {
                    self.cancel_probe();
                }
            }
        }
    }
}
