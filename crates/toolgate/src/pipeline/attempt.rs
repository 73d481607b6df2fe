//! How one attempt ended, as the caller's closure reports it ([`AttemptResult`],
//! [`AttemptEnd`]), and how the pipeline classifies it.

use std::time::Duration;

use crate::clock::wall_clock;
use crate::retry::{classify, Attempt, Class};
use crate::vocab::Outcome;

/// How one attempt ended, as reported by the closure of [`Engine::run`](crate::Engine::run).
///
/// A success carries the value; every other kind carries the caller's error:
///
/// | constructor | outcome recorded | class |
/// |---|---|---|
/// | [`success`](Self::success) | `success` | success (a status set on it is only recorded) |
/// | [`failure`](Self::failure) with [`status`](Self::status) 429/503 and [`retry_after`](Self::retry_after) | `error` | retry, not before Retry-After |
/// | [`failure`](Self::failure) with status 5xx, or 429/503 without Retry-After | `error` | retry after backoff |
/// | [`failure`](Self::failure) with another status, or none | `error` | terminal |
/// | [`transport_error`](Self::transport_error) | `error` | retry after backoff |
/// | [`timeout`](Self::timeout) | `timeout` | retry after backoff |
/// | [`invalid`](Self::invalid) | `invalid` | terminal |
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use toolgate::AttemptResult;
///
/// let busy: AttemptResult<(), &str> = AttemptResult::failure("busy")
///     .status(503)
///     .retry_after_header("2");
/// assert_eq!(busy.retry_after_value(), Some(Duration::from_secs(2)));
/// ```
#[derive(Debug)]
#[must_use = "an attempt's result is what the pipeline classifies: return it"]
pub struct AttemptResult<T, E> {
    pub(super) result: Result<T, E>,
    pub(super) end: AttemptEnd,
    pub(super) status: Option<u16>,
    pub(super) retry_after: Option<Duration>,
    pub(super) latency: Option<Duration>,
    pub(super) tokens: Option<u64>,
    pub(super) server_limit: Option<crate::shaping::ServerLimit>,
}

impl<T, E> AttemptResult<T, E> {
    fn new(result: Result<T, E>, end: AttemptEnd) -> Self {
        Self {
            result,
            end,
            status: None,
            retry_after: None,
            latency: None,
            tokens: None,
            server_limit: None,
        }
    }

    /// The attempt produced a usable value.
    pub fn success(value: T) -> Self {
        Self::new(Ok(value), AttemptEnd::Success)
    }

    /// The attempt failed; set the response's [`status`](Self::status) so that it can
    /// be classified (without one it is terminal).
    pub fn failure(error: E) -> Self {
        Self::new(Err(error), AttemptEnd::Error)
    }

    /// No response: the connection failed or broke. Retryable.
    pub fn transport_error(error: E) -> Self {
        Self::new(Err(error), AttemptEnd::Transport)
    }

    /// No response in time (the transport's own timeout). Retryable.
    pub fn timeout(error: E) -> Self {
        Self::new(Err(error), AttemptEnd::Timeout)
    }

    /// A response whose output failed the schema or semantic check. Terminal.
    pub fn invalid(error: E) -> Self {
        Self::new(Err(error), AttemptEnd::Invalid)
    }

    /// The response's HTTP status.
    pub fn status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    /// The response's `Retry-After`, already parsed (looked at for 429 and 503 only).
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// The response's raw `Retry-After` header (delta-seconds or HTTP-date, against the
    /// system's wall clock); garbage is ignored.
    pub fn retry_after_header(mut self, value: &str) -> Self {
        if let Some(after) = crate::retry::retry_after(value, wall_clock()) {
            self.retry_after = Some(after);
        }
        self
    }

    /// The attempt's latency, when the closure measured it itself (default: the time
    /// the closure's future took on the engine's clock).
    pub fn latency(mut self, latency: Duration) -> Self {
        self.latency = Some(latency);
        self
    }

    /// The actual token count, reconciled against the call's estimate.
    pub fn tokens(mut self, tokens: u64) -> Self {
        self.tokens = Some(tokens);
        self
    }

    /// What the response's rate-limit headers said (see [`crate::shaping`]): with
    /// little left, the tool's next calls are spread over the reset window.
    pub fn server_limit(mut self, limit: crate::shaping::ServerLimit) -> Self {
        self.server_limit = Some(limit);
        self
    }

    /// The `Retry-After` set on this result.
    pub fn retry_after_value(&self) -> Option<Duration> {
        self.retry_after
    }

    /// What may follow the attempt.
    pub(super) fn class(&self) -> Class {
        match self.end {
            AttemptEnd::Success => Class::Success,
            AttemptEnd::Invalid => Class::Terminal,
            AttemptEnd::Transport | AttemptEnd::Timeout => Class::Backoff,
            AttemptEnd::Error => match classify(&Attempt {
                status: self.status,
                transport_error: false,
                retry_after: self.retry_after,
                invalid: false,
            }) {
                // A failure with no status (or a 1xx–3xx one) says nothing retryable.
                Class::Success => Class::Terminal,
                c => c,
            },
        }
    }

    /// The outcome its completion records.
    pub(super) fn outcome(&self) -> Outcome {
        match self.end {
            AttemptEnd::Success => Outcome::Success,
            AttemptEnd::Timeout => Outcome::Timeout,
            AttemptEnd::Invalid => Outcome::Invalid,
            AttemptEnd::Error | AttemptEnd::Transport => Outcome::Error,
        }
    }

    /// The server's pause request: a 429 or 503 failure with `Retry-After`.
    pub(super) fn server_pause(&self) -> Option<Duration> {
        (self.end == AttemptEnd::Error && matches!(self.status, Some(429 | 503)))
            .then_some(self.retry_after)
            .flatten()
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AttemptEnd {
    /// A usable value.
    Success,
    /// A failure (with its status, if a response came back).
    Error,
    /// No response: the connection failed.
    Transport,
    /// No response in time (the transport's timeout, or the call's deadline).
    Timeout,
    /// The output failed its check.
    Invalid,
}

impl AttemptEnd {
    /// The stable string: `success`, `error`, `transport_error`, `timeout`, `invalid`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Error => "error",
            Self::Transport => "transport_error",
            Self::Timeout => "timeout",
            Self::Invalid => "invalid",
        }
    }
}
