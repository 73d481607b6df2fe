//! `GET /v1/activity` and `GET /v1/activity/{tool}`: the last minutes, second by
//! second, as the gateway counted them ([`crate::activity`]).
//!
//! A path of its own rather than under `/v1/tools/{tool}`, whose tool name is the
//! rest of the path (it may contain `/`), so that no tool name is ever read as a
//! sub-resource.
//!
//! An admin token (or a gateway without auth) reads every tool's series, the waits
//! per priority class and the tracked tenants (`?tenant=` narrows to one); a tenant's
//! token reads its own tenant's series only.

use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::activity::series::WINDOW_S;
use crate::activity::tenant::Tenant;
use crate::activity::tenants::MAX_TENANTS;
use crate::activity::ToolActivity;
use crate::auth::Caller;
use crate::bounds;
use crate::error::ApiError;
use crate::state::AppState;

/// How many tenants `GET /v1/activity/{tool}` lists unless `?tenants=` says.
pub const DEFAULT_TENANTS: u64 = 20;

/// The query of both endpoints.
#[derive(Debug, Deserialize)]
pub struct ActivityQuery {
    tenant: Option<String>,
    /// How many seconds, up to [`WINDOW_S`] (default: all of them).
    seconds: Option<u64>,
    /// How many tenants to list, up to [`MAX_TENANTS`] (one tool only).
    tenants: Option<u64>,
}

/// What a request may read.
struct Read {
    tenant: Option<String>,
    /// Every tenant's figures (admin or no auth, no `?tenant=`).
    all: bool,
    seconds: u64,
    now: u64,
}

/// Every tool of the policy.
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<ActivityQuery>,
) -> Result<Json<Value>, ApiError> {
    let read = read(&state, &caller, &q)?;
    let tools: Vec<Value> = state
        .activity()
        .tools()
        .iter()
        .map(|(name, t)| {
            let t = t.lock();
            let mut v = series_json(&t, &read);
            v["tool"] = json!(&**name);
            v
        })
        .collect();
    Ok(Json(envelope(&read, json!({"tools": tools}))))
}

/// One tool, with its tracked tenants for an admin.
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(tool): Path<String>,
    Query(q): Query<ActivityQuery>,
) -> Result<Json<Value>, ApiError> {
    bounds::id("tool", &tool, state.live().settings.limits.max_id_length)?;
    let read = read(&state, &caller, &q)?;
    let limit = q.tenants.unwrap_or(DEFAULT_TENANTS);
    bounds::number("tenants", Some(limit), MAX_TENANTS as u64)?;
    let t = state
        .activity()
        .tool(&tool)
        .ok_or_else(|| super::tools::unknown(&tool))?;
    let t = t.lock();
    let mut v = series_json(&t, &read);
    v["tool"] = json!(tool);
    if read.all {
        let limit = usize::try_from(limit).unwrap_or(MAX_TENANTS);
        v["by_priority"] = t.classes_json(read.now);
        v["tenants"] = json!(t.tenants_json(read.now, limit));
        v["tenants_tracked"] = json!(t.tenants.len());
        v["tenants_evicted"] = json!(t.tenants.evicted());
    } else if let Some(name) = read.tenant.as_deref() {
        v["tenant_figures"] = match t.tenants.get(name) {
            Some(tenant) => tenant.to_json(name, read.now),
            None => Tenant::untracked_json(name),
        };
    }
    Ok(Json(envelope(&read, v)))
}

/// Checks the query and decides what the caller reads.
fn read(state: &AppState, caller: &Caller, q: &ActivityQuery) -> Result<Read, ApiError> {
    let max_id = state.live().settings.limits.max_id_length;
    bounds::opt_id("tenant", q.tenant.as_deref(), max_id)?;
    bounds::number("seconds", q.seconds, WINDOW_S)?;
    if q.seconds == Some(0) {
        return Err(ApiError::InvalidRequest(
            "seconds: must be at least 1".into(),
        ));
    }
    let sees_all = caller.admin || caller.tenant.is_none();
    let tenant = match (sees_all, &q.tenant) {
        // An admin (or no auth) without `?tenant=` reads the tool's own totals.
        (true, None) => None,
        _ => caller.tenant_to_read(q.tenant.clone())?,
    };
    Ok(Read {
        all: sees_all && tenant.is_none(),
        tenant,
        seconds: q.seconds.unwrap_or(WINDOW_S),
        now: state.activity().now(),
    })
}

/// The series the caller reads of one tool: the tool's, or its tenant's.
fn series_json(t: &ToolActivity, read: &Read) -> Value {
    let series = match read.tenant.as_deref() {
        None => Some(&t.series),
        Some(name) => t.tenants.get(name).map(|x| &x.series),
    };
    let empty = crate::activity::series::Series::default();
    let series = series.unwrap_or(&empty);
    json!({
        "series": series.to_json(read.now, read.seconds),
        "window": series.totals(read.now).to_json(),
    })
}

/// The fields every answer has.
fn envelope(read: &Read, mut body: Value) -> Value {
    body["tenant"] = json!(read.tenant);
    body["seconds"] = json!(read.seconds);
    body["window_s"] = json!(WINDOW_S);
    body["now_s"] = json!(read.now);
    body
}
