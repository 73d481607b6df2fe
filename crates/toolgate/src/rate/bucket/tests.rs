//! Tests of the GCRA bucket and its one-word form.

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

    /// A count reported beyond an estimate, of any size, leaves the bucket at
    /// most one burst in debt beyond `at` (or where it was), never lowers it, and
    /// is charged in full below that bound; no rate, burst or count overflows.
    #[test]
    fn a_reported_count_is_charged_up_to_one_burst_of_debt(
        n in 1u64..=1 << 53,
        period in 1u64..=u64::MAX,
        burst in 1u64..=1 << 53,
        used in 0u64..=1 << 53,
        cost in proptest::prop_oneof![0u64..=1 << 20, proptest::prelude::any::<u64>()],
        at in 0u64..=u64::MAX,
    ) {
        let g = Gcra::new(n, period, burst);
        let tat = g.charge(g.full(at), used.min(burst.saturating_mul(2)), at);
        let after = g.charge_debt(tat, cost, at);
        let bound = g.scale(at) + 2 * g.tau();
        proptest::prop_assert!(after.get() >= tat.get());
        proptest::prop_assert!(after.get() <= bound.max(tat.get()));
        let full = tat.get().max(g.scale(at)).checked_add(g.units(cost));
        if let Some(full) = full.filter(|f| *f <= bound) {
            proptest::prop_assert_eq!(after.get(), full);
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

    /// The time a refused cost conforms, read off a word, is the scaled form's, for
    /// any rate, burst, state and cost, to the nanosecond.
    #[test]
    fn the_word_says_when_a_cost_conforms_as_the_scaled_form_does(
        n in 1u64..20_000_000_000,
        period in 1u64..1_000_000_000_000,
        burst in 1u64..1_000,
        now in 0u64..1 << 40,
        ahead in 0u64..=u64::MAX,
        cost in 1u64..1_000,
    ) {
        let g = Gcra::new(n, period, burst);
        let Some(form) = g.word_form() else { return Ok(()) };
        let cost = cost.min(burst);
        let Some(base) = now.checked_mul(form.k) else { return Ok(()) };
        // A state from a full bucket to two bursts in debt, not on a whole token.
        let span = form.above.saturating_mul(2).max(1);
        let Some(word) = base.checked_add(ahead % span) else { return Ok(()) };
        if let Some(at) = form.earliest(word, cost, now) {
            proptest::prop_assert_eq!(at, g.earliest(form.to_tat(word), cost, now));
        }
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
            if cost <= burst {
                // The word says when the cost conforms, as the scaled form does.
                if let Some(at) = form.earliest(word, cost, now) {
                    proptest::prop_assert_eq!(at, g.earliest(tat, cost, now));
                }
            }
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
