//! What a reload (`SIGHUP`, `POST /v1/admin/reload`) may change.
//!
//! A reload must not open the gateway by accident: a config without tokens is refused
//! while authentication is on (turning it off takes a restart), and a config without
//! tools — which would drop every quota, as an empty or truncated file does — is
//! refused unless it says `[gateway] allow_no_tools = true` itself. Settings that are
//! fixed when the server starts (`listen`, `body_limit`, `request_timeout`) are not
//! applied; the answer and the log name those that changed.

use std::net::SocketAddr;
use std::time::Duration;

use crate::settings::{LoadErrors, Loaded};

/// What a reload put in force.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reloaded {
    /// Tools of the new policy.
    pub tools: usize,
    /// `[gateway]` keys whose new value waits for a restart.
    pub needs_restart: Vec<&'static str>,
}

/// The settings fixed when the server started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fixed {
    /// `[gateway] listen` of the config in force.
    pub listen: Option<SocketAddr>,
    /// The body limit the router was built with.
    pub body_limit: usize,
    /// The request timeout the router was built with.
    pub request_timeout: Duration,
    /// The connection layer's settings the accept loop was started with.
    pub connections: ConnectionKeys,
}

/// `header_read_timeout`, `idle_timeout`, `max_connections`, `shutdown_grace`.
pub type ConnectionKeys = (Duration, Duration, usize, Duration);

/// The connection layer's settings of `s`.
pub fn connection_keys(s: &crate::settings::Settings) -> ConnectionKeys {
    (
        s.header_read_timeout,
        s.idle_timeout,
        s.max_connections,
        s.shutdown_grace,
    )
}

/// Checks that `new` may replace a config under which authentication is on (`auth`).
///
/// # Errors
///
/// Each rule `new` breaks, with its path.
pub fn check(auth: bool, new: &Loaded) -> Result<(), LoadErrors> {
    let mut errors = Vec::new();
    if auth && new.settings.tokens.is_empty() {
        errors.push(
            "gateway.tokens: the new config has no [[gateway.tokens]] while authentication \
             is on; a reload never turns authentication off (that takes a restart)"
                .to_string(),
        );
    }
    if new.policy.tools.is_empty() && !new.settings.limits.allow_no_tools {
        errors.push(
            "tools: the new config has no tools, so every quota would be dropped; if that \
             is meant, say so in it with [gateway] allow_no_tools = true"
                .to_string(),
        );
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(LoadErrors(errors))
    }
}

/// The keys of `new` that differ from the settings fixed at start.
pub fn needs_restart(fixed: &Fixed, new: &Loaded) -> Vec<&'static str> {
    let s = &new.settings;
    [
        ("listen", s.listen != fixed.listen),
        ("body_limit", s.body_limit != fixed.body_limit),
        (
            "request_timeout",
            s.request_timeout != fixed.request_timeout,
        ),
        (
            "header_read_timeout",
            s.header_read_timeout != fixed.connections.0,
        ),
        ("idle_timeout", s.idle_timeout != fixed.connections.1),
        ("max_connections", s.max_connections != fixed.connections.2),
        ("shutdown_grace", s.shutdown_grace != fixed.connections.3),
    ]
    .into_iter()
    .filter_map(|(key, changed)| changed.then_some(key))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_config_breaks_both_rules_and_allow_no_tools_lifts_one() {
        let empty = Loaded::from_toml_str("").expect("valid");
        let e = check(true, &empty).expect_err("refused");
        assert_eq!(e.0.len(), 2, "{e}");
        assert!(check(false, &empty).is_err(), "no tools");
        let allowed = Loaded::from_toml_str("[gateway]\nallow_no_tools = true").expect("valid");
        assert!(check(false, &allowed).is_ok());
        assert!(check(true, &allowed).is_err(), "still no tokens");
    }

    #[test]
    fn only_changed_start_settings_need_a_restart() {
        let l = Loaded::from_toml_str("[gateway]\nbody_limit = 1000\n").expect("valid");
        let fixed = Fixed {
            listen: None,
            body_limit: 65536,
            request_timeout: Duration::from_secs(30),
            connections: connection_keys(&Loaded::from_toml_str("").expect("valid").settings),
        };
        assert_eq!(needs_restart(&fixed, &l), ["body_limit"]);
        let l = Loaded::from_toml_str("[gateway]\nidle_timeout = \"5s\"\nmax_connections = 9\n")
            .expect("valid");
        assert_eq!(
            needs_restart(&fixed, &l),
            ["idle_timeout", "max_connections"]
        );
    }
}
