//! A validated [`Config`]: the [`Policy`] an engine runs (compiled against the
//! engine's state by `crate::compiled`).

use std::ops::Deref;

use crate::config::{Config, ConfigErrors};

/// A validated config, ready to run.
///
/// # Examples
///
/// ```
/// use toolgate::Policy;
///
/// let policy = Policy::from_toml_str("[tools.lookup_customer]\nrate = \"2/s\"").unwrap();
/// assert!(policy.tools.contains_key("lookup_customer"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Policy(Config);

// === impl Policy ===

impl Policy {
    /// Validates `config`.
    ///
    /// # Errors
    ///
    /// Every rule the config breaks, each with its path.
    pub fn new(config: Config) -> Result<Self, ConfigErrors> {
        config.validate()?;
        Ok(Self(config))
    }

    /// Parses and validates a TOML policy.
    ///
    /// # Errors
    ///
    /// As [`Config::from_toml_str`].
    pub fn from_toml_str(s: &str) -> Result<Self, ConfigErrors> {
        Config::from_toml_str(s).map(Self)
    }

    /// Parses and validates a JSON policy.
    ///
    /// # Errors
    ///
    /// As [`Config::from_json_str`].
    pub fn from_json_str(s: &str) -> Result<Self, ConfigErrors> {
        Config::from_json_str(s).map(Self)
    }

    /// The config.
    pub fn config(&self) -> &Config {
        &self.0
    }
}

impl Deref for Policy {
    type Target = Config;

    fn deref(&self) -> &Config {
        &self.0
    }
}

impl TryFrom<Config> for Policy {
    type Error = ConfigErrors;

    fn try_from(config: Config) -> Result<Self, ConfigErrors> {
        Self::new(config)
    }
}
