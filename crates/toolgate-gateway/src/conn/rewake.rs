//! Polls a connection again, in place, when it wakes itself while being polled.
//!
//! hyper hands a request's body to the service through a channel that is filled only
//! once the service asks for it: the dispatcher parses the head and calls the
//! service, the service's first poll asks for the body (waking the dispatcher, that
//! is, the connection's own task) and the dispatcher returns; the body is read on the
//! next poll, which wakes the service again. Each of those wakes lands while the task
//! is running, so tokio schedules the task again as a *yield*: to the back of the run
//! queue, with a parked worker woken to steal it (a futex or `eventfd` write and a
//! context switch per request on a busy two-core machine). Here the connection is
//! polled with a waker of its own that, while a poll is under way, only notes the
//! wake; the poll is then repeated at once, up to [`MAX_REPOLLS`] times (so that a
//! connection that keeps waking itself still lets others run). A wake outside a poll
//! (the socket readable, a timer) goes straight to the task, as before.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use parking_lot::Mutex;

/// How many times one poll of the task may poll the connection: the first and this
/// many minus one repeats for wakes during it.
pub(crate) const MAX_REPOLLS: usize = 4;

/// Not being polled: a wake goes to the task.
const IDLE: u8 = 0;
/// Being polled, not woken (yet).
const POLLING: u8 = 1;
/// Woken while being polled: the poller polls again.
const WOKEN: u8 = 2;

/// A connection's own waker (one per connection, made once).
#[derive(Debug)]
pub(crate) struct Rewake {
    shared: Arc<Shared>,
    waker: Waker,
}

#[derive(Debug)]
struct Shared {
    state: AtomicU8,
    /// The task's waker, for wakes outside a poll.
    task: Mutex<Option<Waker>>,
}

// === impl Rewake ===

impl Rewake {
    pub(crate) fn new() -> Self {
        let shared = Arc::new(Shared {
            state: AtomicU8::new(IDLE),
            task: Mutex::new(None),
        });
        let waker = Waker::from(shared.clone());
        Self { shared, waker }
    }

    /// Polls with `poll` until it is ready, or pending without having been woken
    /// meanwhile, or [`MAX_REPOLLS`] polls have been made (then the task is woken
    /// through `cx` to come back later).
    pub(crate) fn poll<T>(
        &self,
        cx: &mut Context<'_>,
        mut poll: impl FnMut(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        {
            let mut task = self.shared.task.lock();
            if !task.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *task = Some(cx.waker().clone());
            }
        }
        let mut inner = Context::from_waker(&self.waker);
        for _ in 0..MAX_REPOLLS {
            self.shared.state.store(POLLING, Ordering::Release);
            let polled = poll(&mut inner);
            let woken = self.shared.state.swap(IDLE, Ordering::AcqRel) == WOKEN;
            if polled.is_ready() || !woken {
                return polled;
            }
        }
        // Still waking itself: let the other tasks run first.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

// === impl Shared ===

impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        match self
            .state
            .compare_exchange(POLLING, WOKEN, Ordering::AcqRel, Ordering::Acquire)
        {
            // The poller sees it and polls again.
            Ok(_) | Err(WOKEN) => {}
            Err(_) => {
                if let Some(task) = self.task.lock().as_ref() {
                    task.wake_by_ref();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts the wakes that reach the task.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn task() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    #[test]
    fn a_wake_during_the_poll_is_a_poll_again_not_a_wake_of_the_task() {
        let (count, waker) = task();
        let rewake = Rewake::new();
        let mut polls = 0;
        let got = rewake.poll(&mut Context::from_waker(&waker), |cx| {
            polls += 1;
            if polls < 3 {
                cx.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready(polls)
            }
        });
        assert_eq!(got, Poll::Ready(3));
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_wake_after_the_poll_reaches_the_task() {
        let (count, waker) = task();
        let rewake = Rewake::new();
        let mut kept = None;
        let got: Poll<()> = rewake.poll(&mut Context::from_waker(&waker), |cx| {
            kept = Some(cx.waker().clone());
            Poll::Pending
        });
        assert!(got.is_pending());
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        let kept = kept.expect("the poll kept its waker");
        kept.wake_by_ref();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        // From another thread too.
        std::thread::spawn(move || kept.wake())
            .join()
            .expect("the waking thread");
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_connection_that_keeps_waking_itself_yields_to_the_task() {
        let (count, waker) = task();
        let rewake = Rewake::new();
        let mut polls = 0;
        let got: Poll<()> = rewake.poll(&mut Context::from_waker(&waker), |cx| {
            polls += 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        });
        assert!(got.is_pending());
        assert_eq!(polls, MAX_REPOLLS);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "woken to come back later"
        );
    }

    /// A wake from another thread is never lost, whenever it lands: during a poll
    /// (the poller polls again), between the poll and the state going idle, or
    /// after (the task is woken). Each round, the other thread sets the flag the
    /// future waits for and wakes it; the poller polls through the `Rewake` and,
    /// when pending, blocks until its task is woken. A lost wake hangs the round
    /// (a timeout fails it).
    #[test]
    fn a_wake_from_another_thread_is_never_lost() {
        use std::sync::atomic::AtomicBool;
        use std::sync::{Condvar, Mutex as StdMutex};
        use std::time::Duration;

        /// The task: woken is a flag under a lock, with a condition to wait on.
        struct Task(StdMutex<bool>, Condvar);
        impl Wake for Task {
            fn wake(self: Arc<Self>) {
                *self.0.lock().expect("lock") = true;
                self.1.notify_all();
            }
        }

        let rewake = Rewake::new();
        let task = Arc::new(Task(StdMutex::new(false), Condvar::new()));
        let waker = Waker::from(task.clone());
        for round in 0..2_000u32 {
            let ready = Arc::new(AtomicBool::new(false));
            let kept: Arc<StdMutex<Option<Waker>>> = Arc::default();
            let (r, k) = (ready.clone(), kept.clone());
            let waking = std::thread::spawn(move || {
                // Once the poller has published its waker, after a pause that lands
                // the wake at a different moment of its loop each round.
                let w = loop {
                    if let Some(w) = k.lock().expect("lock").clone() {
                        break w;
                    }
                    std::thread::yield_now();
                };
                for _ in 0..(round % 7) * 60 {
                    std::hint::spin_loop();
                }
                r.store(true, Ordering::SeqCst);
                w.wake();
            });
            loop {
                *task.0.lock().expect("lock") = false;
                let polled = rewake.poll(&mut Context::from_waker(&waker), |cx| {
                    let is_ready = ready.load(Ordering::SeqCst);
                    *kept.lock().expect("lock") = Some(cx.waker().clone());
                    // Still in the poll for a while: wakes land here too.
                    for _ in 0..(round % 5) * 100 {
                        std::hint::spin_loop();
                    }
                    if is_ready {
                        Poll::Ready(())
                    } else {
                        Poll::Pending
                    }
                });
                if polled.is_ready() {
                    break;
                }
                let woken = task.0.lock().expect("lock");
                let (woken, timeout) = task
                    .1
                    .wait_timeout_while(woken, Duration::from_secs(10), |w| !*w)
                    .expect("lock");
                assert!(
                    !timeout.timed_out() || *woken,
                    "round {round}: a wake was lost"
                );
            }
            waking.join().expect("the waking thread");
        }
    }

    #[test]
    fn the_wake_goes_to_the_latest_task_waker() {
        let (first, w1) = task();
        let (second, w2) = task();
        let rewake = Rewake::new();
        let mut kept = None;
        let _ = rewake.poll(&mut Context::from_waker(&w1), |cx| {
            kept = Some(cx.waker().clone());
            Poll::<()>::Pending
        });
        let _ = rewake.poll(&mut Context::from_waker(&w2), |_| Poll::<()>::Pending);
        kept.expect("kept").wake();
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
    }
}
