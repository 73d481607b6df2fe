//! Running a tool call through the whole pipeline: the one function behind
//! `POST /v1/tools/{tool}/invoke` and the event mesh, so that a call is admitted,
//! executed, classified, completed and retried the same way whichever door it came
//! in by.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use toolgate::{
    AttemptResult, Call, ExecuteError, Permit, Priority, RunFailure, RunOptions, RunOutput,
};

use crate::state::AppState;
use crate::upstream::{self, Failure, Success, Upstream};

/// One call to run.
#[derive(Debug)]
pub struct Job<'a> {
    /// The tool (it has an upstream).
    pub tool: &'a str,
    /// The tenant, if any.
    pub tenant: Option<&'a str>,
    /// The arguments, already checked against the tool's schema.
    pub arguments: &'a Value,
    /// Sent as `Idempotency-Key` on every attempt; makes the call retryable.
    pub idempotency_key: Option<&'a str>,
    /// The declared token cost.
    pub tokens: u64,
    /// The call's own `max_wait` (it waits even on a fail-fast tool).
    pub max_wait: Option<Duration>,
    /// A bound on every wait, whatever the tool or call says.
    pub wait_cap: Duration,
    /// The call's priority class.
    pub priority: Priority,
    /// Time left to the call's deadline (`ZERO`: passed): bounds the whole call
    /// (admission, attempts, delays), and its wait by the tool's observed run time
    /// ([`Call::deadline`]).
    pub deadline: Option<Duration>,
    /// The call's admission, taken before the call was taken in: the first attempt
    /// runs on it.
    pub permit: Option<Permit>,
}

/// How a run ended, with how long its admissions waited in all.
#[derive(Debug)]
pub struct Ran {
    /// The pipeline's answer.
    pub run: Result<RunOutput<Success>, ExecuteError<RunFailure<Failure>>>,
    /// Time spent waiting for admission, over every attempt.
    pub waited: Duration,
}

/// Runs `job` against `up` through the engine's pipeline.
pub async fn run<'a>(state: &AppState, up: &Arc<Upstream>, job: Job<'a>) -> Ran {
    let mut call = Call::new(job.tool)
        .with_tenant(job.tenant)
        .tokens(job.tokens)
        .cap_wait(job.wait_cap)
        .priority(job.priority);
    if let Some(left) = job.deadline {
        let now = state.engine().clock().now();
        call = call.deadline(crate::urgency::engine_deadline(now, left));
    }
    if let Some(w) = job.max_wait {
        call = call.max_wait(w);
    }
    let max_bytes = up
        .config
        .max_response_bytes
        .unwrap_or(state.live().settings.limits.max_response_bytes);
    let (http, up_ref, args) = (state.http(), &**up, job.arguments);
    let mut options = RunOptions::new().with_idempotency_key(job.idempotency_key);
    if let Some(d) = job.deadline {
        options = options.deadline(d);
    }
    let mut waited = Duration::ZERO;
    let (activity, tool, tenant, priority) = (state.activity(), job.tool, job.tenant, job.priority);
    // Every attempt was admitted: each counts as an admission in the activity.
    let attempt = |ctx: toolgate::AttemptCtx<'a>| {
        waited += ctx.waited();
        activity.admitted(tool, tenant, ctx.waited(), priority);
        async move {
            // Every attempt sends the same `Idempotency-Key`.
            let (result, limit) =
                upstream::execute(http, up_ref, args, ctx.idempotency_key(), max_bytes).await;
            let res = match result {
                Ok(ok) => {
                    let status = ok.status;
                    AttemptResult::success(ok).status(status)
                }
                Err(f) => attempt_of(f),
            };
            // The upstream's rate-limit headers shape this tool's next calls.
            match limit {
                Some(s) => res.server_limit(s),
                None => res,
            }
        }
    };
    let engine = state.engine();
    let run = match job.permit {
        Some(p) => engine.run_admitted(p, &call, options, attempt).await,
        None => engine.run(&call, options, attempt).await,
    };
    let refused = match &run {
        Err(ExecuteError::Rejected(r)) => Some(r),
        Err(ExecuteError::Tool(f)) => f.rejection.as_deref(),
        Ok(_) => None,
    };
    if let Some(r) = refused {
        activity.rejected(tool, tenant, r.reason());
    }
    Ran { run, waited }
}

/// How an upstream failure is reported to the pipeline (and so classified).
fn attempt_of(f: Failure) -> AttemptResult<Success, Failure> {
    match f {
        Failure::Timeout(_) => AttemptResult::timeout(f),
        Failure::Transport(_) => AttemptResult::transport_error(f),
        Failure::Invalid(_) => AttemptResult::invalid(f),
        // A failure with a 2xx status is terminal: a too-large answer is not transient.
        Failure::TooLarge(_, status) => AttemptResult::failure(f).status(status),
        Failure::Status(status, _, after) => {
            let res = AttemptResult::failure(f).status(status);
            match after {
                Some(d) => res.retry_after(d),
                None => res,
            }
        }
    }
}
