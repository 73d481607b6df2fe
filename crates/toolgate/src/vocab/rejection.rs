//! What a caller is told when the answer is no ([`Rejection`]).
//!
//! A rejection is a value, not a failure of the tool: it says which quota said no,
//! why, and — when known — when to come back. "Not now" (`retry_after` is set) and
//! "never" ([`Reason::CostExceedsCapacity`], no `retry_after`) are kept apart.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::reason::Reason;

/// A call that was not admitted, and consumed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    tool: Arc<str>,
    quota: Arc<str>,
    reason: Reason,
    retry_after: Option<Duration>,
}

// === impl Rejection ===

impl Rejection {
    /// A rejection of `tool` by `quota` (a config path such as `tools.x.rate`).
    pub fn new(
        tool: impl Into<Arc<str>>,
        quota: impl Into<Arc<str>>,
        reason: Reason,
        retry_after: Option<Duration>,
    ) -> Self {
        Self {
            tool: tool.into(),
            quota: quota.into(),
            reason,
            retry_after,
        }
    }

    /// The tool the call was for.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The quota that said no, as a config path (`tools.lookup_customer.rate`,
    /// `pools.crm.tokens`); empty for unknown tools.
    pub fn quota(&self) -> &str {
        &self.quota
    }

    /// Why the call was rejected.
    pub fn reason(&self) -> Reason {
        self.reason
    }

    /// When the same call could be admitted if nothing else happened meanwhile; `None`
    /// when unknown (concurrency) or never (`cost_exceeds_capacity`).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "call to {:?} rejected: {}", self.tool, self.reason)?;
        if !self.quota.is_empty() {
            write!(f, " by {}", self.quota)?;
        }
        if let Some(d) = self.retry_after {
            write!(f, "; retry after {}ms", d.as_millis().max(1))?;
        }
        Ok(())
    }
}

impl std::error::Error for Rejection {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rejection_displays_its_quota_and_retry_time() {
        let r = Rejection::new(
            "lookup_customer",
            "tools.lookup_customer.rate",
            Reason::RateLimited,
            Some(Duration::from_millis(500)),
        );
        assert_eq!(
            r.to_string(),
            "call to \"lookup_customer\" rejected: rate_limited by tools.lookup_customer.rate; retry after 500ms"
        );
    }
}
