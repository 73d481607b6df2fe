//! `POST /v1/admin/reload`: read the config again and put it in force.

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// Reloads, keeping the state of unchanged quotas; an invalid config is refused with
/// its errors and the old one stays in force. Needs an admin token when auth is on.
pub async fn reload(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    match state.reload() {
        Ok(tools) => {
            tracing::info!(tools, "config reloaded");
            Ok(Json(json!({"reloaded": true, "tools": tools})))
        }
        Err(e) => {
            tracing::warn!(errors = e.0.len(), "config reload refused");
            Err(ApiError::InvalidConfig(e.0))
        }
    }
}
