//! What a caller is told when the answer is no ([`Rejection`]).
//!
//! A rejection is a value, not a failure of the tool: it says which quota said no,
//! why, and — when known — when to come back. "Not now" (`retry_after` is set) and
//! "never" ([`Reason::CostExceedsCapacity`], no `retry_after`) are kept apart.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::reason::Reason;

/// The quota a [`Rejection::store_unavailable`] names.
const STORE_QUOTA: &str = "store";

/// The quota a [`Rejection::past_deadline`] names.
const DEADLINE_QUOTA: &str = "deadline";

/// A call that was not admitted, and consumed nothing.
#[derive(Clone)]
pub struct Rejection {
    names: Names,
    reason: Reason,
    retry_after: Option<Duration>,
}

/// The tool and quota a rejection names: its own, or shared by every rejection of
/// one tool by one quota ([`QuotaNames`]), which costs one reference count to take
/// and give back instead of two.
#[derive(Clone)]
enum Names {
    Own { tool: Arc<str>, quota: Arc<str> },
    Shared(Arc<QuotaNames>),
}

/// A tool's name and the path of one of its quotas, made once per policy and
/// shared by the rejections that name them (see [`Rejection::named`]).
#[derive(Debug)]
pub(crate) struct QuotaNames {
    pub(crate) tool: Arc<str>,
    pub(crate) quota: Arc<str>,
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
            names: Names::Own {
                tool: tool.into(),
                quota: quota.into(),
            },
            reason,
            retry_after,
        }
    }

    /// A rejection by the quota and of the tool that `names` names.
    #[inline]
    pub(crate) fn named(
        names: &Arc<QuotaNames>,
        reason: Reason,
        retry_after: Option<Duration>,
    ) -> Self {
        Self {
            names: Names::Shared(names.clone()),
            reason,
            retry_after,
        }
    }

    /// The rejection of a call to `tool` that would be admitted too late to finish
    /// by its own deadline ([`crate::Call::deadline`]): the reason is
    /// `max_wait_exceeded` and the quota `deadline`, with no `retry_after` (the same
    /// call would be no earlier later). [`Rejection::is_past_deadline`] recognises it.
    pub fn past_deadline(tool: impl Into<Arc<str>>) -> Self {
        Self::new(tool, DEADLINE_QUOTA, Reason::MaxWaitExceeded, None)
    }

    /// Whether this is a [`Rejection::past_deadline`].
    pub fn is_past_deadline(&self) -> bool {
        self.reason == Reason::MaxWaitExceeded && self.quota() == DEADLINE_QUOTA
    }

    /// The rejection of a call to `tool` that a shared store (see [`crate::store`])
    /// could not decide: the store did not answer and its `on_store_error` policy
    /// fails closed, or the call was put to it through a verb that cannot wait for
    /// it (the synchronous [`crate::Engine::try_admit`] on a store engine). The
    /// quota is `store` and the reason `circuit_open`, with no `retry_after`: no quota
    /// of the tool said no, the store could not say yes. Every store and the engine
    /// build it here; [`Rejection::is_store_unavailable`] recognises it.
    pub fn store_unavailable(tool: impl Into<Arc<str>>) -> Self {
        Self::new(tool, STORE_QUOTA, Reason::CircuitOpen, None)
    }

    /// Whether this is a [`Rejection::store_unavailable`]: the answer to tell a
    /// caller that admission could not be decided, rather than that a limit was
    /// reached.
    pub fn is_store_unavailable(&self) -> bool {
        self.reason == Reason::CircuitOpen && self.quota() == STORE_QUOTA
    }

    /// The tool the call was for.
    pub fn tool(&self) -> &str {
        match &self.names {
            Names::Own { tool, .. } => tool,
            Names::Shared(n) => &n.tool,
        }
    }

    /// The quota that said no, as a config path (`tools.lookup_customer.rate`,
    /// `pools.crm.tokens`); empty for unknown tools.
    pub fn quota(&self) -> &str {
        match &self.names {
            Names::Own { quota, .. } => quota,
            Names::Shared(n) => &n.quota,
        }
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

impl PartialEq for Rejection {
    /// Equal when they say the same: tool, quota, reason and retry time, however
    /// their names are held.
    fn eq(&self, other: &Self) -> bool {
        self.tool() == other.tool()
            && self.quota() == other.quota()
            && self.reason == other.reason
            && self.retry_after == other.retry_after
    }
}

impl Eq for Rejection {}

impl fmt::Debug for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rejection")
            .field("tool", &self.tool())
            .field("quota", &self.quota())
            .field("reason", &self.reason)
            .field("retry_after", &self.retry_after)
            .finish()
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "call to {:?} rejected: {}", self.tool(), self.reason)?;
        if !self.quota().is_empty() {
            write!(f, " by {}", self.quota())?;
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
    fn a_store_that_could_not_decide_has_one_rejection_told_apart_from_a_breaker() {
        let r = Rejection::store_unavailable("t");
        assert_eq!(
            (r.tool(), r.quota(), r.reason(), r.retry_after()),
            ("t", "store", Reason::CircuitOpen, None)
        );
        assert!(r.is_store_unavailable());
        let breaker = Rejection::new("t", "tools.t.circuit", Reason::CircuitOpen, None);
        let rate = Rejection::new("t", "tools.t.rate", Reason::RateLimited, None);
        assert!(!breaker.is_store_unavailable() && !rate.is_store_unavailable());
    }

    #[test]
    fn a_rejection_with_shared_names_says_and_equals_what_one_with_its_own_says() {
        let names = Arc::new(QuotaNames {
            tool: "t".into(),
            quota: "tools.t.rate".into(),
        });
        let retry = Some(Duration::from_millis(5));
        let shared = Rejection::named(&names, Reason::RateLimited, retry);
        let own = Rejection::new("t", "tools.t.rate", Reason::RateLimited, retry);
        assert_eq!(shared, own);
        assert_eq!((shared.tool(), shared.quota()), ("t", "tools.t.rate"));
        assert_eq!(format!("{shared:?}"), format!("{own:?}"));
        assert_eq!(shared.to_string(), own.to_string());
        assert_ne!(
            shared,
            Rejection::new("t", "tools.t.rate", Reason::RateLimited, None)
        );
    }

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
