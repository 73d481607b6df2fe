//! A retry budget: retries limited to a fraction of recent calls, plus a floor.

use std::time::Duration;

use crate::clock::Nanos;
use crate::sync::Mutex;

const SLOTS: usize = 10;
const SLOT_NS: u64 = 1_000_000_000;

/// Allows retries only while they stay under `ratio` of the calls made in the last
/// ten seconds, plus a floor of `min_per_second` retries per second that are always
/// allowed — so a failing dependency is not hit with a storm of retries, while a quiet
/// one can still be retried. Time comes from the caller (the engine's clock).
///
/// A retry takes from the ratio allowance first: the retries so taken stay at or below
/// `ratio` × the calls deposited in the last ten seconds (counted in whole-second
/// slots). Otherwise it takes a token from the floor, a token bucket refilled at
/// `min_per_second` tokens per second that holds at most `min_per_second` tokens (one
/// second's worth) and starts full; `min_per_second = 0` turns the floor off. So with
/// no calls at all, `min_per_second = 1` allows one retry in any one-second interval,
/// then one more per second.
///
/// # Examples
///
/// ```
/// use toolgate::retry::RetryBudget;
///
/// let budget = RetryBudget::new(0.1, 0);
/// for _ in 0..20 {
///     budget.deposit(0);
/// }
/// assert!(budget.try_withdraw(0));
/// assert!(budget.try_withdraw(0));
/// assert!(!budget.try_withdraw(0)); // 10 % of 20 calls
///
/// let floor = RetryBudget::new(0.0, 1);
/// assert!(floor.try_withdraw(0));
/// assert!(!floor.try_withdraw(999_999_999)); // one retry per second
/// assert!(floor.try_withdraw(1_000_000_000));
/// ```
#[derive(Debug)]
pub struct RetryBudget {
    ratio: f64,
    min_per_second: u32,
    inner: Mutex<State>,
}

#[derive(Debug)]
struct State {
    recent: Recent,
    floor: Floor,
}

/// The calls and retries of the last seconds, one slot per second.
#[derive(Debug, Default)]
struct Recent {
    /// Per one-second slot: (slot number, calls, retries taken from the ratio).
    slots: [(u64, u64, u64); SLOTS],
}

/// The floor's token bucket, in billionths of a token so that a refill at
/// `min_per_second` per second is exact per nanosecond.
#[derive(Debug)]
struct Floor {
    /// Tokens × 10⁹ as of `at`.
    nano_tokens: u64,
    at: Nanos,
}

// === impl RetryBudget ===

impl RetryBudget {
    /// A budget of `ratio` (clamped to 0–1) retries per call, plus a floor bucket of
    /// `min_per_second` retries per second.
    pub fn new(ratio: f64, min_per_second: u32) -> Self {
        Self {
            ratio: ratio.clamp(0.0, 1.0),
            min_per_second,
            inner: Mutex::new(State {
                recent: Recent::default(),
                floor: Floor {
                    nano_tokens: Floor::capacity(min_per_second),
                    at: 0,
                },
            }),
        }
    }

    /// Records a call at `now` (the pipeline records each successful call).
    pub fn deposit(&self, now: Nanos) {
        self.inner.lock().recent.slot(now).1 += 1;
    }

    /// Takes one retry from the budget at `now`, if there is one: from the ratio
    /// allowance, else from the floor bucket.
    #[must_use = "a retry is taken from the budget only when this says `true`"]
    pub fn try_withdraw(&self, now: Nanos) -> bool {
        let mut s = self.inner.lock();
        let (calls, retries) = s.recent.totals(now);
        if (retries as f64) + 1.0 <= self.ratio * calls as f64 {
            s.recent.slot(now).2 += 1;
            return true;
        }
        s.floor.try_take(now, self.min_per_second)
    }

    /// The window the ratio looks back over.
    pub fn window() -> Duration {
        Duration::from_nanos(SLOT_NS * SLOTS as u64)
    }
}

// === impl Recent ===

impl Recent {
    fn slot(&mut self, now: Nanos) -> &mut (u64, u64, u64) {
        let n = now / SLOT_NS;
        let s = &mut self.slots[(n % SLOTS as u64) as usize];
        if s.0 != n {
            *s = (n, 0, 0);
        }
        s
    }

    fn totals(&self, now: Nanos) -> (u64, u64) {
        let n = now / SLOT_NS;
        self.slots
            .iter()
            .filter(|s| s.0 + (SLOTS as u64) > n && s.0 <= n)
            .fold((0, 0), |(c, r), s| (c + s.1, r + s.2))
    }
}

// === impl Floor ===

impl Floor {
    /// One token, in the bucket's unit.
    const TOKEN: u64 = 1_000_000_000;

    /// `min_per_second` tokens: one second's worth.
    fn capacity(min_per_second: u32) -> u64 {
        u64::from(min_per_second) * Self::TOKEN
    }

    /// Refills the bucket up to `now`, then takes a whole token if there is one.
    fn try_take(&mut self, now: Nanos, min_per_second: u32) -> bool {
        let refill = now
            .saturating_sub(self.at)
            .saturating_mul(u64::from(min_per_second));
        self.nano_tokens = self
            .nano_tokens
            .saturating_add(refill)
            .min(Self::capacity(min_per_second));
        self.at = self.at.max(now);
        if self.nano_tokens < Self::TOKEN {
            return false;
        }
        self.nano_tokens -= Self::TOKEN;
        true
    }
}

#[cfg(test)]
mod tests;
