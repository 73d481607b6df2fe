//! `POST /v1/admin/reload`: read the config again and put it in force.

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// Reloads, keeping the state of unchanged quotas: `200 {"reloaded": true, "tools": n}`
/// (plus `"needs_restart": [keys]` when settings fixed at start changed). A config
/// that is invalid or breaks a reload rule is refused with its errors and the old one
/// stays in force. Needs an admin token when auth is on. Logged by
/// [`AppState::reload_report`].
pub async fn reload(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let r = state
        .reload_report()
        .map_err(|e| ApiError::InvalidConfig(e.0))?;
    let mut body = json!({"reloaded": true, "tools": r.tools});
    if !r.needs_restart.is_empty() {
        body["needs_restart"] = json!(r.needs_restart);
    }
    Ok(Json(body))
}
