//! What a caller asks for: the admission of one tool call ([`Call`]), with its cost
//! and its own bounds on how long it may wait: a `max_wait`, a cap, and a deadline by
//! which it must have finished ([`Call::deadline`]).

use std::time::Duration;

use crate::clock::Nanos;

use super::priority::Priority;

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
#[must_use = "a call describes an admission and does nothing until passed to one"]
pub struct Call<'a> {
    pub(crate) tool: &'a str,
    pub(crate) tenant: Option<&'a str>,
    pub(crate) tokens: u64,
    pub(crate) count: u64,
    pub(crate) waits: Waits,
    pub(crate) priority: Priority,
}

/// A call's own bounds on its wait, each stored as nanoseconds plus one (`0`: not
/// set): its `max_wait` (overriding the tool's), its cap and its deadline (a time on
/// the engine's clock). Three words where three `Option`s would take six, so that a
/// `Call` stays small (and cheap to build, zeros for "not set"): the fast path reads
/// it on every decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Waits {
    max: u64,
    cap: u64,
    deadline: u64,
}

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
                deadline: Waits::NONE,
            },
            priority: Priority::Default,
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

    /// The time on the engine's clock (`engine.clock().now()`, a [`Nanos`] like every
    /// time the engine reads) by which the call must have *finished*, not merely
    /// started: the caller's own deadline, such as `engine.clock().now() + 2 s` for a request
    /// that times out in two seconds.
    ///
    /// With a deadline, the call's wait is bounded by `min(max_wait, deadline − now −
    /// expected run time)`, the expected run time being the tool's observed p90
    /// latency (from the completions that reported one; zero before any did). A call
    /// that would be admitted too late to finish — its deadline already past, or
    /// less than the expected run time left at its predicted admission — is refused
    /// at once with `max_wait_exceeded` by the quota `"deadline"`. Like
    /// [`Call::cap_wait`], a deadline never makes a fail-fast tool wait. Without one
    /// (the default), nothing of this is asked.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use toolgate::{Call, Engine, ManualClock, Policy};
    ///
    /// let clock = ManualClock::new();
    /// let policy = Policy::from_toml_str("[tools.t]\nrate = \"1/s\"").unwrap();
    /// let engine = Engine::with_clock(policy, Arc::new(clock.clone()));
    /// let soon = engine.clock().now() + 2_000_000_000;
    /// assert!(engine.try_admit(&Call::new("t").deadline(soon)).is_ok());
    /// clock.advance(Duration::from_secs(3));
    /// let late = engine.try_admit(&Call::new("t").deadline(soon)).unwrap_err();
    /// assert_eq!(late.quota(), "deadline");
    /// ```
    pub const fn deadline(mut self, at: Nanos) -> Self {
        self.waits.deadline = at.saturating_add(1);
        self
    }

    /// Sets the deadline from an option ([`Call::deadline`]).
    pub const fn with_deadline(mut self, at: Option<Nanos>) -> Self {
        self.waits.deadline = match at {
            Some(at) => at.saturating_add(1),
            None => Waits::NONE,
        };
        self
    }

    /// The call's priority class (default [`Priority::Default`]). Carried with the
    /// call and recorded; quotas read it where they reserve a share for higher
    /// classes.
    pub const fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
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

    /// The call's deadline on the engine's clock, if any ([`Call::deadline`]).
    pub const fn deadline_at(&self) -> Option<Nanos> {
        self.waits.deadline.checked_sub(1)
    }

    /// The call's priority class.
    pub const fn priority_class(&self) -> Priority {
        self.priority
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
