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

    /// The word of a scaled state, if it has one.
    pub(crate) fn to_word(self, tat: Tat) -> Option<u64> {
        let v = tat.get();
        let g = u128::from(self.g);
        if v % g != 0 {
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
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn admit(g: &Gcra, tat: &mut Tat, cost: u64, now: Nanos) -> Result<(), Nanos> {
        let t = g.earliest(*tat, cost, now);
        if t > now {
            return Err(t - now);
        }
        *tat = g.charge(*tat, cost, now);
        Ok(())
    }

    #[test]
    fn a_conversion_keeps_the_times_promised_beyond_an_empty_bucket() {
        // 10/s, burst 2: two calls at 0 empty it, and waiters hold 100, 200 and 300 ms.
        let old = Gcra::new(10, S, 2);
        let mut tat = old.full(0);
        for at in [0, 0, 100, 200, 300] {
            tat = old.charge(tat, 1, at * 1_000_000);
        }
        // A larger burst at t = 0 neither hands out fresh tokens nor a promised time:
        // the first call under it fits at 400 ms, after the last waiter.
        let new = Gcra::new(10, S, 3);
        let conv = new.convert_from(&old, tat, 0);
        assert_eq!(new.earliest(conv, 1, 0), 400_000_000);
        // Without reservations it is as before: no more tokens than were left.
        let fresh = old.charge(old.full(0), 1, 0);
        let conv = new.convert_from(&old, fresh, 0);
        assert_eq!(new.available(conv, 0), 1);
    }

    proptest::proptest! {
        /// A charge never yields the word of a locked bucket (`u64::MAX`) and never
        /// admits on it, however close to the end of the word's range the clock is:
        /// the fast path relies on this instead of checking for the lock itself.
        #[test]
        fn a_charge_never_yields_or_accepts_the_locked_word(
            n in 1u64..=1 << 53,
            period in 1u64..=1 << 40,
            burst in 1u64..=1 << 20,
            cost in 0u64..=1 << 20,
            back in 0u64..=1 << 12,
            word_back in 0u64..=1 << 12,
        ) {
            let Some(form) = Gcra::new(n, period, burst).word_form() else { return Ok(()) };
            // Times at which the bound lies at or just below the end of the word's
            // range (exactly at it when `k` divides what is left).
            let now = ((u64::MAX - form.above) / form.k).saturating_sub(back);
            let charge = form.prepare(cost, now);
            proptest::prop_assert!(charge.is_some());
            let charge = charge.unwrap();
            proptest::prop_assert_eq!(charge.apply(u64::MAX), None);
            // States from which the charge lands at or next to the end of the range.
            let word = (u64::MAX - cost * form.per_token).saturating_sub(word_back);
            proptest::prop_assert_ne!(charge.apply(word), Some(u64::MAX));
            proptest::prop_assert_ne!(charge.apply(now * form.k), Some(u64::MAX));
            // At the bound itself, for any form: a charge that would land on it is
            // refused, one that lands just below it is kept.
            if let Some(edge) = charge.below.checked_sub(charge.add).filter(|w| *w > charge.now) {
                proptest::prop_assert_eq!(charge.apply(edge), None);
                proptest::prop_assert_eq!(charge.apply(edge - 1), Some(charge.below - 1));
            }
        }

        /// A charge of `cost` on a bucket of one token per nanosecond whose bound is
        /// the end of the word's range.
        #[test]
        fn a_charge_that_would_reach_the_locked_word_is_refused(cost in 0u64..=8, burst in 8u64..=64) {
            let form = Gcra::new(1, 1, burst).word_form().unwrap();
            let charge = form.prepare(cost, u64::MAX - form.above).unwrap();
            proptest::prop_assert_eq!(charge.apply(u64::MAX - cost), None);
            proptest::prop_assert_eq!(charge.apply(u64::MAX - cost - 1), Some(u64::MAX - 1));
        }

        /// The one-word form of the fast path decides exactly as the scaled form,
        /// and holds the same state, for any rate, burst and history.
        #[test]
        fn the_word_form_decides_as_the_scaled_form(
            n in 1u64..20_000_000_000,
            period in 1u64..1_000_000_000_000,
            burst in 1u64..1_000,
            steps in proptest::collection::vec((0u64..2_000_000_000, 1u64..1_200), 1..60),
        ) {
            let g = Gcra::new(n, period, burst);
            let Some(form) = g.word_form() else { return Ok(()) };
            let mut tat = g.full(0);
            let mut word = form.to_word(tat).unwrap();
            let mut now = 0u64;
            for (dt, cost) in steps {
                now += dt;
                let scaled = (cost <= burst && g.earliest(tat, cost, now) <= now)
                    .then(|| g.charge(tat, cost, now));
                match form.charge(word, cost, now) {
                    Some(w) => {
                        // The word may only decide when it can represent the result.
                        proptest::prop_assert_eq!(Some(form.to_tat(w)), scaled);
                        word = w;
                        tat = form.to_tat(w);
                    }
                    None => {
                        if let Some(t) = scaled {
                            // Refused for arithmetic only: the general path decides.
                            let room = now.checked_mul(form.k).and_then(|x| x.checked_add(form.above));
                            proptest::prop_assert!(room.is_none() || form.to_word(t).is_none());
                            return Ok(());
                        }
                    }
                }
                proptest::prop_assert_eq!(form.to_word(tat), Some(word));
            }
        }
    }

    #[test]
    fn two_per_second_burst_two_admits_two_then_one_every_half_second() {
        let g = Gcra::new(2, S, 2);
        let mut tat = g.full(0);
        let admitted = (0..5).filter(|_| admit(&g, &mut tat, 1, 0).is_ok()).count();
        assert_eq!(admitted, 2);
        assert_eq!(admit(&g, &mut tat, 1, 0), Err(S / 2));
        assert_eq!(admit(&g, &mut tat, 1, S / 2 - 1), Err(1));
        assert!(admit(&g, &mut tat, 1, S / 2).is_ok());
        assert!(admit(&g, &mut tat, 1, S / 2).is_err());
        assert!(admit(&g, &mut tat, 1, S).is_ok());
        // From empty, a full second refills both tokens.
        assert!(admit(&g, &mut tat, 1, 2 * S).is_ok());
        assert!(admit(&g, &mut tat, 1, 2 * S).is_ok());
        assert!(admit(&g, &mut tat, 1, 2 * S).is_err());
    }

    #[test]
    fn rates_above_one_per_nanosecond_are_exact() {
        // 10^10 per second: ten per nanosecond.
        let g = Gcra::new(10_000_000_000, S, 10);
        let mut tat = g.full(1_000);
        for _ in 0..10 {
            assert!(admit(&g, &mut tat, 1, 1_000).is_ok());
        }
        assert_eq!(admit(&g, &mut tat, 1, 1_000), Err(1));
        assert_eq!(g.available(tat, 1_001), 10);
    }

    #[test]
    fn rates_below_one_per_day_are_exact() {
        let week = 7 * 86_400 * S;
        let g = Gcra::new(1, week, 1);
        let mut tat = g.full(0);
        assert!(admit(&g, &mut tat, 1, 0).is_ok());
        assert_eq!(admit(&g, &mut tat, 1, 1), Err(week - 1));
        assert!(admit(&g, &mut tat, 1, week).is_ok());
    }

    #[test]
    fn a_late_give_back_keeps_the_refill_back_once_across_the_parts_of_a_charge() {
        const MS: u64 = S / 1000;
        let g = Gcra::new(2, S, 2);
        // Two tokens reserved together from a full bucket at 0.
        let tat = g.charge(g.full(0), 2, 0);
        let kept = crate::sync::Mutex::new(0);
        // Given back one by one at 1 ms: the first keeps back the 1 ms of refill a
        // full bucket would have wasted, the second none more.
        let one = g.refund(tat, 1, Some((0, &kept)), MS);
        assert_eq!(g.available(one, MS), 1);
        let both = g.refund(one, 1, Some((0, &kept)), MS);
        assert_eq!(g.available(both, MS), 2, "as if never reserved");
        // A lone part given back at 1 ms keeps the refill back: one more token comes
        // at 501 ms, as if the part had never been taken (not at 500 ms).
        let tat = g.charge(g.charge(g.full(0), 1, 0), 1, MS);
        let back = g.refund(tat, 1, Some((0, &crate::sync::Mutex::new(0))), MS);
        let after = g.charge(back, 1, MS);
        assert_eq!(g.earliest(after, 1, MS), 501 * MS);
    }

    #[test]
    fn refund_never_lifts_above_capacity() {
        let g = Gcra::new(10, S, 10);
        let tat = g.charge(g.full(0), 3, 0);
        assert_eq!(g.available(tat, 0), 7);
        let back = g.refund(tat, 100, None, 0);
        assert_eq!(g.available(back, 0), 10);
        assert!(g.is_idle(back, 0));
    }

    #[test]
    fn conversion_never_grants_more_than_the_old_bucket_had() {
        let old = Gcra::new(10, S, 10);
        let tat = old.charge(old.full(0), 8, 0);
        let new = Gcra::new(100, S, 50);
        assert_eq!(new.available(new.convert_from(&old, tat, 0), 0), 2);
        let smaller = Gcra::new(1, S, 1);
        assert_eq!(smaller.available(smaller.convert_from(&old, tat, 0), 0), 1);
    }
}
