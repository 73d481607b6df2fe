//! tower [`Layer`]s: [`AdmissionLayer`] puts admission in front of any [`Service`];
//! [`PipelineLayer`] runs the whole retry pipeline ([`Engine::run`]) around an
//! HTTP-client-like service whose responses can be classified ([`ClassifyResponse`]).
//!
//! Each request is mapped to a tool identity and cost by a classifier function; the
//! request is passed on only once admitted (waiting if the tool's policy says so), and
//! the permit is completed with the service's outcome and latency. A rejection comes
//! back as the service's error, downcastable to [`Rejection`], and the inner service is
//! not called.
//!
//! Unlike tower's own `RateLimitLayer`, which builds a fresh bucket for every service
//! it wraps, every service built from one [`AdmissionLayer`] — and every other user of
//! the same [`Engine`] — shares the same quotas.
//!
//! # Examples
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use tower::{service_fn, Layer, ServiceExt};
//! use toolgate::layer::{AdmissionLayer, CallSpec};
//! use toolgate::{Engine, Policy, Rejection};
//!
//! let engine = Engine::new(Policy::from_toml_str("[tools.echo]\nrate = \"1/h\"").unwrap());
//! let layer = AdmissionLayer::new(engine, |req: &String| CallSpec::new("echo").tokens(req.len() as u64));
//! let svc = layer.layer(service_fn(|req: String| async move { Ok::<_, std::io::Error>(req) }));
//!
//! assert_eq!(svc.clone().oneshot("hi".to_string()).await.unwrap(), "hi");
//! let err = svc.oneshot("again".to_string()).await.unwrap_err();
//! assert!(err.downcast_ref::<Rejection>().is_some());
//! # }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tower::{BoxError, Layer, Service};

use crate::engine::Engine;
#[cfg(doc)]
use crate::vocab::Rejection;
use crate::vocab::{Call, Completion, Outcome};

mod pipeline;

pub use pipeline::{ClassifyResponse, Pipeline, PipelineLayer, RunReport};

/// The tool identity and cost of one request, as returned by a classifier.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a call spec does nothing until a classifier returns it"]
pub struct CallSpec {
    tool: String,
    tenant: Option<String>,
    tokens: u64,
    idempotency_key: Option<String>,
    deadline: Option<Duration>,
}

/// Applies [`Admission`] to services.
#[derive(Debug, Clone)]
pub struct AdmissionLayer<F> {
    engine: Engine,
    classify: F,
}

/// A service that admits each request before passing it on.
#[derive(Debug, Clone)]
pub struct Admission<S, F> {
    inner: S,
    engine: Engine,
    classify: F,
}

/// The response future of [`Admission`].
pub type ResponseFuture<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

// === impl CallSpec ===

impl CallSpec {
    /// A call to `tool`.
    pub fn new(tool: impl Into<String>) -> Self {
        Self {
            tool: tool.into(),
            tenant: None,
            tokens: 0,
            idempotency_key: None,
            deadline: None,
        }
    }

    /// The tenant of the call.
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// The estimated token cost.
    pub fn tokens(mut self, tokens: u64) -> Self {
        self.tokens = tokens;
        self
    }

    /// The call's idempotency key ([`PipelineLayer`]: makes the call retryable and is
    /// to be sent with every attempt; ignored by [`AdmissionLayer`]).
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Bounds the whole call ([`PipelineLayer`] only), replacing the tool's
    /// `[tools.X.retry] deadline`.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    fn call(&self) -> Call<'_> {
        Call::new(&self.tool)
            .with_tenant(self.tenant.as_deref())
            .tokens(self.tokens)
    }
}

// === impl AdmissionLayer ===

impl<F> AdmissionLayer<F> {
    /// A layer admitting requests through `engine`, classified by `classify`.
    pub fn new(engine: Engine, classify: F) -> Self {
        Self { engine, classify }
    }
}

impl<S, F: Clone> Layer<S> for AdmissionLayer<F> {
    type Service = Admission<S, F>;

    fn layer(&self, inner: S) -> Self::Service {
        Admission {
            inner,
            engine: self.engine.clone(),
            classify: self.classify.clone(),
        }
    }
}

// === impl Admission ===

impl<S, F, Req> Service<Req> for Admission<S, F>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    F: Fn(&Req) -> CallSpec,
    Req: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let spec = (self.classify)(&req);
        let engine = self.engine.clone();
        // Keep the service that was driven to readiness; leave a clone in its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let permit = engine.admit(&spec.call()).await?;
            let clock = engine.clock().clone();
            let start = clock.now();
            let result = inner.call(req).await;
            let latency = Duration::from_nanos(clock.now().saturating_sub(start));
            let outcome = if result.is_ok() {
                Outcome::Success
            } else {
                Outcome::Error
            };
            permit.complete(Completion::new(outcome).latency(latency));
            result.map_err(Into::into)
        })
    }
}
