//! Config errors: each names the path of the offending value and the rule it breaks.

use std::fmt;

/// One problem in a config, e.g.
/// `tools.lookup_customer.rate: "0/s": the request count must be at least 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    path: String,
    message: String,
}

/// Every problem found in a config, sorted by path. Never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(Vec<ConfigError>);

// === impl ConfigError ===

impl ConfigError {
    /// A problem at `path` (empty for the document itself).
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }

    /// The dotted path of the offending value, e.g. `tools.lookup_customer.rate`.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// What is wrong with it.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

// === impl ConfigErrors ===

impl ConfigErrors {
    /// `Ok` if there are no errors; otherwise all of them, sorted by path.
    pub(crate) fn check(mut errors: Vec<ConfigError>) -> Result<(), Self> {
        errors.sort_by(|a, b| a.path.cmp(&b.path));
        errors.dedup();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(Self(errors))
        }
    }

    /// The individual errors.
    pub fn errors(&self) -> &[ConfigError] {
        &self.0
    }
}

impl From<ConfigError> for ConfigErrors {
    fn from(e: ConfigError) -> Self {
        Self(vec![e])
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}
