//! A connection's socket as hyper sees it: reads and flushes move the connection's
//! [`Activity`], and what hyper writes while no request is in flight (its own answer
//! to a head it cannot parse) is replaced by a JSON error ([`HeadError`]).

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::activity::Activity;
use super::head_error::HeadError;

/// See the module doc.
#[derive(Debug)]
pub(crate) struct ConnIo<T> {
    inner: T,
    activity: Arc<Activity>,
    /// Set once hyper writes while the connection waits for a request.
    head_error: Option<HeadError>,
}

// === impl ConnIo ===

impl<T> ConnIo<T> {
    pub(crate) fn new(inner: T, activity: Arc<Activity>) -> Self {
        Self {
            inner,
            activity,
            head_error: None,
        }
    }

    /// The rewrite of hyper's own answer, when what is written now is that answer.
    fn head_error(&mut self) -> Option<&mut HeadError> {
        if self.head_error.is_none() && self.activity.is_waiting() {
            self.head_error = Some(HeadError::default());
        }
        self.head_error.as_mut()
    }
}

impl<T: AsyncWrite + Unpin> ConnIo<T> {
    /// Writes our answer, if hyper's was swallowed.
    fn poll_answer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.head_error {
            Some(e) => e.poll_write_answer(&mut self.inner, cx),
            None => Poll::Ready(Ok(())),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ConnIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        if buf.filled().len() > before {
            self.activity.on_read();
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ConnIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(e) = self.head_error() {
            e.swallow(buf);
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if let Some(e) = self.head_error() {
            bufs.iter().for_each(|b| e.swallow(b));
            return Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum()));
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_answer(cx))?;
        ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
        self.activity.on_flush();
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_answer(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
