//! What a tool's upstream said about its capacity ([`Upstream`]): its `Retry-After`
//! pause and the spreading of its low remaining capacity (see [`crate::signals`]),
//! for the whole tool or per tenant, and the two gates they close.
//!
//! A waiting call keeps its tool's `Upstream` (not the tool), which is all that
//! re-gating it needs ([`crate::queue::Scheduler::regate`]).

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{nanos, Nanos};
use crate::denial::Denial;
use crate::observe::ToolStats;
use crate::shaping::ServerLimit;
use crate::signals::{Claim, Shift, Signals, TenantSignals};
use crate::vocab::{Completion, Reason, Rejection};

/// A tool's upstream signals and the quota paths its gates name.
#[derive(Debug)]
pub(crate) struct Upstream {
    /// The tool's name.
    pub(crate) name: Arc<str>,
    /// The tool's counters (its identity across reloads, too).
    pub(crate) stats: Arc<ToolStats>,
    /// The upstream's pause and spreading of the whole tool, kept across reloads (as
    /// the upstream's word is); a per-tenant tool keeps its tenants' own in
    /// `tenant_signals`.
    pub(crate) signals: Arc<Signals>,
    /// On a tool whose own quotas are per tenant (`partition = "tenant"`), each
    /// tenant's pause and spreading (the whole tool's are in `stats`, unused then);
    /// kept across reloads while the tool stays per tenant.
    pub(crate) tenant_signals: Option<Arc<TenantSignals>>,
    /// `tools.<name>.retry_after`, the quota path of rejections during an upstream's
    /// `Retry-After` pause.
    pub(crate) pause_path: Arc<str>,
    /// `tools.<name>.server_limit`, the quota path of rejections while the
    /// upstream's low remaining capacity is spread over its reset window.
    pub(crate) spread_path: Arc<str>,
}

// === impl Upstream ===

impl Upstream {
    /// The upstream of the tool whose quotas start with `prefix` (`tools.<name>`),
    /// with the signals it had before a reload, if any.
    pub(crate) fn new(
        stats: Arc<ToolStats>,
        (signals, tenant_signals): (Option<Arc<Signals>>, Option<Arc<TenantSignals>>),
        prefix: &str,
    ) -> Self {
        Self {
            name: stats.name.clone(),
            stats,
            signals: signals.unwrap_or_default(),
            tenant_signals,
            pause_path: format!("{prefix}.retry_after").into(),
            spread_path: format!("{prefix}.server_limit").into(),
        }
    }

    /// The key of `tenant`'s signals on a tool with per-tenant signals (a call
    /// without a tenant is the tenant `""`, as with partitions); `None` otherwise.
    pub(crate) fn tenant_key(&self, tenant: Option<&str>) -> Option<u64> {
        self.tenant_signals
            .as_ref()
            .map(|ts| ts.key(tenant.unwrap_or("")))
    }

    /// [`Upstream::tenant_key`] of the tenant whose hash is `hash` (as a call decided
    /// in its tenant's slot has it), without hashing the tenant again.
    #[inline]
    pub(crate) fn tenant_key_of(&self, hash: u64) -> Option<u64> {
        self.tenant_signals
            .as_ref()
            .map(|_| TenantSignals::key_of(hash))
    }

    /// Whether no tenant's own pause or spreading is in force at `now` (always, on
    /// a tool whose signals are not per tenant).
    #[inline]
    pub(crate) fn quiet(&self, now: Nanos) -> bool {
        self.tenant_signals.as_ref().is_none_or(|ts| ts.quiet(now))
    }

    /// Runs `f` on the signals that govern a call of `tenant` at `now` (`None`: none
    /// in force), with the tenant's key on a per-tenant tool. The key is worked out
    /// only while some tenant has a gate in force.
    pub(crate) fn signals_of<R>(
        &self,
        tenant: Option<&str>,
        now: Nanos,
        f: impl FnOnce(Option<&Signals>, Option<u64>) -> R,
    ) -> R {
        match &self.tenant_signals {
            None => f(Some(&self.signals), None),
            Some(ts) if ts.quiet(now) => f(None, None),
            Some(ts) => {
                let key = ts.key(tenant.unwrap_or(""));
                ts.with(key, |s| f(s, Some(key)))
            }
        }
    }

    /// Runs `f` on the signals of the tenant whose key this is (the whole tool's,
    /// when the tool's signals are not per tenant).
    pub(crate) fn signals_by_key<R>(
        &self,
        key: Option<u64>,
        f: impl FnOnce(Option<&Signals>) -> R,
    ) -> R {
        match (&self.tenant_signals, key) {
            (None, _) => f(Some(&self.signals)),
            (Some(ts), Some(key)) => ts.with(key, f),
            (Some(_), None) => f(None),
        }
    }

    /// Runs `f` on the signals a new signal goes to: the tenant's (made if need be),
    /// on a per-tenant tool, or the whole tool's.
    pub(crate) fn update_signals<R>(
        &self,
        key: Option<u64>,
        now: Nanos,
        f: impl FnOnce(&Signals) -> R,
    ) -> R {
        match (&self.tenant_signals, key) {
            (Some(ts), Some(key)) => ts.update(key, now, f),
            _ => f(&self.signals),
        }
    }

    /// Refuses calls while the upstream's `Retry-After` pause lasts. Waiting calls may
    /// wait it out: its end is known.
    pub(crate) fn pause_gate(&self, now: Nanos, tenant: Option<&str>) -> Result<(), Denial> {
        let until = self.signals_of(tenant, now, |s, _| s.map_or(0, Signals::paused_until));
        if until <= now {
            return Ok(());
        }
        Err(self.later(&self.pause_path, until, now))
    }

    /// While the upstream's low remaining capacity is spread over its reset window,
    /// takes this call's slot or says when the next one is free.
    pub(crate) fn spread_gate(
        &self,
        now: Nanos,
        tenant: Option<&str>,
    ) -> Result<Option<Claim>, Denial> {
        self.signals_of(tenant, now, |s, key| match s {
            Some(s) => s.spread_claim(now, key),
            None => Ok(None),
        })
        .map_err(|next| self.later(&self.spread_path, next, now))
    }

    /// Gives a spreading slot back (a quota then refused the call).
    pub(crate) fn unspread(&self, claim: Option<Claim>) {
        if let Some(claim) = claim {
            self.signals_by_key(claim.tenant, |s| {
                if let Some(s) = s {
                    s.unspread(claim);
                }
            });
        }
    }

    /// Takes in the upstream's signals in a completion at `now` (of a call of the
    /// tenant whose key is `tenant`, on a per-tenant tool): each pause and spreading
    /// window is cut to `max_pause`. Whether a gate moved (the waiting calls are then
    /// re-gated), and the key of the signals that took it in.
    pub(crate) fn hear(
        &self,
        c: &Completion,
        tenant: Option<u64>,
        now: Nanos,
        max_pause: Duration,
    ) -> (bool, Option<u64>) {
        let key = self
            .tenant_signals
            .as_ref()
            .map(|ts| tenant.unwrap_or_else(|| ts.key("")));
        let mut shift = Shift::default();
        if let Some(s) = c.server_limit {
            let s = ServerLimit {
                reset: self.bounded(s.reset, max_pause, "rate-limit reset"),
                ..s
            };
            let (moved, every) = self.update_signals(key, now, |sig| {
                let moved = sig.server_limit(now, s);
                (moved, sig.spreading(now).then(|| sig.spread_every()))
            });
            if let Some(every) = every.filter(|_| moved.respread) {
                self.stats.on_spread(every, key.is_some());
            }
            shift = shift | moved;
        }
        if let Some(after) = c.retry_after {
            let after = self.bounded(after, max_pause, "Retry-After");
            let until = now.saturating_add(nanos(after));
            shift = shift | self.update_signals(key, now, |sig| sig.pause_until(now, until));
        }
        if shift.paused > 0 {
            self.stats.on_pause(shift.paused, key.is_some());
        }
        (shift.moved(), key)
    }

    /// `asked`, cut to `max` (with a warning naming the `signal` when it is).
    fn bounded(&self, asked: Duration, max: Duration, signal: &'static str) -> Duration {
        if asked <= max {
            return asked;
        }
        self.stats.on_clamped(signal, asked, max);
        max
    }

    /// A `max_wait_exceeded` rejection naming `quota`, with `retry` to wait.
    pub(crate) fn too_long(&self, quota: &Arc<str>, retry: Nanos) -> Rejection {
        Rejection::new(
            self.name.clone(),
            quota.clone(),
            Reason::MaxWaitExceeded,
            Some(Duration::from_nanos(retry)),
        )
    }

    /// A refusal by an upstream gate that opens at `at`.
    fn later(&self, path: &Arc<str>, at: Nanos, now: Nanos) -> Denial {
        let rejection = Rejection::new(
            self.name.clone(),
            path.clone(),
            Reason::RateLimited,
            Some(Duration::from_nanos(at - now)),
        );
        Denial::until(rejection, at)
    }
}
