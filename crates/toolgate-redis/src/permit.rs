//! The permit of a call admitted through Redis, what it gives back, and who decided
//! it ([`Source`], the one part of it an engine's caller can see).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use toolgate::{Completion, Permit};

use crate::error::StoreError;
use crate::link::Link;
use crate::op::Op;

/// The largest count sent to the scripts: Lua numbers are doubles, whose integers
/// are exact up to 2^53 − 1.
const MAX_SCRIPT_COUNT: i128 = (1 << 53) - 1;

/// Who decided an admission of an engine on the Redis store: read it from the
/// engine's permit with [`Source::of`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(engine: toolgate::Engine) -> Result<(), toolgate::Rejection> {
/// use toolgate::Call;
/// use toolgate_redis::Source;
///
/// let permit = engine.admit_now(&Call::new("lookup_customer")).await?;
/// if Source::of(&permit) == Some(Source::Local) {
///     // Redis did not answer: this process's share of the quota admitted the call.
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// The shared quotas in Redis.
    Redis,
    /// The in-process fallback (`on_store_error = "local"`) while Redis did not answer.
    Local,
    /// A local grant: capacity this process took from Redis in a batch
    /// (`local_grant`).
    Grant,
    /// Nobody: the tool has no policy, or Redis did not answer and
    /// `on_store_error = "fail_open"`.
    Unaccounted,
}

/// A token estimate held until the call completes.
#[derive(Debug, Clone)]
pub(crate) struct TokenHold {
    pub(crate) key: Arc<str>,
    pub(crate) params: [u64; 4],
    pub(crate) estimate: u64,
}

/// Proof that a call was admitted by the gate, held by an engine's permit (through
/// [`crate::RedisStore`]'s lease).
///
/// [`RedisPermit::complete`] releases its concurrency leases and reconciles its token
/// estimate against the actual count. Dropping it without completing releases its
/// leases in a spawned task (best effort: if that fails, the leases expire after the
/// link's lease TTL).
pub(crate) struct RedisPermit {
    held: Held,
    waited: Duration,
    done: bool,
}

/// What a permit holds, by who decided it.
pub(crate) enum Held {
    /// Charges in Redis, given back through the link that made them.
    Remote {
        link: Arc<Link>,
        leases: Vec<Op>,
        tokens: Vec<TokenHold>,
        /// What gives the call's rate, token and sliding charges back (the parts of
        /// a reservation only; empty otherwise).
        refunds: Vec<Op>,
    },
    /// A permit of the in-process fallback.
    Local(Permit),
    /// A unit of a local grant: nothing to give back.
    Granted,
    /// Nothing was charged.
    Unaccounted,
}

// === impl Source ===

impl Source {
    /// Who decided `permit`, an engine's permit on the Redis store; `None` when the
    /// store was not asked (a tool without a policy), or another store decided.
    pub fn of(permit: &Permit) -> Option<Self> {
        match permit.store_source()? {
            "redis" => Some(Self::Redis),
            "local" => Some(Self::Local),
            "grant" => Some(Self::Grant),
            "unaccounted" => Some(Self::Unaccounted),
            _ => None,
        }
    }

    /// Its stable name: `redis`, `local`, `grant` or `unaccounted`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Redis => "redis",
            Self::Local => "local",
            Self::Grant => "grant",
            Self::Unaccounted => "unaccounted",
        }
    }
}

// === impl RedisPermit ===

impl RedisPermit {
    pub(crate) fn new(held: Held, waited: Duration) -> Self {
        Self {
            held,
            waited,
            done: false,
        }
    }

    pub(crate) fn with_waited(mut self, waited: Duration) -> Self {
        self.waited = waited;
        self
    }

    /// How long the call waited for admission.
    pub(crate) fn waited(&self) -> Duration {
        self.waited
    }

    /// Who decided the admission.
    pub(crate) fn source(&self) -> Source {
        match self.held {
            Held::Remote { .. } => Source::Redis,
            Held::Local(_) => Source::Local,
            Held::Granted => Source::Grant,
            Held::Unaccounted => Source::Unaccounted,
        }
    }

    /// Ends the call here when that takes no round trip (no concurrency lease to
    /// release, no token difference to charge or refund: a call under request rates
    /// only) and returns `None`; otherwise hands the completion back, the permit
    /// untouched, for [`RedisPermit::complete`].
    pub(crate) fn complete_here(&mut self, completion: Completion) -> Option<Completion> {
        let round_trip = match &self.held {
            Held::Remote { leases, tokens, .. } => {
                !leases.is_empty()
                    || completion
                        .tokens
                        .is_some_and(|actual| tokens.iter().any(|t| t.differs(actual)))
            }
            Held::Local(_) | Held::Granted | Held::Unaccounted => false,
        };
        if round_trip {
            return Some(completion);
        }
        self.done = true;
        if let Held::Local(p) = std::mem::replace(&mut self.held, Held::Unaccounted) {
            p.complete(completion);
        }
        None
    }

    /// Ends the call: releases its concurrency leases and charges or refunds the
    /// difference between its token estimate and `completion.tokens` (a refund never
    /// lifts a bucket above its capacity). One round trip, bounded by the store's
    /// timeout.
    ///
    /// # Errors
    ///
    /// When Redis did not answer: the leases then expire after the lease TTL and the
    /// token difference is not applied.
    pub(crate) async fn complete(mut self, completion: Completion) -> Result<(), StoreError> {
        self.done = true;
        match std::mem::replace(&mut self.held, Held::Unaccounted) {
            Held::Remote {
                link,
                leases,
                tokens,
                ..
            } => {
                let mut ops = leases;
                if let Some(actual) = completion.tokens {
                    ops.extend(tokens.iter().filter_map(|t| t.reconcile(actual)));
                }
                link.release(ops).await
            }
            Held::Local(p) => {
                p.complete(completion);
                Ok(())
            }
            Held::Granted | Held::Unaccounted => Ok(()),
        }
    }

    /// Gives back what admission charged, for a call that never ran (an unused part
    /// of a reservation made with `Gate::admit_all`): concurrency
    /// leases are released, request and token buckets refunded (never above full)
    /// and sliding-window entries removed, in one round trip. Permits of single
    /// admissions keep only their leases, so for them this is like dropping.
    ///
    /// # Errors
    ///
    /// When Redis did not answer: leases then expire after the lease TTL, and the
    /// rate charges stay until they refill.
    pub(crate) async fn cancel(mut self) -> Result<(), StoreError> {
        self.done = true;
        match std::mem::replace(&mut self.held, Held::Unaccounted) {
            Held::Remote {
                link,
                mut leases,
                refunds,
                ..
            } => {
                leases.extend(refunds);
                link.release(leases).await
            }
            Held::Local(p) => {
                p.cancel();
                Ok(())
            }
            Held::Granted | Held::Unaccounted => Ok(()),
        }
    }
}

// === impl TokenHold ===

impl TokenHold {
    /// Whether settling the estimate against `actual` sends anything (what
    /// [`TokenHold::reconcile`] sends an operation for).
    fn differs(&self, actual: u64) -> bool {
        self.delta(actual) != 0
    }

    /// What settles the estimate against the `actual` count: a charge of the tokens
    /// used beyond it, or a refund of those not used; `None` when they are equal.
    fn reconcile(&self, actual: u64) -> Option<Op> {
        let delta = self.delta(actual);
        (delta != 0).then(|| Op::Bucket {
            key: self.key.clone(),
            params: self.params,
            delta,
            at: -1,
            since: -1,
            charged: 0,
        })
    }

    /// The tokens to charge (or, negative, refund) for `actual` against the estimate.
    fn delta(&self, actual: u64) -> i128 {
        let [.., burst] = self.params;
        // Beyond two bursts the debt bound binds anyway (`release.lua` caps it there
        // too), so the count sent is capped there, and at what Lua holds exactly (which
        // two bursts of a quota that Redis can run never reach): the same state as in
        // memory.
        (i128::from(actual) - i128::from(self.estimate))
            .min(2 * i128::from(burst))
            .min(MAX_SCRIPT_COUNT)
    }
}

impl Drop for RedisPermit {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Held::Remote { link, leases, .. } = &mut self.held {
            if !leases.is_empty() {
                link.release_in_background(std::mem::take(leases));
            }
        }
    }
}

impl fmt::Debug for RedisPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisPermit")
            .field("source", &self.source())
            .field("waited", &self.waited)
            .finish_non_exhaustive()
    }
}
