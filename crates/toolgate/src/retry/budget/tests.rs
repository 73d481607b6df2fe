use proptest::prelude::*;

use super::*;

const S: u64 = 1_000_000_000;

#[test]
fn exhaustion_turns_retries_off_and_time_brings_them_back() {
    let b = RetryBudget::new(0.2, 0);
    for _ in 0..10 {
        b.deposit(0);
    }
    assert!(b.try_withdraw(0));
    assert!(b.try_withdraw(S));
    assert!(!b.try_withdraw(2 * S), "2 retries for 10 calls at 20 %");
    // Ten seconds later the old calls and retries have left the window.
    for _ in 0..5 {
        b.deposit(11 * S);
    }
    assert!(b.try_withdraw(11 * S));
    assert!(!b.try_withdraw(11 * S));
}

#[test]
fn the_floor_allows_one_retry_per_second_without_traffic() {
    // Issue #13, item 18: "+1 per second" let ten retries through within one second.
    let b = RetryBudget::new(0.1, 1);
    let granted: Vec<u64> = (0..100u64)
        .map(|i| i * S / 10)
        .filter(|&t| b.try_withdraw(t))
        .collect();
    assert_eq!(granted, (0..10).map(|s| s * S).collect::<Vec<_>>());
    assert!(!b.try_withdraw(10 * S - 1));
    assert!(b.try_withdraw(10 * S));
    // A quiet spell refills one second's worth, no more.
    assert!(b.try_withdraw(60 * S));
    assert!(!b.try_withdraw(60 * S));
}

#[test]
fn the_floor_holds_one_seconds_worth_and_zero_turns_it_off() {
    let b = RetryBudget::new(0.0, 5);
    assert_eq!((0..20).filter(|_| b.try_withdraw(0)).count(), 5);
    assert!(!b.try_withdraw(S / 5 - 1));
    assert!(b.try_withdraw(S / 5));
    let off = RetryBudget::new(0.0, 0);
    assert!(!off.try_withdraw(0));
    assert!(!off.try_withdraw(3_600 * S));
}

#[test]
fn a_retry_takes_from_the_ratio_allowance_before_the_floor() {
    let b = RetryBudget::new(0.5, 1);
    for _ in 0..4 {
        b.deposit(0);
    }
    // Two from the ratio (50 % of 4 calls), then the floor's one token.
    assert_eq!((0..10).filter(|_| b.try_withdraw(0)).count(), 3);
    // The ratio allowance stays spent for the window; the floor refills.
    assert!(b.try_withdraw(S));
    assert!(!b.try_withdraw(S));
    // New calls give the ratio room again, and the floor's token is left untouched.
    b.deposit(2 * S);
    b.deposit(2 * S);
    assert!(
        b.try_withdraw(2 * S),
        "3 retries from the ratio for 6 calls"
    );
    assert!(b.try_withdraw(2 * S), "the floor's token");
    assert!(!b.try_withdraw(2 * S));
}

/// The floor as a specification: a retry at `t` is granted exactly when, for every
/// interval `[s, t]` starting at time 0 or at an earlier grant, the grants in it
/// (this one included) stay within `min_per_second × (1 s + (t − s))` — one second's
/// worth plus the refill — which is what a greedy token bucket does.
fn floor_model(grants: &[u64], t: u64, min_per_second: u32) -> bool {
    let fits = |s: u64| {
        let n = grants.iter().filter(|&&g| g >= s).count() as u128 + 1;
        n * u128::from(S) <= u128::from(min_per_second) * u128::from(S + (t - s))
    };
    std::iter::once(0).chain(grants.iter().copied()).all(fits)
}

proptest! {
    #[test]
    fn the_floor_grants_exactly_what_its_specification_allows(
        min_per_second in 0u32..=4,
        // Any step, or steps that land on (or a nanosecond short of) whole tokens.
        steps in proptest::collection::vec(prop_oneof![
            0u64..1_500_000_000,
            (0u64..6).prop_map(|k| k * 250_000_000),
            (0u64..5).prop_map(|k| k * 333_333_333),
        ], 1..60),
    ) {
        let b = RetryBudget::new(0.0, min_per_second);
        let mut grants = Vec::new();
        let mut t = 0;
        for dt in steps {
            t += dt;
            let want = floor_model(&grants, t, min_per_second);
            prop_assert_eq!(b.try_withdraw(t), want, "at {} ns after {:?}", t, grants);
            if want {
                grants.push(t);
            }
        }
    }
}

#[test]
fn deposits_from_many_threads_are_all_counted() {
    // More threads than lanes, so the overflow lane (shared, read-modify-writes)
    // takes deposits too. 1,000 calls per thread at 1 % allow exactly 10 retries per
    // thread, and not one more.
    let b = RetryBudget::new(0.01, 0);
    let threads = 2 * b.calls.all().count() + 3;
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| (0..1000).for_each(|_| b.deposit(3 * S)));
        }
    });
    assert_eq!(b.calls(3 * S), threads as u64 * 1000);
    let granted = (0..threads * 20).filter(|_| b.try_withdraw(3 * S)).count();
    assert_eq!(granted, threads * 10);
}

#[test]
fn a_slots_count_saturates_and_a_new_second_starts_over() {
    let full = Calls::bumped(Calls::MAX_COUNT, 0);
    assert_eq!(Calls::decode(full), (0, Calls::MAX_COUNT));
    assert_eq!(Calls::decode(Calls::bumped(full, 10)), (10, 1));
    // The last second a 64-bit nanosecond clock reaches keeps its number.
    let last = u64::MAX / S;
    assert_eq!(Calls::decode(Calls::bumped(0, last)), (last, 1));
}

/// The ratio allowance as a reference model: the calls and the retries granted by
/// the ratio, each with its whole second; a retry at second `n` is granted when the
/// retries of seconds `n - 9 ..= n`, plus one, stay within `ratio` × the calls of
/// those seconds.
#[derive(Default)]
struct Model {
    calls: Vec<u64>,
    retries: Vec<u64>,
}

impl Model {
    fn in_window(events: &[u64], n: u64) -> u64 {
        events.iter().filter(|&&s| s + 10 > n && s <= n).count() as u64
    }

    fn try_withdraw(&mut self, ratio: f64, n: u64) -> bool {
        let ok = (Self::in_window(&self.retries, n) as f64) + 1.0
            <= ratio * Self::in_window(&self.calls, n) as f64;
        if ok {
            self.retries.push(n);
        }
        ok
    }
}

proptest! {
    /// Deposits and withdrawals in time order, with the floor off: the budget grants
    /// exactly the retries the reference model does, whatever the steps (within a
    /// second, across seconds, and past the window).
    #[test]
    fn the_ratio_grants_exactly_what_its_model_allows(
        ratio in prop_oneof![Just(0.1), Just(0.25), Just(0.5), Just(1.0)],
        ops in proptest::collection::vec(
            (any::<bool>(), prop_oneof![0u64..2_000_000_000, Just(0u64), Just(12 * S)]),
            1..200,
        ),
    ) {
        let b = RetryBudget::new(ratio, 0);
        let mut model = Model::default();
        let mut t = 0;
        for (deposit, dt) in ops {
            t += dt;
            if deposit {
                b.deposit(t);
                model.calls.push(t / S);
            } else {
                prop_assert_eq!(b.try_withdraw(t), model.try_withdraw(ratio, t / S), "at {} ns", t);
            }
        }
    }
}
