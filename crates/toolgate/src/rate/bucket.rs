//! Token bucket as GCRA (generic cell rate algorithm) in exact integer arithmetic.
//!
//! A bucket of `burst` tokens refilled at `n` tokens per `period` is tracked by one
//! number, the theoretical arrival time (TAT). To stay exact for rates far above one
//! per nanosecond and far below one per day, time is scaled by `n`: one nanosecond is
//! `n` units and one token is `period` units, so the emission interval `period / n`
//! never needs rounding. The scaled values fit in `u128` for every rate the config
//! accepts (`n`, `burst` ≤ 2^53, `period` ≤ 2^64 ns).

use crate::clock::Nanos;

/// Parameters of a token bucket: `n` tokens per `period_ns`, holding at most `burst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Gcra {
    n: u64,
    period_ns: u64,
    burst: u64,
}

/// The state of one bucket: its theoretical arrival time in scaled units.
///
/// Stored as two `u64` halves so that the state is 8-byte aligned and a partition
/// costs 16 bytes of bucket state rather than 32.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tat {
    hi: u64,
    lo: u64,
}

/// A bucket in one-word units (see [`Gcra::word_form`]): the scaled state `tat` of
/// [`Gcra`] is `word * g`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WordForm {
    /// Units per nanosecond.
    k: u64,
    /// Units per token.
    per_token: u64,
    /// Units of a full bucket and one more (`burst * per_token + 1`): a charge
    /// conforms while the state stays below `now + above`, which also keeps it below
    /// `u64::MAX`, the word of a locked bucket.
    above: u64,
    /// The common factor between the scaled and the word units.
    g: u64,
}

/// A charge of some cost at some time, in a [`WordForm`]'s units.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WordCharge {
    now: u64,
    add: u64,
    /// The state must stay below this (at most `u64::MAX`).
    below: u64,
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

// === impl WordForm ===

impl WordForm {
    /// [`WordCharge::apply`] of [`WordForm::prepare`] in one step.
    #[cfg(test)]
    pub(crate) fn charge(&self, word: u64, cost: u64, now: Nanos) -> Option<u64> {
        self.prepare(cost, now)?.apply(word)
    }

    /// A charge of `cost` tokens at `now`, with everything that does not depend on
    /// the state worked out before the state is read, so that only a compare and an
    /// add lie between reading the word and swapping it (measured against reading
    /// first: within noise, `docs/benchmarks.md`). `None` when the arithmetic would
    /// leave a word (the general path then decides).
    #[inline]
    pub(crate) fn prepare(&self, cost: u64, now: Nanos) -> Option<WordCharge> {
        let now = now.checked_mul(self.k)?;
        Some(WordCharge {
            now,
            add: cost.checked_mul(self.per_token)?,
            below: now.checked_add(self.above)?,
        })
    }

    /// The earliest time ≥ `now` at which `cost` tokens conform on `word`: the same
    /// as [`Gcra::earliest`] on the word's state, in the word's units (no 128-bit
    /// division). `None` when the arithmetic would leave a word.
    #[inline]
    pub(crate) fn earliest(&self, word: u64, cost: u64, now: Nanos) -> Option<Nanos> {
        // Conforms at `t` while `word + cost` stays within a burst of `t`:
        // `word + cost·per_token - burst·per_token <= t·k`.
        let limit = word
            .checked_add(cost.checked_mul(self.per_token)?)?
            .saturating_sub(self.above - 1);
        if limit <= now.checked_mul(self.k)? {
            return Some(now);
        }
        Some(limit.div_ceil(self.k))
    }

    /// The time a refused `cost` conforms on `word` ([`WordForm::earliest`], after
    /// now): `None` when it would conform by `now` or the arithmetic would leave a
    /// word (the general path then decides).
    #[inline]
    pub(crate) fn refusal(&self, word: u64, cost: u64, now: Nanos) -> Option<Nanos> {
        self.earliest(word, cost, now).filter(|at| *at > now)
    }

    /// The word of a scaled state, if it has one.
    pub(crate) fn to_word(self, tat: Tat) -> Option<u64> {
        let v = tat.get();
        let g = u128::from(self.g);
        if !v.is_multiple_of(g) {
            return None;
        }
        u64::try_from(v / g).ok()
    }

    /// The scaled state of a word.
    pub(crate) fn to_tat(self, word: u64) -> Tat {
        Tat::from_u128(u128::from(word) * u128::from(self.g))
    }
}

// === impl WordCharge ===

impl WordCharge {
    /// The state after this charge on `word`, or `None` when it does not conform now
    /// (or would leave a word). The same rule as [`Gcra::earliest`] and
    /// [`Gcra::charge`]. Never `u64::MAX`, and `None` for a `word` of `u64::MAX`
    /// (`max` keeps it, and adding overflows or lands at the bound), so that a locked
    /// bucket needs no check of its own.
    #[inline]
    pub(crate) fn apply(self, word: u64) -> Option<u64> {
        let next = word.max(self.now).checked_add(self.add)?;
        (next < self.below).then_some(next)
    }
}

// === impl Tat ===

impl Tat {
    pub(crate) fn get(self) -> u128 {
        (u128::from(self.hi) << 64) | u128::from(self.lo)
    }

    pub(crate) fn from_u128(v: u128) -> Self {
        Self {
            hi: (v >> 64) as u64,
            lo: v as u64,
        }
    }
}

// === impl Gcra ===

impl Gcra {
    /// A bucket of `burst` tokens refilled at `n` per `period_ns`. All three are ≥ 1
    /// (checked by config validation).
    pub(crate) fn new(n: u64, period_ns: u64, burst: u64) -> Self {
        debug_assert!(n >= 1 && period_ns >= 1 && burst >= 1);
        Self {
            n,
            period_ns,
            burst,
        }
    }

    pub(crate) fn burst(&self) -> u64 {
        self.burst
    }

    /// The time one token takes to refill, rounded down (at least 1 ns).
    pub(crate) fn interval_ns(&self) -> u64 {
        (self.period_ns / self.n).max(1)
    }

    fn scale(&self, t: Nanos) -> u128 {
        u128::from(t) * u128::from(self.n)
    }

    fn units(&self, tokens: u64) -> u128 {
        u128::from(tokens) * u128::from(self.period_ns)
    }

    fn tau(&self) -> u128 {
        self.units(self.burst)
    }

    /// The state of a full bucket at `now`.
    pub(crate) fn full(&self, now: Nanos) -> Tat {
        Tat::from_u128(self.scale(now))
    }

    /// The earliest time ≥ `now` at which `cost` tokens conform. `cost` ≤ burst.
    pub(crate) fn earliest(&self, tat: Tat, cost: u64, now: Nanos) -> Nanos {
        let limit = (tat.get() + self.units(cost)).saturating_sub(self.tau());
        let now_s = self.scale(now);
        if limit <= now_s {
            return now;
        }
        let n = u128::from(self.n);
        let t = limit.div_ceil(n);
        u64::try_from(t).unwrap_or(u64::MAX)
    }

    /// The state after charging `cost` tokens at time `at` (which must conform).
    pub(crate) fn charge(&self, tat: Tat, cost: u64, at: Nanos) -> Tat {
        Tat::from_u128(tat.get().max(self.scale(at)) + self.units(cost))
    }

    /// The state after charging `cost` tokens at `at` that a call used beyond its
    /// estimate (a count reported on completion, which nothing else bounds): as
    /// [`Gcra::charge`], but the bucket is never more than one burst in debt. Its
    /// state stays at or below `at + 2·burst·T` (empty at `at`, and `burst` tokens
    /// owed beyond that; `T` is the time of one token), or where it was if it was
    /// already beyond that, so that after a report of any size the bucket is full
    /// again within `2·burst/rate` of `at`. `at` is the time from which the debt
    /// runs: now, or the last time promised to a waiter.
    pub(crate) fn charge_debt(&self, tat: Tat, cost: u64, at: Nanos) -> Tat {
        let at = self.scale(at);
        let bound = at + 2 * self.tau();
        // Beyond two bursts the bound binds anyway; capping first keeps the sum exact.
        let cost = cost.min(self.burst.saturating_mul(2));
        let charged = tat.get().max(at).saturating_add(self.units(cost));
        Tat::from_u128(charged.min(bound.max(tat.get())))
    }

    /// The state after returning `cost` tokens at `now`, never above a full bucket.
    ///
    /// With `since = (at, kept)`, the tokens were charged at `at` and never used,
    /// and the refund is less the refill since then: had they never been charged,
    /// the bucket may have been full in between and wasted that refill, so a whole
    /// refund could leave it fuller than the history without the charge (this is how
    /// an unused reservation is given back without ever over-admitting). `kept` is
    /// what earlier give-backs of the same charge kept back already, so that the
    /// refill is kept back once across all of them.
    pub(crate) fn refund(
        &self,
        tat: Tat,
        cost: u64,
        since: Option<(Nanos, &crate::sync::Mutex<u128>)>,
        now: Nanos,
    ) -> Tat {
        let mut units = self.units(cost);
        if let Some((at, kept)) = since {
            let refill = self.scale(now).saturating_sub(self.scale(at));
            let mut kept = kept.lock();
            let owed = refill.saturating_sub(*kept).min(units);
            *kept += owed;
            units -= owed;
        }
        let lowered = tat.get().saturating_sub(units);
        Tat::from_u128(lowered.max(self.scale(now)))
    }

    /// The bucket in the one-word form of the lock-free fast path, when it has one:
    /// time in units of `1/k` ns where `k = n / gcd(n, period)`, so that the state
    /// is the scaled theoretical arrival time divided by `gcd(n, period)` — exact,
    /// with no rounding. `None` when a token's length in those units does not fit.
    pub(crate) fn word_form(&self) -> Option<WordForm> {
        let g = gcd(self.n, self.period_ns);
        let per_token = self.period_ns / g;
        Some(WordForm {
            k: self.n / g,
            per_token,
            above: self.burst.checked_mul(per_token)?.checked_add(1)?,
            g,
        })
    }

    /// The time at which the bucket is (or was) exactly empty, its reservations
    /// beyond that served: the end of the times it has promised.
    pub(crate) fn empty_at(&self, tat: Tat) -> Nanos {
        let t = tat
            .get()
            .saturating_sub(self.tau())
            .div_ceil(u128::from(self.n));
        u64::try_from(t).unwrap_or(u64::MAX)
    }

    /// Whole tokens available at `now` (0 while in debt).
    pub(crate) fn available(&self, tat: Tat, now: Nanos) -> u64 {
        let used = tat.get().saturating_sub(self.scale(now));
        let free = self.tau().saturating_sub(used);
        u64::try_from(free / u128::from(self.period_ns)).unwrap_or(u64::MAX)
    }

    /// Whether the bucket is full at `now`, that is indistinguishable from a new one.
    pub(crate) fn is_idle(&self, tat: Tat, now: Nanos) -> bool {
        tat.get() <= self.scale(now)
    }

    /// The state of this bucket carrying over what `old` had used at `now`: the new
    /// bucket starts with no more tokens than the old one had left, nor than its burst.
    ///
    /// Reservations beyond an empty bucket (the admission times already promised to
    /// waiters) carry over as time: the new bucket stays empty until the old one would
    /// have been, so a promised time and a call under the new policy never share a
    /// token.
    pub(crate) fn convert_from(&self, old: &Gcra, tat: Tat, now: Nanos) -> Tat {
        let at = old.empty_at(tat).max(now);
        let left = old.available(tat, at).min(self.burst);
        Tat::from_u128(self.scale(at) + self.units(self.burst - left))
    }
}

#[cfg(test)]
mod tests;
