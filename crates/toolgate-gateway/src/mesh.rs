//! The event mesh in the gateway: calls consumed from NATS JetStream run through
//! [`crate::execute::run`], the function behind `POST /v1/tools/{tool}/invoke`, and
//! so through the same upstream, schema checks, breaker, retries and shaping.
//!
//! `toolgate serve --mesh nats://…` (or `[mesh] url`) starts it beside HTTP; see
//! `docs/mesh.md`.

use std::time::{Duration, SystemTime};

use serde_json::Value;
use toolgate::{AttemptRecord, ExecuteError, RunFailure, StopReason};
use toolgate_mesh::envelope::{Attempt, DeadReason};
use toolgate_mesh::executor::{BoxFuture, Execution, Executor, Failure as MeshFailure, Job};
use toolgate_mesh::{Mesh, MeshConfig};

use crate::state::AppState;
use crate::upstream::Failure;

/// Runs the mesh's calls on the gateway's engine and upstreams.
#[derive(Debug, Clone)]
pub struct Runner {
    state: AppState,
}

/// Starts the mesh on `state` (connecting in the background) and keeps it in the
/// state, for `GET /v1/mesh`, `/healthz` and reloads.
///
/// # Errors
///
/// When there is no URL or the credentials cannot be read.
pub async fn start(
    state: &AppState,
    config: MeshConfig,
    url: Option<&str>,
) -> Result<Mesh, String> {
    let runner = std::sync::Arc::new(Runner {
        state: state.clone(),
    });
    let mesh = Mesh::start(config, url, state.engine().clone(), runner).await?;
    state.set_mesh(mesh.clone());
    Ok(mesh)
}

// === impl Runner ===

impl Executor for Runner {
    fn tools(&self) -> Vec<String> {
        self.state.live().upstreams.keys().cloned().collect()
    }

    fn runs(&self, tool: &str) -> bool {
        self.state.live().upstreams.contains_key(tool)
    }

    fn check_arguments(&self, tool: &str, arguments: &Value) -> Result<(), String> {
        match self.state.live().upstreams.get(tool) {
            Some(up) => up.check_arguments(arguments),
            None => Err(format!("no tool {tool:?} with an upstream")),
        }
    }

    fn execute(&self, job: Job) -> BoxFuture<'_, Execution> {
        Box::pin(self.run(job))
    }
}

impl Runner {
    async fn run(&self, job: Job) -> Execution {
        let Some(up) = self.state.live().upstreams.get(&job.tool).cloned() else {
            let mut f = MeshFailure::new("rejected", "unknown_tool", "the tool has no upstream");
            f.dead = DeadReason::UnknownTool;
            return Execution::Failed(f);
        };
        let may_repeat = up.idempotent || job.idempotency_key.is_some();
        let started = SystemTime::now();
        let ran = crate::execute::run(
            &self.state,
            &up,
            crate::execute::Job {
                tool: &job.tool,
                tenant: job.tenant.as_deref(),
                arguments: &job.arguments,
                idempotency_key: job.idempotency_key.as_deref(),
                tokens: job.tokens.unwrap_or(0),
                max_wait: Some(job.max_wait),
                wait_cap: job.max_wait,
                priority: toolgate::Priority::Default,
                deadline: job.deadline,
                permit: job.permit,
            },
        )
        .await;
        let admitted_at = started + ran.waited;
        match ran.run {
            Ok(out) => Execution::Success {
                result: out.value.result,
                status: Some(out.value.status),
                attempts: attempts(&out.history),
                admitted_at,
            },
            Err(ExecuteError::Rejected(r)) => Execution::Rejected(r),
            Err(ExecuteError::Tool(f)) => Execution::Failed(failure(f, may_repeat, admitted_at)),
        }
    }
}

fn attempts(history: &[AttemptRecord]) -> Vec<Attempt> {
    history
        .iter()
        .map(|a| Attempt {
            attempt: a.number,
            outcome: a.end.as_str().to_string(),
            status: a.status,
            latency_ms: u64::try_from(a.latency.as_millis()).unwrap_or(u64::MAX),
        })
        .collect()
}

/// A run's failure for the mesh: final, or worth delivering again later (when the
/// call may be repeated and the failure was transient).
fn failure(f: RunFailure<Failure>, may_repeat: bool, admitted_at: SystemTime) -> MeshFailure {
    let late = matches!(
        f.reason,
        StopReason::DeadlineExceeded | StopReason::RetryAfterBeyondDeadline
    );
    let (outcome, code) = match &f.error {
        _ if f.reason == StopReason::DeadlineExceeded => ("timeout", "upstream_timeout"),
        Some(Failure::Timeout(_)) | None => ("timeout", "upstream_timeout"),
        Some(Failure::Invalid(_)) => ("invalid", "invalid_result"),
        Some(Failure::TooLarge(..)) => ("error", "upstream_response_too_large"),
        Some(_) => ("error", "upstream_error"),
    };
    let transient = matches!(
        f.reason,
        StopReason::NotRetryable
            | StopReason::AttemptsExhausted
            | StopReason::RetryBudgetExhausted
            | StopReason::RetryAfterTooLong
            | StopReason::Rejected
    );
    let message = match &f.error {
        Some(e) => e.to_string(),
        None => "the call did not finish within its deadline".to_string(),
    };
    let mut m = MeshFailure::new(outcome, code, message);
    m.status = f.last_status;
    m.attempts = attempts(&f.attempts);
    m.admitted_at = Some(admitted_at);
    m.dead = if late {
        DeadReason::DeadlineExceeded
    } else {
        DeadReason::UpstreamError
    };
    if may_repeat && transient {
        let hint = f
            .retry_after
            .or_else(|| f.rejection.as_ref().and_then(|r| r.retry_after()));
        m.retry_in = Some(hint.unwrap_or(Duration::ZERO));
    }
    m
}
