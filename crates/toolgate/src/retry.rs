//! Disciplined recovery: when a failed tool call may be tried again, and when not.
//!
//! Why separate pieces: the decision has three independent inputs, each with its own
//! failure mode. The server may say when to come back ([`retry_after`]: RFC 9110
//! `Retry-After`, delta-seconds or HTTP-date); otherwise the client picks a delay
//! ([`Backoff`]: exponential with full jitter, so synchronised clients spread out);
//! and a fleet-wide brake stops retry storms ([`RetryBudget`]: retries limited to a
//! fraction of recent calls, as in gRPC retry throttling, else a small token-bucket
//! floor of a few retries per second).
//! [`classify()`] maps an attempt's result to what may follow it.
//!
//! Retries are only ever for idempotent tools or calls with an idempotency key, and
//! every attempt passes admission again: no rejected call is ever replayed implicitly.
//! [`Engine::run`](crate::Engine::run) puts these pieces together into one pipeline.

mod after;
mod backoff;
mod budget;
mod classify;
mod runtime;

pub use after::retry_after;
pub use backoff::Backoff;
pub use budget::RetryBudget;
pub use classify::{classify, Attempt, Class};
pub(crate) use runtime::RetryRuntime;
