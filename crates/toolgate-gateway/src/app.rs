//! The router: every endpoint, the body limit, the request timeout and JSON errors
//! for unknown routes and for axum's own rejections ([`crate::rescue`]).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{any, delete, get, post};
use axum::{Json, Router};
use serde_json::json;
use tower::layer::util::{Identity, Stack};

use crate::api::{activity, admin, admit, invoke, leases, reserve, tools};
use crate::auth::Caller;
use crate::connections::Connections;
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::rescue::{JsonErrors, JsonErrorsLayer};
use crate::state::AppState;

/// The dashboard page, served at `GET /`.
pub const DASHBOARD: &str = include_str!("dashboard.html");

/// The stack of [`answer_layers`].
type AnswerLayers = tower::ServiceBuilder<Stack<JsonErrorsLayer, Stack<TimeoutLayer, Identity>>>;

/// The stack of [`layers`].
type Layers = tower::ServiceBuilder<
    Stack<DefaultBodyLimit, Stack<JsonErrorsLayer, Stack<TimeoutLayer, Identity>>>,
>;

/// What every route but `/mcp` answers under, the admission's route included: the
/// request timeout (outermost) and JSON errors.
fn answer_layers(state: &AppState) -> AnswerLayers {
    tower::ServiceBuilder::new()
        .layer(Timeout::layer(state.request_timeout()))
        .layer(JsonErrorsLayer)
}

/// The layers every route of the router runs under: [`answer_layers`], and inside
/// them the body limit (which only tells axum's own extractors the limit, on the
/// request: where it sits among the others does not matter). One layer of the
/// three, not three: axum boxes each `layer` around every route and clones that box
/// on every request (an allocation and a boxed future per level), so they are
/// stacked and applied once.
fn layers(state: &AppState) -> Layers {
    answer_layers(state).layer(DefaultBodyLimit::max(state.body_limit()))
}

/// The path of the admission, `POST` only: most of a gateway's traffic.
pub(crate) const ADMIT_PATH: &str = "/v1/admit";

/// `POST` [`ADMIT_PATH`] alone: [`admit::AdmitService`] under [`answer_layers`], as
/// in [`router`]. The connections send that one request straight here (see
/// `conn::service`), past the path router. The body limit's layer is not needed: it
/// only tells axum's own extractors the limit, and the admission's (`JsonBody`)
/// reads it from the state.
pub(crate) type AdmitRoute = Timeout<JsonErrors<admit::AdmitService>>;

/// See [`AdmitRoute`].
pub(crate) fn admit_route(state: AppState) -> AdmitRoute {
    answer_layers(&state).service(admit::AdmitService(state))
}

/// The gateway's routes on `state`.
pub fn router(state: AppState) -> Router {
    let routes = Router::new()
        .route("/", get(dashboard))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route(ADMIT_PATH, post(admit::admit))
        .route("/v1/leases/{lease}/complete", post(leases::complete))
        .route("/v1/reserve", post(reserve::reserve))
        .route("/v1/reservations/{id}", delete(reserve::release))
        .route("/v1/tools", get(tools::list))
        .route("/v1/tools/{*tool}", get(tools::get).post(tool_post))
        .route("/v1/activity", get(activity::list))
        .route("/v1/activity/{*tool}", get(activity::get))
        .route("/v1/admin/reload", post(admin::reload))
        .route("/v1/mesh", get(mesh))
        .route("/v1/mcp", get(crate::mcp::view))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(layers(&state));
    // `/mcp` answers in rmcp's own terms (JSON-RPC errors, SSE streams whose calls
    // are bounded by `[mcp]` max_wait and call_timeout), so it is mounted outside the
    // JSON-error and request-timeout layers; rmcp bounds its bodies itself.
    let routes = match state.mcp() {
        Some(_) => routes.route("/mcp", any(crate::mcp::handle)),
        None => routes,
    };
    routes.with_state(state)
}

async fn dashboard() -> impl IntoResponse {
    (
        [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))],
        Html(DASHBOARD),
    )
}

/// `GET /healthz`: always 200 while the gateway serves HTTP; `status` is
/// `degraded` while the event mesh (when one runs) is away from NATS, and `mesh`
/// says why.
async fn healthz(State(state): State<AppState>) -> Json<serde_json::Value> {
    let Json(mut body) = health(state.connections());
    if let Some(m) = state.mesh() {
        let v = m.view();
        if v.status != "ok" {
            body["status"] = json!("degraded");
        }
        body["mesh"] = json!({"status": v.status, "error": v.error});
    }
    Json(body)
}

/// `GET /v1/mesh`: the event mesh's state (404 `no_mesh` when none runs). Its
/// figures are every tenant's together, so with tokens only an admin token reads
/// them (403 otherwise).
async fn mesh(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<serde_json::Value>, ApiError> {
    if caller.tenant.is_some() && !caller.admin {
        return Err(ApiError::Forbidden(
            "the mesh's state covers every tenant: an admin token is needed".into(),
        ));
    }
    let m = state.mesh().ok_or_else(|| {
        ApiError::NotFound(
            "no_mesh",
            "no event mesh runs here (toolgate serve --mesh nats://HOST:PORT)".into(),
        )
    })?;
    Ok(Json(json!(m.view())))
}

/// The answer of `GET /healthz`: `{"status": "ok", "connections": {"open",
/// "overflow", "limit"}}` (served on connections beyond the limit too).
pub fn health(connections: &Connections) -> Json<serde_json::Value> {
    Json(json!({"status": "ok", "connections": connections.to_json()}))
}

async fn metrics(State(state): State<AppState>, req: Request) -> Result<Response, ApiError> {
    let live = state.live();
    if live.settings.protect_metrics {
        live.auth.authenticate(req.headers())?;
    }
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        state.metrics().render(),
    )
        .into_response())
}

/// `POST /v1/tools/{tool}/invoke`, where the tool name may itself contain `/`.
/// `POST /v1/tools/{tool}` is a 405 (that resource is `GET` only), whatever the body.
async fn tool_post(
    State(state): State<AppState>,
    caller: Caller,
    Path(path): Path<String>,
    body: Result<JsonBody<invoke::InvokeRequest>, ApiError>,
) -> Result<Response, ApiError> {
    match path.strip_suffix("/invoke") {
        Some(tool) if !tool.is_empty() => {
            let JsonBody(req) = body?;
            invoke::invoke(state, caller, tool.to_string(), req).await
        }
        _ => Err(ApiError::MethodNotAllowed(
            format!(
                "POST is not allowed on /v1/tools/{path} (did you mean POST \
                 /v1/tools/{path}/invoke?)"
            ),
            "GET,HEAD",
        )),
    }
}

async fn not_found(req: Request) -> ApiError {
    ApiError::NotFound(
        "not_found",
        format!("no route {} {}", req.method(), req.uri().path()),
    )
}

async fn method_not_allowed(req: Request) -> Response {
    let body = json!({"error": {
        "code": "method_not_allowed",
        "message": format!("{} is not allowed on {}", req.method(), req.uri().path()),
    }});
    (StatusCode::METHOD_NOT_ALLOWED, Json(body)).into_response()
}

/// Bounds every request by the request timeout (answering `ApiError::Timeout`).
///
/// A plain tower service rather than `middleware::from_fn`, which clones and boxes the
/// inner service and boxes two futures on every request; this boxes none (the routes'
/// futures are `Unpin`).
#[derive(Debug, Clone)]
pub(crate) struct Timeout<S> {
    inner: S,
    limit: Duration,
}

#[derive(Debug, Clone, Copy)]
struct TimeoutLayer(Duration);

impl<S> tower::Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;

    fn layer(&self, inner: S) -> Timeout<S> {
        Timeout {
            inner,
            limit: self.0,
        }
    }
}

impl Timeout<()> {
    fn layer(limit: Duration) -> TimeoutLayer {
        TimeoutLayer(limit)
    }
}

impl<S> tower::Service<Request> for Timeout<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
    S::Future: Unpin,
{
    type Response = Response;
    type Error = Infallible;
    type Future = TimeoutFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        TimeoutFuture {
            inner: self.inner.call(req),
            sleep: None,
            waited: false,
            limit: self.limit,
        }
    }
}

/// The future of [`Timeout`]. Like `tokio::time::timeout` it polls the request first
/// and can only time out once the request waits; unlike it, it builds the timer only
/// then, so a request answered without waiting never touches the timer wheel (a lock
/// every worker thread shares) or the clock.
///
/// A request with a body always waits once: hyper reads the body only after the
/// service asks for it, so the first poll asks and returns pending, and the next one,
/// made at once (the connection's driver polls again in place when it wakes itself),
/// gets it. So the first wait only asks to be polled again; the timer starts at the
/// second, a moment later, and the limit runs from there.
pub(crate) struct TimeoutFuture<F> {
    inner: F,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Whether the request has waited once already.
    waited: bool,
    limit: Duration,
}

impl<F> std::fmt::Debug for TimeoutFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimeoutFuture")
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl<F> Future for TimeoutFuture<F>
where
    F: Future<Output = Result<Response, Infallible>> + Unpin,
{
    type Output = Result<Response, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Poll::Ready(res) = Pin::new(&mut self.inner).poll(cx) {
            return Poll::Ready(res);
        }
        if !self.waited {
            self.waited = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let limit = self.limit;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => {
                Poll::Ready(Ok(ApiError::Timeout(limit.as_millis()).into_response()))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
