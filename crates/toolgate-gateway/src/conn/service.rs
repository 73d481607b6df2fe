//! The service on one connection: hyper's requests to the router (or to the overflow
//! answer), each marked in flight on the connection's [`Activity`] until its answer's
//! body is dropped, which hyper does once the body is in its write buffer.

use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use axum::body::Body;
use axum::http::{Method, Request, Response};
use axum::Router;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;

use super::activity::{Activity, InFlight};
use crate::app::AdmitRoute;

/// A hyper service whose calls are marked in flight; see the module doc.
#[derive(Debug, Clone)]
pub(crate) struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

/// The future of [`Tracked`].
#[derive(Debug)]
pub(crate) struct TrackedFuture<F> {
    inner: F,
    in_flight: Option<InFlight>,
}

/// An answer's body that keeps its request in flight until it is dropped.
#[derive(Debug)]
pub(crate) struct TrackedBody<B> {
    inner: B,
    _in_flight: Option<InFlight>,
}

/// The router as a hyper service; `POST /v1/admit`, most of a gateway's traffic,
/// goes straight to its service under the same timeout and JSON errors (see
/// `app::admit_route`), past the path router's lookup, its extensions and its
/// boxed route.
///
/// One per connection (cloned from the listener's), so the admission's route is
/// called in place: the calls of an HTTP/1 connection never overlap, and its
/// future owns what it needs (the state, cloned once inside).
#[derive(Debug, Clone)]
pub(crate) struct RouterService {
    all: Router,
    admit: RefCell<AdmitRoute>,
}

/// The future of [`RouterService`]: the admission's, or the router's.
// The router's future was this service's whole future before the admission's came
// beside it; boxing it would add an allocation to every other request.
#[allow(clippy::large_enum_variant)]
pub(crate) enum RouterFuture {
    Admit(<AdmitRoute as tower::Service<Request<Body>>>::Future),
    All(axum::routing::future::RouteFuture<Infallible>),
}

// === impl Tracked ===

impl<S> Tracked<S> {
    pub(crate) fn new(inner: S, activity: Arc<Activity>) -> Self {
        Self { inner, activity }
    }
}

impl<S, B> hyper::service::Service<Request<Incoming>> for Tracked<S>
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>,
    S::Future: Unpin,
{
    type Response = Response<TrackedBody<B>>;
    type Error = Infallible;
    type Future = TrackedFuture<S::Future>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        // In flight before the router runs: nothing it writes is taken for hyper's.
        let in_flight = Some(self.activity.begin());
        TrackedFuture {
            inner: self.inner.call(req),
            in_flight,
        }
    }
}

// === impl TrackedFuture ===

impl<F, B> Future for TrackedFuture<F>
where
    F: Future<Output = Result<Response<B>, Infallible>> + Unpin,
{
    type Output = Result<Response<TrackedBody<B>>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Ok(res) = ready!(Pin::new(&mut self.inner).poll(cx));
        let in_flight = self.in_flight.take();
        Poll::Ready(Ok(res.map(|inner| TrackedBody {
            inner,
            _in_flight: in_flight,
        })))
    }
}

// === impl TrackedBody ===

impl<B> http_body::Body for TrackedBody<B>
where
    B: http_body::Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

// === impl RouterService ===

impl RouterService {
    pub(crate) fn new(all: Router, admit: AdmitRoute) -> Self {
        Self {
            all,
            admit: RefCell::new(admit),
        }
    }
}

impl hyper::service::Service<Request<Incoming>> for RouterService {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = RouterFuture;

    fn call(&self, req: Request<Incoming>) -> RouterFuture {
        // Both are always ready (as `axum::serve` relies on for the router); the
        // router is called on a clone (a reference count), as axum does.
        if req.method() == Method::POST && req.uri().path() == crate::app::ADMIT_PATH {
            return RouterFuture::Admit(tower::Service::call(
                &mut *self.admit.borrow_mut(),
                req.map(Body::new),
            ));
        }
        RouterFuture::All(tower::Service::call(
            &mut self.all.clone(),
            req.map(Body::new),
        ))
    }
}

// === impl RouterFuture ===

impl Future for RouterFuture {
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Self::Admit(f) => Pin::new(f).poll(cx),
            Self::All(f) => Pin::new(f).poll(cx),
        }
    }
}

impl std::fmt::Debug for RouterFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Admit(_) => "RouterFuture::Admit",
            Self::All(_) => "RouterFuture::All",
        })
    }
}
