//! One `tools/call` through toolgate's pipeline ([`toolgate::Engine::run`]): admitted
//! under the tool's policy key, forwarded to its upstream, classified (an `isError`
//! result is an `error`, a `structuredContent` that breaks the tool's `outputSchema`
//! is `invalid`, a lost connection a transport error, no answer in time a `timeout`)
//! and completed, so the breaker, `Retry-After` pauses, adaptive limits and retries
//! see MCP calls as they see HTTP ones.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, ErrorData, JsonObject};
use rmcp::service::ServiceError;
use toolgate::{
    AttemptResult, Call, Engine, ExecuteError, Priority, RunFailure, RunOptions, StopReason,
};

use crate::catalog::Entry;
use crate::config::McpConfig;
use crate::decisions::Decisions;
use crate::rejection;
use crate::upstream_call::{self, ProgressTarget};
use crate::upstreams::Upstreams;

/// Why an attempt failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The upstream answered with `isError: true`: its result goes back as it is.
    Tool(CallToolResult),
    /// The upstream answered with a JSON-RPC error: it goes back as it is.
    Rpc(ErrorData),
    /// The result's `structuredContent` breaks the tool's `outputSchema`.
    Invalid(String),
    /// The upstream is down, or the connection failed.
    Transport(String),
    /// No answer within `call_timeout`.
    Timeout(Duration),
}

/// What a call needs to run.
#[derive(Debug)]
pub(crate) struct Job<'a> {
    pub(crate) engine: &'a Engine,
    pub(crate) upstreams: &'a Upstreams,
    pub(crate) config: &'a McpConfig,
    pub(crate) entry: Arc<Entry>,
    pub(crate) tenant: Option<&'a str>,
    pub(crate) arguments: Option<JsonObject>,
    /// Where progress goes, when the client asked for it.
    pub(crate) progress: Option<ProgressTarget>,
    /// Told of every admission decision, when set.
    pub(crate) decisions: Option<&'a dyn Decisions>,
}

/// Runs the call and shapes its answer.
///
/// # Cancel safety
///
/// Dropping the future while the call waits for admission leaves the accounting as
/// if it never came; while it runs, the upstream call is dropped, which sends
/// `notifications/cancelled` upstream.
pub(crate) async fn run(job: Job<'_>) -> Result<CallToolResult, ErrorData> {
    let entry = &job.entry;
    let tokens = entry
        .tokens(job.arguments.as_ref())
        .map_err(|e| ErrorData::invalid_params(e, None))?;
    let call = Call::new(&entry.policy_key)
        .with_tenant(job.tenant)
        .tokens(tokens)
        .cap_wait(job.config.max_wait);
    let timeout = job.config.call_timeout;
    let (upstreams, arguments, progress) = (job.upstreams, &job.arguments, &job.progress);
    let (decisions, tenant) = (job.decisions, job.tenant);
    let ran = job
        .engine
        .run(&call, RunOptions::new(), |ctx| {
            if let Some(d) = decisions {
                d.admitted(&entry.policy_key, tenant, ctx.waited(), Priority::Default);
            }
            let peer = upstreams.peer(&entry.server);
            let entry = entry.clone();
            let mut params = CallToolRequestParams::new(entry.upstream_name.clone());
            params.arguments = arguments.clone();
            let relays = upstreams.relays().clone();
            async move {
                let send = Send {
                    entry: &entry,
                    relays: &relays,
                    progress: progress.as_ref(),
                    timeout,
                };
                attempt(peer, send, params).await
            }
        })
        .await;
    let name = &*entry.tool.name;
    if let Some(d) = decisions {
        let refused = match &ran {
            Err(ExecuteError::Rejected(r)) => Some(r),
            Err(ExecuteError::Tool(f)) => f.rejection.as_deref(),
            Ok(_) => None,
        };
        if let Some(r) = refused {
            d.rejected(&entry.policy_key, tenant, r.reason());
        }
    }
    match ran {
        Ok(out) => Ok(out.value),
        Err(ExecuteError::Rejected(r)) => rejection::answer(name, &r, job.config.on_reject),
        Err(ExecuteError::Tool(f)) => failed(name, f, job.config),
    }
}

/// What an attempt sends with.
struct Send<'a> {
    entry: &'a Entry,
    relays: &'a Arc<crate::progress::Relays>,
    progress: Option<&'a ProgressTarget>,
    timeout: Duration,
}

async fn attempt(
    peer: Result<rmcp::Peer<rmcp::RoleClient>, String>,
    send: Send<'_>,
    params: CallToolRequestParams,
) -> AttemptResult<CallToolResult, Failure> {
    let Send {
        entry,
        relays,
        progress,
        timeout,
    } = send;
    let peer = match peer {
        Ok(p) => p,
        Err(e) => return AttemptResult::transport_error(Failure::Transport(e)),
    };
    entry.upstream_calls.increment(1);
    let call = upstream_call::call(&peer, &entry.server, params, relays, progress);
    match tokio::time::timeout(timeout, call).await {
        Err(_) => AttemptResult::timeout(Failure::Timeout(timeout)),
        Ok(Err(ServiceError::McpError(e))) => AttemptResult::failure(Failure::Rpc(e)),
        Ok(Err(e)) => AttemptResult::transport_error(Failure::Transport(format!(
            "the call to upstream {:?} failed: {e}",
            &*entry.server
        ))),
        Ok(Ok(result)) if result.is_error == Some(true) => {
            AttemptResult::failure(Failure::Tool(result))
        }
        Ok(Ok(result)) => match entry.check_output(result.structured_content.as_ref()) {
            Ok(()) => AttemptResult::success(result),
            Err(e) => AttemptResult::invalid(Failure::Invalid(e)),
        },
    }
}

/// The answer to a call that ran and failed: the upstream's own `isError` result or
/// JSON-RPC error as it came, a rejected retry as a rejection, anything else a tool
/// result with `isError: true` that says what happened.
fn failed(
    name: &str,
    f: RunFailure<Failure>,
    config: &McpConfig,
) -> Result<CallToolResult, ErrorData> {
    if let Some(r) = &f.rejection {
        return rejection::answer(name, r, config.on_reject);
    }
    let text = match f.error {
        Some(Failure::Tool(result)) => return Ok(result),
        Some(Failure::Rpc(e)) => return Err(e),
        Some(Failure::Invalid(e)) => format!("{name} returned an invalid result: {e}"),
        Some(Failure::Transport(e)) => format!("{name} failed: {e}"),
        Some(Failure::Timeout(d)) => format!(
            "{name} did not answer within {} s (call_timeout)",
            d.as_secs_f64()
        ),
        None if f.reason == StopReason::DeadlineExceeded => {
            format!("{name} did not finish within its deadline")
        }
        None => format!("{name} failed ({})", f.reason),
    };
    Ok(CallToolResult::error(vec![ContentBlock::text(text)]))
}
