//! The accept loop: each connection within `max_connections` is served by the
//! router, the next few by the health-only [`Overflow`] answer, any beyond those is
//! closed at once (so the listen backlog never fills and file descriptors are
//! freed); on shutdown, connections are asked to finish and cut off after
//! `shutdown_grace`.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::activity::Timeouts;
use super::cores::Cores;
use super::driver::{drive, Ended};
use super::head_error::{MAX_HEADERS, MAX_HEAD_BYTES};
use super::limits::Limits;
use super::overflow::Overflow;
use super::service::RouterService;
use crate::connections::Connections;
use crate::state::AppState;

/// How long the loop pauses after an accept error that is not about one connection
/// (out of file descriptors, say), so that it does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// What serving ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Served {
    /// Connections still open when `shutdown_grace` ran out, dropped then.
    pub cut_off: usize,
}

/// What every connection task needs.
#[derive(Debug, Clone)]
struct Serving {
    router: RouterService,
    connections: Arc<Connections>,
    limits: Limits,
    http: http1::Builder,
    overflow_http: http1::Builder,
    stop: watch::Receiver<bool>,
    cores: Option<Arc<Cores>>,
}

/// Serves the gateway for `state` on `listener` within `limits` until `shutdown`
/// completes; then stops accepting, asks every connection to finish (each ends after
/// its request in flight, if any) and drops those still open after
/// `limits.shutdown_grace`.
///
/// # Cancel safety
///
/// Dropping the future drops every connection at once.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> Served {
    serve_on(listener, state, limits, None, shutdown).await
}

/// [`serve`], each connection served on one of `cores` (the one with the fewest
/// open connections), or on the current runtime with `None`.
pub async fn serve_on(
    listener: TcpListener,
    state: AppState,
    limits: Limits,
    cores: Option<Arc<Cores>>,
    shutdown: impl Future<Output = ()>,
) -> Served {
    let (stop_tx, stop) = watch::channel(false);
    let connections = state.connections().clone();
    connections.set_limit(limits.max_connections);
    let ctx = Serving {
        router: RouterService::new(
            crate::app::router(state.clone()),
            crate::app::admit_route(state),
        ),
        connections,
        limits,
        http: builder(true),
        overflow_http: builder(false),
        stop,
        cores,
    };
    let mut tasks = JoinSet::new();
    let mut shutdown = pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    // An answer written in pieces (the SSE streams of `/mcp`) would
                    // otherwise wait for the client's delayed ACK: 40 ms a piece.
                    let _ = stream.set_nodelay(true);
                    spawn(&mut tasks, &ctx, stream);
                }
                Err(e) => accept_error(&e).await,
            },
        }
    }
    drop(listener);
    while tasks.try_join_next().is_some() {}
    tracing::info!(
        open = tasks.len(),
        "shutting down: no new connections, open ones asked to finish"
    );
    let _ = stop_tx.send(true);
    let cut_off = finish(&mut tasks, limits.shutdown_grace).await;
    Served { cut_off }
}

/// The HTTP/1 settings of a connection: the head bounds the errors of
/// `super::head_error` name, no timer of hyper's (see `super::driver`).
fn builder(keep_alive: bool) -> http1::Builder {
    let mut b = http1::Builder::new();
    b.max_buf_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS)
        .header_read_timeout(None)
        .keep_alive(keep_alive);
    b
}

/// Serves `stream` as its place in the counts says, or closes it.
fn spawn(tasks: &mut JoinSet<()>, ctx: &Serving, stream: TcpStream) {
    let conns = &ctx.connections;
    let limits = ctx.limits;
    let stop = ctx.stop.clone();
    if let Some(slot) = conns.try_open(limits.max_connections) {
        let (router, http, timeouts) = (ctx.router.clone(), ctx.http.clone(), limits.timeouts());
        let Some(cores) = &ctx.cores else {
            tasks.spawn(serve_router(stream, router, http, timeouts, stop, slot));
            return;
        };
        // Moved to its core's reactor: registered there, its I/O is driven there.
        let Ok(stream) = stream.into_std() else {
            return;
        };
        let (core, seat) = cores.pick();
        tasks.spawn_on(
            async move {
                if let Ok(stream) = TcpStream::from_std(stream) {
                    serve_router(stream, router, http, timeouts, stop, (slot, seat)).await;
                }
            },
            core,
        );
    } else if let Some(slot) = conns.try_overflow(limits.overflow()) {
        let http = ctx.overflow_http.clone();
        let overflow = Overflow {
            connections: conns.clone(),
            limit: limits.max_connections,
        };
        tasks.spawn(async move {
            let ended = drive(stream, overflow, &http, limits.overflow_timeouts(), stop).await;
            trace_end(ended);
            drop(slot);
        });
    } else {
        conns.refuse();
        drop(stream);
    }
}

/// Serves the router on `stream` until the connection ends, then lets go of `held`
/// (the connection's places in the counts).
async fn serve_router(
    stream: TcpStream,
    router: RouterService,
    http: http1::Builder,
    timeouts: Timeouts,
    stop: watch::Receiver<bool>,
    held: impl Send,
) {
    trace_end(drive(stream, router, &http, timeouts, stop).await);
    drop(held);
}

fn trace_end(ended: Ended) {
    if ended == Ended::TimedOut {
        tracing::debug!("connection closed: header or idle timeout");
    }
}

/// Waits out an accept error: at once for one about a single connection, after a
/// pause for one about the process (out of file descriptors, say).
async fn accept_error(e: &std::io::Error) {
    use std::io::ErrorKind::*;
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset | Interrupted | WouldBlock
    ) {
        return;
    }
    tracing::warn!("accept error (retrying in {ACCEPT_ERROR_PAUSE:?}): {e}");
    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
}

/// Waits up to `grace` for every connection to end, then drops the rest; returns how
/// many were dropped.
async fn finish(tasks: &mut JoinSet<()>, grace: Duration) -> usize {
    let all = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(grace, all).await.is_ok() {
        tracing::info!("every connection finished");
        return 0;
    }
    while tasks.try_join_next().is_some() {}
    let cut_off = tasks.len();
    tasks.shutdown().await;
    tracing::warn!(
        cut_off,
        "shutdown_grace of {grace:?} ran out: {cut_off} connection(s) cut off"
    );
    cut_off
}
