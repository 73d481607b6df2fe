//! The `[mcp]` table: how rejections are answered, the bounds of what clients send
//! and hold, and the upstream servers (`[mcp.servers.NAME]`, see [`ServerConfig`]).
//!
//! ```toml
//! [mcp]
//! on_reject = "tool_result"        # or "jsonrpc_error"
//! max_tools = 1024                 # tools aggregated from every upstream together
//! max_argument_bytes = 262144      # the JSON of one call's arguments
//! max_sessions = 1000              # open /mcp sessions, every tenant together
//! session_idle_ttl = "10m"         # a session with no request for this long is closed
//! call_timeout = "60s"             # one upstream call, from its admission
//! max_wait = "30s"                 # a bound on any admission wait of a tools/call
//!
//! [mcp.servers.everything]
//! command = "npx"
//! args = ["@modelcontextprotocol/server-everything"]
//! env = { LOG_LEVEL = "warn" }
//! exclude = ["trigger-sampling-request"]
//!
//! [mcp.servers.crm]
//! url = "https://crm.internal:9443/mcp"
//! headers = { Authorization = "Bearer …" }
//! ca_file = "/etc/toolgate/crm-ca.pem"   # the only CAs trusted for it (else the system's)
//! tools = ["lookup_customer"]
//! ```
//!
//! Unknown keys are errors; every error names its path
//! (`mcp.servers.crm.url: "ftp://x": expected an http:// or https:// URL`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::naming;
use crate::server_config::ServerConfig;

/// How a rejected `tools/call` is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnReject {
    /// A tool result with `isError: true`, a text and `structuredContent` (default).
    #[default]
    ToolResult,
    /// A JSON-RPC error whose `data` is the same object.
    JsonRpcError,
}

/// The MCP gateway's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct McpConfig {
    /// How a rejection is answered.
    pub on_reject: OnReject,
    /// The most tools aggregated from every upstream together; further ones are left
    /// out (with a warning).
    pub max_tools: usize,
    /// The largest JSON of one call's arguments, in bytes.
    pub max_argument_bytes: usize,
    /// Open `/mcp` sessions, every tenant together.
    pub max_sessions: usize,
    /// A session with no request for this long is closed.
    pub session_idle_ttl: Duration,
    /// How long one upstream call may run.
    pub call_timeout: Duration,
    /// A bound on any admission wait of a `tools/call`, whatever the tool's
    /// `max_wait`.
    pub max_wait: Duration,
    /// The upstream servers, by name.
    pub servers: BTreeMap<String, ServerConfig>,
}

/// The ceiling of `max_tools`.
pub const MAX_TOOLS_CEILING: usize = 100_000;
/// The ceiling of `max_argument_bytes`.
pub const MAX_ARGUMENT_BYTES_CEILING: usize = 64 * 1024 * 1024;
/// The ceiling of `max_sessions`.
pub const MAX_SESSIONS_CEILING: usize = 1_000_000;
/// The most upstream servers.
pub const MAX_SERVERS: usize = 256;

/// The keys `[mcp]` accepts.
const KEYS: &str = "call_timeout, max_argument_bytes, max_sessions, max_tools, max_wait, \
    on_reject, servers, session_idle_ttl";

// === impl McpConfig ===

impl Default for McpConfig {
    fn default() -> Self {
        Self {
            on_reject: OnReject::ToolResult,
            max_tools: 1024,
            max_argument_bytes: 256 * 1024,
            max_sessions: 1000,
            session_idle_ttl: Duration::from_secs(600),
            call_timeout: Duration::from_secs(60),
            max_wait: Duration::from_secs(30),
            servers: BTreeMap::new(),
        }
    }
}

impl McpConfig {
    /// Parses the `[mcp]` table; every problem is pushed to `errors` with its path.
    pub fn parse(v: &Value, errors: &mut Vec<String>) -> Self {
        let mut c = Self::default();
        let Some(table) = v.as_object() else {
            errors.push(format!("mcp: expected a table, got {v}"));
            return c;
        };
        for (key, v) in table {
            let r = match key.as_str() {
                "on_reject" => on_reject(v).map(|o| c.on_reject = o),
                "max_tools" => count(v, 1, MAX_TOOLS_CEILING).map(|n| c.max_tools = n),
                "max_argument_bytes" => {
                    count(v, 64, MAX_ARGUMENT_BYTES_CEILING).map(|n| c.max_argument_bytes = n)
                }
                "max_sessions" => count(v, 1, MAX_SESSIONS_CEILING).map(|n| c.max_sessions = n),
                "session_idle_ttl" => within(v, 86_400).map(|d| c.session_idle_ttl = d),
                "call_timeout" => within(v, 86_400).map(|d| c.call_timeout = d),
                "max_wait" => within(v, 3600).map(|d| c.max_wait = d),
                "servers" => {
                    c.servers = servers(v, errors);
                    Ok(())
                }
                _ => Err(format!("unknown key (expected one of: {KEYS})")),
            };
            if let Err(e) = r {
                errors.push(format!("mcp.{key}: {e}"));
            }
        }
        c
    }
}

fn servers(v: &Value, errors: &mut Vec<String>) -> BTreeMap<String, ServerConfig> {
    let Some(table) = v.as_object() else {
        errors.push(format!(
            "mcp.servers: expected a table of servers ([mcp.servers.NAME]), got {v}"
        ));
        return BTreeMap::new();
    };
    if table.len() > MAX_SERVERS {
        errors.push(format!(
            "mcp.servers: {} servers: at most {MAX_SERVERS}",
            table.len()
        ));
        return BTreeMap::new();
    }
    let mut out = BTreeMap::new();
    for (name, v) in table {
        let path = format!("mcp.servers.{name}");
        if let Err(e) = naming::check_server_name(name) {
            errors.push(format!("{path}: {e}"));
            continue;
        }
        if let Some(s) = ServerConfig::parse(&path, v, errors) {
            out.insert(name.clone(), s);
        }
    }
    out
}

fn on_reject(v: &Value) -> Result<OnReject, String> {
    match v.as_str() {
        Some("tool_result") => Ok(OnReject::ToolResult),
        Some("jsonrpc_error") => Ok(OnReject::JsonRpcError),
        _ => Err(format!(
            "{v}: expected \"tool_result\" or \"jsonrpc_error\""
        )),
    }
}

/// A whole number from `min` to `max`.
pub(crate) fn count(v: &Value, min: usize, max: usize) -> Result<usize, String> {
    v.as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| format!("{v}: expected a whole number from {min} to {max}"))
}

/// A duration longer than zero and at most `max_secs` seconds.
pub(crate) fn within(v: &Value, max_secs: u64) -> Result<Duration, String> {
    let s = v
        .as_str()
        .ok_or_else(|| format!("expected a duration such as \"30s\", got {v}"))?;
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("{s:?}: not a duration such as \"30s\" ({e})"))?;
    if d.is_zero() {
        return Err(format!("{s:?}: must be longer than zero"));
    }
    if d > Duration::from_secs(max_secs) {
        return Err(format!("{s:?}: must be at most {max_secs}s"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> (McpConfig, Vec<String>) {
        let mut errors = Vec::new();
        let c = McpConfig::parse(&v, &mut errors);
        (c, errors)
    }

    #[test]
    fn defaults_and_every_key_parse() {
        let (c, e) = parse(json!({
            "on_reject": "jsonrpc_error", "max_tools": 10, "max_argument_bytes": 1024,
            "max_sessions": 5, "session_idle_ttl": "1m", "call_timeout": "2s",
            "max_wait": "3s",
        }));
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(c.on_reject, OnReject::JsonRpcError);
        assert_eq!(
            (c.max_tools, c.max_argument_bytes, c.max_sessions),
            (10, 1024, 5)
        );
        assert_eq!(c.session_idle_ttl, Duration::from_secs(60));
        assert_eq!(c.call_timeout, Duration::from_secs(2));
        assert_eq!(c.max_wait, Duration::from_secs(3));
        assert_eq!(McpConfig::default().on_reject, OnReject::ToolResult);
    }

    #[test]
    fn every_bad_value_is_named_by_its_path() {
        let (_, e) = parse(json!({
            "on_reject": "drop", "max_tools": 0, "max_sessions": 2_000_000,
            "call_timeout": "0s", "bogus": 1,
        }));
        let text = e.join("\n");
        assert!(text.contains("mcp.on_reject: \"drop\": expected"), "{text}");
        assert!(
            text.contains("mcp.max_tools: 0: expected a whole number"),
            "{text}"
        );
        assert!(text.contains("mcp.max_sessions: 2000000"), "{text}");
        assert!(
            text.contains("mcp.call_timeout: \"0s\": must be longer"),
            "{text}"
        );
        assert!(text.contains("mcp.bogus: unknown key"), "{text}");
        assert_eq!(e.len(), 5, "{text}");
    }
}
