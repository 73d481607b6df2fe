//! `POST /v1/leases/{lease}/complete`: end an admitted call.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use toolgate::{Completion, Outcome};

use crate::auth::Caller;
use crate::bounds;
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::state::AppState;

/// The body of a completion.
#[derive(Debug, Deserialize)]
pub struct CompleteRequest {
    outcome: Option<String>,
    latency_ms: Option<u64>,
    tokens: Option<u64>,
    status: Option<u16>,
    headers: Option<serde_json::Map<String, serde_json::Value>>,
}

/// The upstream's `Retry-After` on a 429 or 503 (header names are case-insensitive;
/// unparsable values are ignored, as RFC 9110 allows).
fn server_retry_after(req: &CompleteRequest) -> Option<Duration> {
    if !matches!(req.status, Some(429 | 503)) {
        return None;
    }
    let headers = req.headers.as_ref()?;
    let value = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("retry-after"))
        .map(|(_, v)| match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })?;
    toolgate::retry::retry_after(&value, std::time::SystemTime::now())
}

/// The upstream's rate-limit headers (`X-RateLimit-*`, `RateLimit`,
/// `RateLimit-Policy`): when little is left, the tool's calls are spread over the
/// upstream's reset window.
fn server_limit(req: &CompleteRequest) -> Option<toolgate::shaping::ServerLimit> {
    let headers = req.headers.as_ref()?;
    let values: Vec<(&str, String)> = headers
        .iter()
        .map(|(k, v)| {
            let v = match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.as_str(), v)
        })
        .collect();
    toolgate::shaping::server_limit(
        values.iter().map(|(k, v)| (*k, v.as_str())),
        std::time::SystemTime::now(),
    )
}

/// Completes a lease: releases its concurrency, reconciles its tokens, and — for a
/// `status` of 429 or 503 with a `Retry-After` in `headers` — pauses the tool until
/// then. `204`, or
/// `404` for a lease that is unknown, expired, already completed or another
/// tenant's; `400` (the lease stays open) for an id longer than `max_id_length`, a
/// `tokens` above 2^53 − 1 or a `latency_ms` above a day.
pub async fn complete(
    State(state): State<AppState>,
    caller: Caller,
    Path(lease): Path<String>,
    JsonBody(req): JsonBody<CompleteRequest>,
) -> Result<StatusCode, ApiError> {
    bounds::id("lease", &lease, state.live().settings.limits.max_id_length)?;
    bounds::number("tokens", req.tokens, bounds::MAX_TOKENS)?;
    bounds::number("latency_ms", req.latency_ms, bounds::MAX_LATENCY_MS)?;
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
    if let Some(after) = server_retry_after(&req) {
        c = c.retry_after(after);
    }
    if let Some(limit) = server_limit(&req) {
        c = c.server_limit(limit);
    }
    permit.complete(c);
    Ok(StatusCode::NO_CONTENT)
}
