//! A circuit breaker per tool: closed, open, half-open, and degraded.
//!
//! Why in the admission path: a dependency that keeps failing should stop receiving
//! calls *before* they leave, exactly like a quota with no room — so an open circuit
//! rejects at admission with reason `circuit_open` and `retry_after` = the time left
//! open, and consumes nothing. Half-open admits exactly `half_open_probes` calls, even
//! under heavy concurrency, because probe slots are taken under the breaker's lock.
//!
//! Degraded is the state of a service that answers, but whose answers fail the schema
//! or semantic check (`invalid` outcomes) at or above `degraded_rate`: calls still run,
//! and the state and metrics say so. With `on_degraded = "reject"` a degraded tool is
//! refused like an open one, for a refusal period as long as an open one (`open_for`,
//! grown by `open_for_multiplier` up to `open_for_max` on each trip without a close in
//! between), and then goes half-open: its probes decide, as after an open period. No
//! call runs while it refuses, so its invalid rate could never fall on its own.
//!
//! A refusal always says when to come back: open or degraded-reject, the time left of
//! the refusal period; half-open with every probe slot taken, the time until the
//! youngest probe reaches `slow_call` (by then every probe has ended or counts as
//! failed), at most [`HALF_OPEN_RETRY`] — probes usually answer well within
//! `slow_call`, and asking again early costs one refused call, while waiting too long
//! delays the recovery.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use crate::clock::{nanos, Nanos};
use crate::config::{CircuitConfig, CircuitWindow, OnDegraded};
use crate::sync::Mutex;
use crate::vocab::Outcome;
use window::{Outcomes, Sample};

mod window;

/// The state of a tool's circuit breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CircuitState {
    /// Calls flow; outcomes are counted.
    Closed,
    /// Calls are rejected with `circuit_open` until the open period ends.
    Open,
    /// A limited number of probe calls decide whether to close or reopen.
    HalfOpen,
    /// The tool answers, but too many answers are invalid.
    Degraded,
}

/// The `retry_after` of a half-open refusal when no probe deadline is nearer (no
/// `slow_call`, or a probe already past it): one second, and never more.
pub(crate) const HALF_OPEN_RETRY: Duration = Duration::from_secs(1);

/// A tool's breaker.
#[derive(Debug)]
pub(crate) struct Breaker {
    config: CircuitConfig,
    /// The state as of the last transition, readable without the lock.
    state: AtomicU8,
    inner: Mutex<Inner>,
    gauge: metrics::Gauge,
    tool: std::sync::Arc<str>,
}

#[derive(Debug)]
struct Inner {
    state: CircuitState,
    window: Outcomes,
    /// While open or degraded-reject: the end of the refusal period (the next call
    /// after it goes half-open).
    refuse_until: Nanos,
    /// Trips (to open, or to degraded-reject) since the circuit last closed, for the
    /// growth of the refusal period.
    trips: u32,
    probes_in_flight: u32,
    probe_successes: u32,
    /// When the youngest probe was admitted.
    last_probe_at: Nanos,
}

/// What the breaker says about a new call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Go ahead.
    Pass,
    /// Go ahead as a half-open probe (its outcome decides the state).
    Probe,
    /// Rejected; retry after this long.
    Reject(Duration),
}

// === impl CircuitState ===

impl CircuitState {
    /// `"closed"`, `"open"`, `"half_open"` or `"degraded"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::HalfOpen => "half_open",
            Self::Degraded => "degraded",
        }
    }

    const fn code(self) -> u8 {
        match self {
            Self::Closed => 0,
            Self::Open => 1,
            Self::HalfOpen => 2,
            Self::Degraded => 3,
        }
    }

    fn from_code(c: u8) -> Self {
        match c {
            1 => Self::Open,
            2 => Self::HalfOpen,
            3 => Self::Degraded,
            _ => Self::Closed,
        }
    }
}

impl std::fmt::Display for CircuitState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl Breaker ===

impl Breaker {
    pub(crate) fn new(tool: std::sync::Arc<str>, config: CircuitConfig) -> Self {
        let gauge = metrics::gauge!("toolgate_circuit_state", "tool" => tool.to_string());
        gauge.set(0.0);
        Self {
            config,
            state: AtomicU8::new(CircuitState::Closed.code()),
            inner: Mutex::new(Inner {
                state: CircuitState::Closed,
                window: Outcomes::default(),
                refuse_until: 0,
                trips: 0,
                probes_in_flight: 0,
                probe_successes: 0,
                last_probe_at: 0,
            }),
            gauge,
            tool,
        }
    }

    pub(crate) fn config(&self) -> &CircuitConfig {
        &self.config
    }

    /// The state as of the last transition (an open or degraded-reject circuit whose
    /// refusal period is over reads so until the next call makes it half-open).
    pub(crate) fn state(&self) -> CircuitState {
        CircuitState::from_code(self.state.load(Ordering::Acquire))
    }

    /// Decides whether a new call may go ahead at `now`.
    pub(crate) fn gate(&self, now: Nanos) -> Gate {
        if self.state() == CircuitState::Closed {
            return Gate::Pass;
        }
        let mut g = self.inner.lock();
        match g.state {
            CircuitState::Closed => Gate::Pass,
            CircuitState::Degraded if !self.rejects_degraded() => Gate::Pass,
            CircuitState::Open | CircuitState::Degraded if now < g.refuse_until => {
                Gate::Reject(Duration::from_nanos(g.refuse_until - now))
            }
            CircuitState::Open | CircuitState::Degraded => {
                self.transition(&mut g, CircuitState::HalfOpen);
                g.probes_in_flight = 0;
                g.probe_successes = 0;
                self.take_probe(&mut g, now)
            }
            CircuitState::HalfOpen => self.take_probe(&mut g, now),
        }
    }

    /// A half-open probe slot, or the refusal of a call that finds every slot taken.
    fn take_probe(&self, g: &mut Inner, now: Nanos) -> Gate {
        if g.probes_in_flight + g.probe_successes < self.config.half_open_probes {
            g.probes_in_flight += 1;
            g.last_probe_at = now;
            Gate::Probe
        } else {
            Gate::Reject(self.probes_decided_in(g, now))
        }
    }

    /// When a call refused while half-open should come back: the time until the
    /// youngest probe reaches `slow_call`, at most [`HALF_OPEN_RETRY`].
    fn probes_decided_in(&self, g: &Inner, now: Nanos) -> Duration {
        self.config
            .slow_call
            .map(|slow| {
                g.last_probe_at
                    .saturating_add(nanos(slow))
                    .saturating_sub(now)
            })
            .filter(|&left| left > 0)
            .map_or(HALF_OPEN_RETRY, |left| {
                Duration::from_nanos(left).min(HALF_OPEN_RETRY)
            })
    }

    /// The `retry_after` of a call refused while half-open although a probe slot was
    /// free (a reservation, which never runs as a probe).
    pub(crate) fn half_open_retry(&self, now: Nanos) -> Duration {
        self.probes_decided_in(&self.inner.lock(), now)
    }

    /// Whether a degraded tool refuses calls (`on_degraded = "reject"` and a
    /// `degraded_rate` that can make it degraded).
    fn rejects_degraded(&self) -> bool {
        self.config.on_degraded == OnDegraded::Reject && self.config.degraded_rate.is_some()
    }

    /// Gives back a probe slot whose call never ran (rejected by a quota, or dropped).
    pub(crate) fn cancel_probe(&self) {
        let mut g = self.inner.lock();
        if g.state == CircuitState::HalfOpen {
            g.probes_in_flight = g.probes_in_flight.saturating_sub(1);
        }
    }

    /// Records how an admitted call ended. True when that made the breaker refuse
    /// calls it let through before (it tripped open, or turned degraded with
    /// `on_degraded = "reject"`): calls waiting for admission must hear of it.
    pub(crate) fn record(
        &self,
        outcome: Outcome,
        latency: Option<Duration>,
        probe: bool,
        now: Nanos,
    ) -> bool {
        let before = self.state();
        self.take(outcome, latency, probe, now);
        let after = self.state();
        let refuses = match after {
            CircuitState::Open => true,
            CircuitState::Degraded => self.config.on_degraded == OnDegraded::Reject,
            CircuitState::Closed | CircuitState::HalfOpen => false,
        };
        refuses && after != before
    }

    /// Takes in an outcome (see [`Breaker::record`]).
    fn take(&self, outcome: Outcome, latency: Option<Duration>, probe: bool, now: Nanos) {
        let slow = matches!((self.config.slow_call, latency), (Some(limit), Some(l)) if l >= limit);
        let failed = matches!(outcome, Outcome::Error | Outcome::Timeout) || slow;
        let invalid = outcome == Outcome::Invalid;
        let mut g = self.inner.lock();
        if probe && g.state == CircuitState::HalfOpen {
            return self.record_probe(&mut g, failed, invalid, now);
        }
        let counted = match g.state {
            CircuitState::Closed => true,
            CircuitState::Degraded => !self.rejects_degraded(),
            CircuitState::Open | CircuitState::HalfOpen => false,
        };
        if !counted {
            // A call admitted before the circuit started refusing: its outcome is stale.
            return;
        }
        g.window.push(Sample {
            at: now,
            failed,
            invalid,
        });
        self.trim(&mut g, now);
        let n = u32::try_from(g.window.len()).unwrap_or(u32::MAX);
        if n < self.config.min_calls {
            return;
        }
        let failures = g.window.failed() as f64;
        if failures / f64::from(n) >= self.config.failure_rate {
            return self.trip(&mut g, now, CircuitState::Open);
        }
        if let Some(rate) = self.config.degraded_rate {
            let invalids = g.window.invalid() as f64;
            let degraded = invalids / f64::from(n) >= rate;
            match (g.state, degraded) {
                (CircuitState::Closed, true) if self.rejects_degraded() => {
                    self.trip(&mut g, now, CircuitState::Degraded);
                }
                (CircuitState::Closed, true) => self.transition(&mut g, CircuitState::Degraded),
                (CircuitState::Degraded, false) => self.transition(&mut g, CircuitState::Closed),
                _ => {}
            }
        }
    }

    /// A half-open probe's outcome: a failure reopens, an invalid answer (when a
    /// degraded tool refuses calls) degrades again, `close_after` others close.
    fn record_probe(&self, g: &mut Inner, failed: bool, invalid: bool, now: Nanos) {
        g.probes_in_flight = g.probes_in_flight.saturating_sub(1);
        if failed {
            return self.trip(g, now, CircuitState::Open);
        }
        if invalid && self.rejects_degraded() {
            return self.trip(g, now, CircuitState::Degraded);
        }
        g.probe_successes += 1;
        if g.probe_successes >= self.config.close_after {
            g.trips = 0;
            g.window.clear();
            self.transition(g, CircuitState::Closed);
        }
    }

    fn trim(&self, g: &mut Inner, now: Nanos) {
        match self.config.window {
            CircuitWindow::Count(n) => {
                while g.window.len() > n as usize {
                    g.window.pop();
                }
            }
            CircuitWindow::Time(d) => {
                let span = nanos(d);
                while g
                    .window
                    .oldest()
                    .is_some_and(|at| at.saturating_add(span) <= now)
                {
                    g.window.pop();
                }
            }
        }
    }

    /// Starts refusing calls (`to` is open, or degraded with `on_degraded = "reject"`)
    /// for `open_for`, grown by `open_for_multiplier` per trip since the circuit last
    /// closed, at most `open_for_max`.
    fn trip(&self, g: &mut Inner, now: Nanos, to: CircuitState) {
        let base = self.config.open_for.as_secs_f64();
        let grown = base * self.config.open_for_multiplier.powi(g.trips.min(64) as i32);
        let open_for = Duration::from_secs_f64(grown.min(self.config.open_for_max.as_secs_f64()));
        g.trips = g.trips.saturating_add(1);
        g.refuse_until = now.saturating_add(nanos(open_for));
        g.window.clear();
        g.probes_in_flight = 0;
        g.probe_successes = 0;
        self.transition(g, to);
    }

    fn transition(&self, g: &mut Inner, to: CircuitState) {
        let from = g.state;
        if from == to {
            return;
        }
        g.state = to;
        self.state.store(to.code(), Ordering::Release);
        self.gauge.set(f64::from(to.code()));
        metrics::counter!("toolgate_circuit_transitions_total",
            "tool" => self.tool.to_string(), "from" => from.as_str(), "to" => to.as_str())
        .increment(1);
        tracing::info!(target: "toolgate::circuit", tool = &*self.tool, from = from.as_str(), to = to.as_str(), "circuit state changed");
    }
}
