//! One pipeline for a tool call: admission, a deadline, classification, completion
//! and disciplined retries — [`Engine::run`](crate::Engine::run).
//!
//! Every attempt goes through the same steps, in this order:
//!
//! 1. **admission** ([`Engine::admit`](crate::Engine::admit): the `Retry-After` pause, the circuit breaker,
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
//!    backoff, and takes one retry from the tool's [`RetryBudget`](crate::retry::RetryBudget).
//!
//! The core stays free of network I/O: the closure performs the attempt and reports
//! how it ended as an [`AttemptResult`].
//!
//! One concept per file, each using only those before it: `options` (what a run is
//! given and tells each attempt), `attempt` (how an attempt ended), `history` (the
//! record of the attempts), `failure` (how the call ended), `delay` (the wait before the
//! next attempt, or why there is none), `run` (the steps: admit, attempt, complete,
//! retry or stop).

mod attempt;
mod delay;
mod failure;
mod history;
mod options;
mod run;

pub use attempt::{AttemptEnd, AttemptResult};
pub use failure::{RunFailure, RunOutput, StopReason};
pub use history::{AttemptRecord, History};
pub use options::{AttemptCtx, RunOptions};
pub(crate) use run::run;
