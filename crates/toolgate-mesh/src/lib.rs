//! toolgate's event mesh: tool calls consumed from NATS JetStream only as fast as
//! each downstream service can take them, executed once per idempotency key,
//! with one result per call and a dead-letter stream for what cannot succeed.
//!
//! Agents publish calls on `toolgate.calls.<tool>`; a gateway running [`Mesh`]
//! pulls each tool's calls through its own durable consumer when admission can
//! start them (consumption itself is the backpressure), runs them through the
//! executor — in the gateway, the same pipeline as `POST /v1/tools/{tool}/invoke` —
//! and publishes the outcome on `toolgate.results.<call_id>`. Many gateways share
//! the durable consumers; with a shared quota store they never exceed a quota
//! together. `docs/mesh.md` in the repository tells the whole story, and how a
//! Kafka source would plug into [`executor::Executor`] and [`worker`].
//!
//! | module | what |
//! |---|---|
//! | [`subject`] | tool and call-id ↔ subject tokens |
//! | [`config`] | the `[mesh]` table |
//! | [`envelope`] | calls, results, dead letters |
//! | [`executor`] | the seam to whoever runs a tool |
//! | [`worker`] | per-tool throttled consumption |
//! | [`client`] | publishing a call and waiting for its result |

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]
#![allow(
    clippy::disallowed_methods,
    reason = "envelopes carry wall-clock times and deadlines (RFC 3339), checked on the wall clock"
)]

mod claims;
pub mod client;
pub mod config;
mod connect;
mod delivery;
mod discovery;
pub mod envelope;
pub mod executor;
mod mesh;
#[cfg(all(doctest, feature = "test-util"))]
mod must_use;
mod outbox;
mod process;
mod shared;
mod stats;
mod streams;
pub mod subject;
#[cfg(feature = "test-util")]
pub mod testing;
pub mod worker;

pub use config::MeshConfig;
pub use mesh::{Mesh, MeshView, StreamNames};
pub use outbox::REASON_HEADER;
pub use stats::ToolView;
