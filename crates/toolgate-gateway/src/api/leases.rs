//! `POST /v1/leases/{lease}/complete`: end an admitted call.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use toolgate::{Completion, Outcome};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::state::AppState;

/// The body of a completion.
#[derive(Debug, Deserialize)]
pub struct CompleteRequest {
    outcome: Option<String>,
    latency_ms: Option<u64>,
    tokens: Option<u64>,
    #[allow(dead_code)]
    status: Option<u16>,
    #[allow(dead_code)]
    headers: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Completes a lease: releases its concurrency and reconciles its tokens. `204`, or
/// `404` for a lease that is unknown, expired, already completed or another
/// tenant's.
pub async fn complete(
    State(state): State<AppState>,
    caller: Caller,
    Path(lease): Path<String>,
    JsonBody(req): JsonBody<CompleteRequest>,
) -> Result<StatusCode, ApiError> {
    let outcome: Outcome = req
        .outcome
        .as_deref()
        .unwrap_or("success")
        .parse()
        .map_err(|e: String| ApiError::InvalidRequest(format!("outcome: {e}")))?;
    let permit = state
        .leases()
        .take(&lease, caller.tenant.as_deref())
        .ok_or_else(|| {
            ApiError::NotFound(
                "unknown_lease",
                format!("no open lease {lease:?} (unknown, expired or already completed)"),
            )
        })?;
    let mut c = Completion::new(outcome);
    if let Some(ms) = req.latency_ms {
        c = c.latency(Duration::from_millis(ms));
    }
    if let Some(t) = req.tokens {
        c = c.tokens(t);
    }
    permit.complete(c);
    Ok(StatusCode::NO_CONTENT)
}
