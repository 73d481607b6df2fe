//! A retry budget: retries limited to a fraction of recent calls, plus a floor.

use std::time::Duration;

use crate::clock::Nanos;
use crate::sync::Mutex;

const SLOTS: usize = 10;
const SLOT_NS: u64 = 1_000_000_000;

/// Allows retries only while they stay under `ratio` of the calls made in the last
/// ten seconds, plus `min_per_second` retries per second that are always allowed —
/// so a failing dependency is not hit with a storm of retries, while a quiet one can
/// still be retried. Time comes from the caller (the engine's clock).
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
/// ```
#[derive(Debug)]
pub struct RetryBudget {
    ratio: f64,
    min_per_second: u32,
    inner: Mutex<Window>,
}

#[derive(Debug, Default)]
struct Window {
    /// Per one-second slot: (slot number, calls, retries).
    slots: [(u64, u64, u64); SLOTS],
}

// === impl RetryBudget ===

impl RetryBudget {
    /// A budget of `ratio` retries per call plus `min_per_second` retries per second.
    pub fn new(ratio: f64, min_per_second: u32) -> Self {
        Self {
            ratio: ratio.clamp(0.0, 1.0),
            min_per_second,
            inner: Mutex::new(Window::default()),
        }
    }

    /// Records a call (a first attempt) at `now`.
    pub fn deposit(&self, now: Nanos) {
        self.inner.lock().slot(now).1 += 1;
    }

    /// Takes one retry from the budget at `now`, if there is one.
    pub fn try_withdraw(&self, now: Nanos) -> bool {
        let mut w = self.inner.lock();
        let (calls, retries) = w.totals(now);
        let floor = u64::from(self.min_per_second) * SLOTS as u64;
        let allowed = floor as f64 + self.ratio * calls as f64;
        if (retries as f64) + 1.0 > allowed {
            return false;
        }
        w.slot(now).2 += 1;
        true
    }

    /// The window the budget looks back over.
    pub fn window() -> Duration {
        Duration::from_nanos(SLOT_NS * SLOTS as u64)
    }
}

// === impl Window ===

impl Window {
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

#[cfg(test)]
mod tests {
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
    fn the_floor_allows_retries_without_traffic() {
        let b = RetryBudget::new(0.0, 1);
        let granted = (0..20).filter(|_| b.try_withdraw(0)).count();
        assert_eq!(granted, SLOTS);
    }
}
