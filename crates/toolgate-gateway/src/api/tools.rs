//! `GET /v1/tools` and `GET /v1/tools/{tool}`: live state.
//!
//! Tool names may contain `/` (`mcp:github/search_issues`), so the tool is the rest
//! of the path; percent-encoding works too.
//!
//! An admin token (or a gateway without auth) sees every figure: the tool's totals
//! over every tenant, and the partitions of the token's (or `?tenant=`) tenant. A
//! tenant's token sees its own figures and the limits in force only: its open leases
//! (in all and per tool), what its partitions have left, and the `available` of
//! shared quotas (which its `RateLimit` headers and refusals disclose anyway); no
//! totals of admissions, refusals, calls in flight or waiting, partitions or leases.
//!
//! On a shared store, what each quota has left is read from the store (read-only
//! round trips: one for the whole list on a single Redis server,
//! [`toolgate::Engine::fetch_tool_states`]); the counters stay this replica's.
//!
//! With a tenant (`?tenant=`, which an admin token may set to any tenant, or a
//! tenant token's own), the answer also carries `tenant_activity`: that tenant's own
//! admissions, rejections by reason, calls waiting and wait percentiles on the tool
//! ([`crate::activity`]).

use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use toolgate::config::{Mode, OnLimit};
use toolgate::{QuotaState, ToolState};

use crate::activity::tenant::Tenant;
use crate::auth::Caller;
use crate::bounds;
use crate::error::ApiError;
use crate::leases::Held;
use crate::state::AppState;

/// `?tenant=` (without auth or with an admin token; otherwise the token's tenant).
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
    let tenant = caller.tenant_to_read(q.tenant)?;
    let engine = state.engine();
    // On a shared store, what every quota has left is read at once.
    let states: Vec<ToolState> = engine.fetch_tool_states(tenant.as_deref()).await;
    // On a shared store the quotas live there; the counters here are this replica's.
    let store = engine.store().map_or("memory", |s| s.name());
    let with_tenant = |mut v: Value, tool: &str| {
        if let Some(t) = tenant.as_deref() {
            v["tenant_activity"] = tenant_activity(&state, tool, t);
        }
        v
    };
    let body = match own_view(&state, &caller) {
        Some(held) => json!({
            "tools": states.iter().map(|s| with_tenant(tenant_json(s, &held), &s.tool)).collect::<Vec<_>>(),
            "leases": held.by_tool.values().sum::<usize>(),
            "tenant": tenant,
            "store": store,
        }),
        None => json!({
            "tools": states.iter().map(|s| with_tenant(to_json(s), &s.tool)).collect::<Vec<_>>(),
            "leases": state.leases().len(),
            "tenant": tenant,
            "store": store,
        }),
    };
    Ok(Json(body))
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
    let tenant = caller.tenant_to_read(q.tenant)?;
    let s = state
        .engine()
        .fetch_tool_state(&tool, tenant.as_deref())
        .await
        .ok_or_else(|| match tool.strip_suffix("/invoke") {
            // `/v1/tools/{tool}/invoke` exists, for POST only.
            Some(t) if !t.is_empty() => ApiError::MethodNotAllowed(
                format!("GET is not allowed on /v1/tools/{tool} (invoke is POST)"),
                "POST",
            ),
            _ => unknown(&tool),
        })?;
    let mut body = match own_view(&state, &caller) {
        Some(held) => tenant_json(&s, &held),
        None => to_json(&s),
    };
    if let Some(t) = tenant.as_deref() {
        body["tenant_activity"] = tenant_activity(&state, &tool, t);
    }
    Ok(Json(body))
}

/// The figures the gateway counted of `tenant` on `tool` ([`crate::activity`]).
fn tenant_activity(state: &AppState, tool: &str, tenant: &str) -> Value {
    let activity = state.activity();
    let now = activity.now();
    let tracked = activity.tool(tool);
    let tracked = tracked.as_ref().map(|t| t.lock());
    match tracked.as_ref().and_then(|t| t.tenants.get(tenant)) {
        Some(t) => t.to_json(tenant, now),
        None => Tenant::untracked_json(tenant),
    }
}

/// What a tenant's (non-admin) token may see of the leases: its own; `None` for an
/// admin token or a gateway without auth, which see everything.
fn own_view(state: &AppState, caller: &Caller) -> Option<Held> {
    match (&caller.tenant, caller.admin) {
        (Some(t), false) => Some(state.leases().held_by(t)),
        _ => None,
    }
}

/// The 404 of a tool without a policy.
pub fn unknown(tool: &str) -> ApiError {
    ApiError::NotFound("unknown_tool", format!("no tool {tool:?} in the policy"))
}

/// A tool's state as JSON. `tokens_left` is what its own request-rate quota has left;
/// `circuit` is the breaker's state (`closed` for a tool without one) and
/// `adaptive_limit` the learnt concurrency limit (`null` without `[adaptive]`).
pub fn to_json(s: &ToolState) -> Value {
    let own_rate = own_rate(s);
    json!({
        "tool": s.tool,
        "on_limit": on_limit(s.on_limit),
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

/// A tool's state as a tenant's token sees it: the limits in force, what its own
/// partitions (and the shared quotas) have left, and its own open leases on the tool
/// (`leases`); none of the tool's totals.
fn tenant_json(s: &ToolState, held: &Held) -> Value {
    let own_rate = own_rate(s);
    let quotas: Vec<Value> = s
        .quotas
        .iter()
        .map(|q| {
            json!({
                "quota": q.quota,
                "kind": q.kind,
                "capacity": q.capacity,
                "available": q.available,
                "mode": mode(q.mode),
            })
        })
        .collect();
    json!({
        "tool": s.tool,
        "on_limit": on_limit(s.on_limit),
        "tokens_left": own_rate.and_then(|q| q.available),
        "capacity": own_rate.map(|q| q.capacity),
        "leases": held.by_tool.get(s.tool.as_str()).copied().unwrap_or(0),
        "circuit": s.circuit.map_or("closed", |c| c.as_str()),
        "adaptive_limit": s.adaptive_limit,
        "quotas": quotas,
    })
}

/// The tool's own request-rate quota.
fn own_rate(s: &ToolState) -> Option<&QuotaState> {
    s.quotas
        .iter()
        .find(|q| matches!(q.kind, "rate" | "sliding") && q.quota.starts_with("tools."))
}

fn on_limit(o: OnLimit) -> &'static str {
    match o {
        OnLimit::Wait => "wait",
        _ => "reject",
    }
}

fn mode(m: Mode) -> &'static str {
    match m {
        Mode::Shadow => "shadow",
        _ => "enforce",
    }
}

fn quota_json(q: &QuotaState) -> Value {
    json!({
        "quota": q.quota,
        "kind": q.kind,
        "capacity": q.capacity,
        "available": q.available,
        "waiters": q.waiters,
        "partitions": q.partitions,
        "mode": mode(q.mode),
    })
}
