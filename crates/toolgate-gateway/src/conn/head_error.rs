//! hyper's own answers to request heads it cannot parse, rewritten as JSON errors.
//!
//! hyper answers a malformed request line (400), an over-long request target (414)
//! and an oversized head (431) itself, before any service runs, with an empty body,
//! and offers no hook to change that. These are the only bytes it writes on a
//! connection while no request is in flight and every answer is flushed (see
//! [`super::activity::Activity::is_waiting`]), after which it closes the connection.
//! The connection's I/O ([`super::io::ConnIo`]) therefore swallows whatever hyper
//! writes in that phase and writes the JSON answer for the same status instead. Our
//! own answers are always written while their request is in flight, so they are never
//! touched, and no parsing of the answer stream is needed.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use axum::http::StatusCode;
use tokio::io::AsyncWrite;

use crate::error::ApiError;

/// The largest request head hyper reads (request line and headers), in bytes.
pub(crate) const MAX_HEAD_BYTES: usize = 80 * 1024;
/// The most headers a request may have.
pub(crate) const MAX_HEADERS: usize = 100;
/// The longest request target hyper takes, in bytes (its own bound).
const MAX_TARGET_BYTES: usize = 65_534;
/// How much of hyper's answer is kept to read its status and `date` header.
const KEEP: usize = 512;

/// hyper's answer being swallowed, then ours being written.
#[derive(Debug, Default)]
pub(crate) struct HeadError {
    /// The start of what hyper wrote.
    seen: Vec<u8>,
    /// Our answer and how much of it is written.
    answer: Option<(Vec<u8>, usize)>,
}

// === impl HeadError ===

impl HeadError {
    /// Takes bytes hyper wrote (they are never sent).
    pub(crate) fn swallow(&mut self, buf: &[u8]) {
        let room = KEEP.saturating_sub(self.seen.len());
        self.seen.extend_from_slice(&buf[..buf.len().min(room)]);
    }

    /// Writes our answer to `io`; ready once all of it is written.
    pub(crate) fn poll_write_answer<T: AsyncWrite + Unpin>(
        &mut self,
        io: &mut T,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        let seen = &self.seen;
        let (bytes, at) = self.answer.get_or_insert_with(|| (answer(seen), 0));
        while *at < bytes.len() {
            let n = ready!(Pin::new(&mut *io).poll_write(cx, &bytes[*at..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *at += n;
        }
        Poll::Ready(Ok(()))
    }
}

/// Our answer for hyper's answer `head` (`HTTP/1.1 431 …`): the same status, hyper's
/// `date` header, a JSON error and `connection: close`.
fn answer(head: &[u8]) -> Vec<u8> {
    let status = head
        .get(9..12)
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse::<u16>().ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::BAD_REQUEST);
    let body = serde_json::to_vec(&error_for(status).body()).unwrap_or_default();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    )
    .into_bytes();
    if let Some(date) = date_line(head) {
        out.extend_from_slice(date);
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&body);
    out
}

fn error_for(status: StatusCode) -> ApiError {
    let message = match status {
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => format!(
            "the request head is larger than {MAX_HEAD_BYTES} bytes or has more than \
             {MAX_HEADERS} headers"
        ),
        StatusCode::URI_TOO_LONG => {
            format!("the request target is longer than {MAX_TARGET_BYTES} bytes")
        }
        StatusCode::BAD_REQUEST => {
            "the request head is not valid HTTP/1.1 (its request line or a header is \
             malformed)"
                .to_string()
        }
        other => other
            .canonical_reason()
            .unwrap_or("the request cannot be served")
            .to_lowercase(),
    };
    ApiError::Http(status, message)
}

/// hyper's `date: …\r\n` line, if it is in `head`.
fn date_line(head: &[u8]) -> Option<&[u8]> {
    head.split_inclusive(|&b| b == b'\n')
        .find(|l| l.len() > 5 && l[..5].eq_ignore_ascii_case(b"date:") && l.ends_with(b"\r\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hypers_answer_becomes_a_json_error_of_the_same_status() {
        let hyper = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\
                      date: Tue, 01 Dec 2026 10:00:00 GMT\r\n\r\n";
        let out = String::from_utf8(answer(hyper)).expect("utf-8");
        let (head, body) = out.split_once("\r\n\r\n").expect("head");
        assert!(head.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
        assert!(
            head.contains("\r\ndate: Tue, 01 Dec 2026 10:00:00 GMT"),
            "{head}"
        );
        assert!(head.contains("\r\nconnection: close"), "{head}");
        assert!(head.contains(&format!("\r\ncontent-length: {}", body.len())));
        let v: serde_json::Value = serde_json::from_str(body).expect("json");
        assert_eq!(v["error"]["code"], "headers_too_large");
        assert_eq!(
            error_for(StatusCode::URI_TOO_LONG).body()["error"]["code"],
            "uri_too_long"
        );
        let garbled = String::from_utf8(answer(b"HTTP/")).expect("utf-8");
        assert!(
            garbled.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{garbled}"
        );
    }
}
