//! The steps of one call through the pipeline ([`run`]): admit, attempt under the
//! deadline, complete with the classified outcome, then retry or stop.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use crate::admit::{self, Waits};
use crate::clock::{nanos, Nanos};
use crate::live::Live;
use crate::permit::Permit;
use crate::retry::{Class, RetryRuntime};
use crate::tool::ToolRuntime;
use crate::vocab::{
    Call, Completion, ExecuteError, OnLimit, Outcome, Rejection, DEFAULT_MAX_PAUSE,
};

use super::attempt::{AttemptEnd, AttemptResult};
use super::delay::next_delay;
use super::failure::{RunFailure, RunOutput, StopReason};
use super::history::{AttemptRecord, History};
use super::options::{AttemptCtx, RunOptions};

/// One call on its way through the pipeline: what every step reads.
struct Run<'r, 'k> {
    live: &'r Live,
    call: &'r Call<'r>,
    options: RunOptions<'k>,
    tool: Option<Arc<ToolRuntime>>,
    /// Whether the call may be retried: an idempotent tool, or a key.
    retries: bool,
    deadline_at: Option<Nanos>,
    jitter: fn() -> f64,
}

/// What the attempts so far left behind, for the failure that may end the call.
struct Tally<E> {
    history: History,
    last_error: Option<E>,
    last_status: Option<u16>,
}

/// Runs `call` through the pipeline (see [`crate::Engine::run`]); its first attempt
/// runs on `first` when it was admitted already. The run's one future, which starts
/// the run at its first poll: no layer of future between the caller's and the run's
/// to build and move the arguments through.
pub(crate) fn run<'r, 'k, T, E, F, Fut>(
    live: &'r Live,
    first: Option<Permit>,
    call: &'r Call<'_>,
    options: RunOptions<'k>,
    attempt: F,
) -> impl Future<Output = Result<RunOutput<T>, ExecuteError<RunFailure<E>>>> + use<'r, 'k, T, E, F, Fut>
where
    F: FnMut(AttemptCtx<'k>) -> Fut,
    Fut: Future<Output = AttemptResult<T, E>>,
{
    Run::go(live, call, options, first, attempt)
}

// === impl Run ===

impl<'r, 'k> Run<'r, 'k> {
    fn new(live: &'r Live, call: &'r Call<'r>, options: RunOptions<'k>) -> Self {
        let tool = live.tool(call.tool).ok();
        let settings = tool.as_ref().and_then(|t| t.retry.as_ref());
        // Retries only for idempotent tools or calls with a key.
        let retries =
            tool.as_ref().is_some_and(|t| t.idempotent) || options.idempotency_key.is_some();
        let start = live.shared.now();
        let deadline_at = options
            .deadline
            .or(settings.map(|s| s.config.deadline))
            .map(|d| start.saturating_add(nanos(d)));
        // The call's own deadline (`Call::deadline`) bounds the run too.
        let deadline_at = match (deadline_at, call.deadline_at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Self {
            live,
            call,
            options,
            tool,
            retries,
            deadline_at,
            jitter: options.jitter.unwrap_or(fastrand::f64),
        }
    }

    /// The engine's time, read without a virtual call for toolgate's own clocks.
    #[inline]
    fn now(&self) -> Nanos {
        self.live.shared.now()
    }

    /// The tool's retry settings, whether or not this call may be retried.
    fn settings(&self) -> Option<&RetryRuntime> {
        self.tool.as_ref()?.retry.as_ref()
    }

    /// The retry settings, when this call may be retried.
    fn retry(&self) -> Option<&RetryRuntime> {
        self.settings().filter(|_| self.retries)
    }

    /// Every attempt, each admitted, run, completed and followed by a retry or the
    /// end of the call.
    async fn go<T, E, F, Fut>(
        live: &'r Live,
        call: &'r Call<'r>,
        options: RunOptions<'k>,
        mut first: Option<Permit>,
        mut attempt: F,
    ) -> Result<RunOutput<T>, ExecuteError<RunFailure<E>>>
    where
        F: FnMut(AttemptCtx<'k>) -> Fut,
        Fut: Future<Output = AttemptResult<T, E>>,
    {
        // Started at the first poll, like any async function's body.
        let this = Self::new(live, call, options);
        let mut tally = Tally {
            // Most calls take one attempt, which the history holds inline.
            history: History::new(),
            last_error: None,
            last_status: None,
        };
        loop {
            let number = u32::try_from(tally.history.len()).unwrap_or(u32::MAX - 1) + 1;
            // 1. Admission, never waiting past the deadline: decided at once where it
            // can be, here rather than in an async step (no future to build).
            let admitted = match first.take() {
                Some(p) => Ok(p),
                None => {
                    let call = this.attempt_call();
                    match this.admit_at_once(&call, number) {
                        Ok(answer) => answer,
                        Err(tool) => admit::admit(live, tool, &call, Waits::AsTheToolSays).await,
                    }
                }
            };
            let permit = match admitted {
                Ok(p) => p,
                Err(r) if number == 1 => return Err(ExecuteError::Rejected(r)),
                Err(r) => return Err(ExecuteError::Tool(this.not_admitted(r, number, tally))),
            };
            // 2. Execution under the remaining deadline.
            let t0 = this.now();
            let fut = std::pin::pin!(attempt(this.ctx(number, t0, &permit)));
            let ended = this.execute(fut).await;
            let measured = Duration::from_nanos(this.now().saturating_sub(t0));
            let Some(res) = ended else {
                return Err(ExecuteError::Tool(
                    this.cut(permit, number, measured, tally),
                ));
            };
            // 3. Classification; 4. completion.
            let (class, now, record) = this.complete(permit, &res, number, measured);
            if res.status.is_some() {
                tally.last_status = res.status;
            }
            let (end, status) = (res.end, res.status);
            let server_after = res.retry_after.map(|d| d.min(this.max_pause()));
            match res.result {
                Ok(value) => return Ok(this.succeeded(value, (number, now), record, tally)),
                Err(e) => tally.last_error = Some(e),
            }
            // 5. Retry or stop.
            let stop = this.retry_or_stop(class, (end, status), number, now, record, &mut tally);
            if let Err(reason) = stop.await {
                let mut f = tally.fail(this.call.tool, reason);
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

    /// Step 1: the call as its attempts are admitted: waiting only as the tool says,
    /// and never past the call's deadline.
    fn attempt_call(&self) -> Call<'r> {
        let mut call = *self.call;
        if let (Some(at), Some(t)) = (self.deadline_at, &self.tool) {
            let own = self.call.max_wait_override();
            if t.on_limit == OnLimit::Wait || own.is_some() {
                let left = Duration::from_nanos(at.saturating_sub(self.now()));
                call = call.max_wait(own.unwrap_or(t.max_wait).min(left));
            }
        }
        call
    }

    /// Step 1, decided at once where it can be (no admission future to build): the
    /// first attempt on the tool resolved for the run a moment ago (one lookup by name
    /// per call, not two). `Err`: what `admit::admit` takes instead, that tool, or
    /// `None` for a retry, which looks it up again so that a reload between attempts
    /// is seen.
    fn admit_at_once(
        &self,
        call: &Call<'_>,
        number: u32,
    ) -> Result<Result<Permit, Rejection>, Option<Arc<ToolRuntime>>> {
        let tool = self.tool.as_ref().filter(|_| number == 1).ok_or(None)?;
        admit::decide_now(self.live, tool, call, Waits::AsTheToolSays).map_err(|t| Some(t.clone()))
    }

    /// What attempt `number`, starting at `t0` on `permit`, is told.
    fn ctx(&self, number: u32, t0: Nanos, permit: &Permit) -> AttemptCtx<'k> {
        AttemptCtx {
            number,
            idempotency_key: self.options.idempotency_key,
            remaining: self
                .deadline_at
                .map(|at| Duration::from_nanos(at.saturating_sub(t0))),
            waited: permit.waited(),
        }
    }

    /// Step 2: the attempt, raced against the call's deadline (`None`: cut by it).
    async fn execute<T, E>(
        &self,
        mut fut: std::pin::Pin<&mut impl Future<Output = AttemptResult<T, E>>>,
    ) -> Option<AttemptResult<T, E>> {
        let Some(at) = self.deadline_at else {
            return Some(fut.await);
        };
        // Poll once before arming the deadline's timer: an attempt that is ready at
        // once needs none.
        match std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await {
            Poll::Ready(r) => Some(r),
            Poll::Pending => {
                let sleep = self.live.shared.clock.sleep_until(at);
                tokio::select! {
                    biased;
                    r = &mut fut => Some(r),
                    () = sleep => None,
                }
            }
        }
    }

    /// Steps 3 and 4: classifies the attempt and completes its permit with the
    /// outcome, latency, token count and the server's signals. The server's
    /// Retry-After counts for at most the tool's `max_pause` (its pause ends then;
    /// the completion cuts it, and says so). The class, the time after completing
    /// (the tool's pause ends no later than then plus the Retry-After) and the
    /// attempt's record.
    fn complete<T, E>(
        &self,
        permit: Permit,
        res: &AttemptResult<T, E>,
        number: u32,
        measured: Duration,
    ) -> (Class, Nanos, AttemptRecord) {
        let class = match res.class() {
            Class::RetryAfter(d) => Class::RetryAfter(d.min(self.max_pause())),
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
        let record = AttemptRecord {
            number,
            end: res.end,
            status: res.status,
            latency,
            delay: None,
        };
        (class, self.now(), record)
    }

    /// Step 5: waits for the next attempt, or says why there is none.
    async fn retry_or_stop(
        &self,
        class: Class,
        (end, status): (AttemptEnd, Option<u16>),
        number: u32,
        now: Nanos,
        mut record: AttemptRecord,
        tally: &mut Tally<impl Sized>,
    ) -> Result<(), StopReason> {
        let delay = next_delay(
            class,
            end,
            status,
            number,
            self.retry(),
            now,
            self.deadline_at,
            self.jitter,
        );
        match delay {
            Ok(delay) => {
                record.delay = Some(delay);
                log_attempt(self.call.tool, &record, None);
                tally.history.push(record);
                metrics::counter!("toolgate_retries_total",
                    "tool" => self.call.tool.to_string(), "reason" => retry_label(class, end))
                .increment(1);
                if !delay.is_zero() {
                    self.live
                        .shared
                        .clock
                        .sleep_until(now.saturating_add(nanos(delay)))
                        .await;
                }
                Ok(())
            }
            Err(reason) => {
                log_attempt(self.call.tool, &record, Some(reason));
                tally.history.push(record);
                Err(reason)
            }
        }
    }

    /// The call's success: its budget refilled, counted when it took retries.
    fn succeeded<T, E>(
        &self,
        value: T,
        (number, now): (u32, Nanos),
        record: AttemptRecord,
        mut tally: Tally<E>,
    ) -> RunOutput<T> {
        if let Some(s) = self.settings() {
            s.budget.deposit(now);
        }
        if number > 1 {
            metrics::counter!("toolgate_success_after_retry_total",
                "tool" => self.call.tool.to_string())
            .increment(1);
        }
        tally.history.push(record);
        RunOutput {
            value,
            history: tally.history,
        }
    }

    /// The end of a call whose retry was not admitted.
    fn not_admitted<E>(&self, r: Rejection, number: u32, tally: Tally<E>) -> RunFailure<E> {
        tracing::warn!(target: "toolgate::retry", tool = self.call.tool, attempt = number,
            reason = "rejected", rejected_by = r.reason().as_str(), quota = r.quota(),
            "a retry was not admitted; the call ends");
        let mut f = tally.fail(self.call.tool, StopReason::Rejected);
        f.rejection = Some(Box::new(r));
        f
    }

    /// The end of a call whose attempt the deadline cut: completed as `timeout`.
    fn cut<E>(
        &self,
        permit: Permit,
        number: u32,
        measured: Duration,
        mut tally: Tally<E>,
    ) -> RunFailure<E> {
        permit.complete(Completion::new(Outcome::Timeout).latency(measured));
        let record = AttemptRecord {
            number,
            end: AttemptEnd::Timeout,
            status: None,
            latency: measured,
            delay: None,
        };
        log_attempt(self.call.tool, &record, Some(StopReason::DeadlineExceeded));
        tally.history.push(record);
        tally.fail(self.call.tool, StopReason::DeadlineExceeded)
    }

    /// The tool's `max_pause` (the default for a tool without a policy).
    fn max_pause(&self) -> Duration {
        self.tool
            .as_ref()
            .map_or(DEFAULT_MAX_PAUSE, |t| t.max_pause)
    }
}

// === impl Tally ===

impl<E> Tally<E> {
    /// The failure that ends a call of `tool` for `reason`.
    fn fail(self, tool: &str, reason: StopReason) -> RunFailure<E> {
        RunFailure {
            tool: tool.to_string(),
            reason,
            attempts: self.history.into_vec(),
            last_status: self.last_status,
            error: self.last_error,
            rejection: None,
            retry_after: None,
        }
    }
}

/// The label of `toolgate_retries_total{reason}`.
fn retry_label(class: Class, end: AttemptEnd) -> &'static str {
    match (class, end) {
        (Class::RetryAfter(_), _) => "retry_after",
        (_, AttemptEnd::Transport) => "transport_error",
        (_, AttemptEnd::Timeout) => "timeout",
        _ => "status",
    }
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
