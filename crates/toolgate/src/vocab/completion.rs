//! What a caller reports when an admitted call ends ([`Completion`]): its outcome,
//! and what it learned on the way (latency, actual tokens, the upstream's signals).

use std::time::Duration;

use super::outcome::Outcome;

/// What a caller reports when an admitted call ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[must_use = "a completion does nothing until passed to a permit's `complete`"]
pub struct Completion {
    /// How the call ended.
    pub outcome: Outcome,
    /// How long the tool took, if the caller measured it.
    pub latency: Option<Duration>,
    /// The actual token count, reconciled against the estimate given at admission.
    pub tokens: Option<u64>,
    /// The upstream asked not to be called again before this long (a 429 or 503
    /// with `Retry-After`): the tool — and only that tool — is paused until then, for
    /// at most its `max_pause`; on a tool whose quotas are per tenant, only the
    /// permit's tenant is.
    pub retry_after: Option<Duration>,
    /// What the upstream's rate-limit headers said (see [`crate::shaping`]): when its
    /// remaining capacity is low, the tool's calls are spread over its reset window
    /// (at most `max_pause` long; the permit's tenant's calls only, on a per-tenant
    /// tool).
    pub server_limit: Option<crate::shaping::ServerLimit>,
}

// === impl Completion ===

impl Completion {
    /// A completion with this outcome and nothing else known.
    pub const fn new(outcome: Outcome) -> Self {
        Self {
            outcome,
            latency: None,
            tokens: None,
            retry_after: None,
            server_limit: None,
        }
    }

    /// A successful completion.
    pub const fn success() -> Self {
        Self::new(Outcome::Success)
    }

    /// Records the measured latency.
    pub const fn latency(mut self, latency: Duration) -> Self {
        self.latency = Some(latency);
        self
    }

    /// Records the actual token count, to reconcile against the estimate.
    pub const fn tokens(mut self, tokens: u64) -> Self {
        self.tokens = Some(tokens);
        self
    }

    /// Records the upstream's `Retry-After`: the tool is paused until then.
    pub const fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// Records the upstream's rate-limit headers, read by
    /// [`crate::shaping::server_limit`].
    pub const fn server_limit(mut self, limit: crate::shaping::ServerLimit) -> Self {
        self.server_limit = Some(limit);
        self
    }
}
