//! Time for the engine: every reading and every sleep goes through a [`Clock`].
//!
//! Why a trait: admission decisions are functions of time, so tests must be able to
//! drive time by hand ([`ManualClock`]) and get the same answer every run, while
//! production uses the monotonic system clock ([`SystemClock`]). Times are plain
//! nanosecond counts ([`Nanos`]) measured from the clock's own origin, which keeps the
//! quota arithmetic in integers.
//!
//! # Sleeping on the system clock
//!
//! A waiter is admitted when its sleep completes, so the timer's precision is the
//! waiter's lateness. tokio's timer rounds a deadline up to its next 1 ms tick and
//! parks in `epoll_wait` with a whole-millisecond timeout: a waiter would wake 0 to
//! about 2 ms after its time. So [`SystemClock::sleep_until`] also registers the
//! deadline with a precise timer: one process-wide thread, `toolgate-timer`, started
//! on first use, that keeps the deadlines in order and sleeps on a condition variable
//! (a futex with a nanosecond timeout) until the earliest one, then wakes exactly the
//! due sleepers. It is woken only when a new earliest deadline is registered, so
//! sleeping waiters cost no CPU; a dropped sleep removes its deadline.
//!
//! A wake from that thread lands at the back of the runtime's global queue; when
//! that queue holds a backlog (a burst of new tasks), the timer leaves the wake to
//! tokio's, which runs on a worker ahead of it (see `timer.rs`).
//!
//! The sleep still arms tokio's timer as well and completes when either fires, but
//! only once tokio's clock (the one [`SystemClock::now`] reads) has reached the
//! deadline. On the real clock both are the same monotonic clock and the precise
//! timer comes first; under tokio's paused time (`#[tokio::test(start_paused =
//! true)]`) tokio's timer decides, and the precise timer, which follows the real
//! clock, can neither complete a sleep early nor make it spin.

// The one place where the system's clocks are read (`.clippy.toml` disallows
// `Instant::now` and `SystemTime::now` elsewhere in the core).
#![allow(
    clippy::disallowed_methods,
    reason = "the clock module is the core's one reader of the system's clocks"
)]

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

mod timer;

/// Nanoseconds since a clock's origin.
pub type Nanos = u64;

/// A future that completes when a clock reaches a deadline.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A monotonic source of time that can also sleep until a deadline.
pub trait Clock: fmt::Debug + Send + Sync + 'static {
    /// The current time. Never decreases.
    fn now(&self) -> Nanos;

    /// A future that completes once [`Clock::now`] has reached `deadline`.
    fn sleep_until(&self, deadline: Nanos) -> Sleep;

    /// The clock as [`std::any::Any`], for the engine to read toolgate's own clocks
    /// without a virtual call on its fast path. Other clocks keep the default.
    #[doc(hidden)]
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// The wall-clock time now, for what only the wall clock answers: an HTTP-date in an
/// upstream's `Retry-After`. Admission never reads it; it runs on a [`Clock`].
pub(crate) fn wall_clock() -> SystemTime {
    SystemTime::now()
}

/// Converts a [`Duration`] to [`Nanos`], saturating at `u64::MAX` (about 584 years).
pub(crate) fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The monotonic clock of the running process (tokio's `Instant`, so paused tokio
/// time in tests is honoured too). Sleeping needs a tokio runtime with the time driver;
/// besides tokio's timer, a precise timer thread (`toolgate-timer`, started on first
/// use) wakes sleeps within tens of microseconds of their deadline rather than on
/// tokio's 1 ms tick. Paused tokio time is still followed: a sleep never completes
/// before [`Clock::now`] has reached its deadline.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: tokio::time::Instant,
}

/// A clock that moves only when told to: for deterministic tests and simulations.
///
/// [`ManualClock::advance`] wakes exactly the sleepers whose deadline has been reached,
/// in deadline order; nothing else ever wakes them.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use toolgate::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// assert_eq!(clock.now(), 0);
/// clock.advance(Duration::from_millis(500));
/// assert_eq!(clock.now(), 500_000_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

#[derive(Debug, Default)]
struct ManualInner {
    now: AtomicU64,
    next_id: AtomicU64,
    timers: Mutex<BTreeMap<(Nanos, u64), Waker>>,
}

struct ManualSleep {
    clock: Arc<ManualInner>,
    deadline: Nanos,
    id: u64,
    registered: bool,
}

// === impl SystemClock ===

impl SystemClock {
    /// A system clock whose origin is now.
    pub fn new() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Nanos {
        nanos(self.origin.elapsed())
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn sleep_until(&self, deadline: Nanos) -> Sleep {
        let at = self
            .origin
            .checked_add(Duration::from_nanos(deadline))
            .unwrap_or_else(|| self.origin + Duration::from_secs(86_400 * 365 * 30));
        hybrid_sleep(timer::global(), at)
    }
}

/// Sleeps until tokio's clock reaches `at`, woken by whichever comes first: tokio's
/// own timer (which follows paused time in tests, and wakes up to about 2 ms late on
/// the real clock) or the precise timer (which wakes on the real clock within the
/// operating system's timer slack).
///
/// It completes only once `tokio::time::Instant::now() >= at`, which is exactly
/// `SystemClock::now() >= deadline`. When time is not paused, tokio's `Instant` is the
/// monotonic clock the precise timer waits on, so a sleeper it wakes finds its
/// deadline passed. When tokio's time is paused, the precise timer may fire while
/// tokio's clock is still behind: the sleep then stops using it and waits for tokio's
/// timer alone, so it neither completes early nor keeps re-registering.
fn hybrid_sleep(timer: &timer::Timer, at: tokio::time::Instant) -> Sleep {
    // Created here, not on first poll: like `tokio::time::sleep_until`, calling this
    // outside a runtime with the time driver panics at once.
    let tokio_sleep = tokio::time::sleep_until(at);
    let mut precise = Some(timer.registration(at.into_std()));
    Box::pin(async move {
        let mut tokio_sleep = std::pin::pin!(tokio_sleep);
        std::future::poll_fn(|cx| {
            if tokio::time::Instant::now() >= at || tokio_sleep.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
            if precise.as_mut().is_some_and(|p| !p.poll(cx)) {
                // The real clock is past the deadline but tokio's is not (paused time),
                // or there is no timer thread: tokio's timer alone wakes this sleep.
                precise = None;
            }
            Poll::Pending
        })
        .await;
        // `precise` is dropped with the future (completed or cancelled), and with it
        // its entry in the timer.
    })
}

// === impl ManualClock ===

/// toolgate's own clocks, read without a virtual call; any other clock through its
/// trait object.
///
/// An explicit tag (`repr(u8)`): telling the variants apart is then one byte
/// compare, where the niche in `Instant`'s nanoseconds took half a dozen instructions
/// on every read.
#[derive(Debug, Clone)]
#[repr(u8)]
pub(crate) enum NowSource {
    System(SystemClock),
    Manual(ManualClock),
    Other,
}

impl NowSource {
    pub(crate) fn of(clock: &dyn Clock) -> Self {
        match clock.as_any() {
            Some(any) => {
                if let Some(c) = any.downcast_ref::<SystemClock>() {
                    Self::System(*c)
                } else if let Some(c) = any.downcast_ref::<ManualClock>() {
                    Self::Manual(c.clone())
                } else {
                    Self::Other
                }
            }
            None => Self::Other,
        }
    }

    /// The time, from `clock` unless it is one of toolgate's own.
    #[inline]
    pub(crate) fn now(&self, clock: &dyn Clock) -> Nanos {
        match self {
            Self::System(c) => c.now(),
            Self::Manual(c) => c.now(),
            Self::Other => clock.now(),
        }
    }
}

impl ManualClock {
    /// A manual clock standing at time zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves time forward by `by` and wakes every sleeper that became due.
    pub fn advance(&self, by: Duration) {
        self.inner.now.fetch_add(nanos(by), Ordering::SeqCst);
        self.inner.wake_due();
    }

    /// Moves time forward to `to` (no effect if `to` is in the past) and wakes every
    /// sleeper that became due.
    pub fn set(&self, to: Nanos) {
        self.inner.now.fetch_max(to, Ordering::SeqCst);
        self.inner.wake_due();
    }

    /// The number of sleepers still waiting for their deadline.
    pub fn sleepers(&self) -> usize {
        self.inner.timers.lock().len()
    }

    /// The earliest deadline any sleeper waits for.
    pub fn next_deadline(&self) -> Option<Nanos> {
        self.inner.timers.lock().keys().next().map(|(t, _)| *t)
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> Nanos {
        self.inner.now.load(Ordering::SeqCst)
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn sleep_until(&self, deadline: Nanos) -> Sleep {
        Box::pin(ManualSleep {
            clock: self.inner.clone(),
            deadline,
            id: self.inner.next_id.fetch_add(1, Ordering::Relaxed),
            registered: false,
        })
    }
}

impl ManualInner {
    fn wake_due(&self) {
        let now = self.now.load(Ordering::SeqCst);
        let due = {
            let mut timers = self.timers.lock();
            let later = timers.split_off(&(now.saturating_add(1), 0));
            std::mem::replace(&mut *timers, later)
        };
        for waker in due.into_values() {
            waker.wake();
        }
    }
}

impl Future for ManualSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut timers = self.clock.timers.lock();
        // Checked under the timer lock: `advance` stores the new time before it takes
        // the lock, so a sleeper either sees the new time or is found by `wake_due`.
        if self.clock.now.load(Ordering::SeqCst) >= self.deadline {
            timers.remove(&(self.deadline, self.id));
            drop(timers);
            self.registered = false;
            return Poll::Ready(());
        }
        timers.insert((self.deadline, self.id), cx.waker().clone());
        drop(timers);
        self.registered = true;
        Poll::Pending
    }
}

impl Drop for ManualSleep {
    fn drop(&mut self) {
        if self.registered {
            self.clock.timers.lock().remove(&(self.deadline, self.id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_test::task;

    #[test]
    fn advance_wakes_exactly_the_due_sleepers() {
        let clock = ManualClock::new();
        let mut early = task::spawn(clock.sleep_until(10));
        let mut late = task::spawn(clock.sleep_until(20));
        assert!(early.poll().is_pending());
        assert!(late.poll().is_pending());
        assert_eq!(clock.sleepers(), 2);

        clock.set(10);
        assert!(early.is_woken());
        assert!(!late.is_woken());
        assert!(early.poll().is_ready());
        assert!(late.poll().is_pending());

        clock.advance(Duration::from_nanos(10));
        assert!(late.is_woken());
        assert!(late.poll().is_ready());
        assert_eq!(clock.sleepers(), 0);
    }

    #[test]
    fn a_dropped_sleeper_leaves_no_timer() {
        let clock = ManualClock::new();
        let mut sleep = task::spawn(clock.sleep_until(5));
        assert!(sleep.poll().is_pending());
        drop(sleep);
        assert_eq!(clock.sleepers(), 0);
    }

    /// The precise timer wakes a system-clock sleep at its deadline: the runtime's own
    /// driver does not turn while this thread sleeps, so only the precise timer can
    /// have woken it.
    #[tokio::test]
    async fn the_precise_timer_wakes_a_system_sleep_at_its_deadline() {
        let timer = timer::Timer::start();
        let clock = SystemClock::new();
        let deadline = clock.now() + 20_000_000;
        let mut sleep = task::spawn(hybrid_sleep(
            &timer,
            clock.origin + Duration::from_nanos(deadline),
        ));
        assert!(sleep.poll().is_pending());
        assert_eq!(timer.entries(), 1);
        let limit = std::time::Instant::now() + Duration::from_secs(5);
        while !sleep.is_woken() && std::time::Instant::now() < limit {
            std::thread::sleep(Duration::from_micros(200));
        }
        assert!(sleep.is_woken(), "the precise timer woke the sleep");
        assert!(clock.now() >= deadline);
        assert!(sleep.poll().is_ready());
        assert_eq!(timer.entries(), 0);
    }

    #[tokio::test]
    async fn system_sleeps_never_end_before_their_deadline() {
        let clock = SystemClock::new();
        for i in 0..50u64 {
            let deadline = clock.now() + 100_000 + i * 37_000;
            clock.sleep_until(deadline).await;
            let now = clock.now();
            assert!(now >= deadline, "woke {} ns early", deadline - now);
            assert!(
                now - deadline < 50_000_000,
                "woke {} ns late",
                now - deadline
            );
        }
    }

    #[tokio::test]
    async fn a_dropped_system_sleep_leaves_no_timer() {
        let timer = timer::Timer::start();
        let clock = SystemClock::new();
        let mut sleeps: Vec<_> = (0..100u64)
            .map(|i| {
                task::spawn(hybrid_sleep(
                    &timer,
                    clock.origin + Duration::from_millis(100 + i),
                ))
            })
            .collect();
        for sleep in &mut sleeps {
            assert!(sleep.poll().is_pending());
        }
        assert_eq!(timer.entries(), 100);
        drop(sleeps);
        assert_eq!(timer.entries(), 0);
    }

    /// Under paused time the precise timer fires on the real clock while tokio's clock
    /// stands still: the sleep must not complete, and must not spin re-registering.
    #[tokio::test(start_paused = true)]
    async fn under_paused_time_a_system_sleep_follows_tokio_time() {
        let timer = timer::Timer::start();
        let clock = SystemClock::new();
        let mut sleep = task::spawn(hybrid_sleep(
            &timer,
            clock.origin + Duration::from_millis(20),
        ));
        assert!(sleep.poll().is_pending());
        assert_eq!(timer.entries(), 1);
        // Real time passes; tokio's (paused) time does not.
        let limit = std::time::Instant::now() + Duration::from_secs(5);
        while timer.entries() != 0 && std::time::Instant::now() < limit {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(timer.entries(), 0, "the precise timer fired");
        assert!(sleep.is_woken());
        assert!(
            sleep.poll().is_pending(),
            "not before tokio's clock is there"
        );
        assert_eq!(timer.entries(), 0, "not registered again");
        std::thread::sleep(Duration::from_millis(10));
        assert!(!sleep.is_woken(), "no busy loop");
        assert!(sleep.poll().is_pending());

        tokio::time::advance(Duration::from_millis(19)).await;
        assert!(sleep.poll().is_pending());
        assert!(clock.now() < 20_000_000);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(clock.now() >= 20_000_000);
        assert!(sleep.poll().is_ready());
    }

    #[test]
    fn set_never_moves_backwards() {
        let clock = ManualClock::new();
        clock.set(100);
        clock.set(50);
        assert_eq!(clock.now(), 100);
    }
}
