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
    /// A path segment the route cannot take (not UTF-8 once percent-decoded, say).
    InvalidPath(String),
    /// A query string the route cannot take (a repeated parameter, say).
    InvalidQuery(String),
    /// The connection is one beyond `max_connections` (the field); only `GET /healthz`
    /// is served on it.
    ConnectionLimit(usize),
    /// An error of HTTP itself (a malformed or oversized request head, say), answered
    /// with this status; the code is named after the status.
    Http(StatusCode, String),
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
            InvalidPath(m) => (StatusCode::BAD_REQUEST, "invalid_path", m.clone()),
            InvalidQuery(m) => (StatusCode::BAD_REQUEST, "invalid_query", m.clone()),
            ConnectionLimit(n) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "connection_limit",
                format!(
                    "the gateway serves at most {n} connections at once and this one is \
                     beyond them (only GET /healthz is answered on it); retry on a new \
                     connection"
                ),
            ),
            Http(status, m) => (*status, code_of(*status), m.clone()),
            TooManyLeases(m) => (StatusCode::TOO_MANY_REQUESTS, "too_many_leases", m.clone()),
        }
    }

    /// The status answered.
    pub fn status(&self) -> StatusCode {
        self.parts().0
    }

    /// The JSON body answered: `{"error": {"code", "message"}}`, plus `errors` for
    /// [`ApiError::InvalidConfig`].
    pub fn body(&self) -> serde_json::Value {
        let (_, code, message) = self.parts();
        self.body_of(code, message)
    }

    fn body_of(&self, code: &str, message: String) -> serde_json::Value {
        let mut body = json!({"error": {"code": code, "message": message}});
        if let ApiError::InvalidConfig(errs) = self {
            body["error"]["errors"] = json!(errs);
        }
        body
    }
}

/// The code of an [`ApiError::Http`] error with `status`.
fn code_of(status: StatusCode) -> &'static str {
    match status.as_u16() {
        404 => "not_found",
        405 => "method_not_allowed",
        408 => "request_timeout",
        413 => "body_too_large",
        414 => "uri_too_long",
        415 => "unsupported_media_type",
        422 => "invalid_request",
        431 => "headers_too_large",
        503 => "unavailable",
        500..=599 => "internal",
        _ => "bad_request",
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, message) = self.parts();
        let mut res = (status, Json(self.body_of(code, message))).into_response();
        if status == StatusCode::UNAUTHORIZED {
            res.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let ApiError::MethodNotAllowed(_, allow) = &self {
            res.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        if let ApiError::ConnectionLimit(_) = &self {
            let h = res.headers_mut();
            h.insert(header::CONNECTION, HeaderValue::from_static("close"));
            h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
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
