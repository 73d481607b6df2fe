//! What one connection is doing, for its timers and for telling its own answers
//! from the ones hyper writes by itself.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// The two timeouts of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timeouts {
    /// From the start of a request head (the connection's start, or its first byte
    /// after an idle wait) to the end of that head.
    pub(crate) header: Duration,
    /// From the end of an answer (its body handed to hyper) to the first byte of the
    /// next request: a client that does not read its answer is cut off too.
    pub(crate) idle: Duration,
}

/// The phase of one connection, shared by its I/O, its service and its driver (all
/// on the connection's task, so the lock is never contended).
#[derive(Debug)]
pub(crate) struct Activity {
    phase: Mutex<Phase>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No request in flight and every answer flushed: waiting for a request head.
    /// `head`: the header timer runs (a new connection, or bytes of the next head
    /// came in); otherwise the idle timer does. `since`: when that timer started.
    Waiting { since: Instant, head: bool },
    /// This many requests in flight (hyper serves one at a time on HTTP/1; counted
    /// to stay right if that changes).
    Busy(u32),
    /// The last answer's body ended at `since`; its bytes may still be in hyper's
    /// buffer (the idle timer runs).
    Draining { since: Instant },
}

/// A request in flight, from the service call until its answer's body is dropped.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Activity>);

// === impl Activity ===

impl Activity {
    /// A new connection: waiting for its first request head.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            phase: Mutex::new(Phase::Waiting {
                since: Instant::now(),
                head: true,
            }),
        })
    }

    /// Bytes came in: after an idle wait they start a request head.
    pub(crate) fn on_read(&self) {
        let mut phase = self.phase.lock();
        if let Phase::Waiting { head: false, .. } = *phase {
            *phase = Phase::Waiting {
                since: Instant::now(),
                head: true,
            };
        }
    }

    /// A request reached the service.
    pub(crate) fn begin(self: &Arc<Self>) -> InFlight {
        let mut phase = self.phase.lock();
        *phase = match *phase {
            Phase::Busy(n) => Phase::Busy(n.saturating_add(1)),
            Phase::Waiting { .. } | Phase::Draining { .. } => Phase::Busy(1),
        };
        InFlight(self.clone())
    }

    fn end(&self) {
        let mut phase = self.phase.lock();
        *phase = match *phase {
            Phase::Busy(n) if n > 1 => Phase::Busy(n - 1),
            Phase::Busy(_) => Phase::Draining {
                since: Instant::now(),
            },
            other => other,
        };
    }

    /// The connection was flushed: every answer that ended is now written, so the
    /// connection waits for its next request (the idle timer goes on).
    pub(crate) fn on_flush(&self) {
        let mut phase = self.phase.lock();
        if let Phase::Draining { since } = *phase {
            *phase = Phase::Waiting { since, head: false };
        }
    }

    /// Whether no request is in flight and every answer is written: whatever is
    /// written now is hyper's own answer to a request head it could not parse.
    pub(crate) fn is_waiting(&self) -> bool {
        matches!(*self.phase.lock(), Phase::Waiting { .. })
    }

    /// When the connection is to be closed unless something happens; `None` while a
    /// request is in flight.
    pub(crate) fn deadline(&self, t: Timeouts) -> Option<Instant> {
        match *self.phase.lock() {
            Phase::Waiting { since, head: true } => Some(since + t.header),
            Phase::Waiting { since, head: false } | Phase::Draining { since } => {
                Some(since + t.idle)
            }
            Phase::Busy(_) => None,
        }
    }
}

// === impl InFlight ===

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timeouts = Timeouts {
        header: Duration::from_secs(10),
        idle: Duration::from_secs(30),
    };

    #[tokio::test(start_paused = true)]
    async fn the_header_timer_runs_until_a_request_and_the_idle_timer_after_its_answer() {
        let start = Instant::now();
        let a = Activity::new();
        assert_eq!(a.deadline(T), Some(start + T.header));
        let req = a.begin();
        assert_eq!(a.deadline(T), None, "busy");
        tokio::time::advance(Duration::from_secs(100)).await;
        drop(req);
        let idle = start + Duration::from_secs(100);
        assert_eq!(
            a.deadline(T),
            Some(idle + T.idle),
            "the client must read it"
        );
        assert!(!a.is_waiting(), "the answer is not flushed yet");
        tokio::time::advance(Duration::from_secs(1)).await;
        a.on_flush();
        assert!(a.is_waiting());
        assert_eq!(
            a.deadline(T),
            Some(idle + T.idle),
            "idle since the answer ended"
        );
        tokio::time::advance(Duration::from_secs(4)).await;
        a.on_read();
        assert_eq!(
            a.deadline(T),
            Some(idle + Duration::from_secs(5) + T.header)
        );
        a.on_read();
        assert_eq!(
            a.deadline(T),
            Some(idle + Duration::from_secs(5) + T.header),
            "later bytes of the same head do not move the deadline"
        );
    }
}
