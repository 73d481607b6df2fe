//! Exact sliding-window log: at most `limit` admissions in any interval of length
//! `period`.
//!
//! The log keeps one entry per admission time (with a count, so a batch is one entry).
//! An entry stays in the window while `t + period > now`. Entries are appended in
//! non-decreasing time order, which is what lets the engine reserve future slots for
//! waiters and cut them off again exactly when a waiter is cancelled.

use std::collections::VecDeque;

use crate::clock::Nanos;

/// Parameters of a sliding window: at most `limit` per `period_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct SlidingWindow {
    limit: u64,
    period_ns: u64,
}

/// The admissions still inside the window, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SlidingLog {
    entries: VecDeque<(Nanos, u64)>,
    total: u64,
    /// Entries trimmed since the log was created, so that [`SlidingLog::len`] counts
    /// from the log's creation and stays a valid snapshot across trims.
    trimmed: usize,
}

// === impl SlidingWindow ===

impl SlidingWindow {
    pub(crate) fn new(limit: u64, period_ns: u64) -> Self {
        debug_assert!(limit >= 1 && period_ns >= 1);
        Self { limit, period_ns }
    }

    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// Drops the entries that have left the window at `now`.
    pub(crate) fn trim(&self, log: &mut SlidingLog, now: Nanos) {
        while let Some(&(t, n)) = log.entries.front() {
            if t.saturating_add(self.period_ns) > now {
                break;
            }
            log.entries.pop_front();
            log.total -= n;
            log.trimmed += 1;
        }
    }

    /// The earliest time ≥ `now` (and ≥ the newest entry) at which `cost` more
    /// admissions fit. `cost` ≤ limit; `log` must be trimmed at `now`.
    pub(crate) fn earliest(&self, log: &SlidingLog, cost: u64, now: Nanos) -> Nanos {
        let newest = log.entries.back().map_or(0, |e| e.0);
        let floor = now.max(newest);
        let Some(mut excess) = (log.total + cost).checked_sub(self.limit) else {
            return floor;
        };
        if excess == 0 {
            return floor;
        }
        for &(t, n) in &log.entries {
            if n >= excess {
                return floor.max(t.saturating_add(self.period_ns));
            }
            excess -= n;
        }
        floor
    }

    /// Records `cost` admissions at `at` (≥ the newest entry).
    pub(crate) fn charge(&self, log: &mut SlidingLog, cost: u64, at: Nanos) {
        log.entries.push_back((at, cost));
        log.total += cost;
    }

    pub(crate) fn period_ns(&self) -> u64 {
        self.period_ns
    }

    /// Admissions inside the window at `now`, without trimming the log.
    pub(crate) fn in_window(&self, log: &SlidingLog, now: Nanos) -> u64 {
        log.entries
            .iter()
            .filter(|&&(t, _)| t.saturating_add(self.period_ns) > now)
            .map(|&(_, n)| n)
            .sum()
    }

    /// A log for this window carrying over `used` admissions made at `now`.
    pub(crate) fn seeded(&self, used: u64, now: Nanos) -> SlidingLog {
        let mut log = SlidingLog::default();
        if used > 0 {
            self.charge(&mut log, used.min(self.limit), now);
        }
        log
    }
}

// === impl SlidingLog ===

impl SlidingLog {
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Admissions recorded in the log (after the last trim).
    #[cfg(test)]
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Entries ever recorded and not cut off by [`SlidingLog::truncate`]: a snapshot
    /// that stays valid while old entries are trimmed.
    pub(crate) fn len(&self) -> usize {
        self.trimmed + self.entries.len()
    }

    /// Drops the entries recorded after the snapshot `len`.
    pub(crate) fn truncate(&mut self, len: usize) {
        let keep = len.saturating_sub(self.trimmed);
        while self.entries.len() > keep {
            if let Some((_, n)) = self.entries.pop_back() {
                self.total -= n;
            }
        }
    }

    /// Takes `cost` admissions made at `at` back out of the log, if it holds that
    /// many at that time (an entry may hold several calls of one reservation).
    pub(crate) fn remove(&mut self, at: Nanos, cost: u64) {
        let Some(i) = self
            .entries
            .iter()
            .rposition(|&(t, n)| t == at && n >= cost)
        else {
            return;
        };
        if let Some(e) = self.entries.get_mut(i) {
            e.1 -= cost;
            if e.1 == 0 {
                self.entries.remove(i);
            }
            self.total -= cost;
        }
    }

    /// The time of the newest entry.
    pub(crate) fn newest(&self) -> Option<Nanos> {
        self.entries.back().map(|e| e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn admit(w: &SlidingWindow, log: &mut SlidingLog, now: Nanos) -> Result<(), Nanos> {
        w.trim(log, now);
        let t = w.earliest(log, 1, now);
        if t > now {
            return Err(t - now);
        }
        w.charge(log, 1, now);
        Ok(())
    }

    #[test]
    fn at_most_limit_in_any_window_and_retry_after_is_when_the_oldest_leaves() {
        let w = SlidingWindow::new(3, 60 * S);
        let mut log = SlidingLog::default();
        assert!(admit(&w, &mut log, 0).is_ok());
        assert!(admit(&w, &mut log, 10 * S).is_ok());
        assert!(admit(&w, &mut log, 20 * S).is_ok());
        assert_eq!(admit(&w, &mut log, 30 * S), Err(30 * S));
        assert_eq!(admit(&w, &mut log, 60 * S - 1), Err(1));
        assert!(admit(&w, &mut log, 60 * S).is_ok());
        assert_eq!(admit(&w, &mut log, 60 * S), Err(10 * S));
    }

    #[test]
    fn parts_of_a_batch_are_taken_back_one_by_one() {
        let w = SlidingWindow::new(4, 10);
        let mut log = SlidingLog::default();
        w.charge(&mut log, 3, 0); // a reservation of three calls, one entry
        log.remove(0, 1);
        assert_eq!(w.in_window(&log, 1), 2);
        log.remove(0, 5); // more than the entry holds: nothing
        log.remove(7, 1); // no entry at that time: nothing
        assert_eq!(w.in_window(&log, 1), 2);
        log.remove(0, 2);
        assert!(log.is_empty());
        assert_eq!(w.earliest(&log, 4, 1), 1);
    }

    #[test]
    fn batches_wait_for_enough_entries_to_leave() {
        let w = SlidingWindow::new(4, 10);
        let mut log = SlidingLog::default();
        w.charge(&mut log, 2, 0);
        w.charge(&mut log, 2, 5);
        assert_eq!(w.earliest(&log, 3, 6), 15);
        assert_eq!(w.earliest(&log, 2, 6), 10);
    }

    #[test]
    fn truncating_to_a_snapshot_survives_trims() {
        let w = SlidingWindow::new(10, 100);
        let mut log = SlidingLog::default();
        w.charge(&mut log, 1, 0);
        w.charge(&mut log, 1, 10);
        let snap = log.len();
        w.charge(&mut log, 3, 150);
        w.trim(&mut log, 105);
        assert_eq!(log.total(), 4);
        log.truncate(snap);
        assert_eq!(log.total(), 1);
        assert_eq!(log.newest(), Some(10));
    }

    #[test]
    fn future_entries_keep_later_calls_behind_them() {
        let w = SlidingWindow::new(10, 100);
        let mut log = SlidingLog::default();
        w.charge(&mut log, 1, 50);
        assert_eq!(w.earliest(&log, 1, 0), 50);
    }
}
