//! One second-by-second series over the last [`WINDOW_S`] seconds: admissions,
//! rejections and the waits of the admitted calls, in at most [`WINDOW_S`] slots.

use std::collections::VecDeque;
use std::time::Duration;

use serde_json::{json, Value};

use super::waits::Waits;

/// How many seconds a series covers.
pub const WINDOW_S: u64 = 300;

/// One second of a series.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// The second (of the engine's clock) this slot counts.
    sec: u64,
    admitted: u32,
    rejected: u32,
    waits: Waits,
}

/// The last [`WINDOW_S`] seconds, one slot per second that saw a decision: a busy
/// series holds [`WINDOW_S`] slots of 88 bytes (about 26 KB), an idle one none.
#[derive(Debug, Clone, Default)]
pub struct Series {
    slots: VecDeque<Slot>,
}

/// What a series counted over its window.
#[derive(Debug, Clone, Copy, Default)]
pub struct Totals {
    /// Admissions.
    pub admitted: u64,
    /// Rejections.
    pub rejected: u64,
    /// The admitted calls' waits.
    pub waits: Waits,
}

// === impl Series ===

impl Series {
    /// Counts an admission at second `sec` after waiting `waited`.
    pub fn admitted(&mut self, sec: u64, waited: Duration) {
        let s = self.slot(sec);
        s.admitted = s.admitted.saturating_add(1);
        s.waits.record(waited);
    }

    /// Counts a rejection at second `sec`.
    pub fn rejected(&mut self, sec: u64) {
        let s = self.slot(sec);
        s.rejected = s.rejected.saturating_add(1);
    }

    /// The slot of `sec` (a clock never goes back; a slot older than the newest is
    /// counted in the newest).
    fn slot(&mut self, sec: u64) -> &mut Slot {
        self.expire(sec);
        if self.slots.back().is_none_or(|s| s.sec < sec) {
            self.grow();
            self.slots.push_back(Slot {
                sec,
                ..Slot::default()
            });
        }
        let last = self.slots.len() - 1;
        &mut self.slots[last]
    }

    /// Makes room for one more slot, doubling up to [`WINDOW_S`] slots and never past.
    fn grow(&mut self) {
        let (len, cap) = (self.slots.len(), self.slots.capacity());
        if len == cap {
            let max = usize::try_from(WINDOW_S).unwrap_or(usize::MAX);
            let want = (cap * 2).clamp(4, max.max(len + 1));
            self.slots.reserve_exact(want - len);
        }
    }

    /// Drops the slots that left the window ending at `now`.
    fn expire(&mut self, now: u64) {
        while self.slots.front().is_some_and(|s| s.sec + WINDOW_S <= now) {
            self.slots.pop_front();
        }
    }

    /// Whether the window ending at `now` holds nothing.
    pub fn is_idle(&self, now: u64) -> bool {
        self.slots.back().is_none_or(|s| s.sec + WINDOW_S <= now)
    }

    /// The totals of the window ending at `now`.
    pub fn totals(&self, now: u64) -> Totals {
        let mut t = Totals::default();
        for s in self.slots.iter().filter(|s| s.sec + WINDOW_S > now) {
            t.admitted += u64::from(s.admitted);
            t.rejected += u64::from(s.rejected);
            t.waits.merge(&s.waits);
        }
        t
    }

    /// The last `seconds` (at most [`WINDOW_S`]) ending at `now` as dense arrays,
    /// oldest second first (the last entry is the current second): `admitted`,
    /// `rejected`, `wait_p50_ms`, `wait_p99_ms` (null in a second without admissions).
    pub fn to_json(&self, now: u64, seconds: u64) -> Value {
        let seconds = seconds.clamp(1, WINDOW_S);
        let len = usize::try_from(seconds).unwrap_or(1);
        let (mut adm, mut rej) = (vec![0u32; len], vec![0u32; len]);
        let (mut p50, mut p99) = (vec![None; len], vec![None; len]);
        for s in &self.slots {
            let Some(age) = now.checked_sub(s.sec).filter(|a| *a < seconds) else {
                continue;
            };
            let i = len - 1 - usize::try_from(age).unwrap_or(len - 1);
            adm[i] = s.admitted;
            rej[i] = s.rejected;
            p50[i] = s.waits.quantile_ms(0.5);
            p99[i] = s.waits.quantile_ms(0.99);
        }
        json!({"admitted": adm, "rejected": rej, "wait_p50_ms": p50, "wait_p99_ms": p99})
    }
}

// === impl Totals ===

impl Totals {
    /// `{"admitted", "rejected", "wait_ms": {"p50", "p99"}}`.
    pub fn to_json(&self) -> Value {
        json!({
            "admitted": self.admitted,
            "rejected": self.rejected,
            "wait_ms": {"p50": self.waits.quantile_ms(0.5), "p99": self.waits.quantile_ms(0.99)},
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_land_in_their_slots_and_leave_after_the_window() {
        let mut s = Series::default();
        s.admitted(10, Duration::ZERO);
        s.admitted(10, Duration::from_millis(40));
        s.rejected(12);
        let j = s.to_json(12, 300);
        let adm = j["admitted"].as_array().expect("array");
        assert_eq!(adm.len(), 300);
        assert_eq!(adm[297], 2);
        assert_eq!(j["rejected"][299], 1);
        assert_eq!(j["wait_p99_ms"][297], 40);
        assert_eq!(j["wait_p50_ms"][297], 0);
        assert!(j["wait_p50_ms"][299].is_null());
        let t = s.totals(12);
        assert_eq!((t.admitted, t.rejected), (2, 1));
        assert_eq!(
            s.totals(310).admitted,
            0,
            "second 10 left the window at 310"
        );
        assert_eq!(s.totals(311).rejected, 1);
        assert!(s.is_idle(312));
        let short = s.to_json(12, 2);
        assert_eq!(short["admitted"], serde_json::json!([0, 0]));
        assert_eq!(short["rejected"], serde_json::json!([0, 1]));
        s.admitted(400, Duration::ZERO);
        assert_eq!(s.slots.len(), 1, "old slots are dropped");
    }

    #[test]
    fn a_busy_series_never_holds_more_than_the_window() {
        let mut s = Series::default();
        for sec in 0..1_000 {
            s.admitted(sec, Duration::ZERO);
        }
        assert_eq!(s.slots.len(), 300);
        assert!(s.slots.capacity() <= 300, "{}", s.slots.capacity());
        assert_eq!(s.totals(999).admitted, 300);
        assert!(size_of::<Slot>() <= 88, "{}", size_of::<Slot>());
    }
}
