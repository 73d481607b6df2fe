//! The answer on a connection beyond `max_connections`: `GET /healthz` as usual (so
//! a load balancer still sees the gateway alive at its limit), 503
//! `connection_limit` with `Connection: close` for anything else. It runs no route,
//! reads no body and takes no lock of the engine.

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, Response};
use axum::response::IntoResponse;
use hyper::body::Incoming;

use crate::connections::Connections;
use crate::error::ApiError;

/// See the module doc.
#[derive(Debug, Clone)]
pub(crate) struct Overflow {
    pub(crate) connections: Arc<Connections>,
    pub(crate) limit: usize,
}

// === impl Overflow ===

impl hyper::service::Service<Request<Incoming>> for Overflow {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Ready<Result<Response<Body>, Infallible>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let health = matches!(*req.method(), Method::GET | Method::HEAD);
        let res = if health && req.uri().path() == "/healthz" {
            crate::app::health(&self.connections).into_response()
        } else {
            ApiError::ConnectionLimit(self.limit).into_response()
        };
        ready(Ok(res))
    }
}
