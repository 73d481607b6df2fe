//! `/mcp`: rmcp's Streamable HTTP server on a [`Gateway`], for the gateway's router
//! to mount behind its authentication (which puts the caller's [`crate::Tenant`]
//! into each request's extensions).

use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

use crate::gateway::Gateway;
use crate::sessions::Sessions;
use crate::upstreams::Upstreams;

/// The tower service of `/mcp`.
pub type McpService = StreamableHttpService<Gateway, LocalSessionManager>;

/// Room for the JSON-RPC envelope around a call's arguments, in bytes.
const ENVELOPE_BYTES: usize = 64 * 1024;

/// What `/mcp` serves: rmcp's service, the session ledger and the upstreams.
pub struct Endpoint {
    service: McpService,
    sessions: Sessions,
    upstreams: Upstreams,
}

// === impl Endpoint ===

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("sessions", &self.sessions)
            .field("upstreams", &self.upstreams)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// The endpoint of `gateway` (see [`service`] for `check_hosts`), with a session
    /// ledger bounded by `[mcp] max_sessions` and `session_idle_ttl`.
    pub fn new(gateway: Gateway, check_hosts: bool) -> Self {
        let c = gateway.upstreams().config();
        let sessions = Sessions::new(c.max_sessions, c.session_idle_ttl);
        let upstreams = gateway.upstreams().clone();
        Self {
            service: service(gateway, check_hosts),
            sessions,
            upstreams,
        }
    }

    /// rmcp's tower service (cheap to clone).
    pub fn service(&self) -> &McpService {
        &self.service
    }

    /// Who owns which session.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// The upstreams.
    pub fn upstreams(&self) -> &Upstreams {
        &self.upstreams
    }
}

/// The `/mcp` service on `gateway`. `check_hosts`: accept only loopback `Host`
/// headers (rmcp's DNS-rebinding guard), for a gateway without tokens on loopback;
/// with tokens, the bearer token guards the endpoint instead.
pub fn service(gateway: Gateway, check_hosts: bool) -> McpService {
    let c = gateway.upstreams().config();
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(c.session_idle_ttl);
    let mut config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(c.max_argument_bytes.saturating_add(ENVELOPE_BYTES));
    if !check_hosts {
        config = config.disable_allowed_hosts();
    }
    StreamableHttpService::new(move || Ok(gateway.clone()), Arc::new(sessions), config)
}
