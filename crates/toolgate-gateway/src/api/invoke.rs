//! `POST /v1/tools/{tool}/invoke`: the gateway runs the call itself.
//!
//! Arguments are checked against the tool's schema before admission (invalid: 400,
//! nothing consumed); then the call runs through toolgate's pipeline
//! ([`toolgate::Engine::run`]): each attempt is admitted (waiting as the tool's policy
//! says), executed against `[tools.X.upstream]` by [`crate::upstream::execute`] with
//! the call's `Idempotency-Key`, and its permit completed with the outcome
//! (`success`, `error`, `timeout`, or `invalid` when the result fails the result
//! schema); `[tools.X.retry]` retries idempotent tools and keyed calls.
//!
//! The answer carries `attempts`; a terminal failure's error body carries `reason`,
//! every attempt and `last_status`. A rejected first admission is the usual 429.

use std::time::{Duration, SystemTime};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use toolgate::{ExecuteError, RunFailure, StopReason};

use crate::auth::Caller;
use crate::bounds;
use crate::error::ApiError;
use crate::state::AppState;
use crate::upstream::Failure;
use crate::urgency;

/// The body of an invocation.
#[derive(Debug, Deserialize)]
pub struct InvokeRequest {
    #[serde(default)]
    arguments: Value,
    idempotency_key: Option<String>,
    tenant: Option<String>,
    max_wait_ms: Option<u64>,
    priority: Option<String>,
    /// An RFC 3339 string or Unix milliseconds (see [`crate::urgency`]).
    deadline: Option<Value>,
}

/// Runs `tool` with the request's arguments.
pub async fn invoke(
    state: AppState,
    caller: Caller,
    tool: String,
    req: InvokeRequest,
) -> Result<Response, ApiError> {
    let max_id = state.live().settings.limits.max_id_length;
    bounds::id("tool", &tool, max_id)?;
    bounds::opt_id("tenant", req.tenant.as_deref(), max_id)?;
    bounds::opt_id("idempotency_key", req.idempotency_key.as_deref(), max_id)?;
    let priority = urgency::priority("priority", req.priority.as_deref())?;
    let deadline = req
        .deadline
        .as_ref()
        .map(|v| urgency::deadline("deadline", v, SystemTime::now()))
        .transpose()?;
    let tenant = caller.tenant_for(req.tenant)?;
    let up = state.live().upstreams.get(&tool).cloned().ok_or_else(|| {
        match state.engine().tool_state(&tool, None) {
            Some(_) => ApiError::NotFound(
                "no_upstream",
                format!("tool {tool:?} has no [tools.{tool}.upstream] to invoke"),
            ),
            None => super::tools::unknown(&tool),
        }
    })?;
    up.check_arguments(&req.arguments)
        .map_err(ApiError::InvalidArguments)?;
    let max_wait = req.max_wait_ms.map(Duration::from_millis);
    let job = crate::execute::Job {
        tool: &tool,
        tenant: tenant.as_deref(),
        arguments: &req.arguments,
        idempotency_key: req.idempotency_key.as_deref(),
        tokens: 0,
        max_wait,
        wait_cap: super::admit::wait_cap(&state),
        priority,
        deadline,
        permit: None,
    };
    let crate::execute::Ran { run, waited } = crate::execute::run(&state, &up, job).await;
    match run {
        Ok(out) => {
            let attempts = out.attempts();
            let latency = out.history.last().map_or(Duration::ZERO, |a| a.latency);
            Ok(Json(json!({
                "result": out.value.result,
                "status": out.value.status,
                "outcome": "success",
                "attempts": attempts,
                "waited_ms": waited.as_millis(),
                "latency_ms": latency.as_millis(),
            }))
            .into_response())
        }
        Err(ExecuteError::Rejected(r)) => Ok(super::admit::rejected(&state, &r, tenant.as_deref())),
        Err(ExecuteError::Tool(f)) => Ok(failed(f)),
    }
}

/// The terminal failure of an invocation: the usual `{"error": {"code", "message"}}`
/// (`upstream_timeout` 504 when the last attempt or the deadline ran out of time,
/// `invalid_result`, `upstream_response_too_large` or `upstream_error` 502
/// otherwise), plus why the call stopped, every attempt and the last status.
fn failed(f: RunFailure<Failure>) -> Response {
    let timed_out = f.reason == StopReason::DeadlineExceeded
        || matches!(f.error, Some(Failure::Timeout(_)) | None);
    let (status, code) = match &f.error {
        _ if timed_out => (StatusCode::GATEWAY_TIMEOUT, "upstream_timeout"),
        Some(Failure::Invalid(_)) => (StatusCode::BAD_GATEWAY, "invalid_result"),
        Some(Failure::TooLarge(..)) => (StatusCode::BAD_GATEWAY, "upstream_response_too_large"),
        _ => (StatusCode::BAD_GATEWAY, "upstream_error"),
    };
    let message = match (&f.error, f.reason) {
        (Some(e), StopReason::DeadlineExceeded) => {
            format!("the call did not finish within its deadline; last failure: {e}")
        }
        (Some(e), _) => e.to_string(),
        (None, _) => "the call did not finish within its deadline".to_string(),
    };
    let attempts: Vec<Value> = f
        .attempts
        .iter()
        .map(|a| {
            json!({
                "attempt": a.number,
                "outcome": a.end.as_str(),
                "status": a.status,
                "latency_ms": a.latency.as_millis(),
                "delay_ms": a.delay.map(|d| d.as_millis()),
            })
        })
        .collect();
    let mut error = json!({
        "code": code,
        "message": message,
        "reason": f.reason.as_str(),
        "attempts": attempts,
        "last_status": f.last_status,
    });
    if let Some(r) = &f.rejection {
        error["rejection"] = json!({
            "quota": r.quota(),
            "reason": r.reason().as_str(),
            "retry_after_ms": r.retry_after().map(|d| d.as_millis()),
        });
    }
    if let Some(d) = f.retry_after {
        error["retry_after_ms"] = json!(d.as_millis());
    }
    (status, Json(json!({ "error": error }))).into_response()
}
