//! How a call ended: [`RunOutput`] on success, else [`RunFailure`] with its
//! [`StopReason`].

use std::fmt;
use std::time::Duration;

use crate::vocab::Rejection;

use super::history::{AttemptRecord, History};

/// A call that succeeded: the value and every attempt it took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutput<T> {
    /// The successful attempt's value.
    pub value: T,
    /// Every attempt, the successful one last.
    pub history: History,
}

impl<T> RunOutput<T> {
    /// How many attempts the call took.
    pub fn attempts(&self) -> u32 {
        u32::try_from(self.history.len()).unwrap_or(u32::MAX)
    }
}

/// Why a call that ran ended without success. The strings of [`StopReason::as_str`]
/// are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StopReason {
    /// A status that is not retried (4xx other than 429).
    TerminalStatus,
    /// A failure without a status, which says nothing retryable.
    TerminalError,
    /// The output failed its check.
    InvalidOutput,
    /// Retryable, but the call may not be retried: the tool has no `[retry]`, or is
    /// not `idempotent` and the call has no idempotency key.
    NotRetryable,
    /// `max_attempts` attempts failed.
    AttemptsExhausted,
    /// The tool's retry budget had no retry left.
    RetryBudgetExhausted,
    /// The deadline passed during an attempt, or a backoff would end after it.
    DeadlineExceeded,
    /// The server's `Retry-After` ends after the deadline: no waiting in vain.
    RetryAfterBeyondDeadline,
    /// The server's `Retry-After` is longer than `max_retry_after`.
    RetryAfterTooLong,
    /// A retry was not admitted (the [`Rejection`] is in [`RunFailure::rejection`]).
    Rejected,
}

impl StopReason {
    /// The stable string, e.g. `"attempts_exhausted"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::TerminalStatus => "terminal_status",
            Self::TerminalError => "terminal_error",
            Self::InvalidOutput => "invalid_output",
            Self::NotRetryable => "not_retryable",
            Self::AttemptsExhausted => "attempts_exhausted",
            Self::RetryBudgetExhausted => "retry_budget_exhausted",
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::RetryAfterBeyondDeadline => "retry_after_beyond_deadline",
            Self::RetryAfterTooLong => "retry_after_too_long",
            Self::Rejected => "rejected",
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A call that ran at least once (or was cut by its deadline) and ended without
/// success: the one terminal result the caller sees.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunFailure<E> {
    /// The tool.
    pub tool: String,
    /// Why the call ended.
    pub reason: StopReason,
    /// Every attempt that ran. A vector, not a [`History`], so that the failure
    /// (and every `Result` that carries it) stays small; a failure allocates its
    /// tool's name anyway.
    pub attempts: Vec<AttemptRecord>,
    /// The status of the last attempt that got a response.
    pub last_status: Option<u16>,
    /// The error of the last attempt that returned one (`None` when the only
    /// attempt was cut by the deadline).
    pub error: Option<E>,
    /// The rejection of a retry's admission ([`StopReason::Rejected`]); boxed to keep
    /// the failure small.
    pub rejection: Option<Box<Rejection>>,
    /// The server's `Retry-After` that ended the call
    /// ([`StopReason::RetryAfterBeyondDeadline`], [`StopReason::RetryAfterTooLong`]),
    /// cut to the tool's `max_pause` as the tool's pause is.
    pub retry_after: Option<Duration>,
}

impl<E> RunFailure<E> {
    /// Replaces the error.
    pub fn map_error<F>(self, f: impl FnOnce(E) -> F) -> RunFailure<F> {
        RunFailure {
            tool: self.tool,
            reason: self.reason,
            attempts: self.attempts,
            last_status: self.last_status,
            error: self.error.map(f),
            rejection: self.rejection,
            retry_after: self.retry_after,
        }
    }
}

impl<E: fmt::Display> fmt::Display for RunFailure<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "call to {:?} failed after {} attempt(s): {}",
            self.tool,
            self.attempts.len(),
            self.reason
        )?;
        if let Some(s) = self.last_status {
            write!(f, " (last status {s})")?;
        }
        if let Some(r) = &self.rejection {
            write!(f, "; {r}")?;
        } else if let Some(e) = &self.error {
            write!(f, ": {e}")?;
        }
        Ok(())
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for RunFailure<E> {}
