//! A quota's definition ([`QuotaDef`]): what it limits ([`Kind`]), which part of a
//! call it is charged with ([`CostOf`]), its config path, and whether it is enforced
//! and partitioned. A definition holds no state: two quotas with equal definitions
//! are interchangeable, which is what lets a reload keep the state of unchanged
//! quotas.

use std::sync::Arc;

use crate::rate::{Gcra, SlidingWindow};
use crate::vocab::{CostOf, Mode, Rate, Reason, Window, DEFAULT_MAX_PARTITIONS};

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
        }
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

    /// The most a single admission can ever cost.
    pub(crate) fn capacity(&self) -> u64 {
        match self.kind {
            Kind::Bucket(g) => g.burst(),
            Kind::Sliding(w) => w.limit(),
            Kind::Concurrency(k) => k,
        }
    }
}
