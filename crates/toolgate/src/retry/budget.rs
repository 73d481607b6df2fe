//! A retry budget: retries limited to a fraction of recent calls, plus a floor.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::clock::Nanos;
use crate::lanes::{Mine, PerLane};
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
    /// The calls of the last seconds, counted per thread ([`Calls`]): a deposit,
    /// made by every successful call, takes no lock.
    calls: PerLane<Calls>,
    inner: Mutex<State>,
}

#[derive(Debug)]
struct State {
    recent: Recent,
    floor: Floor,
}

/// The retries taken from the ratio in the last seconds, one slot per second.
#[derive(Debug, Default)]
struct Recent {
    /// Per one-second slot: (slot number, retries taken from the ratio).
    slots: [(u64, u64); SLOTS],
}

/// One thread's calls of the last seconds, one word per one-second slot: the slot's
/// number in the high [`Calls::NUMBER_BITS`] bits and its calls in the rest
/// (saturating), so that a reader never sees a number with another slot's count.
#[derive(Debug, Default)]
struct Calls([AtomicU64; SLOTS]);

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
            calls: PerLane::new(),
            inner: Mutex::new(State {
                recent: Recent::default(),
                floor: Floor {
                    nano_tokens: Floor::capacity(min_per_second),
                    at: 0,
                },
            }),
        }
    }

    /// Records a call at `now` (the pipeline records each successful call). Takes
    /// no lock: the count goes to this thread's own lane.
    pub fn deposit(&self, now: Nanos) {
        let (n, i) = slot_of(now);
        match self.calls.mine() {
            Mine::Own(calls) => {
                let w = &calls.0[i];
                w.store(
                    Calls::bumped(w.load(Ordering::Relaxed), n),
                    Ordering::Relaxed,
                );
            }
            Mine::Shared(calls) => {
                let bump = |w| Some(Calls::bumped(w, n));
                let _always = calls.0[i].fetch_update(Ordering::Relaxed, Ordering::Relaxed, bump);
            }
        }
    }

    /// Takes one retry from the budget at `now`, if there is one: from the ratio
    /// allowance, else from the floor bucket.
    #[must_use = "a retry is taken from the budget only when this says `true`"]
    pub fn try_withdraw(&self, now: Nanos) -> bool {
        let mut s = self.inner.lock();
        let retries = s.recent.retries(now);
        if (retries as f64) + 1.0 <= self.ratio * self.calls(now) as f64 {
            *s.recent.slot(now) += 1;
            return true;
        }
        s.floor.try_take(now, self.min_per_second)
    }

    /// The window the ratio looks back over.
    pub fn window() -> Duration {
        Duration::from_nanos(SLOT_NS * SLOTS as u64)
    }

    /// The calls deposited in the window that ends at `now`, by every thread.
    fn calls(&self, now: Nanos) -> u64 {
        let n = now / SLOT_NS;
        self.calls
            .all()
            .flat_map(|c| &c.0)
            .map(|w| Calls::decode(w.load(Ordering::Relaxed)))
            .filter(|&(slot, _)| in_window(slot, n))
            .fold(0, |sum, (_, calls)| sum.saturating_add(calls))
    }
}

/// The number of the one-second slot of `now`, and its index in a window's array.
fn slot_of(now: Nanos) -> (u64, usize) {
    let n = now / SLOT_NS;
    (n, (n % SLOTS as u64) as usize)
}

/// Whether the slot numbered `slot` lies in the window that ends in slot `n`.
fn in_window(slot: u64, n: u64) -> bool {
    slot + (SLOTS as u64) > n && slot <= n
}

// === impl Calls ===

impl Calls {
    /// Bits of a word that hold its slot's number: enough for every slot a
    /// nanosecond clock of 64 bits reaches (2^35 seconds).
    const NUMBER_BITS: u32 = 40;
    /// Bits that hold the slot's calls: one thread deposits far fewer than 2^24
    /// (16.7 million) in one second, and a count saturates rather than wraps.
    const COUNT_BITS: u32 = 64 - Self::NUMBER_BITS;
    const MAX_COUNT: u64 = (1 << Self::COUNT_BITS) - 1;

    /// The word `w` after one more call in slot `n`: counted on, or started over
    /// when the word holds an older slot.
    #[inline]
    fn bumped(w: u64, n: u64) -> u64 {
        let (slot, calls) = Self::decode(w);
        let calls = if slot == n {
            (calls + 1).min(Self::MAX_COUNT)
        } else {
            1
        };
        (n << Self::COUNT_BITS) | calls
    }

    /// A word's slot number and calls.
    #[inline]
    fn decode(w: u64) -> (u64, u64) {
        (w >> Self::COUNT_BITS, w & Self::MAX_COUNT)
    }
}

// === impl Recent ===

impl Recent {
    /// The retries of the slot of `now`, started over if it held an older slot.
    fn slot(&mut self, now: Nanos) -> &mut u64 {
        let (n, i) = slot_of(now);
        let s = &mut self.slots[i];
        if s.0 != n {
            *s = (n, 0);
        }
        &mut s.1
    }

    /// The retries taken in the window that ends at `now`.
    fn retries(&self, now: Nanos) -> u64 {
        let n = now / SLOT_NS;
        self.slots
            .iter()
            .filter(|s| in_window(s.0, n))
            .map(|s| s.1)
            .sum()
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
