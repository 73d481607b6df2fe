//! The precise timer behind [`SystemClock`](super::SystemClock): one process-wide
//! thread that wakes sleepers at their deadline to within the operating system's
//! timer slack (tens of microseconds), not tokio's 1 ms tick.
//!
//! The deadlines live in a [`BTreeMap`] keyed by `(Instant, id)` under one mutex. The
//! thread sleeps on a condition variable until the earliest deadline (a futex with a
//! nanosecond timeout on Linux), takes every entry that is due, releases the lock and
//! only then wakes them. It is notified only when a registration becomes the new
//! earliest deadline, so it costs nothing while sleepers sleep: no polling, no
//! periodic tick. A [`Registration`] that is dropped removes its entry.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Waker};
use std::time::Instant;

use parking_lot::{Condvar, Mutex, MutexGuard};

/// A timer thread and its deadlines. Dropping it stops the thread (the process-wide
/// one is never dropped).
pub(crate) struct Timer {
    /// `None` if the thread could not be started: registrations then never fire.
    shared: Option<Arc<Shared>>,
}

struct Shared {
    state: Mutex<State>,
    wakeup: Condvar,
}

#[derive(Default)]
struct State {
    entries: BTreeMap<(Instant, u64), Sleeper>,
    next_id: u64,
    shutdown: bool,
}

/// A registered sleeper: its waker, and the tokio runtime it was registered from.
struct Sleeper {
    waker: Waker,
    runtime: Option<tokio::runtime::Handle>,
}

/// Tasks waiting in a runtime's global queue beyond which the precise timer stands
/// aside (see [`Sleeper::wake`]).
const BACKLOG: usize = 32;

impl Sleeper {
    /// Wakes the sleeper, unless its runtime is behind on a backlog.
    ///
    /// A wake from this thread (not one of tokio's workers) puts the task at the
    /// back of the runtime's global queue. That is fast while the queue is short, but
    /// behind a burst of new tasks (a crowd of callers arriving at once) it can cost
    /// milliseconds, whereas tokio's own timer, which every sleep also arms, wakes the
    /// task on a worker, ahead of that backlog, within about 2 ms. So when the queue
    /// holds a backlog the precise timer leaves the wake to tokio's.
    fn wake(self) {
        let backlogged = self
            .runtime
            .is_some_and(|rt| rt.metrics().global_queue_depth() > BACKLOG);
        if !backlogged {
            self.waker.wake();
        }
    }
}

/// One sleeper's place in a [`Timer`]: registered on the first [`Registration::poll`],
/// removed when dropped.
pub(crate) struct Registration {
    shared: Option<Arc<Shared>>,
    at: Instant,
    state: Reg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reg {
    Unregistered,
    Registered(u64),
    /// Fired (the deadline passed on the real clock), or could never be registered.
    Done,
}

/// The process-wide timer, its thread started on first use.
pub(crate) fn global() -> &'static Timer {
    static GLOBAL: OnceLock<Timer> = OnceLock::new();
    GLOBAL.get_or_init(Timer::start)
}

// === impl Timer ===

impl Timer {
    /// A timer with its own thread.
    pub(crate) fn start() -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wakeup: Condvar::new(),
        });
        let thread = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("toolgate-timer".into())
            .spawn(move || thread.run());
        match spawned {
            Ok(_) => Self {
                shared: Some(shared),
            },
            Err(error) => {
                tracing::warn!(
                    %error,
                    "could not start the toolgate-timer thread; sleeps fall back to tokio's timer"
                );
                Self { shared: None }
            }
        }
    }

    /// A registration for `at`, not yet in the timer.
    pub(crate) fn registration(&self, at: Instant) -> Registration {
        Registration {
            shared: self.shared.clone(),
            at,
            state: Reg::Unregistered,
        }
    }

    /// The number of registered, not yet fired deadlines.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> usize {
        self.shared
            .as_ref()
            .map_or(0, |s| s.state.lock().entries.len())
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        if let Some(shared) = &self.shared {
            shared.state.lock().shutdown = true;
            shared.wakeup.notify_one();
        }
    }
}

impl fmt::Debug for Timer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timer")
            .field("running", &self.shared.is_some())
            .finish_non_exhaustive()
    }
}

// === impl Shared ===

impl Shared {
    /// The timer thread: wakes each waker once its deadline has passed on the
    /// monotonic clock, never before.
    fn run(&self) {
        let mut due = Vec::new();
        let mut state = self.state.lock();
        loop {
            if state.shutdown {
                return;
            }
            let now = Instant::now();
            while let Some(entry) = state.entries.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                due.push(entry.remove());
            }
            if !due.is_empty() {
                // Never wake while holding the lock: a woken task may run (and
                // register or cancel) on another thread at once.
                MutexGuard::unlocked(&mut state, || due.drain(..).for_each(Sleeper::wake));
                continue;
            }
            match state.entries.keys().next() {
                Some(&(at, _)) => {
                    self.wakeup.wait_until(&mut state, at);
                }
                None => self.wakeup.wait(&mut state),
            }
        }
    }
}

// === impl Registration ===

impl Registration {
    /// Registers (or refreshes) the task's waker for the deadline. Returns `false`
    /// once the deadline has passed on the real clock: the timer fired, or there is
    /// nothing to register. The registration is then spent and stays `false`.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(shared) = &self.shared else {
            return false;
        };
        match self.state {
            Reg::Done => false,
            Reg::Unregistered => {
                if self.at <= Instant::now() {
                    self.state = Reg::Done;
                    return false;
                }
                let sleeper = Sleeper {
                    waker: cx.waker().clone(),
                    runtime: tokio::runtime::Handle::try_current().ok(),
                };
                let mut state = shared.state.lock();
                let id = state.next_id;
                state.next_id += 1;
                let earliest = state
                    .entries
                    .keys()
                    .next()
                    .is_none_or(|&(first, _)| self.at < first);
                state.entries.insert((self.at, id), sleeper);
                drop(state);
                if earliest {
                    shared.wakeup.notify_one();
                }
                self.state = Reg::Registered(id);
                true
            }
            Reg::Registered(id) => {
                let mut state = shared.state.lock();
                match state.entries.get_mut(&(self.at, id)) {
                    Some(Sleeper { waker, .. }) => {
                        if !waker.will_wake(cx.waker()) {
                            waker.clone_from(cx.waker());
                        }
                        true
                    }
                    None => {
                        drop(state);
                        self.state = Reg::Done;
                        false
                    }
                }
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let (Reg::Registered(id), Some(shared)) = (self.state, &self.shared) {
            // The entry is gone already if the timer fired.
            let waker = shared.state.lock().entries.remove(&(self.at, id));
            drop(waker);
        }
    }
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("at", &self.at)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Wake;
    use std::time::Duration;

    /// A waker that records when it was first woken.
    #[derive(Default)]
    struct Flag {
        woken_at: Mutex<Option<Instant>>,
        woken: Condvar,
    }

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            let now = Instant::now();
            self.woken_at.lock().get_or_insert(now);
            self.woken.notify_all();
        }
    }

    impl Flag {
        fn waker(self: &Arc<Self>) -> Waker {
            Waker::from(self.clone())
        }

        /// When it was woken, waiting up to `limit` for it.
        fn wait(&self, limit: Duration) -> Option<Instant> {
            let mut woken_at = self.woken_at.lock();
            let _ = self
                .woken
                .wait_while_for(&mut woken_at, |w| w.is_none(), limit);
            *woken_at
        }
    }

    fn register(timer: &Timer, at: Instant, flag: &Arc<Flag>) -> Registration {
        let mut reg = timer.registration(at);
        let waker = flag.waker();
        assert!(reg.poll(&mut Context::from_waker(&waker)));
        reg
    }

    #[test]
    fn behind_a_backlog_in_its_runtime_a_sleeper_is_left_to_tokios_timer() {
        let timer = Timer::start();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let (calm, crowded) = (Arc::new(Flag::default()), Arc::new(Flag::default()));
        let at = Instant::now() + Duration::from_millis(10);
        let _calm_reg = {
            let _in = rt.enter();
            register(&timer, at, &calm)
        };
        assert!(
            calm.wait(Duration::from_secs(5)).is_some(),
            "a calm runtime's sleeper is woken"
        );

        // Tasks spawned from outside a runtime that is not running wait in its
        // global queue.
        for _ in 0..=BACKLOG {
            drop(rt.spawn(async {}));
        }
        assert!(rt.metrics().global_queue_depth() > BACKLOG);
        let at = Instant::now() + Duration::from_millis(10);
        let _crowded_reg = {
            let _in = rt.enter();
            register(&timer, at, &crowded)
        };
        let limit = Instant::now() + Duration::from_secs(5);
        while timer.entries() > 0 && Instant::now() < limit {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(timer.entries(), 0, "the deadline passed and the entry left");
        assert_eq!(
            crowded.wait(Duration::from_millis(50)),
            None,
            "not woken from here"
        );
    }

    #[test]
    fn due_wakers_are_woken_and_later_ones_are_not() {
        let timer = Timer::start();
        let (soon, later) = (Arc::new(Flag::default()), Arc::new(Flag::default()));
        let start = Instant::now();
        let soon_at = start + Duration::from_millis(10);
        let mut soon_reg = register(&timer, soon_at, &soon);
        let mut later_reg = register(&timer, start + Duration::from_secs(3600), &later);
        assert_eq!(timer.entries(), 2);

        let woken_at = soon
            .wait(Duration::from_secs(5))
            .expect("the due waker is woken");
        assert!(woken_at >= soon_at, "woken before its deadline");
        assert_eq!(later.wait(Duration::from_millis(50)), None);
        assert_eq!(timer.entries(), 1);

        // A fired registration says so, and stays spent.
        let waker = soon.waker();
        let mut cx = Context::from_waker(&waker);
        assert!(!soon_reg.poll(&mut cx));
        assert!(!soon_reg.poll(&mut cx));
        let waker = later.waker();
        assert!(later_reg.poll(&mut Context::from_waker(&waker)));
        assert_eq!(timer.entries(), 1);
        drop(later_reg);
        assert_eq!(timer.entries(), 0);
    }

    #[test]
    fn a_dropped_registration_leaves_no_entry() {
        let timer = Timer::start();
        let flag = Arc::new(Flag::default());
        let reg = register(&timer, Instant::now() + Duration::from_millis(30), &flag);
        assert_eq!(timer.entries(), 1);
        drop(reg);
        assert_eq!(timer.entries(), 0);
        assert_eq!(
            flag.wait(Duration::from_millis(80)),
            None,
            "a cancelled sleep is not woken"
        );
        // Never polled: never registered.
        drop(timer.registration(Instant::now() + Duration::from_secs(1)));
        assert_eq!(timer.entries(), 0);
    }

    #[test]
    fn a_registration_already_due_is_not_registered() {
        let timer = Timer::start();
        let mut reg = timer.registration(Instant::now());
        let waker = Waker::noop();
        assert!(!reg.poll(&mut Context::from_waker(waker)));
        assert_eq!(timer.entries(), 0);
    }

    #[test]
    fn many_registrations_and_cancellations_leave_the_map_empty() {
        let timer = Timer::start();
        let start = Instant::now();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let timer = &timer;
                s.spawn(move || {
                    let flag = Arc::new(Flag::default());
                    let waker = flag.waker();
                    let mut cx = Context::from_waker(&waker);
                    let mut regs = Vec::new();
                    for i in 0..2_500u64 {
                        // Deadlines from 0 to 25 ms away: some fire while others are
                        // being registered or dropped.
                        let at = start + Duration::from_micros((i * 10 + t) % 25_000);
                        let mut reg = timer.registration(at);
                        reg.poll(&mut cx);
                        if i % 3 == 0 {
                            drop(reg);
                        } else {
                            regs.push(reg);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(5));
                    // Polled again (refreshing the waker or finding it fired), then dropped.
                    for reg in &mut regs {
                        reg.poll(&mut cx);
                    }
                    drop(regs);
                });
            }
        });
        assert_eq!(timer.entries(), 0);
    }

    #[test]
    fn a_new_earliest_deadline_wakes_the_thread_and_is_served_on_time() {
        let timer = Timer::start();
        let far = Arc::new(Flag::default());
        let _far = register(&timer, Instant::now() + Duration::from_secs(3600), &far);
        // Let the thread go to sleep until the far deadline.
        std::thread::sleep(Duration::from_millis(20));

        let near = Arc::new(Flag::default());
        let at = Instant::now() + Duration::from_millis(10);
        let _near = register(&timer, at, &near);
        let woken_at = near
            .wait(Duration::from_secs(5))
            .expect("the new earliest deadline is served");
        assert!(woken_at >= at, "woken before its deadline");
        assert!(
            woken_at - at < Duration::from_millis(50),
            "woken {:?} late",
            woken_at - at
        );
        assert_eq!(far.wait(Duration::ZERO), None);
        assert_eq!(timer.entries(), 1);
    }

    #[test]
    fn a_refreshed_waker_is_the_one_woken() {
        let timer = Timer::start();
        let (first, second) = (Arc::new(Flag::default()), Arc::new(Flag::default()));
        let mut reg = register(&timer, Instant::now() + Duration::from_millis(10), &first);
        let waker = second.waker();
        assert!(reg.poll(&mut Context::from_waker(&waker)));
        assert!(second.wait(Duration::from_secs(5)).is_some());
        assert_eq!(first.wait(Duration::ZERO), None);
    }
}
