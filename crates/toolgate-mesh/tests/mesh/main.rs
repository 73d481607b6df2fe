//! The mesh against a real nats-server: throttled consumption, dead letters,
//! de-duplication and idempotency, broker and upstream faults.

#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
#![allow(
    clippy::disallowed_methods,
    reason = "tests against real NATS servers bound and measure real time"
)]

mod consume;
mod dedupe;
mod faults;
mod lifecycle;
mod poison;
mod support;
