//! Values that every thread updates on a hot path without a shared atomic
//! read-modify-write: one lane (a 128-byte block) per thread, written by that thread
//! only, read together when needed ([`PerLane`]); and the counters every admission
//! bumps, built on it ([`Tally`]).
//!
//! Why by hand: a shared `fetch_add` costs an uncontended locked instruction, and a
//! cache-line transfer between cores when two cores admit the same tool; the two
//! counters of every admission (admitted, finished) would cost more than the whole
//! decision. Crates for sharded counters either still use `fetch_add` per shard or
//! hash threads onto shards that several threads then share; here every thread owns
//! its lane outright (a lane index is handed out once per thread and returned when it
//! exits), so an update is a plain load and store. Threads beyond the lanes a value
//! has share one overflow lane with read-modify-writes, so nothing is ever lost.

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// A lane index that no thread holds: the thread has none yet.
const UNSET: usize = usize::MAX;
/// The thread is exiting (its lane went back to the pool): it counts in the
/// overflow lane.
const EXITED: usize = usize::MAX - 1;

thread_local! {
    static LANE: Cell<usize> = const { Cell::new(UNSET) };
    static RETURN: LaneReturn = const { LaneReturn };
}

/// Lane indices free for the taking, lowest first, and the next never used one.
static POOL: Mutex<Pool> = Mutex::new(Pool {
    free: BinaryHeap::new(),
    next: 0,
});

struct Pool {
    /// Lowest first, so that lanes stay dense and few.
    free: BinaryHeap<Reverse<usize>>,
    next: usize,
}

/// Gives the thread's lane back when the thread exits.
struct LaneReturn;

impl Drop for LaneReturn {
    fn drop(&mut self) {
        let lane = LANE.replace(EXITED);
        if lane < EXITED {
            POOL.lock().free.push(Reverse(lane));
        }
    }
}

/// This thread's lane index.
#[inline]
fn lane() -> usize {
    let lane = LANE.get();
    if lane != UNSET {
        return lane;
    }
    claim()
}

#[cold]
fn claim() -> usize {
    // Registering the return first: if the thread is already tearing its
    // thread-locals down, it keeps to the overflow lane.
    if RETURN.try_with(|_| ()).is_err() {
        LANE.set(EXITED);
        return EXITED;
    }
    let lane = {
        let mut pool = POOL.lock();
        pool.free
            .pop()
            .map(|Reverse(lane)| lane)
            .unwrap_or_else(|| {
                pool.next += 1;
                pool.next - 1
            })
    };
    LANE.set(lane);
    lane
}

/// Adds one to a counter in this thread's own lane: it is the lane's only writer,
/// so no read-modify-write is needed.
#[inline(always)]
fn add_own(counter: &AtomicU64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
}

/// How many lanes a counter has: twice the cores, between 4 and 64.
fn lanes() -> usize {
    static LANES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LANES.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(4, usize::from);
        (2 * cores).clamp(4, 64)
    })
}

/// A lane's value alone in a 128-byte block: two cache lines, for the prefetchers
/// that fetch lines in pairs (so neighbouring lanes never share one).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded<T>(T);

/// One `T` per lane, and one more shared by the threads whose lane lies beyond them.
#[derive(Debug)]
pub(crate) struct PerLane<T> {
    lines: Box<[Padded<T>]>,
    overflow: Padded<T>,
}

/// The value of [`PerLane`] a thread updates.
pub(crate) enum Mine<'a, T> {
    /// Its own lane's: no other thread writes it, so a load and a store update it.
    Own(&'a T),
    /// The overflow lane's, which other threads write too: read-modify-writes only.
    Shared(&'a T),
}

impl<T: Default> PerLane<T> {
    pub(crate) fn new() -> Self {
        Self {
            lines: (0..lanes()).map(|_| Padded::default()).collect(),
            overflow: Padded::default(),
        }
    }
}

impl<T> PerLane<T> {
    /// The value this thread updates. One bounds check covers a thread without a
    /// lane yet too (`UNSET` lies beyond every value's lanes).
    #[inline(always)]
    pub(crate) fn mine(&self) -> Mine<'_, T> {
        match self.lines.get(LANE.get()) {
            Some(line) => Mine::Own(&line.0),
            None => self.mine_elsewhere(),
        }
    }

    /// [`PerLane::mine`] for a thread that has no lane yet (it claims one) or whose
    /// lane lies beyond this value's (the overflow lane).
    #[cold]
    #[inline(never)]
    fn mine_elsewhere(&self) -> Mine<'_, T> {
        match self.lines.get(lane()) {
            Some(line) => Mine::Own(&line.0),
            None => Mine::Shared(&self.overflow.0),
        }
    }

    /// Every lane's value, the overflow lane's last.
    pub(crate) fn all(&self) -> impl Iterator<Item = &T> {
        self.lines.iter().chain([&self.overflow]).map(|l| &l.0)
    }
}

/// One thread's counts of a [`Tally`].
#[derive(Debug, Default)]
struct Line {
    admitted: AtomicU64,
    finished: AtomicU64,
}

/// Admitted and finished calls of one tool, counted per thread.
#[derive(Debug)]
pub(crate) struct Tally(PerLane<Line>);

impl Tally {
    pub(crate) fn new() -> Self {
        Self(PerLane::new())
    }

    /// Bumps this thread's count in `line`'s `field`.
    #[inline(always)]
    fn bump(&self, field: fn(&Line) -> &AtomicU64) {
        match self.0.mine() {
            Mine::Own(line) => add_own(field(line)),
            Mine::Shared(line) => {
                field(line).fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Counts an admission.
    #[inline]
    pub(crate) fn admit(&self) {
        self.bump(|l| &l.admitted);
    }

    /// Counts the end of an admitted call.
    #[inline]
    pub(crate) fn finish(&self) {
        self.bump(|l| &l.finished);
    }

    /// The sum of one count over every line.
    fn sum(&self, field: fn(&Line) -> &AtomicU64) -> u64 {
        self.0
            .all()
            .fold(0, |n, l| n.wrapping_add(field(l).load(Ordering::Relaxed)))
    }

    /// Calls admitted so far.
    pub(crate) fn admitted(&self) -> u64 {
        self.sum(|l| &l.admitted)
    }

    /// Calls admitted and not finished yet (a snapshot: lanes are read one after
    /// another, so a call finished on another thread meanwhile may show early).
    pub(crate) fn in_flight(&self) -> u64 {
        let finished = self.sum(|l| &l.finished);
        // Read after the finished counts, so that it covers every finished call.
        let diff = self.admitted().wrapping_sub(finished);
        if diff > u64::MAX / 2 {
            0
        } else {
            diff
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_many_threads_are_all_kept() {
        let tally = Tally::new();
        // More threads than lanes, so the overflow lane is used too.
        let threads = lanes() * 2 + 3;
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    for _ in 0..1000 {
                        tally.admit();
                    }
                    for _ in 0..400 {
                        tally.finish();
                    }
                });
            }
        });
        assert_eq!(tally.admitted(), threads as u64 * 1000);
        assert_eq!(tally.in_flight(), threads as u64 * 600);
    }

    #[test]
    fn a_call_may_finish_on_another_thread() {
        let tally = Tally::new();
        tally.admit();
        tally.admit();
        std::thread::scope(|s| {
            s.spawn(|| tally.finish());
        });
        assert_eq!(tally.in_flight(), 1);
        tally.finish();
        assert_eq!(tally.in_flight(), 0);
        assert_eq!(tally.admitted(), 2);
    }

    #[test]
    fn exited_threads_give_their_lanes_back() {
        let before = POOL.lock().next;
        for _ in 0..200 {
            let lane = std::thread::spawn(lane).join().unwrap();
            assert!(lane < EXITED);
        }
        // Without reuse, 200 threads one after another would take 200 new lanes;
        // with it they take one (other tests' threads may take a few meanwhile).
        let grown = POOL.lock().next - before;
        assert!(grown < 100, "lanes leak: {grown} new lanes for 200 threads");
    }
}
