//! Loading a config file: the `[gateway]`, `[mesh]` and `[mcp]` tables are taken out, the rest
//! is the policy, and the errors of every part are reported together, each with its
//! path.

use std::path::Path;

use serde_json::Value;
use toolgate::config::Config;
use toolgate::Policy;
use toolgate_mcp::McpConfig;
use toolgate_mesh::MeshConfig;

use super::Settings;

/// A config file split into the policy, the gateway's settings and the mesh's.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The admission policy.
    pub policy: Policy,
    /// The gateway's settings.
    pub settings: Settings,
    /// The event mesh's settings (`[mesh]`), when the file has them.
    pub mesh: Option<MeshConfig>,
    /// The MCP gateway's settings (`[mcp]`), when the file has them.
    pub mcp: Option<McpConfig>,
}

/// Every problem of a config file, each with its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadErrors(pub Vec<String>);

// === impl Loaded ===

impl Loaded {
    /// Reads a config file: JSON when its name ends in `.json` (any case) or its text
    /// starts with `{` (which no TOML document does), TOML otherwise.
    ///
    /// # Errors
    ///
    /// When the file cannot be read or parsed, with every invalid value listed.
    pub fn from_path(path: &Path) -> Result<Self, LoadErrors> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| LoadErrors(vec![format!("cannot read {}: {e}", path.display())]))?;
        if is_json(path, &text) {
            Self::from_json_str(&text)
        } else {
            Self::from_toml_str(&text)
        }
    }

    /// Parses a TOML config with optional `[gateway]`, `[mesh]` and `[mcp]` tables.
    ///
    /// # Errors
    ///
    /// As [`Loaded::from_path`].
    pub fn from_toml_str(text: &str) -> Result<Self, LoadErrors> {
        let value: toml::Value =
            toml::from_str(text).map_err(|e| LoadErrors(vec![format!("invalid TOML: {e}")]))?;
        let json = serde_json::to_value(value)
            .map_err(|e| LoadErrors(vec![format!("invalid TOML: {e}")]))?;
        Self::from_value(json)
    }

    /// Parses a JSON config with an optional `gateway` object.
    ///
    /// # Errors
    ///
    /// As [`Loaded::from_path`].
    pub fn from_json_str(text: &str) -> Result<Self, LoadErrors> {
        let json: Value = serde_json::from_str(text)
            .map_err(|e| LoadErrors(vec![format!("invalid JSON: {e}")]))?;
        Self::from_value(json)
    }

    /// Splits a value tree into settings and policy.
    ///
    /// # Errors
    ///
    /// As [`Loaded::from_path`].
    pub fn from_value(mut json: Value) -> Result<Self, LoadErrors> {
        let mut errors = Vec::new();
        let gateway = json.as_object_mut().and_then(|o| o.remove("gateway"));
        let settings = gateway
            .map(|g| Settings::parse(&g, &mut errors))
            .unwrap_or_default();
        let mesh = json
            .as_object_mut()
            .and_then(|o| o.remove("mesh"))
            .map(|m| MeshConfig::parse(&m, &mut errors));
        let mcp = json
            .as_object_mut()
            .and_then(|o| o.remove("mcp"))
            .map(|m| McpConfig::parse(&m, &mut errors));
        let policy = match Config::from_value(&json) {
            Ok(c) => Policy::new(c).map_err(|e| errors.extend(lines(&e))).ok(),
            Err(e) => {
                errors.extend(lines(&e));
                None
            }
        };
        if let Some(p) = &policy {
            // Schemas are compiled here too, so `toolgate check` reports bad ones.
            if let Err(e) = crate::upstream::Upstream::compile_all(p) {
                errors.extend(e);
            }
        }
        match policy {
            Some(policy) if errors.is_empty() => Ok(Self {
                policy,
                settings,
                mesh,
                mcp,
            }),
            _ => {
                errors.sort();
                Err(LoadErrors(errors))
            }
        }
    }
}

/// Whether a config file is JSON: by its extension, or by its first character, as a
/// TOML document cannot start with `{` (a key, a `[table]` or a comment comes first).
fn is_json(path: &Path, text: &str) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        || text.trim_start().starts_with('{')
}

fn lines(e: &toolgate::config::ConfigErrors) -> Vec<String> {
    e.errors().iter().map(ToString::to_string).collect()
}

// === impl LoadErrors ===

impl std::fmt::Display for LoadErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join("\n"))
    }
}

impl std::error::Error for LoadErrors {}
