//! What is given back to Redis when a call ends, a waiter leaves or a grant expires:
//! the operations of `scripts/release.lua`, as values (the script's arguments are
//! written in `script.rs`).

use std::sync::Arc;

/// A change to give back to Redis when a call ends or a waiter leaves.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// Remove members `id:from ..= id:to` of a sorted set (leases, sliding entries).
    Members {
        key: Arc<str>,
        id: Arc<str>,
        from: u64,
        to: u64,
    },
    /// Charge (`delta > 0`) or refund (`delta < 0`) tokens of a bucket of `params`
    /// (`pq`, `pr`, `den`, `burst`); a charge, of tokens used beyond an estimate, never
    /// leaves the bucket more than one burst in debt. `at >= 0` also clears its
    /// last-reserved mark if it is `at`. `since >= 0`: the refund gives back
    /// part of a charge of `charged` tokens made at `since` (Redis µs) that was never
    /// used, less its share of the refill since then, so that the bucket never ends
    /// up fuller than without the charge.
    Bucket {
        key: Arc<str>,
        params: [u64; 4],
        delta: i128,
        at: i64,
        since: i64,
        charged: u64,
    },
}
