//! Who is told of each admission decision of a `tools/call`, with its tenant: the
//! gateway counts them per tenant for its activity view, which the core does not
//! (its fast path counts per tool only).

use std::fmt;
use std::time::Duration;

use toolgate::{Priority, Reason};

/// Told of every admission and rejection of a `tools/call` (each attempt's admission,
/// and the rejection of the call or of a retry). Called on the call's task: keep it
/// short.
pub trait Decisions: Send + Sync + fmt::Debug + 'static {
    /// `tool` (the policy key) was admitted for `tenant` after waiting `waited`.
    fn admitted(&self, tool: &str, tenant: Option<&str>, waited: Duration, priority: Priority);

    /// A call of `tool` for `tenant` was rejected for `reason`.
    fn rejected(&self, tool: &str, tenant: Option<&str>, reason: Reason);
}
