//! A quota's definition ([`QuotaDef`]): what it limits ([`Kind`]), which part of a
//! call it is charged with ([`CostOf`]), its config path, and whether it is enforced
//! and partitioned. A definition holds no state: two quotas with equal definitions
//! are interchangeable, which is what lets a reload keep the state of unchanged
//! quotas.

use std::sync::Arc;

use crate::rate::{Gcra, SlidingWindow};
use crate::vocab::{
    Call, CostOf, Mode, Priority, Rate, Reason, Reserve, Window, DEFAULT_MAX_PARTITIONS,
};

/// What a quota limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Bucket(Gcra),
    Sliding(SlidingWindow),
    Concurrency(u64),
}

/// A quota's definition. Two quotas with equal definitions are interchangeable, which
/// is what lets a reload keep the state of unchanged quotas.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct QuotaDef {
    pub(crate) path: Arc<str>,
    pub(crate) kind: Kind,
    pub(crate) cost_of: CostOf,
    pub(crate) shadow: bool,
    pub(crate) partitioned: bool,
    pub(crate) max_partitions: usize,
    /// What each priority class (highest first) may not use of it: the share its
    /// table's `reserve` keeps for the classes above.
    pub(crate) hold: [u64; 3],
}

// === impl QuotaDef ===

impl QuotaDef {
    pub(crate) fn rate(path: Arc<str>, rate: Rate, burst: Option<u64>, window: Window) -> Self {
        let kind = match window {
            Window::Bucket => Kind::Bucket(Gcra::new(
                rate.count(),
                rate.period_ns(),
                burst.unwrap_or(rate.count()),
            )),
            Window::Sliding => Kind::Sliding(SlidingWindow::new(rate.count(), rate.period_ns())),
        };
        Self::with_kind(path, kind, CostOf::Requests)
    }

    pub(crate) fn tokens(path: Arc<str>, rate: Rate, burst: Option<u64>) -> Self {
        let g = Gcra::new(
            rate.count(),
            rate.period_ns(),
            burst.unwrap_or(rate.count()),
        );
        Self::with_kind(path, Kind::Bucket(g), CostOf::Tokens)
    }

    pub(crate) fn concurrency(path: Arc<str>, limit: u32) -> Self {
        Self::with_kind(path, Kind::Concurrency(u64::from(limit)), CostOf::Requests)
    }

    fn with_kind(path: Arc<str>, kind: Kind, cost_of: CostOf) -> Self {
        Self {
            path,
            kind,
            cost_of,
            shadow: false,
            partitioned: false,
            max_partitions: DEFAULT_MAX_PARTITIONS,
            hold: [0; 3],
        }
    }

    /// Keeps the shares of `reserve` for the classes they are for.
    pub(crate) fn reserved(mut self, reserve: Reserve) -> Self {
        let cap = self.capacity();
        self.hold = Priority::ALL.map(|p| reserve.hold(cap, p));
        self
    }

    /// What `call`'s class may not use of it.
    #[inline]
    pub(crate) fn hold_for(&self, call: &Call<'_>) -> u64 {
        self.hold[call.priority_class() as usize]
    }

    pub(crate) fn mode(mut self, mode: Mode) -> Self {
        self.shadow = mode == Mode::Shadow;
        self
    }

    pub(crate) fn partitioned(mut self, on: bool, max: usize) -> Self {
        self.partitioned = on;
        self.max_partitions = max;
        self
    }

    /// The reason given when this quota says no.
    pub(crate) fn reason(&self) -> Reason {
        match (self.kind, self.cost_of) {
            (Kind::Concurrency(_), _) => Reason::ConcurrencyLimited,
            (_, CostOf::Tokens) => Reason::TokensLimited,
            _ => Reason::RateLimited,
        }
    }

    /// The average time between admissions of cost 1 the quota allows: `None` for a
    /// concurrency limit, which has no rate.
    pub(crate) fn interval(&self) -> Option<u64> {
        match self.kind {
            Kind::Bucket(g) => Some(g.interval_ns()),
            Kind::Sliding(w) => Some((w.period_ns() / w.limit()).max(1)),
            Kind::Concurrency(_) => None,
        }
    }

    /// The most a single admission can ever cost.
    pub(crate) fn capacity(&self) -> u64 {
        match self.kind {
            Kind::Bucket(g) => g.burst(),
            Kind::Sliding(w) => w.limit(),
            Kind::Concurrency(k) => k,
        }
    }
}
