//! `GET /v1/tools` and `GET /v1/tools/{tool}`: live state.
//!
//! Tool names may contain `/` (`mcp:github/search_issues`), so the tool is the rest
//! of the path; percent-encoding works too.

use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use toolgate::config::{Mode, OnLimit};
use toolgate::{QuotaState, ToolState};

use crate::auth::Caller;
use crate::bounds;
use crate::error::ApiError;
use crate::state::AppState;

/// `?tenant=` (only without auth; with auth the token's tenant is used).
#[derive(Debug, Deserialize)]
pub struct TenantQuery {
    tenant: Option<String>,
}

/// Every tool with a policy.
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<TenantQuery>,
) -> Result<Json<Value>, ApiError> {
    let max_id = state.live().settings.limits.max_id_length;
    bounds::opt_id("tenant", q.tenant.as_deref(), max_id)?;
    let tenant = caller.tenant_for(q.tenant)?;
    let engine = state.engine();
    let tools: Vec<Value> = match tenant.as_deref() {
        None => engine.tool_states().iter().map(to_json).collect(),
        Some(t) => engine
            .tool_states()
            .iter()
            .filter_map(|s| engine.tool_state(&s.tool, Some(t)))
            .map(|s| to_json(&s))
            .collect(),
    };
    // On a shared store the quotas live there; the counters here are this replica's.
    let store = engine.store().map_or("memory", |s| s.name());
    Ok(Json(json!({
        "tools": tools,
        "leases": state.leases().len(),
        "tenant": tenant,
        "store": store,
    })))
}

/// One tool.
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(tool): Path<String>,
    Query(q): Query<TenantQuery>,
) -> Result<Json<Value>, ApiError> {
    let max_id = state.live().settings.limits.max_id_length;
    bounds::id("tool", &tool, max_id)?;
    bounds::opt_id("tenant", q.tenant.as_deref(), max_id)?;
    let tenant = caller.tenant_for(q.tenant)?;
    state
        .engine()
        .tool_state(&tool, tenant.as_deref())
        .map(|s| Json(to_json(&s)))
        .ok_or_else(|| match tool.strip_suffix("/invoke") {
            // `/v1/tools/{tool}/invoke` exists, for POST only.
            Some(t) if !t.is_empty() => ApiError::MethodNotAllowed(
                format!("GET is not allowed on /v1/tools/{tool} (invoke is POST)"),
                "POST",
            ),
            _ => unknown(&tool),
        })
}

/// The 404 of a tool without a policy.
pub fn unknown(tool: &str) -> ApiError {
    ApiError::NotFound("unknown_tool", format!("no tool {tool:?} in the policy"))
}

/// A tool's state as JSON. `tokens_left` is what its own request-rate quota has left;
/// `circuit` is the breaker's state (`closed` for a tool without one) and
/// `adaptive_limit` the learnt concurrency limit (`null` without `[adaptive]`).
pub fn to_json(s: &ToolState) -> Value {
    let own_rate = s
        .quotas
        .iter()
        .find(|q| matches!(q.kind, "rate" | "sliding") && q.quota.starts_with("tools."));
    json!({
        "tool": s.tool,
        "on_limit": match s.on_limit { OnLimit::Wait => "wait", _ => "reject" },
        "tokens_left": own_rate.and_then(|q| q.available),
        "capacity": own_rate.map(|q| q.capacity),
        "in_flight": s.in_flight,
        "waiting": s.waiting,
        "admitted": s.admitted,
        "rejected": s.rejected,
        "shadow_rejected": s.shadow_rejected,
        "circuit": s.circuit.map_or("closed", |c| c.as_str()),
        "adaptive_limit": s.adaptive_limit,
        "quotas": s.quotas.iter().map(quota_json).collect::<Vec<_>>(),
    })
}

fn quota_json(q: &QuotaState) -> Value {
    json!({
        "quota": q.quota,
        "kind": q.kind,
        "capacity": q.capacity,
        "available": q.available,
        "waiters": q.waiters,
        "partitions": q.partitions,
        "mode": match q.mode { Mode::Shadow => "shadow", _ => "enforce" },
    })
}
