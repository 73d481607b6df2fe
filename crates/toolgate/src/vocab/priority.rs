//! A call's priority class ([`Priority`]): `"interactive"` > `"default"` > `"batch"`.

use std::fmt;
use std::str::FromStr;

/// A call's priority class, highest first.
///
/// The names are fixed: `"interactive"`, `"default"`, `"batch"`. A class is carried
/// with the call and recorded; the order derives from the declaration
/// (`Interactive < Default < Batch`, so a smaller value is a higher class).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Priority {
    /// A person is waiting on the answer.
    Interactive,
    /// Neither interactive nor batch (the class of a call that names none).
    #[default]
    Default,
    /// Bulk work that can yield to the others.
    Batch,
}

/// A priority name that is none of the three.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownPriority;

// === impl Priority ===

impl Priority {
    /// Every class, highest first.
    pub const ALL: [Self; 3] = [Self::Interactive, Self::Default, Self::Batch];

    /// `"interactive"`, `"default"` or `"batch"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Interactive => "interactive",
            Self::Default => "default",
            Self::Batch => "batch",
        }
    }
}

impl FromStr for Priority {
    type Err = UnknownPriority;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or(UnknownPriority)
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl UnknownPriority ===

impl fmt::Display for UnknownPriority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the priority must be \"interactive\", \"default\" or \"batch\"")
    }
}

impl std::error::Error for UnknownPriority {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_names_parse_and_nothing_else() {
        for p in Priority::ALL {
            assert_eq!(p.as_str().parse::<Priority>(), Ok(p));
        }
        for bad in ["", "Interactive", "high", "batch "] {
            assert_eq!(bad.parse::<Priority>(), Err(UnknownPriority), "{bad:?}");
        }
        assert!(Priority::Interactive < Priority::Default);
        assert!(Priority::Default < Priority::Batch);
    }
}
