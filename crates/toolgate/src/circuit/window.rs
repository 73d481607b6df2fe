//! The breaker's window of outcomes ([`Outcomes`]): the samples in it and how many of
//! them failed or were invalid, counted as samples come and go, so a completion costs
//! O(1) whatever the window's size.

use std::collections::VecDeque;

use crate::clock::Nanos;

/// One outcome in the window.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sample {
    pub(super) at: Nanos,
    pub(super) failed: bool,
    pub(super) invalid: bool,
}

/// The outcomes in the breaker's window, with their failed and invalid counts.
#[derive(Debug, Default)]
pub(super) struct Outcomes {
    samples: VecDeque<Sample>,
    failed: usize,
    invalid: usize,
}

// === impl Outcomes ===

impl Outcomes {
    pub(super) fn push(&mut self, s: Sample) {
        self.failed += usize::from(s.failed);
        self.invalid += usize::from(s.invalid);
        self.samples.push_back(s);
    }

    /// Drops the oldest outcome.
    pub(super) fn pop(&mut self) {
        if let Some(s) = self.samples.pop_front() {
            self.failed -= usize::from(s.failed);
            self.invalid -= usize::from(s.invalid);
        }
    }

    /// When the oldest outcome came.
    pub(super) fn oldest(&self) -> Option<Nanos> {
        self.samples.front().map(|s| s.at)
    }

    pub(super) fn clear(&mut self) {
        *self = Self::default();
    }

    pub(super) fn len(&self) -> usize {
        self.samples.len()
    }

    /// How many failed (errors, timeouts, slow calls).
    pub(super) fn failed(&self) -> usize {
        self.failed
    }

    /// How many were invalid.
    pub(super) fn invalid(&self) -> usize {
        self.invalid
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counts_follow_the_samples_in_and_out() {
        let mut w = Outcomes::default();
        let s = |at, failed, invalid| Sample {
            at,
            failed,
            invalid,
        };
        w.push(s(1, true, false));
        w.push(s(2, false, true));
        w.push(s(3, true, true));
        assert_eq!((w.len(), w.failed(), w.invalid()), (3, 2, 2));
        w.pop();
        assert_eq!(
            (w.len(), w.failed(), w.invalid(), w.oldest()),
            (2, 1, 2, Some(2))
        );
        w.clear();
        assert_eq!(
            (w.len(), w.failed(), w.invalid(), w.oldest()),
            (0, 0, 0, None)
        );
        w.pop();
        assert_eq!(w.len(), 0);
    }
}
