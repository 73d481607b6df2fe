//! The limiter state of a quota instance ([`Limiter`]): a bucket's theoretical
//! arrival time, a window's log, a count in flight, or — once a reload has moved the
//! state into another cell — the link to that cell; with how a limiter is made
//! afresh, carried over to a new definition, and measured.
//!
//! It is generic over the cell a retired limiter points to (`C`: in the engine, the
//! cell that holds it).

use super::def::{Kind, QuotaDef};
use super::successor::Successor;
use crate::clock::Nanos;
use crate::rate::{SlidingLog, Tat};

/// What a quota instance has used, by the kind of its quota.
#[derive(Debug)]
pub(crate) enum Limiter<C> {
    Bucket(Tat),
    Sliding(Box<SlidingLog>),
    Concurrency {
        in_flight: u64,
        limit: u64,
    },
    /// A reload carried the state into another cell: whoever finds this under the
    /// lock starts over on the policy now in force (a charge here would be lost).
    /// A token estimate reconciled late follows the successor.
    Retired(Box<Successor<C>>),
}

// === impl Limiter ===

impl<C> Limiter<C> {
    /// A new limiter of `def` in its initial (full) state.
    pub(crate) fn fresh(def: &QuotaDef, now: Nanos) -> Self {
        match def.kind {
            Kind::Bucket(g) => Limiter::Bucket(g.full(now)),
            Kind::Sliding(_) => Limiter::Sliding(Box::default()),
            Kind::Concurrency(k) => Limiter::Concurrency {
                in_flight: 0,
                limit: k,
            },
        }
    }

    /// A limiter of `def` carrying over what this one (of definition `old`) had used,
    /// such that the switch never admits more than either definition would allow from
    /// here.
    ///
    /// Times already promised to waiters (reservations past `now`) carry over as
    /// time: a quota of another kind counts as used up until the last of them, so a
    /// promised time is never handed out twice. (A bucket turned into a bucket, or a
    /// window into a window, carries them exactly.)
    pub(crate) fn converted(&self, old: &QuotaDef, def: &QuotaDef, now: Nanos) -> Self {
        let promised = self.promised_until(old);
        let (used, now) = if promised > now {
            (u64::MAX, promised)
        } else {
            (self.used(old, now), now)
        };
        match (def.kind, old.kind, self) {
            (Kind::Bucket(new), Kind::Bucket(prev), Limiter::Bucket(tat)) => {
                Limiter::Bucket(new.convert_from(&prev, *tat, now))
            }
            (Kind::Bucket(new), _, _) => {
                let left = new.burst().saturating_sub(used);
                Limiter::Bucket(new.charge(new.full(now), new.burst() - left, now))
            }
            (Kind::Sliding(_), _, Limiter::Sliding(log)) => Limiter::Sliding(log.clone()),
            (Kind::Sliding(w), _, _) => Limiter::Sliding(Box::new(w.seeded(used, now))),
            (Kind::Concurrency(k), _, Limiter::Concurrency { in_flight, .. }) => {
                Limiter::Concurrency {
                    in_flight: *in_flight,
                    limit: k,
                }
            }
            (Kind::Concurrency(k), _, _) => Limiter::Concurrency {
                in_flight: 0,
                limit: k,
            },
        }
    }

    /// Until when this limiter (of `def`) holds times promised to waiters: a bucket
    /// until it would be empty, a window until its newest entry (0: none).
    fn promised_until(&self, def: &QuotaDef) -> Nanos {
        match (def.kind, self) {
            (Kind::Bucket(g), Limiter::Bucket(tat)) => g.empty_at(*tat),
            (Kind::Sliding(_), Limiter::Sliding(log)) => log.newest().unwrap_or(0),
            _ => 0,
        }
    }

    /// Capacity of `def` in use at `now` (tokens taken, window entries, calls in
    /// flight).
    pub(crate) fn used(&self, def: &QuotaDef, now: Nanos) -> u64 {
        match (def.kind, self) {
            (Kind::Bucket(g), Limiter::Bucket(tat)) => {
                g.burst() - g.available(*tat, now).min(g.burst())
            }
            (Kind::Sliding(w), Limiter::Sliding(log)) => w.in_window(log, now),
            (_, Limiter::Concurrency { in_flight, .. }) => *in_flight,
            _ => 0,
        }
    }

    /// Capacity of `def` available at `now`.
    pub(crate) fn available(&self, def: &QuotaDef, now: Nanos) -> u64 {
        match (def.kind, self) {
            (_, Limiter::Concurrency { in_flight, limit }) => limit.saturating_sub(*in_flight),
            _ => def.capacity().saturating_sub(self.used(def, now)),
        }
    }
}
