//! How an admitted call ended ([`Outcome`]), as the circuit breaker and the adaptive
//! limits take it in.

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
