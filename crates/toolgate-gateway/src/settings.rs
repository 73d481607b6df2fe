//! The gateway's own settings (`[gateway]`) and loading a config file.
//!
//! The core config rejects unknown keys, so the gateway takes its `[gateway]` table
//! out of the file first and hands the rest to
//! [`Config::from_value`](toolgate::config::Config::from_value). Errors of both
//! parts are reported together, each with its path.
//!
//! ```toml
//! [gateway]
//! listen = "127.0.0.1:8787"      # overridden by --listen
//! lease_ttl = "60s"              # default TTL of a lease
//! body_limit = 65536             # bytes; larger bodies get 413
//! request_timeout = "30s"        # per-request bound (waits are capped 100 ms below it)
//! protect_metrics = false        # require a token for GET /metrics
//! allow_unauthenticated = false  # allow a non-loopback listen address without tokens
//! ratelimit_remaining = true     # false: no `RateLimit` (what is left) on 200 answers
//! header_read_timeout = "10s"    # a request head must arrive within this (at most 5m)
//! idle_timeout = "30s"           # a kept-alive connection with no request is closed (at most 1h)
//! max_connections = 10000        # connections served at once (1 to 1000000)
//! shutdown_grace = "20s"         # SIGTERM: connections still open then are cut (at most 5m)
//! # bounds (see `Limits`)
//! max_id_length = 256            # bytes of a tool name, tenant id, idempotency key, lease id
//! max_reservation_ttl = "60s"    # longest reservation `ttl_ms` (at least lease_ttl)
//! max_leases = 100000            # open leases, every tenant together
//! max_leases_per_tenant = 10000  # open leases of one tenant
//! max_response_bytes = 8388608   # largest upstream answer read by invoke
//! allow_no_tools = false         # true: a reload may put a config without tools in force
//!
//! [[gateway.tokens]]
//! tenant = "acme"
//! sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
//! admin = true                   # may call POST /v1/admin/reload
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;

mod limits;
mod loaded;

pub use limits::{
    Limits, MAX_ID_LENGTH_CEILING, MAX_LEASES_CEILING, MAX_LEASE_TTL, MAX_RESPONSE_BYTES_CEILING,
    MIN_ID_LENGTH,
};
pub use loaded::{LoadErrors, Loaded};

/// The default listen address: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8787";

/// The ceiling of `header_read_timeout`.
pub const MAX_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// The ceiling of `idle_timeout`.
pub const MAX_IDLE_TIMEOUT: Duration = Duration::from_secs(60 * 60);
/// The ceiling of `max_connections`.
pub const MAX_MAX_CONNECTIONS: usize = 1_000_000;
/// The ceiling of `shutdown_grace`.
pub const MAX_SHUTDOWN_GRACE: Duration = Duration::from_secs(5 * 60);

/// Settings of the gateway itself, from `[gateway]`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Settings {
    /// Where to listen (`--listen` wins).
    pub listen: Option<SocketAddr>,
    /// Default TTL of a lease.
    pub lease_ttl: Duration,
    /// Largest accepted request body, in bytes.
    pub body_limit: usize,
    /// Bound on every request.
    pub request_timeout: Duration,
    /// Whether `GET /metrics` needs a token (when tokens are configured).
    pub protect_metrics: bool,
    /// Whether a non-loopback address may be used with no tokens configured.
    pub allow_unauthenticated: bool,
    /// Whether admitted answers carry `RateLimit` (what is left), which costs a live
    /// state snapshot per admission; `RateLimit-Policy` is always sent.
    pub ratelimit_remaining: bool,
    /// How long a client may take to send a request head, from its connection's start
    /// or its first byte after an idle wait; at most [`MAX_HEADER_READ_TIMEOUT`].
    pub header_read_timeout: Duration,
    /// How long a kept-alive connection may wait for its next request (a connection
    /// with a request in flight is not idle); at most [`MAX_IDLE_TIMEOUT`].
    pub idle_timeout: Duration,
    /// Connections served at once (1 to [`MAX_MAX_CONNECTIONS`]); further ones get a
    /// health-only service or are closed.
    pub max_connections: usize,
    /// On SIGTERM/SIGINT, how long open connections may take to finish before they are
    /// cut off; at most [`MAX_SHUTDOWN_GRACE`].
    pub shutdown_grace: Duration,
    /// Bearer tokens, each bound to a tenant.
    pub tokens: Vec<TokenEntry>,
    /// Bounds on what clients send and hold.
    pub limits: Limits,
}

/// A bearer token, stored as the SHA-256 of the token, hex encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenEntry {
    /// The tenant whose calls this token makes.
    pub tenant: String,
    /// SHA-256 of the token, 32 bytes.
    pub sha256: [u8; 32],
    /// Whether the token may reload the config.
    pub admin: bool,
}

// === impl Settings ===

impl Default for Settings {
    fn default() -> Self {
        Self {
            listen: None,
            lease_ttl: Duration::from_secs(60),
            body_limit: 64 * 1024,
            request_timeout: Duration::from_secs(30),
            protect_metrics: false,
            allow_unauthenticated: false,
            ratelimit_remaining: true,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            max_connections: 10_000,
            shutdown_grace: Duration::from_secs(20),
            tokens: Vec::new(),
            limits: Limits::default(),
        }
    }
}

impl Settings {
    pub(crate) fn parse(v: &Value, errors: &mut Vec<String>) -> Self {
        let mut s = Self::default();
        let Some(table) = v.as_object() else {
            errors.push(format!("gateway: expected a table, got {v}"));
            return s;
        };
        for (key, v) in table {
            let path = format!("gateway.{key}");
            let r = match key.as_str() {
                "listen" => str_of(v).and_then(|t| parse_listen(t).map(|a| s.listen = Some(a))),
                "lease_ttl" => limits::ttl(v).map(|d| s.lease_ttl = d),
                "request_timeout" => duration(v).map(|d| s.request_timeout = d),
                "body_limit" => v
                    .as_u64()
                    .filter(|n| (64..=64 * 1024 * 1024).contains(n))
                    .map(|n| s.body_limit = n as usize)
                    .ok_or_else(|| format!("{v}: expected a byte count from 64 to 67108864")),
                "protect_metrics" => bool_of(v).map(|b| s.protect_metrics = b),
                "allow_unauthenticated" => bool_of(v).map(|b| s.allow_unauthenticated = b),
                "ratelimit_remaining" => bool_of(v).map(|b| s.ratelimit_remaining = b),
                "header_read_timeout" | "idle_timeout" | "max_connections" | "shutdown_grace" => {
                    s.connection_key(key, v)
                }
                "tokens" => {
                    s.tokens = tokens(v, errors);
                    Ok(())
                }
                _ => s.limits.parse(key, v).unwrap_or_else(|| Err(unknown_key())),
            };
            if let Err(e) = r {
                errors.push(format!("{path}: {e}"));
            }
        }
        s
    }

    /// Parses one key of the connection layer.
    fn connection_key(&mut self, key: &str, v: &Value) -> Result<(), String> {
        match key {
            "header_read_timeout" => duration_at_most(v, MAX_HEADER_READ_TIMEOUT, "5m")
                .map(|d| self.header_read_timeout = d),
            "idle_timeout" => {
                duration_at_most(v, MAX_IDLE_TIMEOUT, "1h").map(|d| self.idle_timeout = d)
            }
            "max_connections" => v
                .as_u64()
                .filter(|n| (1..=MAX_MAX_CONNECTIONS as u64).contains(n))
                .map(|n| self.max_connections = n as usize)
                .ok_or_else(|| format!("{v}: expected a count from 1 to {MAX_MAX_CONNECTIONS}")),
            "shutdown_grace" => {
                duration_at_most(v, MAX_SHUTDOWN_GRACE, "5m").map(|d| self.shutdown_grace = d)
            }
            _ => Err(unknown_key()),
        }
    }
}

/// Every key of `[gateway]` (the unknown-key message lists them sorted).
const KEYS: &[&str] = &[
    "allow_unauthenticated",
    "body_limit",
    "lease_ttl",
    "listen",
    "protect_metrics",
    "ratelimit_remaining",
    "request_timeout",
    "tokens",
    // The connection layer.
    "header_read_timeout",
    "idle_timeout",
    "max_connections",
    "shutdown_grace",
];

/// The error of an unknown `[gateway]` key, listing the known ones.
fn unknown_key() -> String {
    let mut keys = KEYS.to_vec();
    keys.extend(Limits::KEYS);
    keys.sort_unstable();
    format!("unknown key (expected one of: {})", keys.join(", "))
}

fn tokens(v: &Value, errors: &mut Vec<String>) -> Vec<TokenEntry> {
    let Some(list) = v.as_array() else {
        errors.push(format!(
            "gateway.tokens: expected an array of tables ([[gateway.tokens]]), got {v}"
        ));
        return Vec::new();
    };
    list.iter()
        .enumerate()
        .filter_map(|(i, t)| token(t, &format!("gateway.tokens[{i}]"), errors))
        .collect()
}

fn token(v: &Value, path: &str, errors: &mut Vec<String>) -> Option<TokenEntry> {
    let Some(t) = v.as_object() else {
        errors.push(format!("{path}: expected a table, got {v}"));
        return None;
    };
    let before = errors.len();
    for key in t.keys() {
        if !["tenant", "sha256", "admin"].contains(&key.as_str()) {
            errors.push(format!(
                "{path}.{key}: unknown key (expected one of: admin, sha256, tenant)"
            ));
        }
    }
    let tenant = match t.get("tenant").map(str_of) {
        Some(Ok(s)) if !s.is_empty() => s.to_string(),
        Some(Ok(_)) => {
            errors.push(format!("{path}.tenant: must not be empty"));
            String::new()
        }
        Some(Err(e)) => {
            errors.push(format!("{path}.tenant: {e}"));
            String::new()
        }
        None => {
            errors.push(format!(
                "{path}.tenant: missing: a token is bound to a tenant"
            ));
            String::new()
        }
    };
    let sha256 = match t.get("sha256").map(str_of) {
        Some(Ok(h)) => parse_sha256(h).unwrap_or_else(|e| {
            errors.push(format!("{path}.sha256: {e}"));
            [0; 32]
        }),
        Some(Err(e)) => {
            errors.push(format!("{path}.sha256: {e}"));
            [0; 32]
        }
        None => {
            errors.push(format!(
                "{path}.sha256: missing: the SHA-256 of the token, hex encoded"
            ));
            [0; 32]
        }
    };
    let admin = match t.get("admin").map(bool_of) {
        Some(Ok(b)) => b,
        Some(Err(e)) => {
            errors.push(format!("{path}.admin: {e}"));
            false
        }
        None => false,
    };
    (errors.len() == before).then_some(TokenEntry {
        tenant,
        sha256,
        admin,
    })
}

fn parse_sha256(h: &str) -> Result<[u8; 32], String> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(h, &mut out)
        .map_err(|e| format!("{h:?}: expected 64 hex digits (the SHA-256 of the token): {e}"))?;
    Ok(out)
}

/// A listen address: `IP:PORT`, or `HOST:PORT` resolved now (an IPv4 address first),
/// so that `localhost:8787` works as well as `127.0.0.1:8787`.
///
/// # Errors
///
/// When `s` is neither, or the host resolves to no address; the message names `s`.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse() {
        return Ok(a);
    }
    let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(s)
        .map_err(|e| {
            format!("{s:?}: not an address such as \"127.0.0.1:8787\" or \"localhost:8787\" ({e})")
        })?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("{s:?}: the host resolves to no address"))
}

fn str_of(v: &Value) -> Result<&str, String> {
    v.as_str()
        .ok_or_else(|| format!("expected a string, got {v}"))
}

fn bool_of(v: &Value) -> Result<bool, String> {
    v.as_bool()
        .ok_or_else(|| format!("expected true or false, got {v}"))
}

fn duration(v: &Value) -> Result<Duration, String> {
    let s = str_of(v)?;
    match humantime::parse_duration(s) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err(format!("{s:?}: must be longer than zero")),
        Err(e) => Err(format!("{s:?}: not a duration such as \"60s\" ({e})")),
    }
}

/// A duration longer than zero and at most `max` (`max_text` in the message).
fn duration_at_most(v: &Value, max: Duration, max_text: &str) -> Result<Duration, String> {
    let d = duration(v)?;
    if d > max {
        return Err(format!("{v}: must be at most {max_text}"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_table_is_taken_out_before_the_policy_is_checked() {
        let l = Loaded::from_toml_str(
            "[gateway]\nlease_ttl = \"2s\"\n[[gateway.tokens]]\ntenant = \"acme\"\n\
             sha256 = \"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"\n\
             [tools.t]\nrate = \"1/s\"\n",
        )
        .expect("valid");
        assert_eq!(l.settings.lease_ttl, Duration::from_secs(2));
        assert_eq!(l.settings.tokens[0].tenant, "acme");
        assert!(l.policy.tools.contains_key("t"));
    }

    #[test]
    fn errors_of_both_parts_are_listed_with_their_paths() {
        let e = Loaded::from_toml_str(
            "[gateway]\nlease_ttl = \"soon\"\nbogus = 1\n[[gateway.tokens]]\ntenant = \"a\"\n\
             sha256 = \"xyz\"\n[tools.t]\nrate = \"0/s\"\n",
        )
        .expect_err("invalid");
        let text = e.to_string();
        assert!(text.contains("gateway.lease_ttl: \"soon\""), "{text}");
        assert!(text.contains("gateway.bogus: unknown key"), "{text}");
        assert!(text.contains("gateway.tokens[0].sha256: \"xyz\""), "{text}");
        assert!(text.contains("tools.t.rate: \"0/s\""), "{text}");
        assert_eq!(e.0.len(), 4, "{text}");
    }

    #[test]
    fn listen_takes_a_host_name_and_names_a_bad_one() {
        let l = Loaded::from_toml_str("[gateway]\nlisten = \"localhost:9\"\n").expect("valid");
        assert_eq!(
            l.settings.listen,
            Some("127.0.0.1:9".parse().expect("addr"))
        );
        let e = Loaded::from_toml_str("[gateway]\nlisten = \"8787\"\n").expect_err("invalid");
        assert!(
            e.0[0].starts_with("gateway.listen: \"8787\": not an address such as"),
            "{e}"
        );
    }

    #[test]
    fn connection_keys_have_defaults_and_ceilings() {
        let d = Settings::default();
        assert_eq!(d.header_read_timeout, Duration::from_secs(10));
        assert_eq!(d.idle_timeout, Duration::from_secs(30));
        assert_eq!(d.max_connections, 10_000);
        assert_eq!(d.shutdown_grace, Duration::from_secs(20));
        let l = Loaded::from_toml_str(
            "[gateway]\nheader_read_timeout = \"300ms\"\nidle_timeout = \"1h\"\n\
             max_connections = 4\nshutdown_grace = \"5m\"\n",
        )
        .expect("valid");
        assert_eq!(l.settings.header_read_timeout, Duration::from_millis(300));
        assert_eq!(l.settings.idle_timeout, Duration::from_secs(3600));
        assert_eq!(l.settings.max_connections, 4);
        assert_eq!(l.settings.shutdown_grace, Duration::from_secs(300));
        let e = Loaded::from_toml_str(
            "[gateway]\nheader_read_timeout = \"6m\"\nidle_timeout = \"0s\"\n\
             max_connections = 0\nshutdown_grace = \"301s\"\n",
        )
        .expect_err("invalid");
        assert_eq!(
            e.0,
            [
                "gateway.header_read_timeout: \"6m\": must be at most 5m",
                "gateway.idle_timeout: \"0s\": must be longer than zero",
                "gateway.max_connections: 0: expected a count from 1 to 1000000",
                "gateway.shutdown_grace: \"301s\": must be at most 5m",
            ]
        );
    }

    #[test]
    fn the_mcp_table_is_taken_out_and_its_errors_listed_with_the_rest() {
        let l = Loaded::from_toml_str(
            "[mcp.servers.fs]\ncommand = \"mcp-fs\"\n[tools.\"mcp:fs/read\"]\nrate = \"1/s\"\n",
        )
        .expect("valid");
        let mcp = l.mcp.expect("[mcp]");
        assert!(mcp.servers.contains_key("fs"));
        assert!(l.policy.tools.contains_key("mcp:fs/read"));
        let e = Loaded::from_toml_str(
            "[mcp]\non_reject = \"drop\"\n[mcp.servers.x]\ncommand = \"a\"\nurl = \"http://h/\"\n\
             [mcp.servers.\"a__b\"]\ncommand = \"a\"\n[tools.t]\nrate = \"0/s\"\n",
        )
        .expect_err("invalid");
        let text = e.to_string();
        assert!(text.contains("mcp.on_reject: \"drop\""), "{text}");
        assert!(
            text.contains("mcp.servers.x: give either command"),
            "{text}"
        );
        assert!(
            text.contains("mcp.servers.a__b: the server name must not contain"),
            "{text}"
        );
        assert!(text.contains("tools.t.rate: \"0/s\""), "{text}");
        assert_eq!(e.0.len(), 4, "{text}");
    }

    #[test]
    fn an_invalid_json_schema_is_a_config_error() {
        let e = Loaded::from_toml_str(
            "[tools.t.upstream]\nurl = \"http://127.0.0.1:1/x\"\n\
             arguments_schema = { type = \"no-such-type\" }\n",
        )
        .expect_err("invalid schema");
        assert_eq!(e.0.len(), 1, "{e}");
        assert!(
            e.0[0].starts_with("tools.t.upstream.arguments_schema: invalid JSON Schema"),
            "{e}"
        );
    }
}
