//! What a waiting call holds before it is admitted, given back unless handed to its
//! permit: a half-open probe slot ([`ProbeHold`]) and concurrency slots
//! ([`ConcHold`]).

use crate::held::HeldParts;
use crate::tool::ToolRuntime;

/// A half-open probe slot taken while waiting; given back unless handed to a permit.
pub(super) struct ProbeHold<'a> {
    pub(super) tool: &'a ToolRuntime,
    pub(super) held: bool,
}

/// Concurrency slots taken while waiting; released unless handed to a permit.
pub(super) struct ConcHold<'a> {
    pub(super) tool: &'a ToolRuntime,
    pub(super) held: HeldParts,
}

// === impl ProbeHold ===

impl ProbeHold<'_> {
    pub(super) fn disarm(mut self) -> bool {
        std::mem::replace(&mut self.held, false)
    }
}

impl Drop for ProbeHold<'_> {
    fn drop(&mut self) {
        if self.held {
            self.tool.cancel_probe();
        }
    }
}

impl Drop for ConcHold<'_> {
    fn drop(&mut self) {
        for h in self.held.drain(..) {
            h.cell(h.quota(&self.tool.quotas)).lock().release(h.cost);
        }
    }
}
