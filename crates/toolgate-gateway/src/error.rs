//! The one place where errors become HTTP responses:
//! `{"error": {"code", "message"}}` with a 4xx/5xx status. Internals never leak.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// An error answered to a client.
#[derive(Debug)]
#[non_exhaustive]
pub enum ApiError {
    /// The body is not JSON.
    MalformedJson(String),
    /// The body is JSON but not the expected shape.
    InvalidRequest(String),
    /// The body is larger than the limit.
    BodyTooLarge(usize),
    /// No or an unknown bearer token.
    Unauthorized(&'static str),
    /// A valid token that may not do this.
    Forbidden(String),
    /// No such resource.
    NotFound(&'static str, String),
    /// The resource exists but not with this method; the second field is `Allow`.
    MethodNotAllowed(String, &'static str),
    /// Tool arguments fail the tool's schema.
    InvalidArguments(String),
    /// A config reload was refused.
    InvalidConfig(Vec<String>),
    /// The upstream failed.
    Upstream(&'static str, String),
    /// The upstream did not answer in time.
    UpstreamTimeout(String),
    /// The request took longer than the gateway's request timeout.
    Timeout(u128),
    /// Something the gateway cannot do in this build or state.
    Unavailable(String),
    /// Opening the leases asked for would pass `max_leases` or
    /// `max_leases_per_tenant`; nothing was admitted.
    TooManyLeases(String),
}

// === impl ApiError ===

impl ApiError {
    fn parts(&self) -> (StatusCode, &'static str, String) {
        use ApiError::*;
        match self {
            MalformedJson(m) => (StatusCode::BAD_REQUEST, "malformed_json", m.clone()),
            InvalidRequest(m) => (StatusCode::BAD_REQUEST, "invalid_request", m.clone()),
            BodyTooLarge(n) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("the request body is larger than the limit of {n} bytes"),
            ),
            Unauthorized(m) => (StatusCode::UNAUTHORIZED, "unauthorized", (*m).to_string()),
            Forbidden(m) => (StatusCode::FORBIDDEN, "forbidden", m.clone()),
            NotFound(code, m) => (StatusCode::NOT_FOUND, code, m.clone()),
            MethodNotAllowed(m, _) => (
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                m.clone(),
            ),
            InvalidArguments(m) => (StatusCode::BAD_REQUEST, "invalid_arguments", m.clone()),
            InvalidConfig(errs) => (
                StatusCode::BAD_REQUEST,
                "invalid_config",
                format!(
                    "the new config was refused; the old one stays in force:\n{}",
                    errs.join("\n")
                ),
            ),
            Upstream(code, m) => (StatusCode::BAD_GATEWAY, code, m.clone()),
            UpstreamTimeout(m) => (StatusCode::GATEWAY_TIMEOUT, "upstream_timeout", m.clone()),
            Timeout(ms) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "timeout",
                format!("the request did not finish within the gateway's {ms}ms request timeout"),
            ),
            Unavailable(m) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable", m.clone()),
            TooManyLeases(m) => (StatusCode::TOO_MANY_REQUESTS, "too_many_leases", m.clone()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, message) = self.parts();
        let mut body = json!({"error": {"code": code, "message": message}});
        if let ApiError::InvalidConfig(errs) = &self {
            body["error"]["errors"] = json!(errs);
        }
        let mut res = (status, Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            res.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let ApiError::MethodNotAllowed(_, allow) = &self {
            res.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        res
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (status, code, message) = self.parts();
        write!(f, "{status} {code}: {message}")
    }
}

impl std::error::Error for ApiError {}
