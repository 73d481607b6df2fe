//! Where quota state lives: the seam between the [`crate::Engine`] and a shared
//! store.
//!
//! By default an engine keeps every quota in its own memory. An engine built with
//! [`crate::Engine::with_store`] instead asks a [`QuotaStore`] — such as the Redis
//! store of the `toolgate-redis` crate — to check and charge the quotas of each call
//! (request rates, sliding windows, token budgets, concurrency, pools, tenant
//! partitions), so that every process sharing the store obeys one quota.
//!
//! What stays in the engine, per process, is what describes how *this process* sees
//! a tool: the upstream's `Retry-After` pause, the circuit breaker and the adaptive
//! concurrency limit (an adaptive limit is enforced locally, on top of the store's
//! static `concurrency`). The engine's API is the same either way, except that the
//! synchronous [`crate::Engine::try_admit`] and [`crate::Engine::try_admit_all`]
//! cannot wait for a network round trip: use [`crate::Engine::admit_now`] and
//! [`crate::Engine::admit_all`], which work on every store.
//!
//! The store sees only [`Call`] values and reports [`Rejection`] values, so a store
//! applies exactly the rules of the in-memory engine; `toolgate-redis` runs the
//! engine's own semantic test suite against itself to show it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::policy::Policy;
use crate::vocab::{Call, Completion, Rejection};

/// A boxed, sendable future, as returned by [`QuotaStore`] methods.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A shared home for quota state: checks and charges every quota of a call at once.
///
/// Implementations must be all-or-nothing (a rejected call charges nothing
/// anywhere), must report rejections with the same quota paths and reasons as the
/// in-memory engine, and must never let a caller hang past their own timeout (their
/// `on_store_error` policy decides what an unreachable store means).
pub trait QuotaStore: Send + Sync + fmt::Debug + 'static {
    /// A short name for logs and errors, such as `"redis"`.
    fn name(&self) -> &'static str;

    /// Admits `call` now or never (`wait == false`), or waiting as the tool's
    /// `on_limit` and the call's `max_wait` say (`wait == true`).
    ///
    /// Dropping the future must leave nothing charged that a caller could not get
    /// back (what "cancel safe" means for a given store is documented by it).
    fn admit<'a>(
        &'a self,
        call: Call<'a>,
        wait: bool,
    ) -> StoreFuture<'a, Result<Box<dyn StoreLease>, Rejection>>;

    /// Admits every call or none (a multi-step plan). Never waits.
    fn admit_all<'a>(
        &'a self,
        calls: &'a [Call<'a>],
    ) -> StoreFuture<'a, Result<Vec<Box<dyn StoreLease>>, Rejection>>;

    /// Sets how long the store keeps the concurrency leases of an admitted call that
    /// nothing releases (its process died), for calls admitted from now on. A live
    /// process releases each lease itself when its call ends, so this is only a
    /// backstop, but it must be at least as long as a process may hold a lease, or a
    /// live call would lose its slot to another. Called again on every reload of the
    /// longest lease. The default does nothing: for a store whose leases live and die
    /// with its process.
    fn set_lease_ttl(&self, ttl: Duration) {
        let _ = ttl;
    }

    /// What each quota of each of `tools` has left in the store now, read without
    /// charging anything: the figures of [`crate::Engine::fetch_tool_state`] and
    /// [`crate::Engine::fetch_tool_states`], one list per tool, in order. With
    /// `tenant`, its partitions' figures; without, a partitioned quota is left out.
    /// A quota left out of the answer has no figure (`available: None`). A store may
    /// read many tools in one round trip.
    ///
    /// The default answers nothing: a store whose figures cannot be read.
    ///
    /// # Errors
    ///
    /// A message for logs when the store did not answer (the figures are then
    /// unknown, not zero).
    fn levels<'a>(
        &'a self,
        tools: &'a [&'a str],
        tenant: Option<&'a str>,
    ) -> StoreFuture<'a, Result<Vec<Vec<Level>>, String>> {
        let _ = tenant;
        Box::pin(std::future::ready(Ok(vec![Vec::new(); tools.len()])))
    }

    /// Puts a new policy in force in the store.
    ///
    /// # Errors
    ///
    /// A message saying why the store cannot run `policy`; the old policy then stays
    /// in force.
    fn apply(&self, policy: &Policy) -> Result<(), String>;
}

/// What one quota has left in a store ([`QuotaStore::levels`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Level {
    /// The quota's config path, e.g. `tools.lookup_customer.rate`.
    pub quota: Arc<str>,
    /// What it has left now: tokens of a bucket, room in a sliding window, free
    /// concurrency slots.
    pub available: u64,
}

impl Level {
    /// Quota `quota` has `available` left.
    pub fn new(quota: impl Into<Arc<str>>, available: u64) -> Self {
        Self {
            quota: quota.into(),
            available,
        }
    }
}

/// What a store keeps for an admitted call until it ends: concurrency leases, token
/// estimates. Owned by the call's [`crate::Permit`].
pub trait StoreLease: Send + Sync + fmt::Debug {
    /// How long the call waited in the store.
    fn waited(&self) -> Duration;

    /// The call ended (`None`: the permit was dropped without an outcome). Must not
    /// block: network I/O goes to a background task.
    fn complete(self: Box<Self>, completion: Option<Completion>);

    /// The call never ran (an unused part of a reservation): give back what can be
    /// given back. Must not block.
    fn cancel(self: Box<Self>);

    /// Who decided the admission, in the store's own words: for logs and tests (the
    /// Redis store says `redis`, or `local` when its in-process fallback decided
    /// while Redis did not answer). Read through [`crate::Permit::store_source`].
    /// The default is `store`.
    fn source(&self) -> &'static str {
        "store"
    }
}
