//! The MCP gateway in `toolgate serve`: `/mcp` serves the upstreams of `[mcp]`
//! (see `docs/mcp.md`) over Streamable HTTP, behind the gateway's bearer tokens. The
//! token decides the tenant of every call; a session belongs to the tenant that
//! opened it, and their number is bounded (`[mcp] max_sessions`).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use toolgate_mcp::http::Endpoint;
use toolgate_mcp::sessions::Admit;
use toolgate_mcp::{Gateway, McpConfig, Tenant, Upstreams};
use tower::ServiceExt;

use crate::state::AppState;

/// The header of a Streamable HTTP session.
const SESSION_HEADER: &str = "mcp-session-id";
/// How long start-up waits for every upstream's first connection.
const READY_WAIT: Duration = Duration::from_secs(20);

/// Starts the upstreams of `config`, waits (a bounded time) for their first
/// connection, and mounts `/mcp` on `state`.
pub async fn start(state: &AppState, config: McpConfig) -> Upstreams {
    let upstreams = Upstreams::start(config);
    if !upstreams.ready(READY_WAIT).await {
        tracing::warn!("not every MCP upstream answered within {READY_WAIT:?}; still trying");
    }
    for s in upstreams.view() {
        match &s.error {
            None => tracing::info!(server = %s.name, tools = s.tools, "MCP upstream ready"),
            Some(e) => tracing::warn!(server = %s.name, error = %e, "MCP upstream not ready"),
        }
    }
    let gateway = Gateway::new(state.engine().clone(), upstreams.clone())
        .with_decisions(state.activity().clone());
    // Without tokens the gateway serves loopback only: rmcp's Host check guards it
    // against DNS rebinding there. With tokens, the token does.
    let check_hosts = !state.live().auth.enabled();
    state.set_mcp(Arc::new(Endpoint::new(gateway, check_hosts)));
    upstreams
}

/// Every request on `/mcp`: authenticated, checked against the session ledger,
/// tagged with its tenant and handed to rmcp.
pub async fn handle(State(state): State<AppState>, mut req: Request) -> Response {
    let Some(mcp) = state.mcp().cloned() else {
        return crate::error::ApiError::NotFound(
            "no_mcp",
            "no MCP gateway runs here (configure [mcp.servers.NAME])".into(),
        )
        .into_response();
    };
    let caller = match state.live().auth.authenticate(req.headers()) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    let tenant = caller.tenant;
    let session = req
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    match mcp.sessions().check(session.as_deref(), tenant.as_deref()) {
        Admit::Yes => {}
        Admit::TooMany(max) => {
            return rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("too many open MCP sessions (at most {max}); retry later"),
            )
        }
        _ => return rpc_error(StatusCode::NOT_FOUND, "Session not found"),
    }
    let delete = req.method() == Method::DELETE;
    req.extensions_mut().insert(Tenant(tenant.clone()));
    let Ok(resp) = mcp.service().clone().oneshot(req).await;
    if let Some(id) = &session {
        if delete && resp.status().is_success() {
            mcp.sessions().closed(id);
        }
    } else if let Some(id) = resp
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
    {
        if !mcp.sessions().opened(id, tenant.as_deref()) {
            tracing::warn!("an MCP session was opened beyond max_sessions; it is not served");
        }
    }
    resp.map(Body::new)
}

/// `GET /v1/mcp`: the upstream servers (connected or why not, restarts) and every
/// exposed tool with its policy key (404 `no_mcp` when no MCP gateway runs). Like
/// `GET /v1/mesh` it covers every tenant, so with tokens only an admin token reads it.
pub async fn view(
    State(state): State<AppState>,
    caller: crate::auth::Caller,
) -> Result<Json<serde_json::Value>, crate::error::ApiError> {
    if caller.tenant.is_some() && !caller.admin {
        return Err(crate::error::ApiError::Forbidden(
            "the MCP gateway's state covers every tenant: an admin token is needed".into(),
        ));
    }
    let mcp = state.mcp().ok_or_else(|| {
        crate::error::ApiError::NotFound(
            "no_mcp",
            "no MCP gateway runs here (configure [mcp.servers.NAME])".into(),
        )
    })?;
    let engine = state.engine();
    let servers: Vec<_> = mcp
        .upstreams()
        .view()
        .into_iter()
        .map(|s| {
            json!({"name": s.name, "connected": s.connected, "tools": s.tools,
                   "error": s.error, "restarts": s.restarts})
        })
        .collect();
    let catalog = mcp.upstreams().catalog();
    let tools: Vec<_> = catalog
        .tools()
        .iter()
        .map(|e| {
            json!({"name": e.tool.name, "tool": e.policy_key, "server": &*e.server,
                   "policy": engine.tool_state(&e.policy_key, None).is_some()})
        })
        .collect();
    Ok(Json(
        json!({"servers": servers, "tools": tools, "sessions": mcp.sessions().len()}),
    ))
}

/// A JSON-RPC error with no id, as rmcp answers transport-level problems.
fn rpc_error(status: StatusCode, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": null,
                      "error": {"code": -32001, "message": message}});
    (status, Json(body)).into_response()
}
