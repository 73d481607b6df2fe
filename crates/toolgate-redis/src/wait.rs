//! Waiting across processes: reservations, the per-process queue limit, and giving a
//! reservation back when a waiter leaves.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use toolgate::{Call, Reason, Rejection};

use crate::permit::{Op, RedisPermit};
use crate::plan::{reservation_ops, Step};
use crate::quota::Tool;
use crate::script::Reply;
use crate::store::Gate;

/// A waiter of this process; counts against the tool's `queue_limit`.
struct QueueSlot(Arc<Tool>);

/// Gives back a reservation unless disarmed: a waiter that leaves early.
struct CancelGuard {
    gate: Arc<Gate>,
    ops: Vec<Op>,
    armed: bool,
}

// === impl Gate ===

impl Gate {
    /// The wait path of [`Gate::admit`].
    pub(crate) async fn wait(
        self: &Arc<Self>,
        tool: &Arc<Tool>,
        call: &Call<'_>,
        steps: &[Step],
        max_wait: Duration,
    ) -> Result<RedisPermit, Rejection> {
        let Some(_slot) = QueueSlot::enter(tool) else {
            return self
                .decide(tool, call, steps, -1, false)
                .await
                .map_err(|r| {
                    Rejection::new(r.tool(), r.quota(), Reason::QueueFull, r.retry_after())
                });
        };
        let start = tokio::time::Instant::now();
        let mut poll = Duration::from_millis(5);
        let mut polled = false;
        loop {
            let left = max_wait.saturating_sub(start.elapsed());
            let left_us = i64::try_from(left.as_micros()).unwrap_or(i64::MAX);
            match self.decide(tool, call, steps, left_us, true).await {
                Err(r) if r.reason() == Reason::ConcurrencyLimited && !left.is_zero() => {
                    tokio::time::sleep(poll.min(left)).await;
                    poll = (poll * 2).min(Duration::from_millis(50));
                    polled = true;
                }
                // Time spent polling for a concurrency slot counts as waiting too.
                Ok(p) if polled => return Ok(p.with_waited(start.elapsed())),
                other => return other,
            }
        }
    }

    /// Sleeps until a reserved admission time, giving the reservation back if the
    /// future is dropped first.
    pub(crate) async fn sleep_out(
        self: &Arc<Self>,
        permit: RedisPermit,
        steps: &[Step],
        id: &Arc<str>,
        reply: Reply,
    ) -> Result<RedisPermit, Rejection> {
        let Reply::Admitted {
            at,
            wait,
            shadow_ok,
            ..
        } = reply
        else {
            return Ok(permit);
        };
        if wait <= 0 {
            return Ok(permit);
        }
        let mut guard = CancelGuard {
            gate: self.clone(),
            ops: reservation_ops(steps, id, at, shadow_ok),
            armed: true,
        };
        let waited = Duration::from_micros(u64::try_from(wait).unwrap_or(0));
        match &self.clock {
            Some(c) => c.sleep_until(u64::try_from(at).unwrap_or(0) * 1000).await,
            None => tokio::time::sleep(waited).await,
        }
        guard.armed = false;
        Ok(permit.with_waited(waited))
    }
}

// === impl QueueSlot ===

impl QueueSlot {
    fn enter(tool: &Arc<Tool>) -> Option<Self> {
        let prev = tool.waiting.fetch_add(1, Ordering::AcqRel);
        if prev >= tool.queue_limit {
            tool.waiting.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Self(tool.clone()))
    }
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.armed {
            self.gate
                .release_in_background(std::mem::take(&mut self.ops));
        }
    }
}
