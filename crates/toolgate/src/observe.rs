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

use crate::latency::Latencies;
use crate::vocab::{Priority, Reason, Rejection};

/// Live counters of one tool, kept across policy reloads.
#[derive(Debug)]
pub(crate) struct ToolStats {
    pub(crate) name: Arc<str>,
    /// Admitted and finished calls, counted per thread (in flight: the difference).
    pub(crate) calls: crate::lanes::Tally,
    pub(crate) waiting: AtomicUsize,
    pub(crate) rejected: AtomicU64,
    pub(crate) shadow_rejected: AtomicU64,
    /// The latest latencies completions reported, and their p90 (the expected run
    /// time a deadline leaves room for). Boxed: read only for a call with a deadline,
    /// it stays out of the cache lines the fast path reads.
    pub(crate) latency: Box<Latencies>,
    metrics: ToolMetrics,
}

#[derive(Debug)]
struct ToolMetrics {
    admitted: Counter,
    rejected: [Counter; 8],
    shadow_rejected: [Counter; 8],
    /// Per priority class, highest first.
    wait: [Histogram; 3],
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
            wait: Priority::ALL.map(|p| {
                metrics::histogram!("toolgate_wait_seconds",
                    "tool" => label.clone(), "priority" => p.as_str())
            }),
            in_flight: metrics::gauge!("toolgate_in_flight", "tool" => label.clone()),
            paused: metrics::counter!("toolgate_server_paused_seconds_total", "tool" => label),
        };
        Self {
            name,
            calls: crate::lanes::Tally::new(),
            waiting: AtomicUsize::new(0),
            rejected: AtomicU64::new(0),
            shadow_rejected: AtomicU64::new(0),
            latency: Box::new(Latencies::new()),
            metrics,
        }
    }

    /// Counts an admission. Inlined into the fast path, where `waited` is zero and
    /// the histogram drops out.
    #[inline(always)]
    pub(crate) fn on_admit(&self, waited: Duration, tenant: Option<&str>, p: Priority) {
        self.calls.admit();
        self.metrics.admitted.increment(1);
        self.metrics.in_flight.increment(1.0);
        if !waited.is_zero() {
            self.metrics.wait[p as usize].record(waited.as_secs_f64());
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

    /// Counts and logs a pause the upstream asked for (`added` ns more of it, for the
    /// whole tool or for one tenant of it).
    pub(crate) fn on_pause(&self, added: u64, tenant: bool) {
        // Whole seconds of pause added (the counter is an integer).
        self.metrics.paused.increment(added.div_ceil(1_000_000_000));
        tracing::info!(target: "toolgate::decision", tool = &*self.name, added_ms = added / 1_000_000,
            one_tenant = tenant, "the upstream asked for a pause: the tool is paused");
    }

    /// Logs the start (or a change) of spreading by the upstream's rate-limit headers.
    pub(crate) fn on_spread(&self, every: u64, tenant: bool) {
        tracing::info!(target: "toolgate::decision", tool = &*self.name, every_ms = every / 1_000_000,
            one_tenant = tenant, "the upstream's quota is low: calls are spread over its reset window");
    }

    /// Warns that an upstream asked for a pause or a spreading window longer than the
    /// tool's `max_pause`, which it was cut to.
    pub(crate) fn on_clamped(&self, signal: &'static str, asked: Duration, max: Duration) {
        tracing::warn!(target: "toolgate::decision", tool = &*self.name, signal,
            asked_ms = u64::try_from(asked.as_millis()).unwrap_or(u64::MAX),
            max_pause_ms = max.as_millis() as u64,
            "the upstream asked for a longer pause than max_pause allows: cut to max_pause");
    }

    /// Whether calls wait for admission now (read after a gate moved: a waiter that
    /// joins later reads the gate itself).
    pub(crate) fn has_waiters(&self) -> bool {
        std::sync::atomic::fence(Ordering::SeqCst);
        self.waiting.load(Ordering::Relaxed) > 0
    }

    /// Joins the wait queue unless `limit` waiters are already in it.
    pub(crate) fn enter_queue(self: &Arc<Self>, limit: usize) -> Option<QueueSlot> {
        let prev = self.waiting.fetch_add(1, Ordering::AcqRel);
        if prev >= limit {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        // Pairs with the fence of `has_waiters`: either a gate that moves from now on
        // sees this waiter, or this waiter sees the gate moved.
        std::sync::atomic::fence(Ordering::SeqCst);
        Some(QueueSlot(self.clone()))
    }

    /// Joins the wait queue past its limit: a call that pushed out another, which
    /// leaves as soon as its task runs.
    pub(crate) fn enter_queue_anyway(self: &Arc<Self>) -> QueueSlot {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        std::sync::atomic::fence(Ordering::SeqCst);
        QueueSlot(self.clone())
    }
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}
