//! Per-tool counters and the `metrics`/`tracing` output of every decision.
//!
//! Metric handles are registered once per tool when a policy is compiled, so the hot
//! path only bumps atomics. Install the `metrics` recorder before building an engine.
//! Tool arguments never reach this module: it only sees names, quota paths, reasons
//! and durations.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram};

use crate::decision::{Reason, Rejection};

/// Live counters of one tool, kept across policy reloads.
#[derive(Debug)]
pub(crate) struct ToolStats {
    pub(crate) name: Arc<str>,
    /// Admitted and finished calls, counted per thread (in flight: the difference).
    pub(crate) calls: crate::lanes::Tally,
    pub(crate) waiting: AtomicUsize,
    pub(crate) rejected: AtomicU64,
    pub(crate) shadow_rejected: AtomicU64,
    /// Until when the upstream asked not to be called (engine clock; 0: never).
    pub(crate) paused_until: AtomicU64,
    /// Spreading by the upstream's rate-limit headers: active until this time
    /// (engine clock; 0: off), one call every `spread_every` ns, the next slot at
    /// `spread_next`.
    spread_until: crate::sync::AtomicU64,
    spread_every: crate::sync::AtomicU64,
    spread_next: crate::sync::AtomicU64,
    metrics: ToolMetrics,
}

#[derive(Debug)]
struct ToolMetrics {
    admitted: Counter,
    rejected: [Counter; 8],
    shadow_rejected: [Counter; 8],
    wait: Histogram,
    in_flight: Gauge,
    /// Seconds the tool was paused by its upstream (`Retry-After`, nothing left).
    paused: Counter,
}

/// Leaves the wait queue count when dropped.
#[derive(Debug)]
pub(crate) struct QueueSlot(Arc<ToolStats>);

// === impl ToolStats ===

impl ToolStats {
    pub(crate) fn new(name: Arc<str>) -> Self {
        let label = name.to_string();
        let by_reason = |decision: &'static str| {
            Reason::ALL.map(|r| {
                metrics::counter!("toolgate_admissions_total",
                    "tool" => label.clone(), "decision" => decision, "reason" => r.as_str())
            })
        };
        let metrics = ToolMetrics {
            admitted: metrics::counter!("toolgate_admissions_total",
                "tool" => label.clone(), "decision" => "admitted", "reason" => "none"),
            rejected: by_reason("rejected"),
            shadow_rejected: by_reason("shadow_rejected"),
            wait: metrics::histogram!("toolgate_wait_seconds", "tool" => label.clone()),
            in_flight: metrics::gauge!("toolgate_in_flight", "tool" => label.clone()),
            paused: metrics::counter!("toolgate_server_paused_seconds_total", "tool" => label),
        };
        Self {
            name,
            calls: crate::lanes::Tally::new(),
            waiting: AtomicUsize::new(0),
            rejected: AtomicU64::new(0),
            shadow_rejected: AtomicU64::new(0),
            paused_until: AtomicU64::new(0),
            spread_until: crate::sync::AtomicU64::new(0),
            spread_every: crate::sync::AtomicU64::new(0),
            spread_next: crate::sync::AtomicU64::new(0),
            metrics,
        }
    }

    /// Counts an admission. Inlined into the fast path, where `waited` is zero and
    /// the histogram drops out.
    #[inline(always)]
    pub(crate) fn on_admit(&self, waited: Duration, tenant: Option<&str>) {
        self.calls.admit();
        self.metrics.admitted.increment(1);
        self.metrics.in_flight.increment(1.0);
        if !waited.is_zero() {
            self.metrics.wait.record(waited.as_secs_f64());
        }
        if tracing::enabled!(target: "toolgate::decision", tracing::Level::DEBUG) {
            self.trace_admit(waited, tenant);
        }
    }

    /// The event of an admission, out of line: the hot path only asks whether
    /// anyone listens.
    #[cold]
    #[inline(never)]
    fn trace_admit(&self, waited: Duration, tenant: Option<&str>) {
        tracing::debug!(
            target: "toolgate::decision",
            tool = &*self.name,
            tenant,
            decision = "admitted",
            waited_ms = waited.as_millis() as u64,
        );
    }

    pub(crate) fn on_reject(&self, r: &Rejection, tenant: Option<&str>) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        self.metrics.rejected[r.reason().index()].increment(1);
        tracing::debug!(
            target: "toolgate::decision",
            tool = &*self.name,
            tenant,
            decision = "rejected",
            reason = r.reason().as_str(),
            quota = r.quota(),
            retry_after_ms = r.retry_after().map(|d| d.as_millis() as u64),
        );
    }

    pub(crate) fn on_shadow_reject(&self, quota: &str, reason: Reason, tenant: Option<&str>) {
        self.shadow_rejected.fetch_add(1, Ordering::Relaxed);
        self.metrics.shadow_rejected[reason.index()].increment(1);
        tracing::info!(
            target: "toolgate::decision",
            tool = &*self.name,
            tenant,
            decision = "shadow_rejected",
            reason = reason.as_str(),
            quota,
            "shadow mode: the call would have been rejected",
        );
    }

    /// Counts the end of an admitted call (its outcome feeds the breaker and the
    /// adaptive limit, which keep their own counts).
    #[inline(always)]
    pub(crate) fn on_finish(&self) {
        self.calls.finish();
        self.metrics.in_flight.decrement(1.0);
    }

    /// Pauses the tool until `until` (never shortens a longer pause).
    pub(crate) fn pause_until(&self, now: u64, until: u64) {
        let before = self.paused_until.fetch_max(until, Ordering::AcqRel);
        let from = before.max(now);
        if until > from {
            // Whole seconds of pause added (the counter is an integer).
            self.metrics
                .paused
                .increment((until - from).div_ceil(1_000_000_000));
        }
        if until > before {
            tracing::info!(target: "toolgate::decision", tool = &*self.name, until_ns = until,
                "the upstream asked for a pause (Retry-After): the tool is paused");
        }
    }

    /// Takes in what an upstream's rate-limit headers said at `now`: under 10 % of
    /// the limit left, the tool's calls are spread over the reset window; nothing
    /// left pauses the tool until the reset; more room ends the spreading.
    pub(crate) fn server_limit(&self, now: u64, s: crate::shaping::ServerLimit) {
        let reset = crate::clock::nanos(s.reset);
        if !s.is_low() || reset == 0 {
            self.spread_until.store(0, Ordering::Release);
            return;
        }
        if s.remaining == 0 {
            self.spread_until.store(0, Ordering::Release);
            self.pause_until(now, now.saturating_add(reset));
            return;
        }
        let every = reset / s.remaining;
        self.spread_every.store(every, Ordering::Release);
        self.spread_until
            .store(now.saturating_add(reset), Ordering::Release);
        tracing::info!(target: "toolgate::decision", tool = &*self.name, remaining = s.remaining,
            every_ms = every / 1_000_000, "the upstream's quota is low: calls are spread over its reset window");
    }

    /// Whether no upstream pause or spreading applies at `now`.
    #[inline]
    pub(crate) fn unshaped(&self, now: u64) -> bool {
        self.paused_until.load(Ordering::Acquire) <= now
            && self.spread_until.load(Ordering::Acquire) <= now
    }

    /// Claims the spreading slot at `now`: `Ok(None)` when not spreading,
    /// `Ok(Some(claim))` when claimed (give it back with [`ToolStats::unspread`]), or
    /// `Err(next)`, the time of the next free slot.
    pub(crate) fn spread_claim(&self, now: u64) -> Result<Option<(u64, u64)>, u64> {
        if self.spread_until.load(Ordering::Acquire) <= now {
            return Ok(None);
        }
        self.claim_slot(now, now)
            .map(|(_, old, new)| Some((old, new)))
    }

    /// Gives a claimed slot back (the call was then refused by a quota).
    pub(crate) fn unspread(&self, claim: Option<(u64, u64)>) {
        if let Some((old, new)) = claim {
            let _ =
                self.spread_next
                    .compare_exchange(new, old, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// The first slot at or after `at` (a waiter's admission time), claimed unless
    /// it lies beyond `deadline` (then returned unclaimed).
    pub(crate) fn spread_at(&self, at: u64, deadline: u64) -> u64 {
        if self.spread_until.load(Ordering::Acquire) <= at {
            return at;
        }
        match self.claim_slot(at, deadline) {
            Ok((t, _, _)) | Err(t) => t,
        }
    }

    /// Claims the first slot at or after `at` unless it lies beyond `deadline`:
    /// `Ok((slot, next before, next after))`, or `Err(slot)` unclaimed.
    fn claim_slot(&self, at: u64, deadline: u64) -> Result<(u64, u64, u64), u64> {
        let every = self.spread_every.load(Ordering::Acquire);
        let mut next = self.spread_next.load(Ordering::Acquire);
        loop {
            let t = next.max(at);
            if t > deadline {
                return Err(t);
            }
            let new = t.saturating_add(every);
            match self.spread_next.compare_exchange_weak(
                next,
                new,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok((t, next, new)),
                Err(cur) => next = cur,
            }
        }
    }

    /// Joins the wait queue unless `limit` waiters are already in it.
    pub(crate) fn enter_queue(self: &Arc<Self>, limit: usize) -> Option<QueueSlot> {
        let prev = self.waiting.fetch_add(1, Ordering::AcqRel);
        if prev >= limit {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(QueueSlot(self.clone()))
    }
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}
