//! Waiting across processes: the per-process queue limit, and sleeping out a reserved
//! admission time, giving the reservation back when the waiter leaves first. The wait
//! itself (asking again while a concurrency limit blocks) is the gate's.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::link::Link;
use crate::op::Op;
use crate::permit::RedisPermit;
use crate::plan::{reservation_ops, Step};
use crate::quota::Tool;
use crate::script::Reply;

/// A waiter of this process; counts against the tool's `queue_limit` until dropped.
pub(crate) struct QueueSlot(Arc<Tool>);

/// Gives back a reservation unless disarmed: a waiter that leaves early.
struct CancelGuard {
    link: Arc<Link>,
    ops: Vec<Op>,
    armed: bool,
}

/// Sleeps until the admission time `reply` reserved for `permit` (admission `id` of
/// `steps`), then hands the permit out with the time waited. Dropping the future
/// while it sleeps gives the reservation back in a spawned round trip through `link`
/// (bucket tokens refunded, sliding entries and leases removed).
pub(crate) async fn sleep_out(
    link: &Arc<Link>,
    permit: RedisPermit,
    steps: &[Step],
    id: &Arc<str>,
    reply: Reply,
) -> RedisPermit {
    let Reply::Admitted {
        at,
        wait,
        shadow_ok,
        ..
    } = reply
    else {
        return permit;
    };
    if wait <= 0 {
        return permit;
    }
    // Boxed: only a call that waits carries the sleep (every admission awaits this).
    Box::pin(sleep_until(link, permit, steps, id, at, wait, shadow_ok)).await
}

/// [`sleep_out`]'s sleep until `at` (`wait` µs from the reply), the reservation
/// given back if the future is dropped first.
async fn sleep_until(
    link: &Arc<Link>,
    permit: RedisPermit,
    steps: &[Step],
    id: &Arc<str>,
    at: i64,
    wait: i64,
    shadow_ok: bool,
) -> RedisPermit {
    let mut guard = CancelGuard {
        link: link.clone(),
        ops: reservation_ops(steps, id, at, shadow_ok),
        armed: true,
    };
    let waited = Duration::from_micros(u64::try_from(wait).unwrap_or(0));
    link.sleep_until(at, waited).await;
    guard.armed = false;
    permit.with_waited(waited)
}

// === impl QueueSlot ===

impl QueueSlot {
    /// A place among `tool`'s waiters of this process; `None` when its `queue_limit`
    /// are all taken.
    pub(crate) fn enter(tool: &Arc<Tool>) -> Option<Self> {
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

// === impl CancelGuard ===

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.armed {
            self.link
                .release_in_background(std::mem::take(&mut self.ops));
        }
    }
}
