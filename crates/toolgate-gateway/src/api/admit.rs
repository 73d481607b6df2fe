//! `POST /v1/admit`: admit a call now (or after waiting, in wait mode) and open a
//! lease, or say why not.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolgate::{Call, Rejection};

use crate::auth::Caller;
use crate::bounds;
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::leases::{Id, NewLease};
use crate::ratelimit::{ceil_secs, StackBuf};
use crate::state::AppState;
use crate::urgency;

/// The body of `POST /v1/admit`.
#[derive(Debug, Deserialize)]
pub struct AdmitRequest {
    tool: String,
    tenant: Option<String>,
    cost: Option<Cost>,
    max_wait_ms: Option<u64>,
    /// Checked for length only: admit does not deduplicate by it.
    idempotency_key: Option<String>,
    priority: Option<String>,
    /// An RFC 3339 string or Unix milliseconds (see [`crate::urgency`]).
    deadline: Option<Value>,
}

/// The 429 answer.
#[derive(Debug, Serialize)]
struct Rejected<'a> {
    admitted: bool,
    tool: &'a str,
    quota: &'a str,
    reason: &'static str,
    retry_after_ms: Option<u128>,
}

/// `POST /v1/admit` as a tower service: what axum's handler does for [`admit`]'s
/// arguments (the caller from the request's head, then its JSON body; a rejection of
/// either is its answer), without the router's route around it: no method router
/// cloned and dropped, no boxed route, no `Content-Length` set after hyper would set
/// it. The connections send that one request here (see `conn::service`), under the
/// request timeout and JSON errors like every route (`app::admit_route`).
#[derive(Debug, Clone)]
pub(crate) struct AdmitService(pub(crate) AppState);

/// The future of [`AdmitService`] (axum boxes a handler's future too).
pub(crate) type AdmitFuture = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

impl tower::Service<Request> for AdmitService {
    type Response = Response;
    type Error = Infallible;
    type Future = AdmitFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> AdmitFuture {
        let state = self.0.clone();
        Box::pin(async move {
            let (mut parts, body) = req.into_parts();
            let caller = match Caller::from_request_parts(&mut parts, &state).await {
                Ok(caller) => caller,
                Err(e) => return Ok(e.into_response()),
            };
            let body = match JsonBody::from_request(Request::from_parts(parts, body), &state).await
            {
                Ok(body) => body,
                Err(e) => return Ok(e.into_response()),
            };
            Ok(admit(State(state), caller, body).await.into_response())
        })
    }
}

/// A call's declared cost.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cost {
    #[serde(default)]
    tokens: u64,
}

/// Admits a call; the client disconnecting while it waits drops this future, which
/// gives its place up without consuming anything. The lease's place is taken first:
/// a call that would pass a lease cap is refused (429 `too_many_leases`) unadmitted.
pub async fn admit(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(req): JsonBody<AdmitRequest>,
) -> Result<Response, ApiError> {
    let limits = state.live().settings.limits;
    check(&req, limits.max_id_length)?;
    let priority = urgency::priority("priority", req.priority.as_deref())?;
    let left = req
        .deadline
        .as_ref()
        .map(|v| urgency::deadline("deadline", v, SystemTime::now()))
        .transpose()?;
    let tenant = caller.tenant_for(req.tenant)?;
    let mut places = state
        .leases()
        .places(tenant.as_deref(), 1, (&limits).into())?;
    let mut call = Call::new(&req.tool)
        .with_tenant(tenant.as_deref())
        .tokens(req.cost.map_or(0, |c| c.tokens))
        .cap_wait(wait_cap(&state))
        .priority(priority);
    if let Some(left) = left {
        let now = state.engine().clock().now();
        call = call.deadline(urgency::engine_deadline(now, left));
    }
    if let Some(ms) = req.max_wait_ms {
        call = call.max_wait(Duration::from_millis(ms));
    }
    let activity = state.activity();
    let mut admit = std::pin::pin!(state.engine().admit(&call));
    // Polled once first: only a call that waits is counted as waiting (and pays for it).
    let first = std::future::poll_fn(|cx| Poll::Ready(admit.as_mut().poll(cx))).await;
    let decision = match first {
        Poll::Ready(d) => d,
        Poll::Pending => {
            let _waiting = activity.waiting(&req.tool, tenant.as_deref());
            admit.await
        }
    };
    match decision {
        Ok(permit) => {
            let waited = permit.waited();
            let at = permit.admitted_at();
            activity.admitted_at(&req.tool, tenant.as_deref(), waited, priority, at);
            let live = state.live();
            let remaining = live.settings.ratelimit_remaining;
            let figures = live
                .headers
                .admitted(&permit, &req.tool, tenant.as_deref(), remaining);
            let waited_ms = waited.as_millis();
            let lease = state.leases().insert(
                &mut places,
                NewLease {
                    permit,
                    tool: &req.tool,
                    ttl: live.settings.lease_ttl,
                    reservation: None,
                },
            );
            let mut res = admitted_body(&lease, waited_ms);
            figures.put(res.headers_mut());
            Ok(res)
        }
        Err(r) => {
            activity.rejected(&req.tool, tenant.as_deref(), r.reason());
            Ok(rejected(&state, &r, tenant.as_deref()))
        }
    }
}

/// Checks the request's ids and numbers against their bounds.
fn check(req: &AdmitRequest, max_id: usize) -> Result<(), ApiError> {
    if req.tool.is_empty() {
        return Err(ApiError::InvalidRequest("tool: must not be empty".into()));
    }
    bounds::id("tool", &req.tool, max_id)?;
    bounds::opt_id("tenant", req.tenant.as_deref(), max_id)?;
    bounds::opt_id("idempotency_key", req.idempotency_key.as_deref(), max_id)?;
    let tokens = req.cost.as_ref().map(|c| c.tokens);
    bounds::number("cost.tokens", tokens, bounds::MAX_TOKENS)
}

/// The 200 answer, `{"admitted":true,"lease":"<id>","waited_ms":<ms>}` (as serde_json
/// writes it), written straight into one buffer: its shape is fixed and its values
/// need no escaping.
fn admitted_body(lease: &Id, waited_ms: u128) -> Response {
    let mut b = StackBuf::new();
    let fits = b.push(br#"{"admitted":true,"lease":""#)
        && b.push(&lease.to_hex())
        && b.push(br#"","waited_ms":"#)
        && b.push_u128(waited_ms)
        && b.push(b"}");
    debug_assert!(fits, "a lease id and a u128 fit the buffer");
    // Content-Type, the two RateLimit headers and Content-Length.
    json_response(StatusCode::OK, Bytes::copy_from_slice(b.as_bytes()), 4)
}

/// The 429's body: `body` (never admitted) as serde writes it, byte for byte, with
/// serde escaping only the two strings that may hold anything (the tool and the
/// quota); the keys and the reason (a snake_case word) are written as they are.
/// Serialising the struct escaped eight strings, two thousand instructions of a
/// rejected request.
fn rejected_body(body: &Rejected<'_>) -> Option<Vec<u8>> {
    debug_assert!(!body.admitted, "a rejection is never admitted");
    let mut b = Vec::with_capacity(112 + body.tool.len() + body.quota.len());
    b.extend_from_slice(br#"{"admitted":false,"tool":"#);
    serde_json::to_writer(&mut b, body.tool).ok()?;
    b.extend_from_slice(br#","quota":"#);
    serde_json::to_writer(&mut b, body.quota).ok()?;
    b.extend_from_slice(br#","reason":""#);
    b.extend_from_slice(body.reason.as_bytes());
    b.extend_from_slice(br#"","retry_after_ms":"#);
    match body.retry_after_ms {
        Some(ms) => {
            let mut n = StackBuf::new();
            n.push_u128(ms).then_some(())?;
            b.extend_from_slice(n.as_bytes());
        }
        None => b.extend_from_slice(b"null"),
    }
    b.push(b'}');
    Some(b)
}

/// A JSON answer of `status` with `body`, its header map sized for `headers` in all
/// (Content-Type, set here, and the Content-Length that axum's router adds on the
/// routes it serves included; on `POST /v1/admit` hyper writes it instead), so that
/// adding them never regrows it: built by hand rather than as `(status, Json(body))`,
/// whose map grows on the way (it holds three quarters of its power-of-two table).
fn json_response(status: StatusCode, body: impl Into<Body>, headers: usize) -> Response {
    let mut res = Response::new(body.into());
    *res.status_mut() = status;
    let h = res.headers_mut();
    h.reserve(headers);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

/// How much shorter than the request timeout a wait is capped.
pub const WAIT_MARGIN: Duration = Duration::from_millis(100);

/// The cap on every wait of a request: the request timeout less [`WAIT_MARGIN`],
/// whatever the tool's `max_wait` or the request's `max_wait_ms`, so that a wait that
/// would outlast the request is refused at once with `max_wait_exceeded` rather than
/// cut off by the timeout.
pub fn wait_cap(state: &AppState) -> Duration {
    state.request_timeout().saturating_sub(WAIT_MARGIN)
}

/// The 429 answer to a rejection, with `Retry-After` (whole seconds, rounded up)
/// when a retry time is known, and the `RateLimit` headers.
pub fn rejected(state: &AppState, r: &Rejection, tenant: Option<&str>) -> Response {
    let body = Rejected {
        admitted: false,
        tool: r.tool(),
        quota: r.quota(),
        reason: r.reason().as_str(),
        retry_after_ms: r.retry_after().map(|d| d.as_nanos().div_ceil(1_000_000)),
    };
    // Content-Type, Retry-After, the two RateLimit headers and Content-Length.
    let mut res = match rejected_body(&body) {
        Some(bytes) => json_response(StatusCode::TOO_MANY_REQUESTS, bytes, 5),
        // Never for this shape (strings and numbers); axum's answer if it were.
        None => return (StatusCode::TOO_MANY_REQUESTS, Json(body)).into_response(),
    };
    if let Some(d) = r.retry_after() {
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(ceil_secs(d).max(1)));
    }
    state
        .live()
        .headers
        .rejected(res.headers_mut(), state.engine(), r, tenant);
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rejected_body_is_what_serde_writes_for_any_tool_quota_reason_and_retry() {
        let names = [
            "t",
            "",
            "mcp:github/create_issue",
            "quo\"te",
            "back\\slash",
            "ctl\n\t\r\u{1}\u{1f}",
            "ünïcödé ✓",
            "emoji 🦀",
        ];
        let retries = [None, Some(0), Some(1), Some(3_599_987), Some(u128::MAX)];
        for reason in toolgate::Reason::ALL {
            for tool in names {
                for quota in names {
                    for retry_after_ms in retries {
                        let body = Rejected {
                            admitted: false,
                            tool,
                            quota,
                            reason: reason.as_str(),
                            retry_after_ms,
                        };
                        let ours = rejected_body(&body).expect("written");
                        let serde = serde_json::to_vec(&body).expect("serialised");
                        assert_eq!(
                            String::from_utf8_lossy(&ours),
                            String::from_utf8_lossy(&serde),
                            "{tool:?} {quota:?} {reason:?} {retry_after_ms:?}"
                        );
                    }
                }
            }
        }
    }
}
