//! `POST /v1/reserve` and `DELETE /v1/reservations/{id}`: all-or-nothing admission
//! of a multi-step plan.
//!
//! Each unit of `count` becomes one lease, so each step of the plan completes its own.
//! Leases of a reservation live `ttl_ms` (default: the lease TTL); at expiry, or on
//! `DELETE /v1/reservations/{id}`, the unused ones are cancelled (`Permit::cancel`):
//! they never ran, so they record no outcome and give back everything they charged —
//! concurrency, request-rate and token-budget capacity.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;
use toolgate::Call;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::leases::NewLease;
use crate::state::AppState;

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
    check(&req)?;
    let tenant = caller.tenant_for(req.tenant)?;
    let calls: Vec<Call<'_>> = req
        .calls
        .iter()
        .flat_map(|s| std::iter::repeat_n(s.tool.as_str(), s.count as usize))
        .map(|t| Call::new(t).with_tenant(tenant.as_deref()))
        .collect();
    let permits = match state.engine().admit_all(&calls).await {
        Ok(p) => p,
        Err(r) => return Ok(super::admit::rejected(&state, &r, tenant.as_deref())),
    };
    let ttl = req
        .ttl_ms
        .map_or(state.live().settings.lease_ttl, Duration::from_millis);
    let reservation = state.leases().new_id();
    let leases: Vec<String> = permits
        .into_iter()
        .map(|permit| {
            state
                .leases()
                .insert(NewLease {
                    permit,
                    tenant: tenant.as_deref(),
                    ttl,
                    reservation: Some(reservation),
                })
                .to_string()
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

fn check(req: &ReserveRequest) -> Result<(), ApiError> {
    if req.calls.is_empty() {
        return Err(ApiError::InvalidRequest("calls: must not be empty".into()));
    }
    let mut total = 0u64;
    for (i, s) in req.calls.iter().enumerate() {
        if s.tool.is_empty() {
            return Err(ApiError::InvalidRequest(format!(
                "calls[{i}].tool: must not be empty"
            )));
        }
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
    if req.ttl_ms == Some(0) {
        return Err(ApiError::InvalidRequest(
            "ttl_ms: must be at least 1".into(),
        ));
    }
    Ok(())
}

/// Releases the unused leases of a reservation: `200 {"released": n}`, or `404`.
pub async fn release(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
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
