//! `POST /v1/tools/{tool}/invoke`: the gateway runs the call itself.
//!
//! Arguments are checked against the tool's schema before admission (invalid: 400,
//! nothing consumed); then the call is admitted (waiting as the tool's policy says),
//! executed against `[tools.X.upstream]` by [`crate::upstream::execute`], and its
//! permit completed with the outcome: `success`, `error`, `timeout`, or `invalid`
//! when the result fails the result schema.

use std::time::Instant;

use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use toolgate::{Call, Completion};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;
use crate::upstream::{self, Failure};

/// The body of an invocation.
#[derive(Debug, Deserialize)]
pub struct InvokeRequest {
    #[serde(default)]
    arguments: Value,
    idempotency_key: Option<String>,
    tenant: Option<String>,
    max_wait_ms: Option<u64>,
}

/// Runs `tool` with the request's arguments.
pub async fn invoke(
    state: AppState,
    caller: Caller,
    tool: String,
    req: InvokeRequest,
) -> Result<Response, ApiError> {
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
    let mut call = Call::new(&tool).with_tenant(tenant.as_deref());
    if let Some(ms) = req.max_wait_ms {
        call = call.max_wait(super::admit::clamp_wait(&state, ms));
    }
    let permit = match state.engine().admit(&call).await {
        Ok(p) => p,
        Err(r) => return Ok(super::admit::rejected(&state, &r, tenant.as_deref())),
    };
    let waited_ms = permit.waited().as_millis();
    let start = Instant::now();
    let result = upstream::execute(
        state.http(),
        &up,
        &req.arguments,
        req.idempotency_key.as_deref(),
    )
    .await;
    let latency = start.elapsed();
    let outcome = result
        .as_ref()
        .map_or_else(Failure::outcome, |_| toolgate::Outcome::Success);
    let mut completion = Completion::new(outcome).latency(latency);
    if let Some(after) = result.as_ref().err().and_then(Failure::retry_after) {
        // The upstream asked for a pause: only this tool waits it out.
        completion = completion.retry_after(after);
    }
    permit.complete(completion);
    match result {
        Ok(ok) => Ok(Json(json!({
            "result": ok.result,
            "status": ok.status,
            "outcome": "success",
            "waited_ms": waited_ms,
            "latency_ms": latency.as_millis(),
        }))
        .into_response()),
        Err(f @ Failure::Timeout(_)) => Err(ApiError::UpstreamTimeout(f.to_string())),
        Err(f @ Failure::Invalid(_)) => Err(ApiError::Upstream("invalid_result", f.to_string())),
        Err(f) => Err(ApiError::Upstream("upstream_error", f.to_string())),
    }
}
