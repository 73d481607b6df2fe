//! Why a call was not admitted ([`Reason`]), in words that stay stable: metrics,
//! logs, the HTTP API and the Python package all speak them.

use std::fmt;

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
}
