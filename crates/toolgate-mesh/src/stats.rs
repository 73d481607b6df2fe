//! What the mesh did, per tool: metrics and the figures of `GET /v1/mesh`.
//!
//! | metric | labels | meaning |
//! |---|---|---|
//! | `toolgate_mesh_messages_total` | `tool`, `outcome` | calls handled, by how they ended (`success`, a failure word, `redelivered` for a call handed back for later) |
//! | `toolgate_mesh_pending` | `tool` | calls in the stream not yet delivered (consumer lag) |
//! | `toolgate_mesh_dead_letters_total` | `tool`, `reason` | dead letters |
//! | `toolgate_mesh_redeliveries_total` | `tool` | calls delivered more than once |

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;

use crate::envelope::DeadReason;

/// The figures of one tool, with its metric handles registered once (a handle is
/// a lookup of its name and labels; the hot path only bumps atomics).
#[derive(Debug)]
pub(crate) struct ToolStats {
    tool: String,
    pub(crate) pending: AtomicU64,
    pub(crate) in_flight: AtomicU64,
    pub(crate) handled: AtomicU64,
    pub(crate) dead_letters: AtomicU64,
    pub(crate) redeliveries: AtomicU64,
    last_error: Mutex<Option<String>>,
    metrics: Metrics,
}

/// The words a call can end with, as `toolgate_mesh_messages_total{outcome}`.
const OUTCOMES: [&str; 8] = [
    "success",
    "error",
    "timeout",
    "invalid",
    "rejected",
    "deadline_exceeded",
    "invalid_arguments",
    "redelivered",
];

#[derive(Debug)]
struct Metrics {
    pending: metrics::Gauge,
    outcomes: [metrics::Counter; OUTCOMES.len()],
    dead: [metrics::Counter; DeadReason::ALL.len()],
    redeliveries: metrics::Counter,
}

/// The figures of every tool the mesh has seen.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    tools: Mutex<BTreeMap<String, Arc<ToolStats>>>,
}

/// One tool's line of `GET /v1/mesh`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolView {
    /// The tool.
    pub tool: String,
    /// Its call subject.
    pub subject: String,
    /// Calls waiting in the stream.
    pub pending: u64,
    /// Calls this replica is running.
    pub in_flight: u64,
    /// Calls this replica finished (a result published).
    pub handled: u64,
    /// Dead letters this replica published.
    pub dead_letters: u64,
    /// Calls this replica saw more than once.
    pub redeliveries: u64,
    /// The last broker error of this tool's consumer, if any since it last worked.
    pub last_error: Option<String>,
}

// === impl Stats ===

impl Stats {
    /// The figures of `tool`, created on first use.
    pub(crate) fn tool(&self, tool: &str) -> Arc<ToolStats> {
        self.tools
            .lock()
            .entry(tool.to_string())
            .or_insert_with(|| Arc::new(ToolStats::new(tool)))
            .clone()
    }

    /// Every tool's line.
    pub(crate) fn view(&self) -> Vec<ToolView> {
        self.tools.lock().values().map(|t| t.view()).collect()
    }
}

// === impl ToolStats ===

impl ToolStats {
    fn new(tool: &str) -> Self {
        let t = tool.to_string();
        let metrics = Metrics {
            pending: metrics::gauge!("toolgate_mesh_pending", "tool" => t.clone()),
            outcomes: OUTCOMES.map(|o| {
                metrics::counter!("toolgate_mesh_messages_total", "tool" => t.clone(), "outcome" => o)
            }),
            dead: DeadReason::ALL.map(|r| {
                metrics::counter!("toolgate_mesh_dead_letters_total",
                    "tool" => t.clone(), "reason" => r.as_str())
            }),
            redeliveries: metrics::counter!("toolgate_mesh_redeliveries_total", "tool" => t.clone()),
        };
        Self {
            tool: t,
            pending: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            handled: AtomicU64::new(0),
            dead_letters: AtomicU64::new(0),
            redeliveries: AtomicU64::new(0),
            last_error: Mutex::new(None),
            metrics,
        }
    }

    fn view(&self) -> ToolView {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ToolView {
            tool: self.tool.clone(),
            subject: crate::subject::calls(&self.tool),
            pending: get(&self.pending),
            in_flight: get(&self.in_flight),
            handled: get(&self.handled),
            dead_letters: get(&self.dead_letters),
            redeliveries: get(&self.redeliveries),
            last_error: self.last_error.lock().clone(),
        }
    }

    /// The consumer's lag, as the broker last said.
    pub(crate) fn set_pending(&self, n: u64) {
        self.pending.store(n, Ordering::Relaxed);
        self.metrics.pending.set(n as f64);
    }

    /// A call ended with `outcome` (a result word, or `redelivered`).
    pub(crate) fn handled(&self, outcome: &str) {
        if outcome != "redelivered" {
            self.handled.fetch_add(1, Ordering::Relaxed);
        }
        match OUTCOMES.iter().position(|o| *o == outcome) {
            Some(i) => self.metrics.outcomes[i].increment(1),
            // A word no list here has: counted all the same.
            None => metrics::counter!("toolgate_mesh_messages_total",
                "tool" => self.tool.clone(), "outcome" => outcome.to_string())
            .increment(1),
        }
    }

    pub(crate) fn dead_letter(&self, reason: DeadReason) {
        self.dead_letters.fetch_add(1, Ordering::Relaxed);
        if let Some(i) = DeadReason::ALL.iter().position(|r| *r == reason) {
            self.metrics.dead[i].increment(1);
        }
    }

    pub(crate) fn redelivered(&self) {
        self.redeliveries.fetch_add(1, Ordering::Relaxed);
        self.metrics.redeliveries.increment(1);
    }

    /// Records a broker error (`None`: it works again).
    pub(crate) fn error(&self, e: Option<String>) {
        *self.last_error.lock() = e;
    }
}
