//! One pipeline for a tool call: admission, a deadline, classification, completion
//! and disciplined retries — [`Engine::run`].
//!
//! Every attempt goes through the same steps, in this order:
//!
//! 1. **admission** ([`Engine::admit`]: the `Retry-After` pause, the circuit breaker,
//!    every quota including concurrency and the adaptive limit; waiting only as the
//!    tool's `on_limit` says, and never past the call's deadline);
//! 2. **execution** of the caller's closure, raced against the remaining deadline on
//!    the engine's [`Clock`](crate::Clock) (a cut attempt is completed as `timeout`);
//! 3. **classification** ([`retry::classify`](crate::retry::classify));
//! 4. **completion** of the permit with the outcome, latency, token count and the
//!    server's `Retry-After` (which feeds the breaker, the adaptive limit and the
//!    tool's pause);
//! 5. **retry or stop**: a retry needs `[tools.X.retry]`, and either `idempotent = true`
//!    or an idempotency key; it waits the server's `Retry-After` or a full-jitter
//!    backoff, and takes one retry from the tool's [`RetryBudget`].
//!
//! The core stays free of network I/O: the closure performs the attempt and reports
//! how it ended as an [`AttemptResult`].

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use crate::clock::{nanos, wall_clock, Nanos};
use crate::config::RetryConfig;
use crate::engine::{Engine, ExecuteError};
use crate::permit::Permit;
use crate::retry::{classify, Attempt, Backoff, Class, RetryBudget};
use crate::vocab::{Call, Completion, OnLimit, Outcome, Rejection, DEFAULT_MAX_PAUSE};

/// A tool's retry settings as the engine runs them.
#[derive(Debug, Clone)]
pub(crate) struct RetryRuntime {
    config: RetryConfig,
    backoff: Option<Backoff>,
    budget: Arc<RetryBudget>,
}

impl RetryRuntime {
    /// The runtime of `config`; the budget of `old` is kept when its settings did not
    /// change (a reload does not hand out a fresh budget).
    pub(crate) fn new(config: &RetryConfig, old: Option<&RetryRuntime>) -> Self {
        let budget = old
            .filter(|o| {
                o.config.budget_ratio == config.budget_ratio
                    && o.config.budget_min_per_second == config.budget_min_per_second
            })
            .map_or_else(
                || {
                    Arc::new(RetryBudget::new(
                        config.budget_ratio,
                        config.budget_min_per_second,
                    ))
                },
                |o| o.budget.clone(),
            );
        Self {
            config: config.clone(),
            // Validated with the config (`base` > 0, `cap` ≥ `base`).
            backoff: Backoff::try_new(config.base, config.cap).ok(),
            budget,
        }
    }
}

/// Options of one [`Engine::run`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use toolgate::RunOptions;
///
/// let opts = RunOptions::new()
///     .idempotency_key("order-42")
///     .deadline(Duration::from_secs(5));
/// assert_eq!(opts.idempotency_key_value(), Some("order-42"));
/// ```
#[derive(Debug, Clone, Copy, Default)]
#[must_use = "options do nothing until passed to `Engine::run`"]
pub struct RunOptions<'k> {
    idempotency_key: Option<&'k str>,
    deadline: Option<Duration>,
    jitter: Option<fn() -> f64>,
}

impl<'k> RunOptions<'k> {
    /// No key, the tool's deadline, random jitter.
    pub const fn new() -> Self {
        Self {
            idempotency_key: None,
            deadline: None,
            jitter: None,
        }
    }

    /// The call's idempotency key: makes a call to a tool that is not marked
    /// `idempotent` retryable, and is handed to every attempt (send it as
    /// `Idempotency-Key`).
    pub const fn idempotency_key(mut self, key: &'k str) -> Self {
        self.idempotency_key = Some(key);
        self
    }

    /// Sets the key from an option.
    pub const fn with_idempotency_key(mut self, key: Option<&'k str>) -> Self {
        self.idempotency_key = key;
        self
    }

    /// Bounds the whole call, every admission, attempt and delay included. Replaces
    /// the tool's `[tools.X.retry] deadline`; without either there is no bound.
    pub const fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The source of the backoff's full jitter: values in `[0, 1)` (default: a
    /// process-wide random source). `|| 1.0` makes every backoff its ceiling, for
    /// deterministic tests.
    pub const fn jitter(mut self, uniform: fn() -> f64) -> Self {
        self.jitter = Some(uniform);
        self
    }

    /// The idempotency key, if any.
    pub const fn idempotency_key_value(&self) -> Option<&'k str> {
        self.idempotency_key
    }
}

/// What the closure of [`Engine::run`] is told about the attempt it performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptCtx<'k> {
    number: u32,
    idempotency_key: Option<&'k str>,
    remaining: Option<Duration>,
    waited: Duration,
}

impl<'k> AttemptCtx<'k> {
    /// The attempt's number: 1 for the first.
    pub const fn number(&self) -> u32 {
        self.number
    }

    /// The call's idempotency key, the same on every attempt.
    pub const fn idempotency_key(&self) -> Option<&'k str> {
        self.idempotency_key
    }

    /// The time left until the call's deadline, if it has one: a good per-attempt
    /// timeout for the transport (the pipeline cuts the attempt then anyway).
    pub const fn remaining(&self) -> Option<Duration> {
        self.remaining
    }

    /// How long this attempt waited for admission.
    pub const fn waited(&self) -> Duration {
        self.waited
    }
}

/// How one attempt ended, as reported by the closure of [`Engine::run`].
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
    result: Result<T, E>,
    end: AttemptEnd,
    status: Option<u16>,
    retry_after: Option<Duration>,
    latency: Option<Duration>,
    tokens: Option<u64>,
    server_limit: Option<crate::shaping::ServerLimit>,
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

    fn class(&self) -> Class {
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

    fn outcome(&self) -> Outcome {
        match self.end {
            AttemptEnd::Success => Outcome::Success,
            AttemptEnd::Timeout => Outcome::Timeout,
            AttemptEnd::Invalid => Outcome::Invalid,
            AttemptEnd::Error | AttemptEnd::Transport => Outcome::Error,
        }
    }

    /// The server's pause request: a 429 or 503 failure with `Retry-After`.
    fn server_pause(&self) -> Option<Duration> {
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

/// One attempt of a call, as listed in [`RunOutput`] and [`RunFailure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptRecord {
    /// 1 for the first attempt.
    pub number: u32,
    /// How it ended.
    pub end: AttemptEnd,
    /// The response's status, if one came back.
    pub status: Option<u16>,
    /// How long it took.
    pub latency: Duration,
    /// The wait before the next attempt (`None` for the last one).
    pub delay: Option<Duration>,
}

/// A call that succeeded: the value and every attempt it took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutput<T> {
    /// The successful attempt's value.
    pub value: T,
    /// Every attempt, the successful one last.
    pub history: Vec<AttemptRecord>,
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
    /// Every attempt that ran.
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

/// The label of `toolgate_retries_total{reason}`.
fn retry_label(class: Class, end: AttemptEnd) -> &'static str {
    match (class, end) {
        (Class::RetryAfter(_), _) => "retry_after",
        (_, AttemptEnd::Transport) => "transport_error",
        (_, AttemptEnd::Timeout) => "timeout",
        _ => "status",
    }
}

// === impl Engine ===

impl Engine {
    /// Runs a tool call through the whole pipeline — admission, execution under the
    /// call's deadline, classification, completion, retries — and returns its value or
    /// one terminal failure.
    ///
    /// `attempt` performs **one** attempt and reports how it ended
    /// ([`AttemptResult`]); it is called again for each retry, with the attempt's
    /// [`AttemptCtx`] (its number and the idempotency key to send).
    ///
    /// Retries happen only when the tool has `[tools.X.retry]` and is `idempotent`
    /// or the call has an idempotency key; at most `max_attempts` attempts run. A
    /// 429 or 503 with `Retry-After` is retried exactly that long after it ended
    /// (the tool is paused until then for every caller); one longer than
    /// `max_retry_after` ends the call (`retry_after_too_long`), and one that ends
    /// after the deadline ends it at once (`retry_after_beyond_deadline`). Other
    /// retryable results wait a full-jitter backoff between `base` and `cap`. Each
    /// retry takes one retry from the tool's budget (successful calls fill it) and
    /// passes admission again: a rejected retry ends the call with that rejection —
    /// it is never replayed silently.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops any permit it holds (released, no
    /// outcome recorded) and any timer it waits on.
    ///
    /// # Errors
    ///
    /// [`ExecuteError::Rejected`] when the first admission was refused (the tool never
    /// ran), or [`ExecuteError::Tool`] with a [`RunFailure`] listing every attempt.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use toolgate::{AttemptResult, Call, Engine, Policy, RunOptions};
    ///
    /// let engine = Engine::new(Policy::from_toml_str(r#"
    ///     [tools.lookup]
    ///     rate = "10/s"
    ///     idempotent = true
    ///     [tools.lookup.retry]
    ///     base = "1ms"
    ///     cap = "2ms"
    /// "#).unwrap());
    /// let out = engine
    ///     .run(&Call::new("lookup"), RunOptions::new(), |ctx| async move {
    ///         if ctx.number() == 1 {
    ///             AttemptResult::failure("unavailable").status(503)
    ///         } else {
    ///             AttemptResult::success("found").status(200)
    ///         }
    ///     })
    ///     .await
    ///     .unwrap();
    /// assert_eq!((out.value, out.attempts()), ("found", 2));
    /// # }
    /// ```
    pub async fn run<'k, T, E, F, Fut>(
        &self,
        call: &Call<'_>,
        options: RunOptions<'k>,
        attempt: F,
    ) -> Result<RunOutput<T>, ExecuteError<RunFailure<E>>>
    where
        F: FnMut(AttemptCtx<'k>) -> Fut,
        Fut: Future<Output = AttemptResult<T, E>>,
    {
        self.run_from(None, call, options, attempt).await
    }

    /// [`Engine::run`] for a call already admitted: its first attempt runs on
    /// `permit` (from [`Engine::admit`] of the same `call`) instead of being admitted
    /// again; retries are admitted as usual. For a consumer that admits before it
    /// takes work in (the event mesh pulls a call only once it holds its admission).
    ///
    /// # Cancel safety
    ///
    /// As [`Engine::run`]; dropping the future drops `permit` (released, no outcome).
    ///
    /// # Errors
    ///
    /// As [`Engine::run`] (never [`ExecuteError::Rejected`]: the first attempt is
    /// admitted already).
    pub async fn run_admitted<'k, T, E, F, Fut>(
        &self,
        permit: Permit,
        call: &Call<'_>,
        options: RunOptions<'k>,
        attempt: F,
    ) -> Result<RunOutput<T>, ExecuteError<RunFailure<E>>>
    where
        F: FnMut(AttemptCtx<'k>) -> Fut,
        Fut: Future<Output = AttemptResult<T, E>>,
    {
        self.run_from(Some(permit), call, options, attempt).await
    }

    async fn run_from<'k, T, E, F, Fut>(
        &self,
        mut first: Option<Permit>,
        call: &Call<'_>,
        options: RunOptions<'k>,
        mut attempt: F,
    ) -> Result<RunOutput<T>, ExecuteError<RunFailure<E>>>
    where
        F: FnMut(AttemptCtx<'k>) -> Fut,
        Fut: Future<Output = AttemptResult<T, E>>,
    {
        let tool = self.compiled().tools.get(call.tool).cloned();
        let settings = tool.as_ref().and_then(|t| t.retry.clone());
        // Retries only for idempotent tools or calls with a key.
        let retry = settings.as_ref().filter(|_| {
            tool.as_ref().is_some_and(|t| t.idempotent) || options.idempotency_key.is_some()
        });
        let clock = self.clock().clone();
        let start = clock.now();
        let deadline_at = options
            .deadline
            .or(settings.as_ref().map(|s| s.config.deadline))
            .map(|d| start.saturating_add(nanos(d)));
        let jitter = options.jitter.unwrap_or(fastrand::f64);
        let mut history: Vec<AttemptRecord> = Vec::new();
        let mut last_error: Option<E> = None;
        let mut last_status: Option<u16> = None;
        let fail = |reason, history: Vec<AttemptRecord>, error, last_status| RunFailure {
            tool: call.tool.to_string(),
            reason,
            attempts: history,
            last_status,
            error,
            rejection: None,
            retry_after: None,
        };
        loop {
            let number = u32::try_from(history.len()).unwrap_or(u32::MAX - 1) + 1;

            // 1. Admission, never waiting past the deadline.
            let mut admit_call = *call;
            if let (Some(at), Some(t)) = (deadline_at, &tool) {
                let own = call.max_wait_override();
                if t.on_limit == OnLimit::Wait || own.is_some() {
                    let left = Duration::from_nanos(at.saturating_sub(clock.now()));
                    admit_call = admit_call.max_wait(own.unwrap_or(t.max_wait).min(left));
                }
            }
            let admitted = match first.take() {
                Some(p) => Ok(p),
                None => self.admit(&admit_call).await,
            };
            let permit = match admitted {
                Ok(p) => p,
                Err(r) if number == 1 => return Err(ExecuteError::Rejected(r)),
                Err(r) => {
                    tracing::warn!(target: "toolgate::retry", tool = call.tool, attempt = number,
                        reason = "rejected", rejected_by = r.reason().as_str(), quota = r.quota(),
                        "a retry was not admitted; the call ends");
                    let mut f = fail(StopReason::Rejected, history, last_error, last_status);
                    f.rejection = Some(Box::new(r));
                    return Err(ExecuteError::Tool(f));
                }
            };

            // 2. Execution under the remaining deadline.
            let t0 = clock.now();
            let ctx = AttemptCtx {
                number,
                idempotency_key: options.idempotency_key,
                remaining: deadline_at.map(|at| Duration::from_nanos(at.saturating_sub(t0))),
                waited: permit.waited(),
            };
            let fut = attempt(ctx);
            let ended = match deadline_at {
                None => Some(fut.await),
                Some(at) => {
                    let mut fut = std::pin::pin!(fut);
                    // Poll once before arming the deadline's timer: an attempt that is
                    // ready at once needs none.
                    match std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await {
                        Poll::Ready(r) => Some(r),
                        Poll::Pending => {
                            let sleep = clock.sleep_until(at);
                            tokio::select! {
                                biased;
                                r = &mut fut => Some(r),
                                () = sleep => None,
                            }
                        }
                    }
                }
            };
            let measured = Duration::from_nanos(clock.now().saturating_sub(t0));
            let Some(res) = ended else {
                permit.complete(Completion::new(Outcome::Timeout).latency(measured));
                let record = AttemptRecord {
                    number,
                    end: AttemptEnd::Timeout,
                    status: None,
                    latency: measured,
                    delay: None,
                };
                log_attempt(call.tool, &record, Some(StopReason::DeadlineExceeded));
                history.push(record);
                return Err(ExecuteError::Tool(fail(
                    StopReason::DeadlineExceeded,
                    history,
                    last_error,
                    last_status,
                )));
            };

            // 3. Classification; 4. completion. The server's Retry-After counts for
            // at most the tool's max_pause (its pause ends then; the completion cuts
            // it, and says so).
            let max_pause = tool.as_ref().map_or(DEFAULT_MAX_PAUSE, |t| t.max_pause);
            let class = match res.class() {
                Class::RetryAfter(d) => Class::RetryAfter(d.min(max_pause)),
                c => c,
            };
            let latency = res.latency.unwrap_or(measured);
            let mut completion = Completion::new(res.outcome()).latency(latency);
            if let Some(n) = res.tokens {
                completion = completion.tokens(n);
            }
            if let Some(after) = res.server_pause() {
                completion = completion.retry_after(after);
            }
            if let Some(s) = res.server_limit {
                completion = completion.server_limit(s);
            }
            permit.complete(completion);
            // Read after completing: the tool's pause ends no later than `now + after`.
            let now = clock.now();
            let mut record = AttemptRecord {
                number,
                end: res.end,
                status: res.status,
                latency,
                delay: None,
            };
            if res.status.is_some() {
                last_status = res.status;
            }
            let end = res.end;
            let server_after = res.retry_after.map(|d| d.min(max_pause));
            match res.result {
                Ok(value) => {
                    if let Some(s) = &settings {
                        s.budget.deposit(now);
                    }
                    if number > 1 {
                        metrics::counter!("toolgate_success_after_retry_total",
                            "tool" => call.tool.to_string())
                        .increment(1);
                    }
                    history.push(record);
                    return Ok(RunOutput { value, history });
                }
                Err(e) => last_error = Some(e),
            }

            // 5. Retry or stop.
            match next_delay(
                class,
                end,
                res.status,
                number,
                retry,
                now,
                deadline_at,
                jitter,
            ) {
                Ok(delay) => {
                    record.delay = Some(delay);
                    log_attempt(call.tool, &record, None);
                    history.push(record);
                    metrics::counter!("toolgate_retries_total",
                        "tool" => call.tool.to_string(), "reason" => retry_label(class, end))
                    .increment(1);
                    if !delay.is_zero() {
                        clock.sleep_until(now.saturating_add(nanos(delay))).await;
                    }
                }
                Err(reason) => {
                    log_attempt(call.tool, &record, Some(reason));
                    history.push(record);
                    let mut f = fail(reason, history, last_error, last_status);
                    if matches!(
                        reason,
                        StopReason::RetryAfterBeyondDeadline | StopReason::RetryAfterTooLong
                    ) {
                        f.retry_after = server_after;
                    }
                    return Err(ExecuteError::Tool(f));
                }
            }
        }
    }
}

/// The wait before the next attempt, or why there is none.
#[allow(clippy::too_many_arguments)]
fn next_delay(
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

/// One line per failed attempt: tool, attempt, status, latency, the delay before
/// the next one or why there is none. Never arguments or credentials.
fn log_attempt(tool: &str, r: &AttemptRecord, stop: Option<StopReason>) {
    let latency_ms = r.latency.as_millis() as u64;
    match stop {
        None => tracing::info!(target: "toolgate::retry", tool, attempt = r.number,
            status = r.status, end = r.end.as_str(), latency_ms,
            delay_ms = r.delay.map(|d| d.as_millis() as u64),
            "attempt failed; retrying"),
        Some(reason) => tracing::warn!(target: "toolgate::retry", tool, attempt = r.number,
            status = r.status, end = r.end.as_str(), latency_ms, reason = reason.as_str(),
            "attempt failed; the call ends"),
    }
}
