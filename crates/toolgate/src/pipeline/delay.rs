//! The wait before a call's next attempt, or why it gets none ([`next_delay`]): the
//! server's `Retry-After` or a full-jitter backoff, never past the deadline, each
//! retry taken from the tool's budget.

use std::time::Duration;

use crate::clock::{nanos, Nanos};
use crate::retry::{Class, RetryRuntime};

use super::attempt::AttemptEnd;
use super::failure::StopReason;

/// The wait before the next attempt, or why there is none.
#[allow(clippy::too_many_arguments)]
pub(super) fn next_delay(
    class: Class,
    end: AttemptEnd,
    status: Option<u16>,
    number: u32,
    retry: Option<&RetryRuntime>,
    now: Nanos,
    deadline_at: Option<Nanos>,
    jitter: fn() -> f64,
) -> Result<Duration, StopReason> {
    let delay = match class {
        Class::Success | Class::Terminal => {
            return Err(match (end, status) {
                (AttemptEnd::Invalid, _) => StopReason::InvalidOutput,
                (_, Some(s)) if s >= 400 => StopReason::TerminalStatus,
                _ => StopReason::TerminalError,
            })
        }
        Class::RetryAfter(_) | Class::Backoff => {
            let Some(r) = retry else {
                return Err(StopReason::NotRetryable);
            };
            if number >= r.config.max_attempts {
                return Err(StopReason::AttemptsExhausted);
            }
            let ends_after_deadline =
                |d: Duration| deadline_at.is_some_and(|at| now.saturating_add(nanos(d)) >= at);
            match class {
                Class::RetryAfter(d) => {
                    if d > r.config.max_retry_after {
                        return Err(StopReason::RetryAfterTooLong);
                    }
                    if ends_after_deadline(d) {
                        return Err(StopReason::RetryAfterBeyondDeadline);
                    }
                    d
                }
                _ => {
                    let mut uniform = jitter;
                    let d = r
                        .backoff
                        .map_or(Duration::ZERO, |b| b.delay(number - 1, &mut uniform));
                    if ends_after_deadline(d) {
                        return Err(StopReason::DeadlineExceeded);
                    }
                    d
                }
            }
        }
    };
    if let Some(r) = retry {
        if !r.budget.try_withdraw(now) {
            return Err(StopReason::RetryBudgetExhausted);
        }
    }
    Ok(delay)
}
