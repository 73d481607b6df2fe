//! The seam to whoever runs a tool: the gateway implements [`Executor`] with the
//! same function `POST /v1/tools/{tool}/invoke` uses (upstream, schema checks,
//! circuit breaker, retries), so a call from the mesh and one over HTTP are one
//! pipeline. A Kafka source, or a test, plugs in here too.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use toolgate::{Permit, Rejection};

use crate::envelope::{Attempt, DeadReason};

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One call to run.
#[derive(Debug)]
#[non_exhaustive]
pub struct Job {
    /// The tool.
    pub tool: String,
    /// The tenant, if any.
    pub tenant: Option<String>,
    /// The arguments (already checked against the tool's schema).
    pub arguments: Value,
    /// Sent to the upstream as `Idempotency-Key` on every attempt.
    pub idempotency_key: Option<String>,
    /// The declared token cost.
    pub tokens: Option<u64>,
    /// Time left to the call's deadline: bounds admission, attempts and retries.
    pub deadline: Option<Duration>,
    /// The longest the call may wait for admission.
    pub max_wait: Duration,
    /// The call's admission, when the mesh admitted it before pulling it: its first
    /// attempt runs on this permit instead of being admitted again.
    pub permit: Option<Permit>,
}

/// How a job ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum Execution {
    /// The upstream answered usably.
    Success {
        /// Its answer.
        result: Value,
        /// Its HTTP status.
        status: Option<u16>,
        /// Every attempt.
        attempts: Vec<Attempt>,
        /// When the first attempt was admitted.
        admitted_at: SystemTime,
    },
    /// Admission refused the call: it never ran.
    Rejected(Rejection),
    /// The call ran and failed.
    Failed(Failure),
}

/// A call that ran and failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Failure {
    /// `error`, `timeout` or `invalid`.
    pub outcome: &'static str,
    /// A stable word (`upstream_error`, `upstream_timeout`, `invalid_result`, …).
    pub code: String,
    /// For people.
    pub message: String,
    /// The upstream's last status.
    pub status: Option<u16>,
    /// Every attempt.
    pub attempts: Vec<Attempt>,
    /// `Some(delay)` when trying the call again later may succeed and is allowed
    /// (the tool is idempotent or the call has a key): deliver it again after at
    /// least `delay` (what the engine or the upstream said; the mesh backs off
    /// further with each delivery). `None`: the failure is final.
    pub retry_in: Option<Duration>,
    /// When the first attempt was admitted.
    pub admitted_at: Option<SystemTime>,
    /// The dead letter's reason when the failure is final (default
    /// `upstream_error`; `deadline_exceeded` when the call's deadline ended it).
    pub dead: DeadReason,
}

// === impl Failure ===

impl Failure {
    /// A final failure (`retry_in` unset) with nothing but its words.
    pub fn new(outcome: &'static str, code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            outcome,
            code: code.into(),
            message: message.into(),
            status: None,
            attempts: Vec::new(),
            retry_in: None,
            admitted_at: None,
            dead: DeadReason::UpstreamError,
        }
    }
}

/// Runs tools for the mesh.
pub trait Executor: Send + Sync + 'static {
    /// The tools this gateway can run now (those with an upstream); calls of others
    /// are dead letters (`unknown_tool`).
    fn tools(&self) -> Vec<String>;

    /// Whether this gateway can run `tool` now (asked for every call: keep it cheap).
    fn runs(&self, tool: &str) -> bool {
        self.tools().iter().any(|t| t == tool)
    }

    /// Checks `arguments` against `tool`'s argument schema.
    ///
    /// # Errors
    ///
    /// What is wrong, for the dead letter (`invalid_arguments`).
    fn check_arguments(&self, tool: &str, arguments: &Value) -> Result<(), String>;

    /// Runs one job through the whole pipeline.
    fn execute(&self, job: Job) -> BoxFuture<'_, Execution>;
}
