//! How many client connections the gateway holds, for the accept loop's limit,
//! `GET /healthz` and the metrics `toolgate_connections` (gauge) and
//! `toolgate_connections_refused_total{action}` (counter).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

/// The gateway's connection counts (cheap to share).
#[derive(Debug)]
pub struct Connections {
    /// Connections served by the router.
    open: AtomicUsize,
    /// Connections beyond the limit, served by the health-only answer.
    overflow: AtomicUsize,
    /// `max_connections` in force (0 until serving starts).
    limit: AtomicUsize,
    gauge: metrics::Gauge,
    refused_overflow: metrics::Counter,
    refused_closed: metrics::Counter,
}

/// Which count a [`Slot`] holds a place in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pool {
    Open,
    Overflow,
}

/// One connection's place in a count, given back on drop.
#[derive(Debug)]
pub struct Slot {
    conns: Arc<Connections>,
    pool: Pool,
}

// === impl Connections ===

impl Connections {
    /// No connections. Install the metrics recorder first ([`crate::metrics::install`]).
    pub fn new() -> Self {
        let refused = |action: &'static str| metrics::counter!("toolgate_connections_refused_total", "action" => action);
        Self {
            open: AtomicUsize::new(0),
            overflow: AtomicUsize::new(0),
            limit: AtomicUsize::new(0),
            gauge: metrics::gauge!("toolgate_connections"),
            refused_overflow: refused("overflow"),
            refused_closed: refused("closed"),
        }
    }

    /// Records the limit in force, for `GET /healthz`.
    pub fn set_limit(&self, max: usize) {
        self.limit.store(max, Ordering::Relaxed);
    }

    /// A place among the `max` connections the router serves, if one is free.
    pub fn try_open(self: &Arc<Self>, max: usize) -> Option<Slot> {
        Self::take(&self.open, max)?;
        self.gauge.increment(1.0);
        Some(self.slot(Pool::Open))
    }

    /// A place among the `max` connections beyond the limit that get the health-only
    /// answer, if one is free (counted as refused).
    pub fn try_overflow(self: &Arc<Self>, max: usize) -> Option<Slot> {
        Self::take(&self.overflow, max)?;
        self.refused_overflow.increment(1);
        Some(self.slot(Pool::Overflow))
    }

    /// Counts a connection closed at once, beyond the overflow too.
    pub fn refuse(&self) {
        self.refused_closed.increment(1);
    }

    /// `{"open", "overflow", "limit"}` for `GET /healthz`.
    pub fn to_json(&self) -> Value {
        json!({
            "open": self.open.load(Ordering::Relaxed),
            "overflow": self.overflow.load(Ordering::Relaxed),
            "limit": self.limit.load(Ordering::Relaxed),
        })
    }

    fn take(count: &AtomicUsize, max: usize) -> Option<usize> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
    }

    fn slot(self: &Arc<Self>, pool: Pool) -> Slot {
        Slot {
            conns: self.clone(),
            pool,
        }
    }
}

impl Default for Connections {
    fn default() -> Self {
        Self::new()
    }
}

// === impl Slot ===

impl Drop for Slot {
    fn drop(&mut self) {
        match self.pool {
            Pool::Open => {
                self.conns.open.fetch_sub(1, Ordering::AcqRel);
                self.conns.gauge.decrement(1.0);
            }
            Pool::Overflow => {
                self.conns.overflow.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_bounded_and_given_back_on_drop() {
        let c = Arc::new(Connections::new());
        let a = c.try_open(2).expect("first");
        let _b = c.try_open(2).expect("second");
        assert!(c.try_open(2).is_none());
        let o = c.try_overflow(1).expect("overflow");
        assert!(c.try_overflow(1).is_none());
        assert_eq!(c.to_json(), json!({"open": 2, "overflow": 1, "limit": 0}));
        drop((a, o));
        assert!(c.try_open(2).is_some());
        assert_eq!(c.to_json()["overflow"], 0);
    }
}
