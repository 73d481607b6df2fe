//! Drives one connection: hyper's HTTP/1 connection, its header and idle timers, and
//! the graceful shutdown.
//!
//! hyper's own `header_read_timeout` is off: its timer (as of hyper 1.12) also runs
//! while a kept-alive connection waits for its next request, so it cannot be both a
//! short header timeout and a longer idle timeout. The timers here follow the
//! connection's [`Activity`] instead: `header_read_timeout` from the connection's
//! start, or from the first byte of a request after an idle wait, until the request
//! reaches the service; `idle_timeout` from the end of an answer (its body handed
//! to hyper) to the next byte, so a client that does not read its answers is cut off
//! too; none while a request is in flight (an admit waiting its turn is never cut off
//! here; `request_timeout` bounds it).
//!
//! hyper's connection is polled through a [`Rewake`], which polls it again in place
//! when it wakes itself (as it does twice for every request with a body) instead of
//! going through tokio's scheduler.

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::task::{ready, Context, Poll};

use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

use super::activity::{Activity, Timeouts};
use super::io::ConnIo;
use super::rewake::Rewake;
use super::service::Tracked;

/// How a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// hyper finished it: the client closed it, an answer closed it, an I/O error.
    Closed,
    /// A header or idle timeout: dropped with no request in flight.
    TimedOut,
}

/// The connection's timer, reset lazily: only when the deadline moves earlier than
/// the one armed; a later deadline is taken when the armed one fires.
struct Deadline {
    sleep: Pin<Box<Sleep>>,
    armed: Instant,
}

/// Serves `service` on `stream` until hyper is done, a timeout passes, or (after
/// `shutdown` turns true and hyper is asked to finish) the task is dropped.
pub(crate) async fn drive<S, B>(
    stream: TcpStream,
    service: S,
    builder: &http1::Builder,
    timeouts: Timeouts,
    mut shutdown: watch::Receiver<bool>,
) -> Ended
where
    S: hyper::service::Service<
        axum::http::Request<hyper::body::Incoming>,
        Response = axum::http::Response<B>,
        Error = std::convert::Infallible,
    >,
    S::Future: Unpin,
    B: http_body::Body + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let activity = Activity::new();
    let io = TokioIo::new(ConnIo::new(stream, activity.clone()));
    let mut conn = pin!(builder.serve_connection(io, Tracked::new(service, activity.clone())));
    let mut stop = pin!(async move {
        if shutdown.wait_for(|stop| *stop).await.is_err() {
            // The accept loop is gone without a shutdown: its task set drops us.
            std::future::pending::<()>().await;
        }
    });
    let mut deadline = Deadline::new(activity.deadline(timeouts));
    let rewake = Rewake::new();
    let mut finishing = false;
    poll_fn(|cx| {
        if !finishing && stop.as_mut().poll(cx).is_ready() {
            conn.as_mut().graceful_shutdown();
            finishing = true;
        }
        if let Poll::Ready(res) = rewake.poll(cx, |cx| conn.as_mut().poll(cx)) {
            if let Err(e) = res {
                tracing::debug!("connection ended: {e}");
            }
            return Poll::Ready(Ended::Closed);
        }
        deadline
            .poll_passed(cx, activity.deadline(timeouts))
            .map(|()| Ended::TimedOut)
    })
    .await
}

// === impl Deadline ===

impl Deadline {
    fn new(at: Option<Instant>) -> Self {
        // A new connection has a deadline; the fallback is never reached.
        let armed = at.unwrap_or_else(|| Instant::now() + std::time::Duration::from_secs(3600));
        Self {
            sleep: Box::pin(tokio::time::sleep_until(armed)),
            armed,
        }
    }

    /// Ready once `want` has passed; `None` (a request in flight) never passes.
    fn poll_passed(&mut self, cx: &mut Context<'_>, want: Option<Instant>) -> Poll<()> {
        let Some(want) = want else {
            return Poll::Pending;
        };
        if want < self.armed {
            self.arm(want);
        }
        loop {
            ready!(self.sleep.as_mut().poll(cx));
            if want <= Instant::now() {
                return Poll::Ready(());
            }
            self.arm(want);
        }
    }

    fn arm(&mut self, at: Instant) {
        self.sleep.as_mut().reset(at);
        self.armed = at;
    }
}
