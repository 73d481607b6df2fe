//! The router's last word on errors: every 4xx/5xx answer that is not JSON already —
//! axum's own extractor rejections, such as a path segment that is not UTF-8 once
//! percent-decoded (`/v1/tools/%ff%fe`) or a repeated query parameter
//! (`?tenant=a&tenant=b`) — becomes `{"error": {"code", "message"}}` here, in one place
//! rather than in each handler that takes a `Path` or a `Query`.
//!
//! Errors hyper answers itself, before any route runs (a malformed or oversized
//! request head), never reach the router; `crate::conn` rewrites those.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;

use crate::error::ApiError;

/// The largest body of a non-JSON error that is read to become the message; axum's
/// rejections are one line.
const MAX_TEXT: usize = 4096;

/// Wraps a route so that its non-JSON error answers become JSON errors.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonErrorsLayer;

/// See [`JsonErrorsLayer`].
#[derive(Debug, Clone)]
pub struct JsonErrors<S> {
    inner: S,
}

/// The future of [`JsonErrors`]: the route's future, then (rarely) the rewrite.
pub struct JsonErrorsFuture<F> {
    state: State<F>,
}

enum State<F> {
    Route(F),
    Rewrite(Pin<Box<dyn Future<Output = Response> + Send>>),
}

// === impl JsonErrorsLayer ===

impl<S> tower::Layer<S> for JsonErrorsLayer {
    type Service = JsonErrors<S>;

    fn layer(&self, inner: S) -> JsonErrors<S> {
        JsonErrors { inner }
    }
}

// === impl JsonErrors ===

impl<S> tower::Service<Request> for JsonErrors<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
    S::Future: Unpin,
{
    type Response = Response;
    type Error = Infallible;
    type Future = JsonErrorsFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        JsonErrorsFuture {
            state: State::Route(self.inner.call(req)),
        }
    }
}

// === impl JsonErrorsFuture ===

impl<F> std::fmt::Debug for JsonErrorsFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonErrorsFuture").finish_non_exhaustive()
    }
}

impl<F> Future for JsonErrorsFuture<F>
where
    F: Future<Output = Result<Response, Infallible>> + Unpin,
{
    type Output = Result<Response, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            match &mut self.state {
                State::Route(f) => {
                    let Ok(res) = ready!(Pin::new(f).poll(cx));
                    if !needs_rewrite(&res) {
                        return Poll::Ready(Ok(res));
                    }
                    self.state = State::Rewrite(Box::pin(rewrite(res)));
                }
                State::Rewrite(f) => return f.as_mut().poll(cx).map(Ok),
            }
        }
    }
}

/// Whether `res` is an error whose body is not JSON.
fn needs_rewrite(res: &Response) -> bool {
    let status = res.status();
    (status.is_client_error() || status.is_server_error())
        && !res
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("application/json"))
}

/// `res` with its text as the message of a JSON error of the same status; its other
/// headers (`Allow`, say) stay.
async fn rewrite(res: Response) -> Response {
    let (mut parts, body) = res.into_parts();
    let text = match axum::body::to_bytes(body, MAX_TEXT).await {
        Ok(b) => String::from_utf8_lossy(&b).trim().to_string(),
        Err(_) => String::new(),
    };
    let error = classify(parts.status, &text);
    let bytes = serde_json::to_vec(&error.body()).unwrap_or_default();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(bytes))
}

/// The error an axum rejection's `text` with `status` stands for. axum names its
/// rejections only in their text: its path rejections start with `Invalid URL` or
/// `Invalid UTF-8 in`, its query rejection with `Failed to deserialize query string`
/// (the bad-input tests pin these down across axum upgrades).
fn classify(status: StatusCode, text: &str) -> ApiError {
    if status == StatusCode::BAD_REQUEST {
        if let Some(rest) = text.strip_prefix("Failed to deserialize query string") {
            let rest = rest.trim_start_matches(':').trim();
            return ApiError::InvalidQuery(format!("the query string is not valid: {rest}"));
        }
        if text.starts_with("Invalid URL") || text.starts_with("Invalid UTF-8 in") {
            let rest = text.strip_prefix("Invalid URL: ").unwrap_or(text);
            return ApiError::InvalidPath(format!("the path is not valid: {}", lower_first(rest)));
        }
    }
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_lowercase()
    } else {
        lower_first(text)
    };
    ApiError::Http(status, message)
}

/// `s` with its first letter in lower case, as our messages are.
fn lower_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejections_are_told_apart_by_their_text() {
        let q = classify(
            StatusCode::BAD_REQUEST,
            "Failed to deserialize query string: duplicate field `tenant`",
        );
        assert_eq!(
            q.body()["error"],
            serde_json::json!({"code": "invalid_query",
                "message": "the query string is not valid: duplicate field `tenant`"})
        );
        let p = classify(StatusCode::BAD_REQUEST, "Invalid UTF-8 in `tool`");
        assert_eq!(p.body()["error"]["code"], "invalid_path");
        assert_eq!(
            p.body()["error"]["message"],
            "the path is not valid: invalid UTF-8 in `tool`"
        );
        let other = classify(StatusCode::UNSUPPORTED_MEDIA_TYPE, "");
        assert_eq!(other.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(
            other.body()["error"],
            serde_json::json!({"code": "unsupported_media_type",
                "message": "unsupported media type"})
        );
    }
}
