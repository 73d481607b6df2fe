//! Admission control and flow control for AI-agent tool calls.
//!
//! An agent's model can ask for many tool calls in one response, and frameworks run
//! them concurrently. toolgate decides **before a tool runs** whether the call may
//! start, against per-tool and shared (pool) quotas — token buckets, exact sliding
//! windows, token budgets, concurrency limits, per-tenant partitions — all-or-nothing
//! across every quota of the call, failing fast or waiting in FIFO order.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use toolgate::{Call, Engine, ManualClock, Policy, Reason};
//!
//! let clock = ManualClock::new();
//! let engine = Engine::with_clock(
//!     Policy::from_toml_str(r#"
//!         [pools.crm]
//!         rate = "100/min"
//!         burst = 3
//!
//!         [tools.lookup_customer]
//!         rate = "2/s"
//!         burst = 2
//!         pools = ["crm"]
//!
//!         [tools.update_customer]
//!         rate = "5/s"
//!         pools = ["crm"]
//!     "#).unwrap(),
//!     Arc::new(clock.clone()),
//! );
//!
//! // Five concurrent lookups: exactly two get through.
//! let results: Vec<_> = (0..5).map(|_| engine.try_admit(&Call::new("lookup_customer"))).collect();
//! assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 2);
//!
//! // The pool has one request left; the update takes it, the next one is refused by
//! // the pool, not by the tool's own quota.
//! assert!(engine.try_admit(&Call::new("update_customer")).is_ok());
//! let no = engine.try_admit(&Call::new("update_customer")).unwrap_err();
//! assert_eq!((no.reason(), no.quota()), (Reason::RateLimited, "pools.crm.rate"));
//!
//! // Tools without a policy pass untouched.
//! assert!(engine.try_admit(&Call::new("get_weather")).is_ok());
//! ```
//!
//! # Features
//!
//! | feature | default | what it adds |
//! |---------|---------|--------------|
//! | `tower` | yes     | [`layer::AdmissionLayer`], admission in front of any `tower::Service`; [`layer::PipelineLayer`], the retry pipeline around an HTTP-client-like service |
//!
//! # Retries
//!
//! [`Engine::run`] runs a call through one pipeline — admission, execution under the
//! call's deadline, classification, completion, and budgeted, `Retry-After`-aware
//! retries for idempotent tools or calls with an idempotency key — and returns the
//! value or one terminal [`RunFailure`] listing every attempt.
//!
//! # Semantics
//!
//! `docs/semantics.md` in the repository explains burst and refill, FIFO waiting,
//! all-or-nothing admission, cancellation, reloads and what is not guaranteed.
//!
//! # Minimum supported Rust version
//!
//! Rust 1.95, the version the project is tested with (`rust-version` in its
//! `Cargo.toml`, so cargo refuses an older toolchain). Raising it is a minor-version
//! change.

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]
#![warn(clippy::too_many_lines)]

mod adaptive;
mod admit;
mod circuit;
mod clock;
pub mod compile;
mod compiled;
pub mod config;
mod denial;
mod engine;
mod handle;
mod held;
mod kernel;
mod lanes;
mod latency;
#[cfg(feature = "tower")]
pub mod layer;
mod live;
#[cfg(doctest)]
mod must_use;
mod observe;
mod permit;
mod pipeline;
mod policy;
mod queue;
mod quota;
mod rate;
mod reserve;
pub mod retry;
pub mod shaping;
mod shared;
mod signals;
mod state;
pub mod store;
mod sync;
mod tool;
mod upstream;
mod vocab;
mod wait;
mod waiter;

pub use circuit::CircuitState;
pub use clock::{Clock, ManualClock, Nanos, Sleep, SystemClock};
pub use engine::Engine;
pub use handle::ToolHandle;
pub use permit::{Permit, ScopedPermit};
pub use pipeline::{
    AttemptCtx, AttemptEnd, AttemptRecord, AttemptResult, RunFailure, RunOptions, RunOutput,
    StopReason,
};
pub use policy::Policy;
pub use state::{QuotaState, ToolState};
pub use vocab::{
    Call, Completion, ExecuteError, Outcome, Priority, Reason, Rejection, UnknownPriority,
};
