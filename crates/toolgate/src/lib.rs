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

// The modules from the top (what a user calls) down: each uses only those below it
// (`scripts/check-layers`), so a call reads `admit → decide → permit → complete` in
// this order. `docs/architecture.md` draws the layers.

// The facade, and the tower layers above it.
mod engine;
#[cfg(feature = "tower")]
pub mod layer;

// The steps of a call: one call, every call of a plan, a resolved tool, snapshots,
// the retry pipeline; the policy in force and its reloads.
mod admit;
mod handle;
mod live;
mod pipeline;
mod reserve;
mod state;

// What an admission hands out and how a call waits; a policy compiled into tools.
mod compiled;
mod names;
mod permit;
mod recent;
mod wait;

// A tool as the engine runs it: its gates, its immediate admission, its end of a call.
mod tool;

// What the tools share: the clock, the waiters' scheduler, the upstream's signals.
mod fair;
mod queue;
mod shared;
mod upstream;
mod waiter;

// The decision kernel and the words of its answers.
mod denial;
mod held;
mod kernel;

// State: quotas and rate algorithms, signals, breaker, adaptive limit, retries,
// counters, and the seam to a shared store.
mod adaptive;
mod circuit;
mod latency;
mod observe;
mod quota;
mod rate;
pub mod retry;
mod signals;
pub mod store;

// The policy: parsing, validation, each tool's resolved quotas.
pub mod compile;
pub mod config;
mod policy;

// The vocabulary every layer speaks (with the upstream's rate-limit headers, which a
// completion carries), and the primitives.
mod clock;
mod lanes;
pub mod shaping;
mod sync;
mod tenant_hash;
mod vocab;
mod words;

#[cfg(doctest)]
mod must_use;

pub use circuit::CircuitState;
pub use clock::{Clock, ManualClock, Nanos, Sleep, SystemClock};
pub use engine::Engine;
pub use handle::ToolHandle;
pub use permit::{Permit, ScopedPermit};
pub use pipeline::{
    AttemptCtx, AttemptEnd, AttemptRecord, AttemptResult, History, RunFailure, RunOptions,
    RunOutput, StopReason,
};
pub use policy::Policy;
pub use state::{QuotaState, ToolState};
pub use vocab::{
    Call, Completion, ExecuteError, Outcome, Priority, Reason, Rejection, UnknownPriority,
};
