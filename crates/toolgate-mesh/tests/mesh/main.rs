//! The mesh against a real nats-server: throttled consumption, dead letters,
//! de-duplication and idempotency, broker faults.

mod consume;
mod support;
