//! `POST /v1/reserve` and `DELETE /v1/reservations/{id}`: all-or-nothing admission
//! of a multi-step plan.
//!
//! Each unit of `count` becomes one lease, so each step of the plan completes its own.
//! Leases of a reservation live `ttl_ms` (default: the lease TTL); at expiry, or on
//! `DELETE /v1/reservations/{id}`, the unused ones are cancelled (`Permit::cancel`):
//! they never ran, so they record no outcome and give back everything they charged —
//! concurrency, request-rate and token-budget capacity.
//!
//! `ttl_ms` is at most `lease_ttl` (or `[gateway] max_reservation_ttl` when that is
//! larger), and each unit takes a place under the lease caps before admission.

use std::time::{Duration, SystemTime};

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;
use toolgate::Call;

use crate::auth::Caller;
use crate::bounds;
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::leases::NewLease;
use crate::settings::Limits;
use crate::state::AppState;
use crate::urgency;

/// The most leases one reservation may hold.
pub const MAX_UNITS: u64 = 1000;

/// The body of `POST /v1/reserve`.
#[derive(Debug, Deserialize)]
pub struct ReserveRequest {
    calls: Vec<Step>,
    ttl_ms: Option<u64>,
    tenant: Option<String>,
}

/// One step of a plan.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    tool: String,
    #[serde(default = "one")]
    count: u64,
    priority: Option<String>,
    /// An RFC 3339 string or Unix milliseconds (see [`crate::urgency`]).
    deadline: Option<serde_json::Value>,
}

fn one() -> u64 {
    1
}

/// Reserves every call or none.
pub async fn reserve(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(req): JsonBody<ReserveRequest>,
) -> Result<Response, ApiError> {
    let (lease_ttl, limits) = {
        let live = state.live();
        (live.settings.lease_ttl, live.settings.limits)
    };
    let units = check(&req, &limits)?;
    let ttl = ttl(req.ttl_ms, lease_ttl, &limits)?;
    let tenant = caller.tenant_for(req.tenant)?;
    let mut places = state
        .leases()
        .places(tenant.as_deref(), units, (&limits).into())?;
    let calls = calls(&state, &req.calls, tenant.as_deref())?;
    let activity = state.activity();
    let permits = match state.engine().admit_all(&calls).await {
        Ok(p) => p,
        Err(r) => {
            // One rejection for the plan, counted on the tool that refused it.
            activity.rejected(r.tool(), tenant.as_deref(), r.reason());
            return Ok(super::admit::rejected(&state, &r, tenant.as_deref()));
        }
    };
    for (p, c) in permits.iter().zip(&calls) {
        activity.admitted(
            c.tool_name(),
            tenant.as_deref(),
            p.waited(),
            c.priority_class(),
        );
    }
    let reservation = state.leases().new_id();
    let leases: Vec<String> = permits
        .into_iter()
        .zip(&calls)
        .map(|(permit, call)| {
            let lease = NewLease {
                permit,
                tool: call.tool_name(),
                ttl,
                reservation: Some(reservation),
            };
            state.leases().insert(&mut places, lease).to_string()
        })
        .collect();
    let mut i = 0;
    let by_call: Vec<_> = req
        .calls
        .iter()
        .map(|s| {
            let n = s.count as usize;
            let part = &leases[i..i + n];
            i += n;
            json!({"tool": s.tool, "leases": part})
        })
        .collect();
    Ok(Json(json!({
        "reservation": reservation.to_string(),
        "leases": leases,
        "calls": by_call,
        "expires_in_ms": ttl.as_millis(),
    }))
    .into_response())
}

/// The calls of the plan, each step's `count` times, with its priority and deadline.
fn calls<'a>(
    state: &AppState,
    steps: &'a [Step],
    tenant: Option<&'a str>,
) -> Result<Vec<Call<'a>>, ApiError> {
    let (wall, now) = (SystemTime::now(), state.engine().clock().now());
    let mut calls = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let priority = urgency::priority(&format!("calls[{i}].priority"), s.priority.as_deref())?;
        let field = || format!("calls[{i}].deadline");
        let deadline = s
            .deadline
            .as_ref()
            .map(|v| urgency::deadline(&field(), v, wall))
            .transpose()?
            .map(|left| urgency::engine_deadline(now, left));
        let call = Call::new(&s.tool)
            .with_tenant(tenant)
            .priority(priority)
            .with_deadline(deadline);
        calls.extend(std::iter::repeat_n(call, s.count as usize));
    }
    Ok(calls)
}

/// Checks the plan; returns its number of units.
fn check(req: &ReserveRequest, limits: &Limits) -> Result<usize, ApiError> {
    if req.calls.is_empty() {
        return Err(ApiError::InvalidRequest("calls: must not be empty".into()));
    }
    bounds::opt_id("tenant", req.tenant.as_deref(), limits.max_id_length)?;
    let mut total = 0u64;
    for (i, s) in req.calls.iter().enumerate() {
        if s.tool.is_empty() {
            return Err(ApiError::InvalidRequest(format!(
                "calls[{i}].tool: must not be empty"
            )));
        }
        bounds::id(&format!("calls[{i}].tool"), &s.tool, limits.max_id_length)?;
        if s.count == 0 {
            return Err(ApiError::InvalidRequest(format!(
                "calls[{i}].count: must be at least 1"
            )));
        }
        total = total.saturating_add(s.count);
    }
    if total > MAX_UNITS {
        return Err(ApiError::InvalidRequest(format!(
            "calls: {total} calls in all; a reservation holds at most {MAX_UNITS}"
        )));
    }
    Ok(total as usize)
}

/// The TTL of a reservation's leases: `ttl_ms`, at most the cap, or `lease_ttl`.
fn ttl(ttl_ms: Option<u64>, lease_ttl: Duration, limits: &Limits) -> Result<Duration, ApiError> {
    let Some(ms) = ttl_ms else {
        return Ok(lease_ttl);
    };
    let cap = limits.reservation_ttl_cap(lease_ttl);
    if ms == 0 {
        return Err(ApiError::InvalidRequest(
            "ttl_ms: must be at least 1".into(),
        ));
    }
    if u128::from(ms) > cap.as_millis() {
        return Err(ApiError::InvalidRequest(format!(
            "ttl_ms: {ms} is longer than the cap of {} ms (lease_ttl, or [gateway] \
             max_reservation_ttl when that is larger)",
            cap.as_millis()
        )));
    }
    Ok(Duration::from_millis(ms))
}

/// Releases the unused leases of a reservation: `200 {"released": n}`, or `404`.
pub async fn release(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    bounds::id(
        "reservation",
        &id,
        state.live().settings.limits.max_id_length,
    )?;
    state
        .leases()
        .release_reservation(&id, caller.tenant.as_deref())
        .map(|n| Json(json!({"reservation": id, "released": n})))
        .ok_or_else(|| {
            ApiError::NotFound(
                "unknown_reservation",
                format!("no reservation {id:?} with open leases"),
            )
        })
}
