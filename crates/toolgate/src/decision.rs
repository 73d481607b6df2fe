//! What a caller asks for ([`Call`]) and what it is told when the answer is no
//! ([`Rejection`]), plus how an admitted call ends ([`Outcome`], [`Completion`]).
//!
//! A rejection is a value, not a failure of the tool: it says which quota said no,
//! why, and — when known — when to come back. "Not now" (`retry_after` is set) and
//! "never" ([`Reason::CostExceedsCapacity`], no `retry_after`) are kept apart.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Why a call was not admitted. The strings of [`Reason::as_str`] are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// A request-rate quota (bucket or sliding window) has no room now.
    RateLimited,
    /// A token budget has no room now.
    TokensLimited,
    /// A concurrency limit is full.
    ConcurrencyLimited,
    /// The predicted wait is longer than the call's `max_wait`.
    MaxWaitExceeded,
    /// The tool's wait queue is full.
    QueueFull,
    /// The call's cost can never fit the quota (cost > burst).
    CostExceedsCapacity,
    /// The tool's circuit breaker is open.
    CircuitOpen,
    /// The tool has no policy and `unknown_tools = "deny"`.
    UnknownTool,
}

/// The quota a [`Rejection::store_unavailable`] names.
const STORE_QUOTA: &str = "store";

/// A call that was not admitted, and consumed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    tool: Arc<str>,
    quota: Arc<str>,
    reason: Reason,
    retry_after: Option<Duration>,
}

/// A request for admission of one tool call.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use toolgate::Call;
///
/// let call = Call::new("search_documents")
///     .tenant("acme")
///     .tokens(1_200)
///     .max_wait(Duration::from_millis(250));
/// assert_eq!(call.tool_name(), "search_documents");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call<'a> {
    pub(crate) tool: &'a str,
    pub(crate) tenant: Option<&'a str>,
    pub(crate) tokens: u64,
    pub(crate) count: u64,
    pub(crate) waits: Waits,
}

/// A call's own bounds on its wait, each stored as nanoseconds plus one (`0`: not
/// set): its `max_wait` (overriding the tool's) and its cap. Two words where two
/// `Option<Duration>`s would take four, so that a `Call` stays as small (and as cheap
/// to build, zeros for "not set") as before the cap: the fast path reads it on every
/// decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Waits {
    max: u64,
    cap: u64,
}

/// How an admitted call ended, as fed to the circuit breaker and adaptive limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// The tool answered and its answer was usable.
    Success,
    /// The tool failed.
    Error,
    /// The tool did not answer in time (also recorded for expired leases).
    Timeout,
    /// The tool answered but its output failed the schema or semantic check.
    Invalid,
}

/// What a caller reports when an admitted call ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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

// === impl Reason ===

impl Reason {
    /// The stable string of this reason, e.g. `"rate_limited"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::RateLimited => "rate_limited",
            Self::TokensLimited => "tokens_limited",
            Self::ConcurrencyLimited => "concurrency_limited",
            Self::MaxWaitExceeded => "max_wait_exceeded",
            Self::QueueFull => "queue_full",
            Self::CostExceedsCapacity => "cost_exceeds_capacity",
            Self::CircuitOpen => "circuit_open",
            Self::UnknownTool => "unknown_tool",
        }
    }

    /// Every reason, in a fixed order.
    pub const ALL: [Reason; 8] = [
        Self::RateLimited,
        Self::TokensLimited,
        Self::ConcurrencyLimited,
        Self::MaxWaitExceeded,
        Self::QueueFull,
        Self::CostExceedsCapacity,
        Self::CircuitOpen,
        Self::UnknownTool,
    ];

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Reason {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("unknown reason {s:?}"))
    }
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
        self.reason == Reason::CircuitOpen && *self.quota == *STORE_QUOTA
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

// === impl Call ===

impl<'a> Call<'a> {
    /// A call to `tool` with cost one request and no token estimate.
    pub const fn new(tool: &'a str) -> Self {
        Self {
            tool,
            tenant: None,
            tokens: 0,
            count: 1,
            waits: Waits {
                max: Waits::NONE,
                cap: Waits::NONE,
            },
        }
    }

    /// The tenant whose partitions the call draws from (for `partition = "tenant"`).
    pub const fn tenant(mut self, tenant: &'a str) -> Self {
        self.tenant = Some(tenant);
        self
    }

    /// Sets the tenant from an option.
    pub const fn with_tenant(mut self, tenant: Option<&'a str>) -> Self {
        self.tenant = tenant;
        self
    }

    /// The estimated token cost charged to `tokens` budgets at admission.
    pub const fn tokens(mut self, tokens: u64) -> Self {
        self.tokens = tokens;
        self
    }

    /// How many requests this admission stands for (default 1).
    pub const fn count(mut self, count: u64) -> Self {
        self.count = count;
        self
    }

    /// Overrides the tool's `max_wait` for this call (wait mode only).
    pub const fn max_wait(mut self, max_wait: Duration) -> Self {
        self.waits.max = Waits::stored(max_wait);
        self
    }

    /// Caps this call's wait at `cap`, whatever its own or its tool's `max_wait`
    /// (a caller's own deadline, such as a request timeout): a predicted wait beyond
    /// it is `max_wait_exceeded` at once. Unlike [`Call::max_wait`] it never makes a
    /// fail-fast tool wait.
    pub const fn cap_wait(mut self, cap: Duration) -> Self {
        self.waits.cap = Waits::stored(cap);
        self
    }

    /// The tool's name.
    pub const fn tool_name(&self) -> &'a str {
        self.tool
    }

    /// The tenant, if given.
    pub const fn tenant_id(&self) -> Option<&'a str> {
        self.tenant
    }

    /// The estimated token cost.
    pub const fn token_estimate(&self) -> u64 {
        self.tokens
    }

    /// How many requests this admission stands for.
    pub const fn request_count(&self) -> u64 {
        self.count
    }

    /// The call's own `max_wait`, if it overrides the tool's.
    pub const fn max_wait_override(&self) -> Option<Duration> {
        Waits::duration(self.waits.max)
    }

    /// The cap on this call's wait, if any ([`Call::cap_wait`]).
    pub const fn wait_cap(&self) -> Option<Duration> {
        Waits::duration(self.waits.cap)
    }

    /// The longest this call may wait on a tool whose `max_wait` is `tool_max_wait`:
    /// its own `max_wait` or the tool's, at most its cap.
    pub fn wait_limit(&self, tool_max_wait: Duration) -> Duration {
        let limit = self.max_wait_override().unwrap_or(tool_max_wait);
        self.wait_cap().map_or(limit, |cap| limit.min(cap))
    }
}

// === impl Waits ===

impl Waits {
    /// Not set.
    const NONE: u64 = 0;

    /// `d` stored: its nanoseconds plus one, saturating past 584 years.
    const fn stored(d: Duration) -> u64 {
        let n = d.as_nanos();
        if n >= u64::MAX as u128 {
            u64::MAX
        } else {
            n as u64 + 1
        }
    }

    const fn duration(stored: u64) -> Option<Duration> {
        match stored.checked_sub(1) {
            Some(n) => Some(Duration::from_nanos(n)),
            None => None,
        }
    }
}

// === impl Outcome ===

impl Outcome {
    /// The stable string of this outcome, as used by the HTTP API.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Error => "error",
            Self::Timeout => "timeout",
            Self::Invalid => "invalid",
        }
    }
}

impl std::str::FromStr for Outcome {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "success" => Ok(Self::Success),
            "error" => Ok(Self::Error),
            "timeout" => Ok(Self::Timeout),
            "invalid" => Ok(Self::Invalid),
            other => Err(format!(
                "unknown outcome {other:?} (expected success, error, timeout or invalid)"
            )),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_round_trip_through_their_stable_strings() {
        for r in Reason::ALL {
            assert_eq!(r.as_str().parse::<Reason>(), Ok(r));
        }
        assert_eq!(
            Reason::ALL[Reason::UnknownTool.index()],
            Reason::UnknownTool
        );
    }

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
