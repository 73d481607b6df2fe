//! [`PipelineLayer`]: the whole retry pipeline ([`Engine::run`]) around an
//! HTTP-client-like service.

use std::fmt;
use std::time::Duration;

use tower::{BoxError, Layer, Service, ServiceExt};

use super::{CallSpec, ResponseFuture};
use crate::engine::Engine;
use crate::pipeline::{AttemptRecord, AttemptResult, RunOptions, StopReason};
use crate::vocab::ExecuteError;

/// What the pipeline needs to know of a response: its status and `Retry-After`.
/// Implemented for [`http::Response`].
pub trait ClassifyResponse {
    /// The HTTP status.
    fn status_code(&self) -> u16;

    /// The parsed `Retry-After` (looked at for 429 and 503 only); `None` when absent
    /// or unparsable.
    fn retry_after(&self) -> Option<Duration>;

    /// Receives the call's [`RunReport`] before the response is handed back (the
    /// `http::Response` implementation puts it in the response's extensions).
    fn attach_report(&mut self, report: RunReport) {
        let _ = report;
    }
}

impl<B> ClassifyResponse for http::Response<B> {
    fn status_code(&self) -> u16 {
        self.status().as_u16()
    }

    fn retry_after(&self) -> Option<Duration> {
        let v = self
            .headers()
            .get(http::header::RETRY_AFTER)?
            .to_str()
            .ok()?;
        crate::retry::retry_after(v, crate::clock::wall_clock())
    }

    fn attach_report(&mut self, report: RunReport) {
        self.extensions_mut().insert(report);
    }
}

/// The attempts behind a response returned by [`Pipeline`] (in the extensions of an
/// `http::Response`), and why the call stopped if it did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    /// Every attempt.
    pub attempts: Vec<AttemptRecord>,
    /// `None` on success; otherwise why no further attempt was made.
    pub reason: Option<StopReason>,
}

/// Applies [`Pipeline`] to services.
#[derive(Debug, Clone)]
pub struct PipelineLayer<F> {
    engine: Engine,
    classify: F,
}

/// A service that runs each request through [`Engine::run`]: admission for every
/// attempt, the deadline, classification of the response, completion and retries.
///
/// Retries call the inner service again with a clone of the request, so requests
/// must be `Clone` (for an `http::Request`, buffer the body: e.g. `Bytes` or
/// `String`). The inner service is cloned per attempt and driven to readiness each
/// time.
///
/// What comes back:
/// - a response whose status is below 400: `Ok`, with its [`RunReport`] attached;
/// - a failed response that ended the call (a terminal status, or retries not
///   allowed, exhausted or refused by the budget or a too long `Retry-After`): that
///   response, as `Ok`, with the report (its `reason` set) attached — as with a plain
///   client, the caller reads the status;
/// - a first admission refused: `Err`, downcastable to [`crate::Rejection`], and the
///   inner service was not called;
/// - anything else (a retry refused by admission, the deadline, a service error at
///   the end): `Err`, downcastable to [`crate::RunFailure<BoxError>`].
///
/// Errors of the inner service count as transport errors (retryable).
#[derive(Debug, Clone)]
pub struct Pipeline<S, F> {
    inner: S,
    engine: Engine,
    classify: F,
}

/// The error of an attempt: a response that did not succeed, or the service's error.
enum Failed<R> {
    Response(R),
    Error(BoxError),
}

impl<R> fmt::Debug for Failed<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Response(_) => f.write_str("Response(..)"),
            Self::Error(e) => f.debug_tuple("Error").field(e).finish(),
        }
    }
}

// === impl PipelineLayer ===

impl<F> PipelineLayer<F> {
    /// A layer running requests through `engine`'s pipeline; `classify` maps each
    /// request to its tool, tenant, cost, idempotency key and deadline.
    pub fn new(engine: Engine, classify: F) -> Self {
        Self { engine, classify }
    }
}

impl<S, F: Clone> Layer<S> for PipelineLayer<F> {
    type Service = Pipeline<S, F>;

    fn layer(&self, inner: S) -> Self::Service {
        Pipeline {
            inner,
            engine: self.engine.clone(),
            classify: self.classify.clone(),
        }
    }
}

// === impl Pipeline ===

impl<S, F, Req> Service<Req> for Pipeline<S, F>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    S::Response: ClassifyResponse + Send + 'static,
    F: Fn(&Req) -> CallSpec,
    Req: Clone + Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Response>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        // Every attempt drives its own clone of the inner service to readiness.
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let spec = (self.classify)(&req);
        let engine = self.engine.clone();
        let inner = self.inner.clone();
        Box::pin(async move {
            let mut options =
                RunOptions::new().with_idempotency_key(spec.idempotency_key.as_deref());
            if let Some(d) = spec.deadline {
                options = options.deadline(d);
            }
            let result = engine
                .run(&spec.call(), options, move |_ctx| {
                    let svc = inner.clone();
                    let req = req.clone();
                    async move { attempt(svc, req).await }
                })
                .await;
            match result {
                Ok(mut out) => {
                    out.value.attach_report(RunReport {
                        attempts: out.history.into_vec(),
                        reason: None,
                    });
                    Ok(out.value)
                }
                Err(ExecuteError::Rejected(r)) => Err(r.into()),
                Err(ExecuteError::Tool(mut failure)) => {
                    let last_answered = failure.rejection.is_none()
                        && failure.attempts.last().is_some_and(|a| a.status.is_some());
                    match failure.error.take() {
                        Some(Failed::Response(mut resp)) if last_answered => {
                            resp.attach_report(RunReport {
                                attempts: failure.attempts,
                                reason: Some(failure.reason),
                            });
                            Ok(resp)
                        }
                        other => {
                            failure.error = other;
                            Err(Box::new(failure.map_error(|e| match e {
                                Failed::Error(e) => e,
                                Failed::Response(r) => {
                                    format!("the service answered {}", r.status_code()).into()
                                }
                            })) as BoxError)
                        }
                    }
                }
            }
        })
    }
}

async fn attempt<S, Req>(svc: S, req: Req) -> AttemptResult<S::Response, Failed<S::Response>>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    S::Response: ClassifyResponse,
{
    let resp = match svc.oneshot(req).await {
        Ok(r) => r,
        Err(e) => return AttemptResult::transport_error(Failed::Error(e.into())),
    };
    let status = resp.status_code();
    if status < 400 {
        return AttemptResult::success(resp).status(status);
    }
    let after = resp.retry_after();
    let mut res = AttemptResult::failure(Failed::Response(resp)).status(status);
    if let Some(d) = after {
        res = res.retry_after(d);
    }
    res
}
